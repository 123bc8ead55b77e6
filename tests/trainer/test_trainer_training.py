"""End to end on CPU: the trainer as SageMaker runs it, one process per host.

Asserts behaviour, not just exit codes: the model learned (accuracy well above chance), two
replicas compute what one device computes, two workers end with bit-identical weights, and a
restart after SIGTERM or SIGKILL continues from the checkpoint to the same weights an
uninterrupted run reaches.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.forkserver import python_command
from tests.trainer.helpers import (
    TRAINING_IMAGE,
    TrainerRun,
    finish,
    free_ports,
    read_scalars,
    read_until,
    run_trainer,
    start_trainer,
    trainer_env,
    write_job,
)
from trainer.datasets.synthetic import SyntheticSpec
from trainer.train.metrics import metric_definitions

# 4 classes: chance is 0.25; the synthetic clusters are separable enough for > 0.8 in 3 epochs.
TABULAR = SyntheticSpec("csv", examples=1536, features=12, classes=4, shards=2, seed=11)
# SGD, not Adam: Adam normalises gradient scale away, so it would hide a wrong loss scaling.
TABULAR_HP = {"epochs": 3, "batch_size": 64, "optimizer": "sgd", "learning_rate": 0.05, "hidden_units": "32"}
LEARNED = 0.8


@pytest.fixture(scope="module")
def one_device_run(tmp_path_factory) -> TrainerRun:
    """The reference run: MLP on CSV, one CPU device, started with no argument (docker run)."""
    base = write_job(tmp_path_factory.mktemp("one-device"), TABULAR_HP, TABULAR)
    run = run_trainer(base)
    assert run.returncode == 0, run.explain()
    return run


def _load_csv(directory) -> tuple[np.ndarray, np.ndarray]:
    rows = np.concatenate([np.loadtxt(p, delimiter=",", skiprows=1, ndmin=2) for p in sorted(directory.glob("*.csv"))])
    return rows[:, :-1].astype(np.float32), rows[:, -1].astype(np.int64)


@pytest.mark.slow
def test_mlp_learns_and_writes_model_config_metrics_and_tensorboard(one_device_run):
    run = one_device_run
    assert run.failure is None

    metrics = run.metrics()
    assert [m["epoch"] for m in metrics] == [1, 2, 3]
    assert all(set(m) == {"epoch", "loss", "accuracy", "examples_per_sec", "step_time_ms", "input_wait"} for m in metrics)
    assert metrics[-1]["accuracy"] > LEARNED, run.explain()
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    assert all(m["examples_per_sec"] > 0 and m["step_time_ms"] > 0 for m in metrics)

    # The model is loadable by plain Keras 3 and classifies the data well.
    import keras

    model = keras.models.load_model(run.model_path)
    features, labels = _load_csv(run.base / "input" / "data" / "train")
    accuracy = float(np.mean(np.argmax(model.predict(features, verbose=0), axis=1) == labels))
    assert accuracy > LEARNED

    resolved = json.loads((run.base / "model" / "trainer_config.json").read_text())
    assert resolved["hyperparameters"]["epochs"] == 3 and resolved["hyperparameters"]["hidden_units"] == [32]
    assert resolved["data"] == {
        "channel": "train",
        "directory": str(run.base / "input" / "data" / "train"),
        "format": "csv",
        "files": 2,
        "examples": 1536,
        "num_features": 12,
        "num_classes": 4,
    }
    assert resolved["completed_epochs"] == 3 and resolved["resumed_from_epoch"] == 0
    assert resolved["distribution"]["strategy"] == "OneDeviceStrategy"
    assert resolved["precision_policy"] == "float32" and resolved["gpu_check"]["ok"] is True

    # One structured GPU report, before training.
    (report,) = run.report("gpu-check")
    assert (report["expected"], report["found"], report["ok"], report["all_reduce_replicas"]) == (0, 0, True, 1)
    assert {"driver_version", "cuda_build_version", "cudnn_build_version", "gpus"} <= set(report)

    scalars = read_scalars(run.base / "output" / "tensorboard")
    for field in ("loss", "accuracy"):
        assert sorted(scalars[f"train/{field}"]) == [1, 2, 3]
        for m in metrics:
            assert scalars[f"train/{field}"][int(m["epoch"])] == pytest.approx(m[field], abs=1e-5)
    assert (run.base / "checkpoints" / "ckpt-3.index").exists()


def test_metric_definitions_parse_exactly_the_metric_lines(one_device_run):
    lines = one_device_run.stdout.splitlines()
    metric_lines = [line for line in lines if line.startswith("[metrics] ")]
    assert len(metric_lines) == 3
    for line in lines:
        for definition in metric_definitions():
            match = re.search(definition["Regex"], line)
            field = re.findall(r"(\w+)=\(", definition["Regex"])[-1]
            if line in metric_lines and f" {field}=" in f" {line[len('[metrics] ') :]}":
                assert match and f" {field}={match.group(1)}" in f" {line[len('[metrics] ') :]}", (definition, line)
            elif line in metric_lines:
                # Validation fields appear only with a validation channel, GPU fields only on GPUs (none here).
                assert field.startswith(("val_", "gpu_")) and match is None, (definition, line)
            else:
                assert match is None, (definition, line)


@pytest.mark.slow
def test_two_replicas_compute_what_one_device_computes(tmp_path, one_device_run):
    base = write_job(tmp_path, TABULAR_HP, TABULAR)
    run = run_trainer(base, "train", TRAINER_LOGICAL_CPU_DEVICES=2)
    assert run.returncode == 0, run.explain()
    (strategy,) = run.events("strategy")
    assert (strategy["name"], strategy["replicas"]) == ("MirroredStrategy", "2")
    assert run.report("gpu-check")[0]["all_reduce_replicas"] == 2
    # Same global batch, same data order: the per-replica loss scaling and the all-reduce must
    # reproduce the single-device trajectory (with SGD a wrong scale doubles every step).
    for mirrored, single in zip(run.metrics(), one_device_run.metrics(), strict=True):
        assert mirrored["loss"] == pytest.approx(single["loss"], rel=1e-3, abs=1e-4)
        assert mirrored["accuracy"] == pytest.approx(single["accuracy"], abs=2e-3)
    assert run.model_path.exists()


@pytest.mark.slow
def test_small_cnn_learns_images_from_tfrecords(tmp_path):
    images = SyntheticSpec("tfrecord", examples=512, features=64, classes=4, shards=2, image_shape=(8, 8, 1), seed=3)
    hp = {"model": "cnn", "image_shape": "8x8x1", "conv_filters": "8", "epochs": 3, "batch_size": 32,
          "learning_rate": 0.01}  # fmt: skip
    run = run_trainer(write_job(tmp_path, hp, images), "train")
    assert run.returncode == 0, run.explain()
    assert run.metrics()[-1]["accuracy"] > LEARNED, run.explain()
    (model,) = run.events("model")
    assert model["name"] == "cnn"
    import keras

    assert keras.models.load_model(run.model_path).input_shape == (None, 64)


def _run_workers(bases, ports, **env) -> list[TrainerRun]:
    """Starts one trainer per base directory as the workers of one job on loopback; waits for all."""
    hosts = ",".join(f"localhost:{port}" for port in ports)
    processes = [
        start_trainer(base, "train", TRAINING_HOSTS=hosts, TRAINING_CURRENT_HOST=f"localhost:{port}",
                      RENDEZVOUS_TIMEOUT_SECONDS=120, **env)
        for base, port in zip(bases, ports, strict=True)
    ]  # fmt: skip
    return [finish(p, b) for p, b in zip(processes, bases, strict=True)]


@pytest.mark.slow
def test_two_workers_over_loopback_finish_with_identical_weights(tmp_path):
    # Four shards: each worker reads its own two files.
    data = SyntheticSpec("csv", examples=768, features=12, classes=4, shards=4, seed=5)
    hp = {"epochs": 2, "batch_size": 32, "learning_rate": 0.01, "hidden_units": "32"}
    bases = [write_job(tmp_path / f"host-{i}", hp, data) for i in range(2)]
    chief, worker = _run_workers(bases, free_ports(2))
    assert chief.returncode == 0, chief.explain()
    assert worker.returncode == 0, worker.explain()

    for run in (chief, worker):
        (strategy,) = run.events("strategy")
        assert (strategy["replicas"], strategy["workers"]) == ("2", "2")
        (sharding,) = run.events("sharding")
        assert sharding["by_file"] == "True"
    digests = [run.events("finished")[0]["weights_sha256"] for run in (chief, worker)]
    assert digests[0] == digests[1]

    # Only the chief reports metrics and writes the model.
    assert [m["epoch"] for m in chief.metrics()] == [1, 2]
    assert chief.metrics()[-1]["accuracy"] > LEARNED, chief.explain()
    assert worker.metrics() == []
    assert chief.model_path.exists() and not worker.model_path.exists()
    resolved = json.loads((chief.base / "model" / "trainer_config.json").read_text())
    assert resolved["weights_sha256"] == digests[0]
    assert resolved["distribution"]["workers"] == 2
    assert not list((worker.base / "checkpoints").glob("**/*.index"))  # non-chief copies are temporary


@pytest.mark.slow
def test_two_workers_resume_together_and_refuse_diverging_checkpoints(tmp_path):
    data = SyntheticSpec("csv", examples=512, features=12, classes=4, shards=2, seed=8)
    hp = {"epochs": 1, "batch_size": 32, "learning_rate": 0.01, "hidden_units": "32"}
    bases = [write_job(tmp_path / f"host-{i}", hp, data) for i in range(2)]
    shared = tmp_path / "shared-checkpoints"  # what SageMaker's S3 sync gives every host

    first = _run_workers(bases, free_ports(2), CHECKPOINT_DIR=shared)
    assert [run.returncode for run in first] == [0, 0], first[0].explain() + first[1].explain()
    assert (shared / "ckpt-1.index").exists()

    for base in bases:
        write_job(base, {**hp, "epochs": 2}, None)
    # The second worker does not see the chief's checkpoint: both refuse instead of diverging.
    empty = tmp_path / "empty-checkpoints"
    ports = free_ports(2)
    hosts = ",".join(f"localhost:{port}" for port in ports)
    processes = [
        start_trainer(base, "train", TRAINING_HOSTS=hosts, TRAINING_CURRENT_HOST=f"localhost:{port}",
                      RENDEZVOUS_TIMEOUT_SECONDS=120, CHECKPOINT_DIR=directory)
        for base, port, directory in zip(bases, ports, (shared, empty), strict=True)
    ]  # fmt: skip
    refused = [finish(p, b) for p, b in zip(processes, bases, strict=True)]
    for run in refused:
        assert run.returncode != 0, run.explain()
        assert "Workers restored different checkpoints" in run.failure and "completed epochs [0, 1]" in run.failure
    for base in bases:
        (base / "output" / "failure").unlink()

    resumed = _run_workers(bases, free_ports(2), CHECKPOINT_DIR=shared)
    assert [run.returncode for run in resumed] == [0, 0], resumed[0].explain() + resumed[1].explain()
    for run in resumed:
        assert run.events("resume")[0]["completed_epochs"] == "1"
    assert [m["epoch"] for m in resumed[0].metrics()] == [2]
    assert len({run.events("finished")[0]["weights_sha256"] for run in resumed}) == 1
    assert resumed[0].model_path.exists() and not resumed[1].model_path.exists()


@pytest.mark.slow
def test_a_missing_worker_fails_the_rendezvous_in_bounded_time(tmp_path):
    ports = free_ports(2)
    base = write_job(tmp_path, TABULAR_HP, TABULAR)
    (base / "model").mkdir()
    (base / "model" / "model.keras").write_text("stale model from an earlier run")
    run = run_trainer(
        base,
        "train",
        timeout=120,
        TRAINING_HOSTS=f"localhost:{ports[0]},localhost:{ports[1]}",
        TRAINING_CURRENT_HOST=f"localhost:{ports[0]}",
        RENDEZVOUS_TIMEOUT_SECONDS=4,
    )
    assert run.returncode != 0
    assert run.failure is not None
    assert "Rendezvous timed out after 4 s" in run.failure
    assert f"localhost:{ports[1]}" in run.failure and "TRAINING_WORKER_PORT" in run.failure
    assert f"Did not answer: localhost:{ports[1]} (refused the connection" in run.failure
    assert not run.model_path.exists()


@pytest.mark.slow
def test_a_peer_that_refuses_connections_fails_the_rendezvous_before_the_timeout(tmp_path):
    ports = free_ports(2)
    base = write_job(tmp_path, TABULAR_HP, TABULAR)
    run = run_trainer(
        base,
        "train",
        timeout=120,
        TRAINING_HOSTS=f"localhost:{ports[0]},localhost:{ports[1]}",
        TRAINING_CURRENT_HOST=f"localhost:{ports[0]}",
        RENDEZVOUS_TIMEOUT_SECONDS=100,
        RENDEZVOUS_REFUSED_SECONDS=3,
    )
    assert run.returncode != 0
    assert f"localhost:{ports[1]} refused connections for" in run.failure, run.explain()
    assert "RENDEZVOUS_REFUSED_SECONDS=3" in run.failure and "Rendezvous timed out" not in run.failure.split(". ")[0]
    assert not run.model_path.exists()


RESUME_DATA = SyntheticSpec("csv", examples=1024, features=12, classes=4, shards=2, seed=2)
# One step a call, so a stop can land between two steps of an epoch (16 steps), on two replicas fed by one
# pipeline (a resumed epoch skips two batches a step).
RESUME_HP = {"epochs": 4, "batch_size": 64, "learning_rate": 0.003, "hidden_units": "32", "steps_per_execution": 1}
REPLICAS = {"TRAINER_LOGICAL_CPU_DEVICES": 2}


@pytest.fixture(scope="module")
def uninterrupted_run(tmp_path_factory) -> TrainerRun:
    run = run_trainer(write_job(tmp_path_factory.mktemp("uninterrupted"), RESUME_HP, RESUME_DATA), **REPLICAS)
    assert run.returncode == 0, run.explain()
    return run


@pytest.mark.slow
def test_stops_by_sigterm_and_sigkill_resume_to_the_weights_of_an_uninterrupted_run(tmp_path, uninterrupted_run):
    epochs = RESUME_HP["epochs"]
    base = write_job(tmp_path, RESUME_HP, RESUME_DATA)

    # 1. SIGTERM (SageMaker stop, spot notice) in the middle of epoch 2 (every batch held 0.2 s: the
    # epoch takes 3 s): stop at the next step, checkpoint the steps applied, say so, exit 143.
    process = subprocess.Popen(
        python_command(str(Path(__file__).with_name("slow_input.py")), "train"), cwd=TRAINING_IMAGE,
        env=trainer_env(base, SLOW_INPUT_SECONDS="0.2", **REPLICAS), stdout=subprocess.PIPE,
        stderr=(base / "stderr.txt").open("w"), text=True, bufsize=1,
    )  # fmt: skip
    printed = read_until(process, "[metrics] epoch=1 ")
    process.send_signal(signal.SIGTERM)
    stopped = finish(process, base, printed)
    assert stopped.returncode == 143, stopped.explain()
    assert [int(m["epoch"]) for m in stopped.metrics()] == [1]
    (checkpoint,) = [event for event in stopped.events("checkpoint") if event["epoch"] == "1" and "epoch_steps" in event]
    applied = int(checkpoint["epoch_steps"])
    assert 1 <= applied < 16, checkpoint
    assert stopped.failure.startswith(f"Training stopped by SIGTERM in epoch 2 at step {applied} of 16, checkpointed (")
    assert "Completed epochs: 1." in stopped.failure
    assert not stopped.model_path.exists()
    completed = [1]

    # 2. Restart: resumes after the last completed epoch; then SIGKILL, no grace at all.
    (base / "output" / "failure").unlink()
    process = start_trainer(base, "train", **REPLICAS)
    printed = read_until(process, f"[metrics] epoch={completed[-1] + 1} ")
    process.send_signal(signal.SIGKILL)
    killed = finish(process, base, printed)
    assert killed.returncode == -signal.SIGKILL
    (resume,) = killed.events("resume")
    assert (int(resume["completed_epochs"]), int(resume["epoch_steps"])) == (completed[-1], applied)
    assert killed.metrics()[0]["epoch"] == completed[-1] + 1
    last_printed = int(killed.metrics()[-1]["epoch"])
    assert last_printed < epochs and not killed.model_path.exists()

    # 3. Restart again: finishes the remaining epochs only.
    resumed = run_trainer(base, "train", **REPLICAS)
    assert resumed.returncode == 0, resumed.explain()
    (resume,) = resumed.events("resume")
    restored = int(resume["completed_epochs"])
    # Every printed epoch was checkpointed first; a SIGKILL may land between a save and its print.
    assert restored in (last_printed, last_printed + 1)
    assert [int(m["epoch"]) for m in resumed.metrics()] == list(range(restored + 1, epochs + 1))
    resolved = json.loads((base / "model" / "trainer_config.json").read_text())
    assert (resolved["completed_epochs"], resolved["resumed_from_epoch"]) == (epochs, restored)
    assert resumed.failure is None
    # Same data order per epoch and the optimizer state restored: the twice-interrupted job ends
    # with exactly the weights of the uninterrupted one.
    assert resumed.events("finished")[0]["weights_sha256"] == uninterrupted_run.events("finished")[0]["weights_sha256"]
    import keras

    keras.models.load_model(resumed.model_path)


# --- bad input: a failure file that says what and where, a non-zero exit, no model -------------


def _job_missing_channel(base):
    write_job(base, TABULAR_HP, None)
    (base / "input" / "data" / "validation").mkdir(parents=True)
    return {}, ["Input channel 'train' is missing", str(base / "input" / "data" / "train"), "validation"]


def _job_empty_dataset(base):
    write_job(base, TABULAR_HP, None)
    (base / "input" / "data" / "train").mkdir(parents=True)
    (base / "input" / "data" / "train" / "part-0.csv").write_text("f0,f1,label\n")
    return {}, ["no examples", "the dataset is empty", str(base / "input" / "data" / "train")]


def _job_malformed_csv(base):
    write_job(base, TABULAR_HP, TABULAR)
    path = base / "input" / "data" / "train" / "part-00001.csv"
    lines = path.read_text().splitlines()
    lines[7] = lines[7].replace(",", ",oops", 1)
    path.write_text("\n".join(lines) + "\n")
    return {}, [f"Malformed CSV row in {path} line 8", "is not a number"]


def _job_malformed_csv_met_while_training(base):
    # Same file size, so the manifest still matches: no scan, the pipeline meets the bad row.
    write_job(base, TABULAR_HP, TABULAR)
    path = base / "input" / "data" / "train" / "part-00001.csv"
    lines = path.read_text().splitlines()
    first, rest = lines[7].split(",", 1)
    lines[7] = "x" * len(first) + "," + rest
    path.write_text("\n".join(lines) + "\n")
    return {}, [f"Malformed CSV row in {path} line 8", "column 1", "is not a number", "met in epoch 1"]


def _job_corrupt_tfrecord(base):
    write_job(base, TABULAR_HP, SyntheticSpec("tfrecord", examples=400, features=12, classes=4, shards=2))
    path = base / "input" / "data" / "train" / "part-00000.tfrecord"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x55
    path.write_bytes(bytes(raw))
    return {}, [f"Corrupt TFRecord file {path}: record ", "damaged or truncated"]


def _job_nan_loss(base):
    write_job(base, {**TABULAR_HP, "learning_rate": "1e30"}, TABULAR)
    return {}, ["The loss became nan in epoch 1 at step", "learning_rate=1e+30", "no model was written"]


def _job_exploding_loss(base):
    # Adam at lr 1000: the loss reaches ~1e7 and stays finite, so the NaN check alone passes it.
    write_job(base, {**TABULAR_HP, "optimizer": "adam", "learning_rate": "1000"}, TABULAR)
    return {}, ["The loss diverged", "in epoch 1 at step", "for 20 steps in a row", "No model was written"]


def _job_unknown_hyperparameter(base):
    write_job(base, {**TABULAR_HP, "learning_rat": "0.1"}, TABULAR)
    return {}, ["unknown hyperparameter 'learning_rat'", "did you mean 'learning_rate'?"]


def _job_gpu_promised_on_cpu(base):
    write_job(base, TABULAR_HP, TABULAR)
    return {"EXPECTED_GPU_COUNT": 1}, ["expected 1 GPU(s) (EXPECTED_GPU_COUNT) but TensorFlow sees 0"]


BAD_INPUTS = {
    "missing-channel": _job_missing_channel,
    "empty-dataset": _job_empty_dataset,
    "malformed-csv-row": _job_malformed_csv,
    "malformed-csv-row-met-while-training": _job_malformed_csv_met_while_training,
    "corrupt-tfrecord": _job_corrupt_tfrecord,
    "nan-loss": _job_nan_loss,
    "exploding-loss": _job_exploding_loss,
    "unknown-hyperparameter": _job_unknown_hyperparameter,
    "gpu-promised-on-cpu": _job_gpu_promised_on_cpu,
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
@pytest.mark.slow
def test_bad_input_fails_with_a_reason_and_no_model(tmp_path, case):
    env, expected = BAD_INPUTS[case](tmp_path)
    # A model from an earlier run in the same directory must not survive as if it were this run's.
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "model.keras").write_text("stale")
    (tmp_path / "model" / "best.keras").write_text("stale best-by-validation model")
    run = run_trainer(tmp_path, "train", **env)
    assert run.returncode != 0, run.explain()
    assert run.failure is not None, run.explain()
    for fragment in expected:
        assert fragment in run.failure, (fragment, run.failure)
    assert not run.model_path.exists()
    assert not list((tmp_path / "model").glob("*.keras"))


@pytest.mark.slow
def test_exploding_loss_can_be_only_a_warning(tmp_path):
    write_job(tmp_path, {**TABULAR_HP, "optimizer": "adam", "learning_rate": "1000", "on_divergence": "warn",
                         "epochs": 1}, TABULAR)  # fmt: skip
    run = run_trainer(tmp_path, "train")
    assert run.returncode == 0, run.explain()
    assert "WARNING: The loss diverged" in run.stderr
    assert run.events("WARNING") and run.model_path.exists()


# --- validation channel ------------------------------------------------------------------------

# Other centroids than the training data: the better the model fits TABULAR, the worse it does here.
UNRELATED = SyntheticSpec("csv", examples=256, features=12, classes=4, shards=1, seed=99)


@pytest.mark.slow
def test_validation_channel_is_reported_and_the_best_model_kept(tmp_path):
    base = write_job(tmp_path, {**TABULAR_HP, "epochs": 2}, TABULAR, channel="training")
    write_job(base, {**TABULAR_HP, "epochs": 2}, SyntheticSpec("csv", examples=256, features=12, classes=4, seed=11),
              channel="validation")  # fmt: skip
    run = run_trainer(base, "train")
    assert run.returncode == 0, run.explain()
    assert run.events("data")[0]["channel"] == "training"
    metrics = run.metrics()
    assert [set(m) for m in metrics] == [
        {"epoch", "loss", "accuracy", "examples_per_sec", "step_time_ms", "input_wait", "val_loss", "val_accuracy"}
    ] * 2
    # Same centroids as the training data: the model generalises.
    assert metrics[-1]["val_accuracy"] > LEARNED, run.explain()
    scalars = read_scalars(base / "output" / "tensorboard")
    for field in ("loss", "accuracy"):
        assert scalars[f"validation/{field}"] == {int(m["epoch"]): pytest.approx(m[f"val_{field}"], abs=1e-5) for m in metrics}
    import keras

    best = keras.models.load_model(run.model_path)  # with validation: the best epoch's model
    assert best.input_shape == (None, 12) and (base / "model" / "last.keras").exists()
    resolved = json.loads((base / "model" / "trainer_config.json").read_text())
    assert resolved["model"]["selected_by"] == "best_val_loss" and resolved["class_names"] == ["0", "1", "2", "3"]


@pytest.mark.slow
def test_a_validation_loss_that_is_not_finite_is_said_and_never_kept_as_the_best_model(tmp_path):
    import math

    hp = {**TABULAR_HP, "epochs": 4}
    base = write_job(tmp_path, hp, TABULAR, channel="training")
    write_job(base, hp, SyntheticSpec("csv", examples=64, features=12, classes=4, seed=11), channel="validation")
    # One validation row with features at float32's limit: once the weights grow, its logits overflow and the
    # channel's mean loss is not finite (the training rows are untouched, so training goes on).
    (first, *_) = sorted((base / "input" / "data" / "validation").glob("*.csv"))
    header, row, *rest = first.read_text().splitlines()
    first.write_text("\n".join([header, ",".join(["3.4e38"] * 12 + [row.split(",")[-1]]), *rest]) + "\n")
    run = run_trainer(base, "train")
    assert run.returncode == 0, run.explain()
    # SageMaker's numeric metric regex (and so run.metrics()) skips val_loss=nan / inf: absent means not finite.
    not_finite = [int(m["epoch"]) for m in run.metrics() if not math.isfinite(float(m.get("val_loss", "nan")))]
    said = run.events("validation-not-finite")
    assert not_finite and [int(e["epoch"]) for e in said] == not_finite, run.explain()
    (line,) = [line for line in run.stdout.splitlines() if line.startswith(f"[trainer] validation-not-finite epoch={not_finite[0]} ")]
    assert "validation channel overflow" in line and "not kept as the best model" in line
    best_epochs = [int(m["epoch"]) for m in run.metrics() if math.isfinite(float(m.get("val_loss", "nan")))]
    selected = json.loads((base / "model" / "trainer_config.json").read_text())["model"]
    if best_epochs:
        best = min(best_epochs, key=lambda e: float(run.metrics()[e - 1]["val_loss"]))
        assert (selected["selected_by"], selected["epoch"]) == ("best_val_loss", best), "a non-finite epoch was kept as the best"
    else:
        assert selected["selected_by"] == "last_epoch"
    assert run.model_path.exists()


@pytest.mark.slow
def test_early_stopping_ends_training_when_val_loss_stops_improving(tmp_path):
    hp = {**TABULAR_HP, "epochs": 8, "early_stopping_patience": 1}
    base = write_job(tmp_path, hp, TABULAR)
    write_job(base, hp, UNRELATED, channel="validation")
    run = run_trainer(base, "train")
    assert run.returncode == 0, run.explain()
    (stop,) = run.events("early-stop")
    epochs = [int(m["epoch"]) for m in run.metrics()]
    assert epochs[-1] == int(stop["epoch"]) < 8
    losses = [m["val_loss"] for m in run.metrics()]
    assert min(losses[:-1]) < losses[-1] - 1e-3  # the last evaluation did not improve on the best
    assert float(stop["best_val_loss"]) == pytest.approx(min(losses), abs=1e-5)
    # The served model.keras is the best epoch's, not the last's (kept as last.keras), and the config says which.
    best_epoch = epochs[losses.index(min(losses))]
    resolved = json.loads((base / "model" / "trainer_config.json").read_text())
    assert resolved["model"] == {"file": "model.keras", "selected_by": "best_val_loss", "epoch": best_epoch,
                                 "val_loss": pytest.approx(min(losses), abs=1e-5), "last_epoch": epochs[-1],
                                 "last_epoch_file": "last.keras"}  # fmt: skip
    import keras

    features, labels = _load_csv(base / "input" / "data" / "validation")

    def val_loss(path) -> float:
        logits = keras.models.load_model(path).predict(features, verbose=0).astype(np.float64)
        shifted = logits - logits.max(axis=1, keepdims=True)
        return float(np.mean(np.log(np.exp(shifted).sum(axis=1)) - shifted[np.arange(len(labels)), labels]))

    assert val_loss(run.model_path) == pytest.approx(min(losses), abs=1e-4)
    assert val_loss(base / "model" / "last.keras") == pytest.approx(losses[-1], abs=1e-4)
    assert sorted(p.name for p in (base / "model").glob("*.keras")) == ["last.keras", "model.keras"]


def test_unexpected_command_line_arguments_are_refused(tmp_path):
    # ("serve" is SageMaker hosting's command: the serving mode, tests/serve.)
    run = run_trainer(write_job(tmp_path, TABULAR_HP, TABULAR), "evaluate")
    assert run.returncode != 0
    assert "Unexpected arguments ['evaluate']" in run.failure


@pytest.mark.slow
def test_a_manifest_that_promises_more_examples_than_the_files_hold_fails_the_epoch(tmp_path):
    base = write_job(tmp_path, {**TABULAR_HP, "epochs": 2}, TABULAR)
    manifest_path = base / "input" / "data" / "train" / ".trainer-manifest.json"
    recorded = json.loads(manifest_path.read_text())
    recorded["files"][0]["examples"] += 200  # sizes still match: the manifest is trusted
    manifest_path.write_text(json.dumps(recorded))
    run = run_trainer(base, "train")
    assert run.returncode != 0, run.explain()
    assert "Epoch 1 ended after fewer than" in run.failure and ".trainer-manifest.json" in run.failure, run.failure
    assert not run.model_path.exists()
