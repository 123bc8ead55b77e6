"""Script mode end to end on CPU: the user's script runs inside the platform's guarantees.

Each test lays out a job the way SageMaker does (hyperparameters from the SDK, the code as the
``code`` channel's ``sourcedir.tar.gz``), runs the real entrypoint (``python -m trainer``) in a
subprocess and checks what the job would report: exit status, ``output/failure``, the model.
"""

from __future__ import annotations

import hashlib
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.helpers import finish, free_ports, read_until, run_trainer, start_trainer
from tests.trainer.script_helpers import build_wheel, pack, script_job, write_source
from trainer.datasets.synthetic import SyntheticSpec, write_dataset

TRAINING_CHANNEL = {"training": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}}
CODE_CHANNEL = {"code": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}}

# A script as a SageMaker TensorFlow user writes it: argparse hyperparameters, SM_CHANNEL_TRAINING,
# SM_MODEL_DIR, plain Keras 3 (no platform import).
SAGEMAKER_SCRIPT = """
import argparse, glob, json, os
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--learning-rate", type=float, default=0.01)
parser.add_argument("--model_dir", default=None)
parser.add_argument("--train", default=os.environ["SM_CHANNEL_TRAINING"])
args = parser.parse_args()

rows = np.concatenate([np.loadtxt(f, delimiter=",", skiprows=1, ndmin=2) for f in sorted(glob.glob(args.train + "/*.csv"))])
x, y = rows[:, :-1].astype("float32"), rows[:, -1].astype("int64")
model = tf.keras.Sequential([tf.keras.Input((x.shape[1],)), tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(int(y.max()) + 1)])
model.compile(tf.keras.optimizers.Adam(args.learning_rate), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
history = model.fit(x, y, epochs=args.epochs, batch_size=args.batch_size, verbose=0)
model.save(os.path.join(os.environ["SM_MODEL_DIR"], "model.keras"))
seen = {k: v for k, v in os.environ.items() if k.startswith("SM_")}
seen["argv"] = os.sys.argv[1:]
seen["accuracy"] = history.history["accuracy"][-1]
seen["keras"] = tf.keras.__name__ if hasattr(tf.keras, "__name__") else str(tf.keras)
json.dump(seen, open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "seen.json"), "w"))
"""

# Keras 2 idioms that Keras 3 rejects: model.save(directory) as a SavedModel, metric.reset_states().
KERAS2_SCRIPT = """
import argparse, os
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))])
model.compile(optimizer="adam", loss="mse")
model.fit(np.zeros((16, 4)), np.zeros((16, 3)), epochs=args.epochs, verbose=0)
mean = tf.keras.metrics.Mean()
mean.update_state(1.0)
mean.reset_states()
model.save(os.path.join(os.environ["SM_MODEL_DIR"], "1"))
"""


def _csv_data(base: Path, examples: int = 256) -> None:
    write_dataset(base / "input" / "data" / "training", SyntheticSpec("csv", examples=examples, features=6, classes=3, seed=3))


def _job_with_code(base: Path, tmp: Path, files: dict[str, str], hyperparameters: dict | None = None, **kwargs) -> Path:
    """The SDK's network-isolation layout: sourcedir.tar.gz in the code channel, the submit dir pointing at it."""
    source = write_source(tmp / "src", files)
    pack(source, base / "input" / "data" / "code" / "sourcedir.tar.gz")
    return script_job(
        base,
        "/opt/ml/input/data/code/sourcedir.tar.gz",
        hyperparameters=hyperparameters,
        channels={**TRAINING_CHANNEL, **CODE_CHANNEL},
        **kwargs,
    )


@pytest.mark.slow
def test_sagemaker_script_runs_unchanged_with_keras_3(tmp_path: Path) -> None:
    base = tmp_path / "opt-ml"
    _job_with_code(base, tmp_path, {"train.py": SAGEMAKER_SCRIPT}, {"epochs": 3, "batch-size": 32, "learning-rate": 0.05})
    _csv_data(base)
    run = run_trainer(base)
    assert run.returncode == 0, run.explain()
    assert (base / "model" / "model.keras").is_file()
    seen = json.loads((base / "output" / "data" / "seen.json").read_text())
    assert seen["argv"] == ["--batch-size", "32", "--epochs", "3", "--learning-rate", "0.05"]
    assert seen["SM_CHANNEL_TRAINING"] == str(base / "input" / "data" / "training")
    assert seen["SM_MODEL_DIR"] == str(base / "model")
    assert json.loads(seen["SM_HPS"]) == {"batch-size": 32, "epochs": 3, "learning-rate": 0.05}
    assert seen["SM_NUM_GPUS"] == "0" and seen["SM_CURRENT_HOST"] == "localhost"
    assert seen["accuracy"] > 0.6, "the script trained on the channel's data"
    # The GPU check ran first, then the script: the order is in the log.
    lines = run.stdout.splitlines()
    check = next(i for i, line in enumerate(lines) if line.startswith("[gpu-check] "))
    start = next(i for i, line in enumerate(lines) if line.startswith("[trainer] script-start"))
    assert check < start
    assert run.failure is None


