"""Validation sharded across replicas (issue #21): the same loss, accuracy and count as on one device."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.trainer.helpers import ROOT

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from trainer.contract.hyperparameters import TrainingConfig
    from trainer.datasets import images
    from trainer.datasets.synthetic import SyntheticSpec, write_dataset
    from trainer.train import runner as train

    directory = Path(sys.argv[1])
    # 23 pictures, batch 4: the last round of batches is short, so one replica gets less (or nothing).
    write_dataset(directory, SyntheticSpec("image-tfrecord", examples=23, features=12 * 12 * 3, classes=3,
                                           image_shape=(12, 12, 3), shards=2, seed=4))
    spec = images.discover(directory, channel="validation", data_format="image-tfrecord")
    config = TrainingConfig(model="resnet50", image_size=8, batch_size=4)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    keras.utils.set_random_seed(1)
    with strategy.scope():
        inputs = keras.Input((8, 8, 3), dtype="uint8")
        hidden = keras.layers.Flatten()(keras.layers.Rescaling(1 / 255)(inputs))
        model = keras.Model(inputs, keras.layers.Dense(3)(hidden))
    on_replicas, on_one = train._evaluator(model, spec, config, strategy), train._evaluator(model, spec, config)
    sharded, single = on_replicas(), on_one()
    print(json.dumps({"sharded": sharded, "single": single, "replicas": strategy.num_replicas_in_sync,
                      "counts": [on_replicas.examples, on_one.examples]}))
    """
)


@pytest.mark.slow
def test_validation_on_two_replicas_equals_validation_on_one_device(tmp_path):
    env_path = f"{ROOT / 'training_image'}"
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "validation")],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "2", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["replicas"] == 2 and result["counts"] == [23, 23]
    (sharded_loss, sharded_accuracy), (loss, accuracy) = result["sharded"], result["single"]
    assert abs(sharded_loss - loss) < 1e-5 and abs(sharded_accuracy - accuracy) < 1e-9
