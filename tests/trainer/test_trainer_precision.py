"""Mixed precision over several replicas: one replica's fp16 overflow skips the step on all of them.

Keras 3's ``LossScaleOptimizer`` decides "skip" from each replica's own, not yet all-reduced
gradients (trainer/precision.py says why); these tests pin the agreed verdict on 2 logical CPU
devices (MirroredStrategy) and on 2 workers over loopback (MultiWorkerMirroredStrategy).
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.forkserver import python_command
from tests.trainer.helpers import (
    TRAINING_IMAGE,
    TrainerRun,
    finish,
    free_ports,
    run_trainer,
    start_trainer,
    trainer_env,
    write_job,
)
from trainer.datasets.synthetic import SyntheticSpec

DATA = SyntheticSpec("csv", examples=1024, features=12, classes=4, shards=2, seed=11)
# Divergence watch off: the one extreme example makes its step's loss jump by design.
HP = {"epochs": 2, "batch_size": 32, "optimizer": "sgd", "learning_rate": 0.01, "hidden_units": "32",
      "divergence_factor": 0}  # fmt: skip
INITIAL_SCALE = 32768.0  # Keras' LossScaleOptimizer default
# One example 1000x its cluster's size and pointing away from it: misclassified, so its scaled
# fp16 gradient (~1e3 x 1e3) overflows 65504 at the initial scale; the loss itself stays finite.
EXTREME = -1000.0


def _with_one_extreme_example(base: Path, file_name: str = "part-00000.csv", row: int = 6) -> Path:
    path = base / "input" / "data" / "train" / file_name
    lines = path.read_text(encoding="utf-8").splitlines()
    *features, label = lines[row].split(",")
    lines[row] = ",".join(f"{float(v) * EXTREME:.6g}" for v in features) + f",{label}"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return base


def _weights_are_finite(run: TrainerRun) -> bool:
    import keras

    model = keras.models.load_model(run.model_path)
    return all(np.isfinite(w).all() for w in model.get_weights())


def _loss_scales(run: TrainerRun) -> list[tuple[float, int]]:
    return [(float(e["scale"]), int(e["skipped_steps"])) for e in run.events("loss-scale")]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fp16", "bf16"])
def test_one_replica_with_an_extreme_example_trains_to_the_end_with_finite_weights(tmp_path, mode):
    base = _with_one_extreme_example(write_job(tmp_path, {**HP, "mixed_precision": mode}, DATA))
    run = run_trainer(base, "train", TRAINER_LOGICAL_CPU_DEVICES=2)
    assert run.returncode == 0, run.explain()
    (strategy,) = run.events("strategy")
    assert (strategy["name"], strategy["replicas"]) == ("MirroredStrategy", "2")
    assert [m["epoch"] for m in run.metrics()] == [1, 2]
    assert _weights_are_finite(run)
    (model,) = run.events("model")
    scales = _loss_scales(run)
    if mode == "fp16":
        assert model["precision"] == "mixed_float16"
        # The overflowing step was skipped (counted since the start) and the scale halved for it.
        assert len(scales) == 2 and scales[0][1] >= 1, scales
        assert scales[-1][0] < INITIAL_SCALE and scales[-1][0] == INITIAL_SCALE / 2 ** scales[-1][1]
    else:
        # bfloat16 has float32's exponent range: no loss scale, nothing to skip.
        assert model["precision"] == "mixed_bfloat16" and scales == []


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fp16", "bf16"])
def test_two_workers_with_the_extreme_example_on_one_agree_and_finish_with_identical_weights(tmp_path, mode):
    ports = free_ports(2)
    hosts = ",".join(f"localhost:{port}" for port in ports)
    # Two shards, one per worker (by-file sharding): only the worker reading part-00000 overflows.
    bases = [
        _with_one_extreme_example(write_job(tmp_path / f"host-{i}", {**HP, "mixed_precision": mode}, DATA))
        for i in range(2)
    ]
    processes = [
        start_trainer(base, "train", TRAINING_HOSTS=hosts, TRAINING_CURRENT_HOST=f"localhost:{port}",
                      RENDEZVOUS_TIMEOUT_SECONDS=120)
        for base, port in zip(bases, ports, strict=True)
    ]  # fmt: skip
    chief, worker = (finish(p, b) for p, b in zip(processes, bases, strict=True))
    assert chief.returncode == 0, chief.explain()
    assert worker.returncode == 0, worker.explain()
    assert chief.events("sharding")[0]["by_file"] == "True"
    digests = {run.events("finished")[0]["weights_sha256"] for run in (chief, worker)}
    assert len(digests) == 1
    assert _weights_are_finite(chief)
    if mode == "fp16":
        assert _loss_scales(chief) == _loss_scales(worker)
        assert all(skipped >= 1 for _, skipped in _loss_scales(chief)), _loss_scales(chief)
    else:
        assert _loss_scales(chief) == []


# --- the optimizer alone, one step on 2 logical CPU devices --------------------------------------

_ONE_STEP = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf, keras
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from trainer.precision import AgreedLossScaleOptimizer
    which, bad_replica = sys.argv[1], int(sys.argv[2])
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        weights = keras.Variable(tf.ones([2]), name="w")
        inner = keras.optimizers.SGD(0.1)
        optimizer = (AgreedLossScaleOptimizer(inner) if which == "agreed"
                     else keras.optimizers.LossScaleOptimizer(inner))
        optimizer.build([weights])

    @tf.function
    def step():
        def replica_fn():
            bad = tf.equal(tf.distribute.get_replica_context().replica_id_in_sync_group, bad_replica)
            grad = tf.where(bad, tf.constant([float("inf"), 1.0]), tf.constant([1.0, 1.0]))
            optimizer.apply_gradients([(grad, weights)])
        strategy.run(replica_fn)

    step()
    local = lambda v: [x.numpy().tolist() for x in strategy.experimental_local_results(v.value)]
    print(json.dumps({"weights": local(weights), "scale": local(optimizer.dynamic_scale),
                      "skipped": local(optimizer.skipped_steps) if which == "agreed" else None}))
    """
)


