"""A user's processing script (``SAGEMAKER_PROGRAM``) runs like a training script: GPU check first,
the container arguments as its argv, failures as the exception's file and line in output/message.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.trainer.process_helpers import job_config, output_dir, raw_dir, run_process, write_raw
from tests.trainer.helpers import RUN_TIMEOUT_SECONDS, TRAINING_IMAGE, trainer_command, trainer_env
from tests.trainer.script_helpers import pack, write_source
from trainer.datasets.synthetic import SyntheticSpec

SUBMIT = "/opt/ml/processing/input/code/sourcedir.tar.gz"

PREP = """
import argparse, glob, json, os, sys

open(os.path.join(os.environ["SM_PROCESSING_OUTPUT_TRAIN"], "started"), "w").close()
parser = argparse.ArgumentParser()
parser.add_argument("--keep", type=int, required=True)
parser.add_argument("--tag", default="")
args = parser.parse_args()
import helper  # the source directory is importable, as in training

rows = []
for path in sorted(glob.glob(os.path.join(os.environ["SM_PROCESSING_INPUT_RAW"], "*.csv"))):
    rows += open(path).read().splitlines()[1:]
with open(os.path.join(os.environ["SM_PROCESSING_OUTPUT_TRAIN"], "kept.csv"), "w") as out:
    out.write("\\n".join(helper.first(rows, args.keep)) + "\\n")
seen = {k: v for k, v in os.environ.items() if k.startswith("SM_")}
seen["argv"] = sys.argv[1:]
seen["cwd"] = os.getcwd()
seen["cuda"] = os.environ.get("CUDA_VISIBLE_DEVICES")
json.dump(seen, open(os.path.join(os.environ["SM_PROCESSING_OUTPUT_TRAIN"], "seen.json"), "w"))
"""

HELPER = """
def first(rows, count):
    if count > len(rows):
        raise ValueError(f"asked for {count} rows, the input has {len(rows)}")
    return rows[:count]
