"""The image's ``python``/``python3`` (training_image/bin) for jobs that replace the entrypoint.

Each test runs the command a SageMaker job would run (``python3 x.py`` as a ScriptProcessor or
``docker run --entrypoint python3`` does, ``bash -c`` as ModelTrainer's sm_train.sh does) with the
image's environment: ``training_image/bin`` first on PATH, the trainer importable, a fake /opt/ml
tree through SAGEMAKER_BASE_DIR. The guarded commands run the real GPU check (TensorFlow on CPU),
so they are marked slow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.trainer.helpers import TRAINING_IMAGE, read_until, trainer_env
from trainer.user_code import guard

IMAGE_BIN = TRAINING_IMAGE / "bin"
TIMEOUT = 240


def image_env(base: Path, **overrides: str | None) -> dict[str, str]:
    """The image's environment: its python wrapper first on PATH, the venv's interpreter behind it."""
    env = trainer_env(base, **overrides)
    env["PATH"] = os.pathsep.join([str(IMAGE_BIN), env.get("PATH", "")])
    env["TRAINER_PYTHON"] = sys.executable
    env.pop(guard.ENV_ACTIVE, None)
    return env


def training_tree(base: Path) -> Path:
    config = base / "input" / "config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text("{}")
    (config / "inputdataconfig.json").write_text("{}")
    return base


def processing_tree(base: Path, instance_type: str = "ml.m5.xlarge") -> Path:
    config = base / "config"
    config.mkdir(parents=True)
    job = {"ProcessingJobName": "p-1", "ProcessingResources": {"ClusterConfig": {"InstanceType": instance_type, "InstanceCount": 1}}}
    (config / "processingjobconfig.json").write_text(json.dumps(job))
    return base


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False)


def gpu_checks(stdout: str) -> int:
    return sum(line.startswith("[gpu-check] ") for line in stdout.splitlines())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tree", "reason_file", "what", "overrides"),
    [
        (training_tree, "failure", "training script", {"EXPECTED_GPU_COUNT": "1"}),
        (processing_tree, "message", "processing script", {"EXPECTED_GPU_COUNT": None}),
    ],
    ids=["training-EXPECTED_GPU_COUNT", "processing-instance-type"],
)
def test_gpus_promised_on_a_cpu_host_stop_the_job_before_the_users_first_line(tmp_path, tree, reason_file, what, overrides):
    base = tmp_path / "opt-ml"
    tree(base) if tree is training_tree else tree(base, "ml.g5.xlarge")
    marker = tmp_path / "started"
    write(tmp_path / "code", "x.py", f"open({str(marker)!r}, 'w').write('ran')\n")
    result = run(["python3", "x.py"], tmp_path / "code", image_env(base, **overrides))
    assert result.returncode == 3, result.stdout + result.stderr
    reason = (base / "output" / reason_file).read_text()
    assert reason.startswith("GPU check failed: expected 1 GPU(s)"), reason
    assert f"The {what} was not started." in reason
    assert not marker.exists(), "the user's first line ran before the GPU check"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "hyperparameters_file", "reason_start"),
    [
        ({"EXPECTED_GPU_COUNT": "two"}, True, "Environment variable EXPECTED_GPU_COUNT must be an integer, got 'two'."),
        (
            {"EXPECTED_GPU_COUNT": "0", "SM_HPS": '{"epochs": 3 "x": 1}'},
            False,
            "Environment variable SM_HPS is not valid JSON: Expecting ',' delimiter: line 1 column 14 (char 13).",
        ),
    ],
    ids=["EXPECTED_GPU_COUNT", "SM_HPS"],
)
def test_a_configuration_mistake_under_the_guard_is_exit_2_as_in_the_trainer(tmp_path, overrides, hyperparameters_file, reason_start):
    """The check's child reads the job's configuration: its mistake is a config error (2), not a GPU failure (3)."""
    base = training_tree(tmp_path / "opt-ml")
    if not hyperparameters_file:
        (base / "input" / "config" / "hyperparameters.json").unlink()
    marker = tmp_path / "started"
    write(tmp_path / "code", "x.py", f"open({str(marker)!r}, 'w').write('ran')\n")
    result = run(["python3", "x.py"], tmp_path / "code", image_env(base, **overrides))
    assert result.returncode == 2, result.stdout + result.stderr
    reason = (base / "output" / "failure").read_text()
    assert reason == f"{reason_start} The training script was not started.\n", reason
    assert f"[trainer] failed reason={reason_start}" in result.stdout
    assert "crash in the driver" not in reason and not marker.exists()


@pytest.mark.slow
def test_a_raise_under_a_shell_names_the_users_file_and_line_and_the_check_runs_once(tmp_path):
    """ModelTrainer's shape: a shell script starts python several times; a driver runs the user's script."""
    base = training_tree(tmp_path / "opt-ml")
    code = tmp_path / "code"
    write(code, "train.py", """
        import sys
        print("user script argv", sys.argv[1:])
        scale = float(sys.argv[2])
        raise ValueError(f"scale {scale} is out of range")
    """)
    write(code, "driver.py", """
        import os, subprocess, sys
        print("driver guarded:", os.environ.get("TRAINER_GUARD_ACTIVE"))
        # A driver starts the user's script with whatever python is first on PATH, as SageMaker's do.
        sys.exit(subprocess.run(["python3", "train.py", "--scale", "7"]).returncode)
    """)
    result = run(["bash", "-c", "python3 --version && python3 driver.py"], code, image_env(base))
    assert result.returncode == 1, result.stdout + result.stderr
    assert gpu_checks(result.stdout) == 1, "every python of one job shares one GPU check"
    assert "user script argv ['--scale', '7']" in result.stdout, "the user's script ran with its arguments"
    assert "driver guarded: 1" in result.stdout
    reason = (base / "output" / "failure").read_text().strip()
    assert reason == (
        "The training script driver.py raised ValueError: scale 7.0 is out of range at train.py line 4: "
        'raise ValueError(f"scale {scale} is out of range"). The full traceback is in the job\'s log.'
    )
    assert "Traceback (most recent call last)" in result.stderr, "the full traceback still reaches the log"


@pytest.mark.slow
def test_processing_script_exit_status_and_last_error_line_reach_the_exit_message(tmp_path):
    base = processing_tree(tmp_path / "opt-ml")
    write(tmp_path / "code", "preprocess.py", """
        import sys
        print("error: input file /opt/ml/processing/input/data/x.csv is empty", file=sys.stderr)
        sys.exit(4)
    """)
    result = run(["python3", "preprocess.py"], tmp_path / "code", image_env(base, EXPECTED_GPU_COUNT="0"))
    assert result.returncode == 4, result.stdout + result.stderr
    message = (base / "output" / "message").read_text()
    assert message.strip() == (
        "The processing script preprocess.py exited with status 4; its last error output: "
        "error: input file /opt/ml/processing/input/data/x.csv is empty. See the job's log."
    )
    assert not (base / "output" / "failure").exists(), "processing reports through output/message"


@pytest.mark.slow
def test_a_processing_result_outside_the_declared_outputs_fails_the_job(tmp_path):
    base = processing_tree(tmp_path / "opt-ml")
    config = json.loads((base / "config" / "processingjobconfig.json").read_text())
    config["ProcessingOutputConfig"] = {"Outputs": [{"OutputName": "out", "S3Output": {"LocalPath": "/opt/ml/processing/out", "S3Uri": "s3://b/o/"}}]}
    (base / "config" / "processingjobconfig.json").write_text(json.dumps(config))
    write(tmp_path / "code", "x.py", f"""
        import os
        os.makedirs({str(base / "processing" / "out")!r}, exist_ok=True)
        open({str(base / "processing" / "out" / "kept.csv")!r}, "w").write("a")
        os.makedirs({str(base / "processing" / "output")!r}, exist_ok=True)
        open({str(base / "processing" / "output" / "lost.csv")!r}, "w").write("b")
    """)
    (base / "processing" / "output").mkdir(parents=True)
    (base / "processing" / "output" / "earlier.csv").write_text("from before the job")
    os.utime(base / "processing" / "output" / "earlier.csv", (1, 1))
    result = run(["python3", "x.py"], tmp_path / "code", image_env(base, EXPECTED_GPU_COUNT="0"))
    assert result.returncode == 8, result.stdout + result.stderr
    message = (base / "output" / "message").read_text()
    assert message.startswith(
        f"The processing script x.py wrote 1 file(s) outside the job's declared outputs, which SageMaker would not "
        f"upload: {base / 'processing' / 'output' / 'lost.csv'}. Declared outputs: out -> {base / 'processing' / 'out'}."
    ), message


@pytest.mark.slow
def test_sigterm_reaches_the_users_script_and_the_job_ends_with_143(tmp_path):
    base = training_tree(tmp_path / "opt-ml")
    stopped = tmp_path / "stopped"
    write(tmp_path / "code", "long.py", f"""
        import signal, sys, time
        def stop(signum, frame):
            open({str(stopped)!r}, "w").write(str(signum))
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        time.sleep(120)
    """)
    process = subprocess.Popen(
        ["python3", "long.py"], cwd=tmp_path / "code", env=image_env(base), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        read_until(process, "ready", timeout=TIMEOUT)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 143
    finally:
        if process.poll() is None:
            process.kill()
    assert stopped.read_text() == str(int(signal.SIGTERM)), "the script's own handler ran"
    reason = (base / "output" / "failure").read_text()
    assert reason.startswith("Stopped by SIGTERM: the training script long.py was stopped after"), reason


def test_outside_a_job_and_for_the_platforms_own_modules_python_is_the_plain_interpreter(tmp_path):
    probe = "import os, sys; print('guarded', os.environ.get('TRAINER_GUARD_ACTIVE'), sys.argv[1:])"
    no_job = run(["python3", "-c", probe, "a"], tmp_path, image_env(tmp_path / "no-such-tree", EXPECTED_GPU_COUNT="1"))
    assert no_job.returncode == 0, no_job.stderr
    assert no_job.stdout.strip() == "guarded None ['a']"

    # A job tree that promises a GPU this host lacks: the platform's own module runs unguarded
    # (python -m trainer does its own check); a guarded command would have failed with exit 3.
    base = training_tree(tmp_path / "opt-ml")
    own = run(["python", "-m", "trainer.contract.errors"], tmp_path, image_env(base, EXPECTED_GPU_COUNT="1"))
    assert own.returncode == 0, own.stdout + own.stderr
    assert "[trainer] guard" not in own.stdout
    assert not (base / "output" / "failure").exists()


def test_the_job_is_read_from_the_tree_the_container_has(tmp_path):
    assert guard.detect_job({"SAGEMAKER_BASE_DIR": str(tmp_path)}) is None
    processing = guard.detect_job({"SAGEMAKER_BASE_DIR": str(processing_tree(tmp_path / "p", "ml.g5.2xlarge"))})
    assert processing is not None
    assert (processing.kind, processing.failure_file, processing.instance_type) == (
        "processing", tmp_path / "p" / "output" / "message", "ml.g5.2xlarge"
    )
    training = guard.detect_job({"SAGEMAKER_BASE_DIR": str(training_tree(tmp_path / "t")), "SM_OUTPUT_DIR": str(tmp_path / "out")})
    assert training is not None
    assert (training.kind, training.failure_file) == ("training", tmp_path / "out" / "failure")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["train.py", "--epochs", "3"], "train.py"),
        (["-u", "-X", "dev", "src/train.py"], "src/train.py"),
        (["-m", "package.main", "--x"], "-m package.main"),
        (["-c", "import x"], "python -c 'import x'"),
        ([], "python (interactive)"),
    ],
)
def test_a_failure_names_the_command_as_the_user_wrote_it(args, named):
    assert guard.describe(args) == named


def test_the_commands_own_report_wins_else_the_first_in_user_code(tmp_path):
    (tmp_path / "1.json").write_text(json.dumps({"pid": 1, "ppid": 99, "type": "RuntimeError", "raised_in": "/venv/x.py:3"}))
    (tmp_path / "2.json").write_text(json.dumps({"pid": 2, "ppid": 1, "type": "ValueError", "file": "train.py", "line": 4}))
    assert guard.pick_report(tmp_path, 99)["file"] == "train.py", "the driver's own frame is not user code"
    (tmp_path / "3.json").write_text(json.dumps({"pid": 3, "ppid": 99, "type": "KeyError", "file": "main.py", "line": 9}))
    assert guard.pick_report(tmp_path, 99)["file"] == "main.py"
    assert guard.pick_report(tmp_path / "none", 99) is None