@pytest.mark.slow
def test_keras_2_script_needs_the_legacy_setting(tmp_path: Path) -> None:
    keras3 = tmp_path / "keras3"
    _job_with_code(keras3, tmp_path / "a", {"train.py": KERAS2_SCRIPT})
    run = run_trainer(keras3)
    assert run.returncode == 8, run.explain()
    assert "raised AttributeError: 'Mean' object has no attribute 'reset_states' at train.py line 13" in (run.failure or "")
    assert "run it with Keras 2 by setting TF_USE_LEGACY_KERAS=1 (scripts.launch --legacy-keras" in (run.failure or "")
    assert len((run.failure or "").strip().splitlines()) == 1

    legacy = tmp_path / "legacy"
    _job_with_code(legacy, tmp_path / "b", {"train.py": KERAS2_SCRIPT})
    run = run_trainer(legacy, TF_USE_LEGACY_KERAS="1")
    assert run.returncode == 0, run.explain()
    assert (legacy / "model" / "1" / "saved_model.pb").is_file(), "Keras 2 wrote a SavedModel directory"


def test_gpu_promised_on_a_cpu_host_never_starts_the_script(tmp_path: Path) -> None:
    base = tmp_path / "opt-ml"
    marker = tmp_path / "script-started"
    _job_with_code(base, tmp_path, {"train.py": f"open({str(marker)!r}, 'w').write('ran')\nimport tensorflow\n"})
    run = run_trainer(base, EXPECTED_GPU_COUNT="1")
    assert run.returncode == 3, run.explain()
    assert "GPU check failed: expected 1 GPU(s)" in (run.failure or "")
    assert "The training script was not started" in (run.failure or "")
    assert not marker.exists(), "the user's first line ran before the GPU check"


def test_a_raising_script_names_exception_file_and_line(tmp_path: Path) -> None:
    base = tmp_path / "opt-ml"
    script = """
    import os

    def load(path):
        raise FileNotFoundError(f"no labels file at {path}")

    def main():
        load(os.path.join(os.environ["SM_CHANNEL_TRAINING"], "labels.txt"))

    main()
    """
    _job_with_code(base, tmp_path, {"train.py": script, "lib/__init__.py": ""})
    run = run_trainer(base)
    assert run.returncode == 8, run.explain()
    failure = run.failure or ""
    assert "raised FileNotFoundError: no labels file at" in failure
    assert "at train.py line 4 in load()" in failure
    assert len(failure) < 600, "one paragraph, not a traceback"
    assert "Traceback (most recent call last)" in run.stderr, "the full traceback stays in the log"
    assert "site-packages" not in failure


def test_exception_raised_inside_a_library_points_at_the_users_line(tmp_path: Path) -> None:
    base = tmp_path / "opt-ml"
    _job_with_code(base, tmp_path, {"train.py": "import json\n\nconfig = json.loads('{not json')\n"})
    run = run_trainer(base)
    assert run.returncode == 8, run.explain()
    assert "JSONDecodeError" in (run.failure or "") and "at train.py line 3" in (run.failure or "")
    assert "raised inside" in (run.failure or "")


