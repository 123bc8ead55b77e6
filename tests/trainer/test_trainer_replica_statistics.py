"""BatchNormalization's moving statistics agree on every replica before validation and saving."""

from __future__ import annotations

import json
import subprocess
import textwrap

from tests.forkserver import python_command
from tests.trainer.helpers import ROOT, trainer_env

SCRIPT = textwrap.dedent(
    """
    import json
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from trainer.train import distribute

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        inputs = keras.Input((3,))
        model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.BatchNormalization()(inputs)))
    # Each replica sees other data (replica r: values around 10 r), as replicas do with their own batches.
    batches = strategy.experimental_distribute_values_from_function(
        lambda context: tf.fill([4, 3], 10.0 * tf.cast(context.replica_id_in_sync_group, tf.float32))
        + tf.constant([[0.0], [1.0], [2.0], [3.0]])
    )
    tf.function(lambda: strategy.run(lambda x: model(x, training=True), args=(batches,)))()
    (moving_mean,) = [v for v in model.non_trainable_variables if "moving_mean" in v.path]
    local = lambda: [x.numpy().tolist() for x in strategy.experimental_local_results(moving_mean.value)]
    before = local()
    distribute.statistics_sync(model, strategy)()
    print(json.dumps({"before": before, "after": local(), "synced": len(distribute.replica_local_statistics(model))}))
    """
)


def test_batch_norm_statistics_are_averaged_over_the_replicas(tmp_path):
    completed = subprocess.run(
        python_command("-c", SCRIPT), capture_output=True, text=True, timeout=240, check=False, cwd=ROOT, env=trainer_env(tmp_path)
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    (first, second) = result["before"]
    assert first != second, "each replica updated its own copy (the defect being fixed)"
    assert result["synced"] == 2  # moving_mean and moving_variance
    mean = [(a + b) / 2 for a, b in zip(first, second, strict=True)]
    assert result["after"][0] == result["after"][1]
    assert all(abs(a - m) < 1e-6 for a, m in zip(result["after"][0], mean, strict=True))