"""


def _job(base: Path, tmp: Path, files: dict[str, str]) -> Path:
    write_raw(base, SyntheticSpec("csv", examples=30, features=3, classes=2, seed=9))
    pack(write_source(tmp / "src", files), base / "processing" / "input" / "code" / "sourcedir.tar.gz")
    inputs = {"raw": {"LocalPath": "/opt/ml/processing/input/raw", "S3Uri": "s3://d/raw/"},
              "code": {"LocalPath": "/opt/ml/processing/input/code", "S3Uri": "s3://a/code/sourcedir.tar.gz"}}  # fmt: skip
    return job_config(base, inputs=inputs)


def _script_env(**extra: str) -> dict[str, str]:
    return {"SAGEMAKER_PROGRAM": "prep.py", "SAGEMAKER_SUBMIT_DIRECTORY": SUBMIT, **extra}


@pytest.mark.slow
def test_the_users_script_runs_with_the_container_arguments(tmp_path):
    base = _job(tmp_path / "job", tmp_path, {"prep.py": PREP, "helper.py": HELPER})
    (base / "output").mkdir()
    (base / "output" / "message").write_text("stale\n")
    run = run_process(base, "--keep", "5", "--tag", "a b", **_script_env())
    assert run.returncode == 0, run.explain()
    assert run.message is None, "a stale message must not outlive a success"
    train = output_dir(base, "train")
    assert len((train / "kept.csv").read_text().splitlines()) == 5
    seen = json.loads((train / "seen.json").read_text())
    assert seen["argv"] == ["--keep", "5", "--tag", "a b"]
    assert seen["SM_PROCESSING_INPUT_RAW"] == str(raw_dir(base))
    assert seen["SM_PROCESSING_OUTPUT_VALIDATION"] == str(output_dir(base, "validation"))
    assert (seen["SM_NUM_GPUS"], seen["SM_CURRENT_HOST"], seen["SM_HOSTS"]) == ("0", "algo-1", '["algo-1"]')
    assert seen["SM_PROCESSING_JOB_NAME"] == "gputrain-test-process" and seen["cuda"] == ""
    assert Path(seen["cwd"]) == base / "code"
    assert not any(k.startswith("SM_CHANNEL") or k == "SM_MODEL_DIR" for k in seen), "training's variables are not set"
    checked = run.stdout.index("[trainer] gpu-verified")
    assert checked < run.stdout.index("[trainer] script-start")


@pytest.mark.slow
def test_a_raising_script_names_exception_file_and_line(tmp_path):
    base = _job(tmp_path / "job", tmp_path, {"prep.py": PREP, "helper.py": HELPER})
    run = run_process(base, "--keep", "500", **_script_env())
    assert run.returncode == 8, run.explain()
    assert run.message == (
        "The processing script prep.py raised ValueError: asked for 500 rows, the input has 30 at helper.py line 3 in "
        'first(): raise ValueError(f"asked for {count} rows, the input has {len(rows)}"). The full traceback is in the '
        "job's log.\n"
    )
    assert "Traceback" in run.stderr, "the traceback still goes to the log"


@pytest.mark.slow
def test_an_argument_the_script_refuses_is_its_last_error_line(tmp_path):
    base = _job(tmp_path / "job", tmp_path, {"prep.py": PREP, "helper.py": HELPER})
    run = run_process(base, "--keep", "1", "--shards", "4", **_script_env())
    assert run.returncode == 8, run.explain()
    assert run.message.startswith("The processing script prep.py called sys.exit(2)")
    assert "unrecognized arguments: --shards 4" in run.message


@pytest.mark.slow
def test_gpu_promised_on_a_cpu_host_never_starts_the_script(tmp_path):
    base = _job(tmp_path / "job", tmp_path, {"prep.py": PREP, "helper.py": HELPER})
    run = run_process(base, "--keep", "5", **_script_env(EXPECTED_GPU_COUNT="1"))
    assert run.returncode == 3, run.explain()
    assert "expected 1 GPU(s)" in run.message and "The processing script was not started." in run.message
    assert not (output_dir(base, "train") / "started").exists()
    assert not (base / "code").exists(), "the code is not even unpacked before the check passes"


@pytest.mark.slow
def test_a_missing_entry_point_lists_what_was_packed(tmp_path):
    base = _job(tmp_path / "job", tmp_path, {"other.py": "print(1)\n"})
    run = run_process(base, **_script_env())
    assert run.returncode == 9, run.explain()
    assert "The processing script 'prep.py' is not in the source directory (other.py)" in run.message, run.message


@pytest.mark.slow
def test_an_s3_submit_directory_is_refused_with_the_local_path_to_use(tmp_path):
    base = _job(tmp_path / "job", tmp_path, {"prep.py": PREP, "helper.py": HELPER})
    run = run_process(base, **_script_env(SAGEMAKER_SUBMIT_DIRECTORY="s3://a/code/sourcedir.tar.gz"))
    assert run.returncode == 9, run.explain()
    assert f"set SAGEMAKER_SUBMIT_DIRECTORY to {SUBMIT}" in run.message, run.message


@pytest.mark.slow
def test_sigterm_reaches_the_script_and_ends_the_job_with_143(tmp_path):
    import subprocess

    waits = """
