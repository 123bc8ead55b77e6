"""The built image, run as SageMaker runs it: ``<image> train``, ``<image> serve``, processing jobs,
jobs that replace the entrypoint, and ``docker stop``, each in its own container with the job's
tree mounted at /opt/ml (laid out by the same helpers as the process tests in tests/trainer).

On a machine without the CUDA base the image is the Debian stand-in (scripts/build-image.sh): the
same Dockerfile, the same virtualenv and entrypoint, on CPU.
"""

from __future__ import annotations

import json
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.image import containers
from tests.trainer.helpers import TrainerRun, write_job
from tests.trainer.process_helpers import job_config, output_dir, write_raw
from trainer.datasets.synthetic import SyntheticSpec

pytestmark = [pytest.mark.image, pytest.mark.slow]

TINY = SyntheticSpec("csv", examples=512, features=8, classes=3, shards=2, seed=3)
TINY_HP = {"epochs": 2, "batch_size": 64, "learning_rate": 0.05, "optimizer": "sgd", "hidden_units": "16"}


def finished_run(base: Path, finished: containers.Finished) -> TrainerRun:
    """A container's run read with the trainer tests' helpers (events, metrics, failure file)."""
    return TrainerRun(base, finished.returncode, finished.stdout, finished.stderr)


def gpu_check_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("[gpu-check] ")]


@pytest.fixture(scope="module")
def trained(image, tmp_path_factory) -> TrainerRun:
    """``docker run -v JOB:/opt/ml IMAGE train``: the built-in MLP on a tiny CSV job."""
    base = write_job(tmp_path_factory.mktemp("train-job"), TINY_HP, TINY)
    return finished_run(base, containers.run(image.tag, ["train"], opt_ml=base))


def test_train_writes_the_model_its_config_and_success(trained):
    run = trained
    assert run.returncode == 0, run.explain()
    assert [m["epoch"] for m in run.metrics()] == [1, 2]
    assert run.model_path.is_file() and (run.base / "model" / "trainer_config.json").is_file()
    assert run.failure is None
    assert "[trainer] success" in run.stdout.splitlines()
    assert len(gpu_check_lines(run.stdout)) == 1, "the trainer checks the GPUs once, before training"