def test_sys_exit_and_a_kill_are_reported_distinctly(tmp_path: Path) -> None:
    exits = tmp_path / "exits"
    _job_with_code(exits, tmp_path / "a", {"train.py": "import sys\nsys.exit('dataset too small')\n"})
    run = run_trainer(exits)
    assert run.returncode == 8, run.explain()
    assert "called sys.exit(1) at train.py line 2: sys.exit('dataset too small')" in (run.failure or "")

    killed = tmp_path / "killed"
    _job_with_code(killed, tmp_path / "b", {"train.py": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"})
    run = run_trainer(killed)
    assert run.returncode == 137, run.explain()
    assert "killed by SIGKILL" in (run.failure or "") and "out-of-memory" in (run.failure or "")


def test_an_argument_the_script_does_not_accept_is_named(tmp_path: Path) -> None:
    base = tmp_path / "opt-ml"
    script = "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--epochs')\nparser.parse_args()\n"
    _job_with_code(base, tmp_path, {"train.py": script}, {"epochs": 2, "batch_size": 64})
    run = run_trainer(base)
    assert run.returncode == 8, run.explain()
    assert "called sys.exit(2) at train.py line 4" in (run.failure or "")
    assert "unrecognized arguments: --batch_size 64" in (run.failure or "")


def _run_with_a_shipped_wheel(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Any]:
    """A job whose source ships the wheel ``platformdemo==1.0`` (``VALUE = 42``) in ``wheels/`` beside
    ``files``; its run, after checking it wrote that value to the model directory."""
    base = tmp_path / "opt-ml"
    source = tmp_path / "src"
    build_wheel(source / "wheels", "platformdemo", "1.0", "VALUE = 42\n")
    _job_with_code(base, tmp_path, files)
    # _job_with_code wrote src/ again: the wheel is packed with it.
    pack(source, base / "input" / "data" / "code" / "sourcedir.tar.gz")
    run = run_trainer(base)
    assert run.returncode == 0, run.explain()
    assert (base / "model" / "value.txt").read_text() == "42"
    return base, run


def test_requirements_install_offline_from_shipped_wheels(tmp_path: Path) -> None:
    files = {
        "requirements.txt": "# what the script needs\nnumpy\nplatformdemo==1.0\n",
        "train.py": "import os, platformdemo\nopen(os.path.join(os.environ['SM_MODEL_DIR'], 'value.txt'), 'w').write(str(platformdemo.VALUE))\n",
    }
    _, run = _run_with_a_shipped_wheel(tmp_path, files)
    installed = run.events("requirements")
    assert installed and installed[0]["installed"] == "platformdemo==1.0", "numpy came from the image, not a wheel"


def test_a_requirement_without_a_wheel_is_refused_with_its_line(tmp_path: Path) -> None:
    base = tmp_path / "opt-ml"
    marker = tmp_path / "script-started"
    files = {
        "requirements.txt": "numpy\nnot-shipped-package==9.9\n",
        "train.py": f"open({str(marker)!r}, 'w').write('ran')\n",
    }
    _job_with_code(base, tmp_path, files)
    run = run_trainer(base)
    assert run.returncode == 9, run.explain()
    failure = run.failure or ""
    assert "requirements.txt line 2 ('not-shipped-package==9.9') cannot be installed" in failure
    # Not known to be isolated: the message says what is true (no index configured) and both ways out.
    assert "no package index is configured (the platform's subnets have no internet)" in failure, failure
    assert "network isolation" not in failure and "wheels" in failure and "set PIP_INDEX_URL" in failure
    assert not marker.exists()

    isolated = tmp_path / "isolated"
    _job_with_code(isolated, tmp_path / "b", files)
    (isolated / "input" / "config" / "trainingjobconfig.json").write_text(json.dumps({"EnableNetworkIsolation": True}))
    run = run_trainer(isolated)
    assert run.returncode == 9, run.explain()
    failure = run.failure or ""
    assert "the container has no package index (network isolation)" in failure and "PIP_INDEX_URL" not in failure, failure


def test_s3_submit_directory_without_the_code_channel_is_refused_when_the_job_is_isolated(tmp_path: Path) -> None:
    base = script_job(tmp_path / "opt-ml", "s3://bucket/gputrain/code/sourcedir.tar.gz", channels=TRAINING_CHANNEL)
    (base / "input" / "config" / "trainingjobconfig.json").write_text(json.dumps({"EnableNetworkIsolation": True}))
    run = run_trainer(base)
    assert run.returncode == 9, run.explain()
    assert "cannot read S3 itself: add an input channel named 'code'" in (run.failure or "")
    assert not (base / "model" / "model.keras").exists(), "never falls back to a built-in model"


def test_s3_submit_directory_is_read_from_the_code_channel(tmp_path: Path) -> None:
    base = tmp_path / "opt-ml"
    source = write_source(tmp_path / "src", {"entry.py": "import os\nopen(os.environ['SM_MODEL_DIR'] + '/ok', 'w').write('1')\n"})
    pack(source, base / "input" / "data" / "code" / "sourcedir.tar.gz")
    script_job(base, "s3://bucket/gputrain/code/sourcedir.tar.gz", program="entry.py", channels={**TRAINING_CHANNEL, **CODE_CHANNEL})
    run = run_trainer(base)
    assert run.returncode == 0, run.explain()
    assert (base / "model" / "ok").is_file()


def test_missing_entry_point_lists_what_was_packed(tmp_path: Path) -> None:
    base = tmp_path / "opt-ml"
    _job_with_code(base, tmp_path, {"main.py": "print('hi')\n"})
    run = run_trainer(base)
    assert run.returncode == 9, run.explain()
    assert "The training script 'train.py' is not in the source directory (main.py)" in (run.failure or "")
    assert not (base / "model" / "model.keras").exists(), "never falls back to a built-in model"


@pytest.mark.slow
def test_sigterm_reaches_the_script_and_resume_continues(tmp_path: Path) -> None:
    """Spot interruption: SIGTERM stops the script, a restart resumes from the helper's checkpoint."""
    base = tmp_path / "opt-ml"
    script = """
    import argparse, os, time
    import numpy as np
    import tensorflow as tf
    from trainer import toolkit

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--epoch-seconds", type=float)
    args = parser.parse_args()
    keras = tf.keras
    keras.utils.set_random_seed(1)
    toolkit.mixed_precision()
    with toolkit.strategy().scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    slow = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: time.sleep(args.epoch_seconds))
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    model.fit(x, y, batch_size=16, epochs=args.epochs, verbose=0, callbacks=[*toolkit.callbacks(batch_size=16), slow])
    model.save(os.path.join(os.environ["SM_MODEL_DIR"], "model.keras"))
    """
    _job_with_code(base, tmp_path, {"train.py": script}, {"epochs": 6, "epoch-seconds": 1.0})
    process = start_trainer(base, SCRIPT_STOP_GRACE_SECONDS="30")
    seen = read_until(process, "[metrics] epoch=2 ")
    stopped = time.monotonic()
    process.send_signal(signal.SIGTERM)
    first = finish(process, base, seen, timeout=60)
    assert time.monotonic() - stopped < 30, "the job ended within the grace period"
    assert first.returncode == 143, first.explain()
    assert "Training stopped by SIGTERM" in (first.failure or "")
    assert not (base / "model" / "model.keras").exists()
    done = [int(m["epoch"]) for m in first.metrics()]

    second = run_trainer(base)
    assert second.returncode == 0, second.explain()
    resumed = [int(m["epoch"]) for m in second.metrics()]
    assert resumed and resumed[0] == max(done) + 1, f"first run printed {done}, resumed run {resumed}"
    assert resumed[-1] == 6
    assert second.failure is None, "a stale failure file does not outlive the successful resume"
    assert second.events("precision") == [{"policy": "float32"}], "the toolkit keeps float32 on CPU"
    assert (base / "model" / "model.keras").is_file()


MWMS_SCRIPT = """
import hashlib, json, os
import numpy as np
import tensorflow as tf
from trainer import toolkit

strategy = toolkit.strategy()
assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy), type(strategy)
tf.keras.utils.set_random_seed(5)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3)])
    optimizer = tf.keras.optimizers.SGD(0.1)
rng = np.random.default_rng(0)
x = rng.normal(size=(128, 4)).astype("float32")
y = rng.integers(0, 3, size=128)

def dataset_fn(context):
    data = tf.data.Dataset.from_tensor_slices((x, y)).shard(context.num_input_pipelines, context.input_pipeline_id)
    return data.batch(context.get_per_replica_batch_size(32)).repeat()

iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

@tf.function
def step(batch):
    def replica(features, labels):
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = tf.nn.compute_average_loss(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits), global_batch_size=32)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return strategy.run(replica, args=batch)

for _ in range(5):
    step(next(iterator))
digest = hashlib.sha256(b"".join(np.ascontiguousarray(w).tobytes() for w in model.get_weights())).hexdigest()
config = json.loads(os.environ["TF_CONFIG"])
json.dump({"digest": digest, "task": config["task"], "workers": config["cluster"]["worker"]},
          open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "weights.json"), "w"))
"""


def _two_workers(tmp_path: Path, script: str) -> tuple[list[int], list[Path], list[Any]]:
    """``script`` run by two hosts of a MultiWorkerMirroredStrategy job over loopback: ports, job trees, runs."""
    ports = free_ports(2)
    hosts = ",".join(f"localhost:{p}" for p in ports)
    processes, bases = [], []
    for index in range(2):
        base = tmp_path / f"worker-{index}"
        (base / "output" / "data").mkdir(parents=True)
        _job_with_code(base, tmp_path / f"src-{index}", {"train.py": script}, {"sagemaker_multi_worker_mirrored_strategy_enabled": True})
        bases.append(base)
        processes.append(start_trainer(base, TRAINING_HOSTS=hosts, TRAINING_CURRENT_HOST=f"localhost:{ports[index]}",
                                       RENDEZVOUS_TIMEOUT_SECONDS="120"))
    return ports, bases, [finish(p, b, timeout=240) for p, b in zip(processes, bases)]


@pytest.mark.slow
def test_two_workers_run_a_user_script_with_multi_worker_mirrored_strategy(tmp_path: Path) -> None:
    ports, bases, runs = _two_workers(tmp_path, MWMS_SCRIPT)
    for run in runs:
        assert run.returncode == 0, run.explain()
    results = [json.loads((b / "output" / "data" / "weights.json").read_text()) for b in bases]
    assert [r["task"]["index"] for r in results] == [0, 1]
    assert results[0]["workers"] == [f"localhost:{p}" for p in ports]
    assert results[0]["digest"] == results[1]["digest"], "workers ended with different weights"
    assert hashlib.sha256(b"").hexdigest() != results[0]["digest"]


@pytest.mark.slow
def test_toolkit_rendezvous_is_bounded_and_names_the_missing_peer(tmp_path: Path) -> None:
    ports = free_ports(2)
    base = tmp_path / "worker-0"
    _job_with_code(base, tmp_path / "src", {"train.py": MWMS_SCRIPT}, {"sagemaker_multi_worker_mirrored_strategy_enabled": True})
    started = time.monotonic()
    run = run_trainer(
        base,
        TRAINING_HOSTS=",".join(f"localhost:{p}" for p in ports),
        TRAINING_CURRENT_HOST=f"localhost:{ports[0]}",
        RENDEZVOUS_TIMEOUT_SECONDS="8",
        timeout=120,
    )
    assert run.returncode == 4, run.explain()
    failure = run.failure or ""
    assert failure.startswith("Rendezvous timed out after 8 s"), failure
    assert f"localhost:{ports[1]}" in failure
    assert time.monotonic() - started < 90


def test_parameter_server_on_one_host_runs_the_script_unchanged(tmp_path: Path) -> None:
    """The SDK's distribution={"parameter_server": {"enabled": True}} with instance_count=1, as AWS's container runs it."""
    base = tmp_path / "opt-ml"
    (base / "output" / "data").mkdir(parents=True)
    script = """
import json, os, sys
json.dump({"tf_config": os.environ.get("TF_CONFIG"), "argv": sys.argv[1:]},
          open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "ran.json"), "w"))
"""
    _job_with_code(base, tmp_path, {"train.py": script}, {"sagemaker_parameter_server_enabled": True, "epochs": 2})
    run = run_trainer(base)
    assert run.returncode == 0, run.explain()
    ran = json.loads((base / "output" / "data" / "ran.json").read_text())
    assert ran == {"tf_config": None, "argv": ["--epochs", "2"]}


def test_multi_worker_mirrored_on_one_host_gets_a_one_worker_tf_config(tmp_path: Path) -> None:
    """instance_count=1 with multi_worker_mirrored_strategy: TF_CONFIG as sagemaker-tensorflow-training sets it."""
    base = tmp_path / "opt-ml"
    (base / "output" / "data").mkdir(parents=True)
    script = """
import json, os
config = json.loads(os.environ["TF_CONFIG"])
json.dump({"workers": config["cluster"]["worker"], "task": config["task"]},
          open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "ran.json"), "w"))
"""
    resources = {"current_host": "algo-1", "hosts": ["algo-1"], "current_group_name": "homogeneousCluster",
                 "instance_groups": [{"instance_group_name": "homogeneousCluster", "instance_type": "ml.g5.xlarge", "hosts": ["algo-1"]}]}
    _job_with_code(base, tmp_path, {"train.py": script}, {"sagemaker_multi_worker_mirrored_strategy_enabled": True},
                   resource_config=resources)  # fmt: skip
    run = run_trainer(base)
    assert run.returncode == 0, run.explain()
    ran = json.loads((base / "output" / "data" / "ran.json").read_text())
    assert ran == {"workers": ["algo-1:8890"], "task": {"index": 0, "type": "worker"}}


# A TF2 ParameterServerStrategy script for SageMaker's parameter_server distribution: the toolkit's
# TF_CONFIG names the coordinator "master" (TF2 calls it "chief"); the master coordinates, the
# other hosts serve as workers until the master is done; every host also runs a parameter server.
PS_SCRIPT = """
import json, os, socket, time
import tensorflow as tf

config = json.loads(os.environ["TF_CONFIG"])
cluster, task = config["cluster"], config["task"]
spec = tf.train.ClusterSpec({"chief": cluster["master"], "worker": cluster["worker"], "ps": cluster["ps"]})
out = os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "ps.json")
if task["type"] == "master":
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, task_type="chief", task_id=0, rpc_layer="grpc")
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        first = tf.Variable(0.0)
        second = tf.Variable(0.0)

    @tf.function
    def step():
        first.assign_add(1.0)
        second.assign_add(2.0)
        return first.read_value()

    results = [coordinator.schedule(step) for _ in range(6)]
    coordinator.join()
    json.dump({"task": task, "first": float(first.numpy()), "second": float(second.numpy()),
               "devices": sorted({first.device, second.device}), "steps": len([r.fetch() for r in results])}, open(out, "w"))
else:
    server = tf.distribute.Server(spec, job_name="worker", task_index=task["index"], protocol="grpc", start=True)
    json.dump({"task": task, "serving": spec.task_address("worker", task["index"])}, open(out, "w"))
    host, port = cluster["master"][0].rsplit(":", 1)
    deadline, seen = time.time() + 300, False
    while time.time() < deadline:  # serve until the coordinator came up and is gone again
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            seen = True
        except OSError:
            if seen:
                break
        time.sleep(1)
"""


def _port_pairs(count: int) -> list[int]:
    """Ports p with p and p + 1 free (worker and parameter server, as 2222 and 2223 on SageMaker)."""
    import socket

    found: list[int] = []
    while len(found) < count:
        (port,) = free_ports(1)
        try:
            with socket.socket() as probe:
                probe.bind(("0.0.0.0", port + 1))  # the parameter server binds every interface
        except OSError:
            continue
        if not any(abs(port - other) <= 1 for other in found):
            found.append(port)
    return found


@pytest.mark.slow
def test_two_hosts_run_a_parameter_server_cluster_for_a_parameter_server_strategy_script(tmp_path: Path) -> None:
    ports = _port_pairs(2)
    hosts = ",".join(f"localhost:{p}" for p in ports)
    processes, bases = [], []
    for index in range(2):
        base = tmp_path / f"host-{index}"
        (base / "output" / "data").mkdir(parents=True)
        _job_with_code(base, tmp_path / f"src-{index}", {"train.py": PS_SCRIPT}, {"sagemaker_parameter_server_enabled": True})
        bases.append(base)
        processes.append(start_trainer(base, TRAINING_HOSTS=hosts, TRAINING_CURRENT_HOST=f"localhost:{ports[index]}"))
    runs = [finish(p, b, timeout=300) for p, b in zip(processes, bases)]
    assert [run.returncode for run in runs] == [0, 0], "\n\n".join(run.explain() for run in runs)
    master, worker = (json.loads((b / "output" / "data" / "ps.json").read_text()) for b in bases)
    assert master["task"] == {"index": 0, "type": "master"} and worker["task"] == {"index": 0, "type": "worker"}
    assert worker["serving"] == f"localhost:{ports[1]}"
    assert (master["first"], master["second"], master["steps"]) == (6.0, 12.0, 6), "the worker host ran every step"
    # One variable on each host's parameter server: both servers held the model.
    assert master["devices"] == ["/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"]
    assert f"master localhost:{ports[0]} is down; stopping" in runs[1].stdout, "the worker host served until the master ended"


MWMS_FIT_SCRIPT = """
import numpy as np
import tensorflow as tf
from trainer import toolkit

strategy = toolkit.strategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
x = np.zeros((64, 4), "float32")
y = np.zeros((64,), "int64")
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), epochs=1, verbose=0)
"""


@pytest.mark.slow
def test_keras_3_fit_under_multi_worker_mirrored_strategy_names_the_cause_and_both_fixes(tmp_path: Path) -> None:
    """Issue #39: both hosts start, TF_CONFIG is right, and Keras 3's fit fails with a raw PerReplica error."""
    _, _, runs = _two_workers(tmp_path, MWMS_FIT_SCRIPT)
    chief = runs[0]
    assert chief.returncode != 0, chief.explain()
    failure = chief.failure or ""
    assert "at train.py line 11: model.fit(" in failure, failure  # the user's file and line
    assert "Keras 3's model.fit does not run under MultiWorkerMirroredStrategy" in failure
    assert "TF_USE_LEGACY_KERAS=1 (scripts.launch --legacy-keras" in failure and "custom loop" in failure



# --- entry points as AWS's containers start them --------------------------------------------------

AI_PLATFORM_LAYOUT = {
    # Google AI Platform's layout: the code is a package named trainer, as the image's own package is.
    "trainer/__init__.py": "",
    "trainer/model.py": "def f():\n    return 42\n",
    "train.py": """
    import os, trainer
    from trainer.model import f
    assert trainer.__file__.startswith(os.getcwd()), trainer.__file__
    open(os.path.join(os.environ["SM_MODEL_DIR"], "value.txt"), "w").write(str(f()))
    """,
}


def test_a_users_package_named_trainer_is_theirs_and_does_not_stop_the_script(tmp_path: Path) -> None:
    base = tmp_path / "opt-ml"
    _job_with_code(base, tmp_path, AI_PLATFORM_LAYOUT)
    run = run_trainer(base)
    assert run.returncode == 0, run.explain()
    assert (base / "model" / "value.txt").read_text() == "42"


def test_an_entry_point_named_trainer_py_runs(tmp_path: Path) -> None:
    base = tmp_path / "opt-ml"
    script = "import os, sys\nopen(os.path.join(os.environ['SM_MODEL_DIR'], 'argv.txt'), 'w').write(' '.join(sys.argv[1:]))\n"
    _job_with_code(base, tmp_path, {"trainer.py": script}, {"epochs": 2}, program="trainer.py")
    run = run_trainer(base)
    assert run.returncode == 0, run.explain()
    assert (base / "model" / "argv.txt").read_text() == "--epochs 2"


def test_a_shell_entry_point_runs_under_its_shebang(tmp_path: Path) -> None:
    base = tmp_path / "opt-ml"
    script = """
    #!/bin/bash
    set -euo pipefail
    names=(alpha beta)
    if [[ "${#names[@]}" == 2 && "$1" == --epochs ]]; then
        echo "bash-args: $@ ${names[1]}"
    fi
    """
    _job_with_code(base, tmp_path, {"train.sh": script}, {"epochs": 3}, program="train.sh")
    run = run_trainer(base)
    assert run.returncode == 0, run.explain()
    assert "bash-args: --epochs 3 beta" in run.stdout


def test_an_extensionless_executable_with_a_shebang_is_run_as_a_command(tmp_path: Path) -> None:
    base = tmp_path / "opt-ml"
    script = """
    #!/usr/bin/env python3
    import os, sys
    open(os.path.join(os.environ["SM_MODEL_DIR"], "argv.txt"), "w").write(" ".join(sys.argv[1:]))
    """
    _job_with_code(base, tmp_path, {"train": script}, {"epochs": 3}, program="train")
    run = run_trainer(base)
    assert run.returncode == 0, run.explain()
    assert (base / "model" / "argv.txt").read_text() == "--epochs 3"


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("model.ipynb", "is a Jupyter notebook"),
        ("train", "has no #! line and is not executable"),
    ],
)
def test_an_entry_point_that_cannot_run_is_refused_in_one_line(tmp_path: Path, name: str, says: str) -> None:
    base = tmp_path / "opt-ml"
    _job_with_code(base, tmp_path, {name: "print('hi')\n"}, program=name)
    run = run_trainer(base)
    assert run.returncode == 9, run.explain()
    failure = (run.failure or "").strip()
    assert says in failure and len(failure.splitlines()) == 1, failure