import os, signal, sys, time
out = os.environ["SM_PROCESSING_OUTPUT_TRAIN"]
def stop(signum, frame):
    open(os.path.join(out, "got-sigterm"), "w").close()
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
open(os.path.join(out, "started"), "w").close()
time.sleep(120)
"""
    base = _job(tmp_path / "job", tmp_path, {"prep.py": waits})
    process = subprocess.Popen(
        trainer_command("process"),
        cwd=TRAINING_IMAGE,
        env=trainer_env(base, **_script_env()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = output_dir(base, "train") / "started"
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    while not started.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    assert started.exists(), process.communicate(timeout=10)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stdout + stderr
    assert (output_dir(base, "train") / "got-sigterm").exists()
    message = (base / "output" / "message").read_text()
    assert message.startswith("Processing stopped by SIGTERM: the processing script prep.py was stopped after")


STRAY = """
import os
train = os.environ["SM_PROCESSING_OUTPUT_TRAIN"]
open(os.path.join(train, "kept.csv"), "w").write("a\\n")
# One folder up from the declared output: SageMaker uploads train/ and validation/, not this.
os.makedirs(os.path.join(os.path.dirname(train), "results"), exist_ok=True)
open(os.path.join(os.path.dirname(train), "results", "summary.json"), "w").write("{}")
"""


@pytest.mark.slow
def test_a_result_written_outside_the_declared_outputs_fails_the_job(tmp_path):
    base = _job(tmp_path / "job", tmp_path, {"prep.py": STRAY})
    run = run_process(base, **_script_env())
    assert run.returncode == 8, run.explain()
    stray = base / "processing" / "output" / "results" / "summary.json"
    assert run.message is not None and run.message.strip() == (
        f"The processing script prep.py wrote 1 file(s) outside the job's declared outputs, which SageMaker would not "
        f"upload: {stray}. Declared outputs: train -> {output_dir(base, 'train')}, validation -> "
        f"{output_dir(base, 'validation')}. Write results under a ProcessingOutput's LocalPath, or declare an output "
        "(ProcessingOutput source=...) for that folder."
    )
    assert stray.is_file() and (output_dir(base, "train") / "kept.csv").is_file(), "nothing is deleted"


WRITES_ITS_MESSAGE = """
import os, sys
with open(os.path.join(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"), "output", "message"), "w") as out:
    out.write("rows=30 skipped=0" if sys.argv[1:] == ["--ok"] else "bad row 7: 3 fields, expected 4")
if sys.argv[1:] != ["--ok"]:
    sys.exit(3)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("argument", "status", "message"), [("--ok", 0, "rows=30 skipped=0"), ("--fail", 8, "bad row 7: 3 fields, expected 4")])
def test_a_message_the_script_writes_is_its_exit_message(tmp_path, argument, status, message):
    """SageMaker reports output/message as ExitMessage after any end, Completed included: the script's
    own text stays, on success and on failure (the platform's reason then goes to the log only)."""
    base = _job(tmp_path / "job", tmp_path, {"prep.py": WRITES_ITS_MESSAGE})
    (base / "output").mkdir()
    (base / "output" / "message").write_text("stale from an earlier attempt\n")
    run = run_process(base, argument, **_script_env())
    assert run.returncode == status, run.explain()
    assert run.message == message
    if status:
        assert "[trainer] failed reason=The processing script prep.py called sys.exit(3) at prep.py line 5" in run.stdout


@pytest.mark.slow
def test_a_python_the_processing_script_starts_is_not_guarded_again(tmp_path):
    """The image's python (bin/python) inside a processing script: the runner already gives the
    guarantees, so a probe the script tolerates is never the job's exit message."""
    import os
    import sys

    script = "#!/bin/sh\npython -c 'import json; json.loads(\"x\")' || echo tolerated\nexit 5\n"
    base = _job(tmp_path / "job", tmp_path, {"prep.sh": script})
    path = os.pathsep.join([str(TRAINING_IMAGE / "bin"), os.environ.get("PATH", "")])
    run = run_process(base, **_script_env(SAGEMAKER_PROGRAM="prep.sh", PATH=path, TRAINER_PYTHON=sys.executable))
    assert run.returncode == 8, run.explain()
    assert "tolerated" in run.stdout
    assert run.message.startswith("The processing script prep.sh exited with status 5"), run.message
    assert "JSONDecodeError" not in run.message.split("last error output")[0], run.message
    assert "[trainer] guard" not in run.stdout