def test_serve_answers_ping_and_an_invocation_with_the_trained_model(image, trained, tmp_path):
    assert trained.returncode == 0, trained.explain()
    with containers.started(image.tag, ["serve"], mounts={trained.base / "model": "/opt/ml/model"}, publish="127.0.0.1::8080") as name:
        url = f"http://127.0.0.1:{containers.published_port(name)}"
        _wait_for_ping(url, name)
        rows = [[0.1 * i for i in range(TINY.features)], [1.0] * TINY.features]
        request = urllib.request.Request(
            url + "/invocations", data=json.dumps({"instances": rows}).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # nosec B310 - loopback
            status, body = response.status, json.loads(response.read())
    assert status == 200
    predictions = body["predictions"]
    assert len(predictions) == len(rows), body
    for prediction in predictions:
        assert 0 <= prediction["predicted_class"] < TINY.classes
        assert sum(prediction["probabilities"]) == pytest.approx(1.0, abs=1e-4)


def _wait_for_ping(url: str, name: str, timeout: float = 120) -> float:
    """Seconds until ``/ping`` answered 200."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            with urllib.request.urlopen(url + "/ping", timeout=5) as response:  # nosec B310 - loopback
                if response.status == 200:
                    return time.monotonic() - start
        except (OSError, urllib.error.URLError):
            pass  # not listening yet
        if not containers.running(name):
            raise AssertionError(f"the serving container ended:\n{containers.logs(name)}")
        time.sleep(0.2)
    raise AssertionError(f"/ping not 200 within {timeout:.0f} s:\n{containers.logs(name)}")


def test_the_builtin_processing_job_shards_raw_csv(image, tmp_path):
    """The Dockerfile's processing command: ``--entrypoint python3`` with ``-m trainer process``."""
    base = job_config(tmp_path / "process-job", instance_type="ml.m5.xlarge")
    write_raw(base, TINY)
    finished = containers.run(image.tag, ["-m", "trainer", "process", "--shards", "2", "--seed", "5"], opt_ml=base, entrypoint="python3")
    assert finished.returncode == 0, finished.explain()
    statistics = json.loads((output_dir(base, "train") / "statistics.json").read_text())
    assert statistics["examples"]["train"] > 0
    assert len(list(output_dir(base, "train").glob("*.tfrecord"))) == 2
    assert list(output_dir(base, "validation").glob("*.tfrecord"))
    assert not (base / "output" / "message").exists()


def test_a_script_processor_job_runs_the_users_script_after_the_gpu_check(image, tmp_path):
    """ScriptProcessor's shape: ``ContainerEntrypoint: ["python3", "/opt/ml/processing/input/code/prep.py"]``,
    the script an input of its own, as the SDK declares it."""
    code = {"LocalPath": "/opt/ml/processing/input/code", "S3Uri": "s3://artifacts/p-1/input/code/prep.py", "S3DataDistributionType": "FullyReplicated"}
    base = job_config(tmp_path / "script-process", instance_type="ml.m5.xlarge", inputs={"code": code})
    _write(base / "processing" / "input" / "code", "prep.py", """
        import pathlib
        out = pathlib.Path("/opt/ml/processing/output/train")
        out.mkdir(parents=True, exist_ok=True)
        (out / "rows.csv").write_text("a,b\\n1,2\\n")
        print("prep.py wrote", out / "rows.csv")
    """)
    finished = containers.run(image.tag, ["/opt/ml/processing/input/code/prep.py"], opt_ml=base, entrypoint="python3")
    assert finished.returncode == 0, finished.explain()
    assert "prep.py wrote /opt/ml/processing/output/train/rows.csv" in finished.stdout
    assert len(gpu_check_lines(finished.stdout)) == 1, finished.explain()
    assert finished.stdout.index("[gpu-check] ") < finished.stdout.index("prep.py wrote")
    assert (output_dir(base, "train") / "rows.csv").read_text() == "a,b\n1,2\n"


FAILING_SCRIPT = """
    import sys
    print("user script started", sys.argv[1:])
    raise ValueError("learning rate must be positive")
"""

# SDK v3 ModelTrainer: ContainerEntrypoint ["/bin/bash"], its driver script from the sm_drivers channel.
SM_TRAIN_SH = """
    #!/bin/bash
    set -e
    cd /opt/ml/input/data/code
    python3 --version
    python3 script.py --lr -1
"""


# The failure names the command as written and the user's file relative to the working directory:
# the image's WORKDIR /opt/ml for `python3 /opt/ml/...`, the code directory sm_train.sh changes to.
@pytest.mark.parametrize(
    ("entrypoint", "command", "named", "where"),
    [
        ("python3", ["/opt/ml/input/data/code/script.py", "--lr", "-1"], "/opt/ml/input/data/code/script.py", "input/data/code/script.py"),
        ("/bin/bash", ["-c", "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh && /opt/ml/input/data/sm_drivers/sm_train.sh"], "script.py", "script.py"),
    ],
    ids=["python3-script", "bash-c-as-sdk-v3"],
)
def test_an_entrypoint_override_gets_the_gpu_check_and_a_failure_naming_the_users_line(image, tmp_path, entrypoint, command, named, where):
    base = write_job(tmp_path / "override-job", {}, None)
    _write(base / "input" / "data" / "code", "script.py", FAILING_SCRIPT)
    _write(base / "input" / "data" / "sm_drivers", "sm_train.sh", SM_TRAIN_SH)
    finished = containers.run(image.tag, command, opt_ml=base, entrypoint=entrypoint)
    assert finished.returncode == 1, finished.explain()
    assert len(gpu_check_lines(finished.stdout)) == 1, finished.explain()
    assert "user script started ['--lr', '-1']" in finished.stdout
    assert finished.stdout.index("[gpu-check] ") < finished.stdout.index("user script started")
    failure = (base / "output" / "failure").read_text()
    assert failure.startswith(
        f"The training script {named} raised ValueError: learning rate must be positive at {where} line 3: "
        'raise ValueError("learning rate must be positive").'
    ), failure


def test_docker_stop_reaches_the_trainer_through_tini_and_leaves_a_checkpoint(image, tmp_path):
    data = SyntheticSpec("csv", examples=4096, features=16, classes=4, shards=2, seed=9)
    base = write_job(tmp_path / "stop-job", {**TINY_HP, "epochs": 200, "batch_size": 32}, data)
    with containers.started(image.tag, ["train"], opt_ml=base) as name:
        containers.wait_for_log(name, "[metrics] epoch=1 ")
        containers.docker("stop", "--time", "60", name, timeout=120)
        status = containers.wait(name)
        stdout, stderr = containers.logs(name)
    run = TrainerRun(base, status, stdout, stderr)
    assert status == 143, run.explain()
    assert run.failure is not None and "Training stopped by SIGTERM" in run.failure, run.explain()
    assert list((base / "checkpoints").glob("*.index")), "no checkpoint was left for the restart"
    assert not run.model_path.exists()


# A user's script that saves on SIGTERM (a stop, a spot interruption), as a checkpointing callback does.
STOPPABLE_SCRIPT = """
    import pathlib, signal, sys, time
    def stop(*_):
        pathlib.Path("/opt/ml/checkpoints").mkdir(exist_ok=True)
        pathlib.Path("/opt/ml/checkpoints/saved-at-stop").write_text("saved")
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    print("user script waiting for a stop", flush=True)
    time.sleep(600)
"""
# SDK v3's sm_train.sh as it runs a script: set -e, an ERR trap that keeps the exit status.
SM_TRAIN_SH_STOPPABLE = """
    #!/bin/bash
    set -e
    handle_error() {
        EXIT_STATUS=$?
        echo "An error occurred with exit code $EXIT_STATUS"
        exit $EXIT_STATUS
    }
    trap 'handle_error' ERR
    cd /opt/ml/input/data/code
    python3 script.py
    echo "Training Container Execution Completed"
"""


# bash as PID 1 (the replaced entrypoint) drops a SIGTERM it has no handler for: the image's
# BASH_ENV runs it under tini, so the stop reaches the guarded python and the user's script.
@pytest.mark.parametrize(
    ("entrypoint", "command"),
    [
        ("/bin/bash", ["-c", "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh && /opt/ml/input/data/sm_drivers/sm_train.sh"]),
        ("/bin/bash", ["/opt/ml/input/data/sm_drivers/sm_train.sh"]),
        ("python3", ["/opt/ml/input/data/code/script.py"]),
    ],
    ids=["bash-c-as-sdk-v3", "bash-script-as-runproc", "python3-script"],
)
def test_docker_stop_reaches_the_users_script_behind_a_replaced_entrypoint(image, tmp_path, entrypoint, command):
    base = write_job(tmp_path / "stop-override-job", {}, None)
    _write(base / "input" / "data" / "code", "script.py", STOPPABLE_SCRIPT)
    _write(base / "input" / "data" / "sm_drivers", "sm_train.sh", SM_TRAIN_SH_STOPPABLE)
    with containers.started(image.tag, command, opt_ml=base, entrypoint=entrypoint) as name:
        containers.wait_for_log(name, "user script waiting for a stop")
        started = time.monotonic()
        containers.docker("stop", "--time", "60", name, timeout=120)
        status = containers.wait(name)
        stdout, stderr = containers.logs(name)
    explain = f"status {status}\n{stdout}\n{stderr}"
    assert time.monotonic() - started < 30, f"the stop waited for docker's SIGKILL: {explain}"
    assert status == 143, explain
    assert (base / "checkpoints" / "saved-at-stop").read_text() == "saved", explain
    failure = (base / "output" / "failure").read_text()
    assert failure.startswith("Stopped by SIGTERM: the training script"), failure


def _write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    path.chmod(0o755)
    return path