def _one_step(which: str, bad_replica: int) -> dict:
    completed = subprocess.run(
        python_command("-c", _ONE_STEP, which, str(bad_replica)),
        cwd=TRAINING_IMAGE, env=trainer_env(TRAINING_IMAGE), capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("bad_replica", [0, 1])
@pytest.mark.slow
def test_an_overflow_on_either_replica_skips_the_step_on_both_and_halves_the_scale(bad_replica):
    result = _one_step("agreed", bad_replica)
    assert result["weights"] == [[1.0, 1.0], [1.0, 1.0]]
    assert result["scale"] == [INITIAL_SCALE / 2] * 2
    assert result["skipped"] == [1, 1]


@pytest.mark.slow
def test_finite_gradients_on_both_replicas_are_applied_unchanged():
    result = _one_step("agreed", -1)
    assert result["scale"] == [INITIAL_SCALE] * 2 and result["skipped"] == [0, 0]
    # Gradient 1 per replica, summed over 2, unscaled by 32768, times lr 0.1 (float32 rounding).
    assert result["weights"][0] == result["weights"][1]
    assert result["weights"][0] == pytest.approx([1.0 - 0.1 * 2 / INITIAL_SCALE] * 2, abs=1e-7)


@pytest.mark.slow
def test_the_root_cause_keras_applies_inf_when_only_the_second_replica_overflows():
    # Keras 3.15 reads replica 0's verdict for all: replica 1's inf reaches the weights and the scale
    # stays. If this starts failing, Keras fixed it and AgreedLossScaleOptimizer may be retired.
    result = _one_step("keras", 1)
    assert not np.isfinite(result["weights"][0]).all()
    assert result["scale"] == [INITIAL_SCALE] * 2


_TOOLKIT = textwrap.dedent(
    """
    import keras
    import numpy as np
    from trainer import toolkit
    plain = keras.optimizers.SGD(0.1)
    assert toolkit.optimizer(plain) is plain  # float32: unchanged
    keras.mixed_precision.set_global_policy("mixed_float16")
    wrapped = toolkit.optimizer(keras.optimizers.SGD(0.1))
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, dtype="float32")])
    model.compile(optimizer=wrapped, loss="mse")
    # compile keeps it (it is a LossScaleOptimizer), so fit gets the replica-agreed skip.
    model.fit(np.ones((4, 3), "float32"), np.ones((4, 2), "float32"), epochs=1, verbose=0)
    print(type(model.optimizer).__name__, int(model.optimizer.skipped_steps.numpy()))
    """
)


@pytest.mark.slow
def test_the_toolkit_gives_scripts_the_agreed_loss_scale_under_fp16():
    completed = subprocess.run(
        python_command("-c", _TOOLKIT), cwd=TRAINING_IMAGE, env=trainer_env(TRAINING_IMAGE), capture_output=True,
        text=True, timeout=180, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.split() == ["AgreedLossScaleOptimizer", "0"]