def test_a_python_the_script_starts_is_not_guarded_again(tmp_path: Path) -> None:
    """The image's python (bin/python) inside a script: the runner already gives the guarantees."""
    import os
    import sys

    from tests.trainer.helpers import TRAINING_IMAGE

    base = tmp_path / "opt-ml"
    script = """
    #!/bin/sh
    python -c 'import json; json.loads("x")' || echo tolerated
    exit 5
    """
    _job_with_code(base, tmp_path, {"train.sh": script}, program="train.sh")
    path = os.pathsep.join([str(TRAINING_IMAGE / "bin"), os.environ.get("PATH", "")])
    run = run_trainer(base, PATH=path, TRAINER_PYTHON=sys.executable)
    assert run.returncode == 8, run.explain()
    assert "tolerated" in run.stdout
    failure = run.failure or ""
    assert failure.startswith("The training script train.sh exited with status 5"), failure
    assert "raised JSONDecodeError" not in failure, "the probe the script tolerated is not the job's failure"
    assert "[trainer] guard" not in run.stdout


def _two_host_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolves_after: dict[str, int]
) -> tuple[Any, Any, list[str], type[Exception]]:
    """Script mode's runner in-process for algo-1 of two hosts, up to unpacking the code; host names resolve
    after ``resolves_after[name]`` failed lookups (never when -1). Returns the environment, the job, the
    lookups, and the exception that says the code was being unpacked (the script about to start)."""
    import socket

    from trainer.contract import environment
    from trainer.user_code import contract, runner, source

    base = script_job(tmp_path / "opt-ml", "/opt/ml/code", resource_config={"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]})
    env = environment.load_environment({"SAGEMAKER_BASE_DIR": str(base), "RENDEZVOUS_TIMEOUT_SECONDS": "2"})
    job = contract.script_job(env.hyperparameters, {})
    lookups: list[str] = []

    def getaddrinfo(host: str, *args: Any, **kwargs: Any) -> list[Any]:
        lookups.append(host)
        left = resolves_after.get(host, 0)
        if left != 0:
            resolves_after[host] = left - 1
            raise socket.gaierror(socket.EAI_NONAME, f"{host}: not yet")
        return []

    class Unpacked(Exception):
        pass

    def prepare(*args: Any, **kwargs: Any) -> None:
        raise Unpacked("the code was unpacked: the script was about to start")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(runner.Supervisor, "install", lambda self: None)
    monkeypatch.setattr(runner, "verify_gpus", lambda *args, **kwargs: {"gpus": 0})
    monkeypatch.setattr(source, "prepare", prepare)
    return env, job, lookups, Unpacked


def test_a_multi_host_script_waits_for_every_host_name_to_resolve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.user_code import runner

    env, job, lookups, unpacked = _two_host_job(tmp_path, monkeypatch, {"algo-2": 1})
    with pytest.raises(unpacked):
        runner.run(env, job)
    assert lookups.count("algo-2") == 2, "algo-2 was looked up again until it resolved, before the code was unpacked"


def test_a_host_name_that_never_resolves_fails_before_the_script_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.contract.errors import RendezvousError
    from trainer.user_code import runner

    env, job, lookups, _ = _two_host_job(tmp_path, monkeypatch, {"algo-2": -1})
    started = time.monotonic()
    with pytest.raises(RendezvousError) as caught:
        runner.run(env, job)
    assert str(caught.value).startswith("Rendezvous failed: host name(s) algo-2 from ")
    assert "did not resolve within RENDEZVOUS_TIMEOUT_SECONDS" in str(caught.value)
    assert 2 <= time.monotonic() - started < 10


SETUP_PY = """
from setuptools import setup
setup(name="mytrainer", version="0.1", py_modules=["helper"], install_requires=["numpy", "{dependency}"])
"""


def test_a_source_directory_with_setup_py_is_installed_with_its_dependencies_offline(tmp_path: Path) -> None:
    """As AWS's toolkit runs `pip install .`: install_requires from the shipped wheels, what the image has is kept."""
    files = {
        "setup.py": SETUP_PY.format(dependency="platformdemo==1.0"),
        "helper.py": "def value():\n    import platformdemo\n    return platformdemo.VALUE\n",
        "train.py": "import os, helper\nopen(os.path.join(os.environ['SM_MODEL_DIR'], 'value.txt'), 'w').write(str(helper.value()))\n",
    }
    _, run = _run_with_a_shipped_wheel(tmp_path, files)
    installed = run.events("requirements")
    assert installed and sorted(installed[0]["installed"].split(",")) == ["mytrainer==0.1", "platformdemo==1.0"], installed


def test_a_setup_py_dependency_without_a_wheel_is_named_in_one_line(tmp_path: Path) -> None:
    base = tmp_path / "opt-ml"
    marker = tmp_path / "script-started"
    files = {"setup.py": SETUP_PY.format(dependency="not-shipped-package==9.9"), "helper.py": "",
             "train.py": f"open({str(marker)!r}, 'w').write('ran')\n"}  # fmt: skip
    _job_with_code(base, tmp_path, files)
    run = run_trainer(base)
    assert run.returncode == 9, run.explain()
    failure = (run.failure or "").strip()
    assert failure.startswith("setup.py ('not-shipped-package==9.9', a dependency of the package it installs) cannot be installed"), failure
    assert len(failure.splitlines()) == 1 and not marker.exists()
