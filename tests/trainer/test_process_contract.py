"""Processing mode's contract: paths, the job's config files, arguments, output/message and exit codes.

Most checks call the contract in-process; the few that must see what SageMaker sees (exit
status, ``output/message``, nothing written) run ``python -m trainer process`` as a subprocess.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.trainer.process_helpers import job_config, output_dir, raw_dir, run_process, write_raw
from trainer.contract.errors import ConfigError
from trainer.datasets.synthetic import SyntheticSpec
from trainer.process import contract, options
from trainer.process.runner import refuse_several_hosts
from trainer.process.transform import shard_counts

TINY_CSV = SyntheticSpec("csv", examples=60, features=3, classes=2, seed=5)


def test_paths_default_to_opt_ml_and_move_with_the_base_dir(tmp_path):
    default = contract.resolve_paths({})
    assert default.input_dir("raw") == Path("/opt/ml/processing/input/raw")
    assert default.output_dir("train") == Path("/opt/ml/processing/output/train")
    assert default.job_config_file == Path("/opt/ml/config/processingjobconfig.json")
    assert default.resource_config_file == Path("/opt/ml/config/resourceconfig.json")
    assert default.message_file == Path("/opt/ml/output/message")
    moved = contract.resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    assert moved.input_dir("code") == tmp_path / "processing" / "input" / "code"
    assert moved.message_file == tmp_path / "output" / "message"
    assert moved.local("/opt/ml/processing/input/raw") == tmp_path / "processing" / "input" / "raw"
    assert moved.local("/data/elsewhere") == Path("/data/elsewhere")


def test_the_job_config_declares_paths_distribution_and_instance_type(tmp_path):
    inputs = {
        "raw": {"LocalPath": "/opt/ml/processing/input/pictures", "S3Uri": "s3://d/raw/", "S3DataDistributionType": "ShardedByS3Key"},
        "code": {"LocalPath": "/opt/ml/processing/input/code", "S3Uri": "s3://a/code/sourcedir.tar.gz"},
    }  # fmt: skip
    job_config(tmp_path, instance_type="ml.g6.12xlarge", instance_count=2, inputs=inputs)
    env = contract.load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    assert env.job_name == "gputrain-test-process"
    assert env.input_dir("raw") == tmp_path / "processing" / "input" / "pictures"
    assert env.inputs["raw"].distribution == "ShardedByS3Key"
    assert env.inputs["code"].distribution == "FullyReplicated"
    assert env.output_dir("validation") == tmp_path / "processing" / "output" / "validation"
    assert (env.instance_type, env.hosts, env.current_host) == ("ml.g6.12xlarge", ("algo-1", "algo-2"), "algo-1")
    assert env.expected_gpu_count is None and env.program is None


def test_without_config_files_one_host_and_the_default_paths(tmp_path):
    env = contract.load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path), "EXPECTED_GPU_COUNT": "0"})
    assert (env.hosts, env.current_host, env.expected_gpu_count) == (("algo-1",), "algo-1", 0)
    assert env.input_dir("raw") == raw_dir(tmp_path) and env.output_dir("train") == output_dir(tmp_path, "train")
    assert env.submit_directory == "/opt/ml/processing/input/code/sourcedir.tar.gz"


@pytest.mark.parametrize(
    ("variables", "fragment"),
    [
        ({"EXPECTED_GPU_COUNT": "two"}, "EXPECTED_GPU_COUNT must be an integer"),
        ({"SAGEMAKER_SUBMIT_DIRECTORY": "/opt/ml/processing/input/code"}, "SAGEMAKER_PROGRAM is not"),
    ],
)
def test_bad_environment_is_named(tmp_path, variables, fragment):
    with pytest.raises(ConfigError, match=fragment):
        contract.load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path), **variables})


def test_a_job_config_that_is_not_json_is_named(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "processingjobconfig.json").write_text("{not json")
    with pytest.raises(ConfigError, match="processingjobconfig.json is not readable JSON"):
        contract.load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path)})


def test_arguments_parse_with_their_defaults():
    assert options.parse([]) == options.TransformOptions("auto", 0, 0.1, None, 0, False)
    parsed = options.parse(
        ["--format", "image-dir", "--shards", "4", "--validation-fraction", "0.5", "--image-size", "32x48", "--seed", "7",
         "--skip-bad-images"]
    )  # fmt: skip
    assert parsed == options.TransformOptions("image-dir", 4, 0.5, (32, 48), 7, True)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--shards", "-1"], "--shards"),
        (["--shards", "many"], "--shards"),
        (["--validation-fraction", "0"], "--validation-fraction"),
        (["--validation-fraction", "0.6"], "--validation-fraction"),
        (["--validation-fraction", "nan"], "--validation-fraction"),
        (["--image-size", "32"], "--image-size"),
        (["--image-size", "0x32"], "--image-size"),
        (["--format", "parquet"], "--format"),
        (["--seed", "x"], "--seed"),
        (["--shard", "2"], "--shard"),
        (["stray"], "stray"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(argv, named):
    with pytest.raises(ConfigError) as caught:
        options.parse(argv)
    message = str(caught.value)
    assert message.startswith("Bad processing argument:") and named in message and "\n" not in message, message


def test_shard_counts_follow_the_request_or_the_size():
    assert shard_counts(4, 0, 0.1) == (4, 1)
    assert shard_counts(9, 0, 0.5) == (9, 9)
    assert shard_counts(3, 0, 0.25) == (3, 1)
    mb = 2**20
    assert shard_counts(0, 10 * mb, 0.1) == (1, 1)
    # 1 GiB: 0.9 GiB in ~128 MiB shards -> 8, 0.1 GiB -> 1.
    assert shard_counts(0, 1024 * mb, 0.1) == (8, 1)


def test_several_hosts_are_refused_naming_the_setting(tmp_path):
    inputs = {"raw": {"LocalPath": "/opt/ml/processing/input/raw", "S3Uri": "s3://d/raw/", "S3DataDistributionType": "ShardedByS3Key"}}
    job_config(tmp_path, instance_count=2, inputs=inputs)
    env = contract.load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    with pytest.raises(ConfigError) as caught:
        refuse_several_hosts(env)
    assert "processing.instance_count" in str(caught.value) and "ShardedByS3Key" in str(caught.value)
    job_config(tmp_path, instance_count=1)
    refuse_several_hosts(contract.load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path)}))


def test_script_environment_is_minimal_and_rerooted(tmp_path):
    job_config(tmp_path)
    env = contract.load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path), "SAGEMAKER_PROGRAM": "prep.py"})
    values = contract.script_environment(env, num_gpus=1, num_cpus=8)
    assert values == {
        "SM_CURRENT_HOST": "algo-1",
        "SM_HOSTS": '["algo-1"]',
        "SM_NUM_GPUS": "1",
        "SM_NUM_CPUS": "8",
        "SM_PROCESSING_JOB_NAME": "gputrain-test-process",
        "SM_PROCESSING_INPUT_RAW": str(raw_dir(tmp_path)),
        "SM_PROCESSING_INPUT_CODE": str(tmp_path / "processing" / "input" / "code"),
        "SM_PROCESSING_OUTPUT_TRAIN": str(output_dir(tmp_path, "train")),
        "SM_PROCESSING_OUTPUT_VALIDATION": str(output_dir(tmp_path, "validation")),
    }


# --- through the entrypoint ------------------------------------------------------------------


@pytest.mark.slow
def test_gpu_promised_on_a_cpu_host_fails_before_any_work(tmp_path):
    write_raw(tmp_path, TINY_CSV)
    job_config(tmp_path)
    run = run_process(tmp_path, EXPECTED_GPU_COUNT=1)
    assert run.returncode == 3, run.explain()
    message = run.message or ""
    assert message.startswith("GPU check failed: expected 1 GPU(s) (EXPECTED_GPU_COUNT)"), message
    assert "The processing job was not started." in message and message.count("\n") == 1
    assert "Traceback" not in message
    for name in ("train", "validation"):
        assert not output_dir(tmp_path, name).exists() or not any(output_dir(tmp_path, name).iterdir())
    assert not (tmp_path / "output" / "failure").exists(), "processing reports in output/message, not output/failure"


def test_the_instance_type_from_the_job_config_sets_the_expectation(tmp_path):
    write_raw(tmp_path, TINY_CSV)
    job_config(tmp_path, instance_type="ml.g5.12xlarge")
    run = run_process(tmp_path, EXPECTED_GPU_COUNT=None)
    assert run.returncode == 3, run.explain()
    message = run.message or ""
    assert message.startswith("GPU check failed: expected 4 GPU(s) (instance type ml.g5.12xlarge in gpu_instances.json)")
    assert message.endswith("The processing job was not started.\n") and message.count("\n") == 1, message
    assert not output_dir(tmp_path, "train").exists(), "the transform never started"


def test_bad_arguments_exit_2_with_one_line_before_the_gpu_check(tmp_path):
    write_raw(tmp_path, TINY_CSV)
    run = run_process(tmp_path, "--validation-fraction", "0.9", EXPECTED_GPU_COUNT=1)
    assert run.returncode == 2, run.explain()
    assert (run.message or "").startswith("Bad processing argument: argument --validation-fraction: must be in (0, 0.5]")
    assert "gpu-check" not in run.stdout


def test_several_hosts_exit_2_naming_the_setting(tmp_path):
    write_raw(tmp_path, TINY_CSV)
    job_config(tmp_path, instance_count=2)
    run = run_process(tmp_path)
    assert run.returncode == 2, run.explain()
    assert "set processing.instance_count to 1" in (run.message or ""), run.message


@pytest.mark.slow
def test_success_removes_a_stale_message_and_writes_both_outputs(tmp_path):
    write_raw(tmp_path, TINY_CSV)
    job_config(tmp_path)
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "message").write_text("an earlier attempt failed\n")
    run = run_process(tmp_path, "--validation-fraction", "0.5")
    assert run.returncode == 0, run.explain()
    assert run.message is None
    statistics = json.loads((output_dir(tmp_path, "train") / "statistics.json").read_text())
    assert statistics["examples"]["train"] + statistics["examples"]["validation"] == 60
    assert (output_dir(tmp_path, "validation") / ".trainer-manifest.json").is_file()
    assert "[trainer] success" in run.stdout


@pytest.mark.slow
def test_a_data_failure_exits_5_with_the_reason_only(tmp_path):
    job_config(tmp_path)
    run = run_process(tmp_path)
    assert run.returncode == 5, run.explain()
    message = run.message or ""
    assert message.startswith("The processing input 'raw' is missing:") and message.count("\n") == 1, message
    assert "Traceback" not in message and "Traceback" not in run.stderr


@pytest.mark.slow
def test_sigterm_during_the_transform_exits_143_and_leaves_no_half_dataset(tmp_path):
    import signal
    import subprocess

    from benchmarks.process_bench import write_csv_input
    from tests.trainer.helpers import TRAINING_IMAGE, read_until, trainer_command, trainer_env

    write_csv_input(raw_dir(tmp_path), rows=150_000, features=32, files=4)
    job_config(tmp_path)
    process = subprocess.Popen(
        trainer_command("process", "--shards", "3"),
        cwd=TRAINING_IMAGE, env=trainer_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
    )  # fmt: skip
    seen = read_until(process, "[trainer] transform-start")
    shard = output_dir(tmp_path, "train") / "part-00000.tfrecord"
    deadline = time.monotonic() + 60
    while not (shard.exists() and shard.stat().st_size) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # into the conversion, past the first records written (150k rows take seconds)
    process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=120)
    assert process.returncode == 143, seen + rest
    assert (tmp_path / "output" / "message").read_text().startswith("Processing stopped by SIGTERM")
    assert "transform-done" not in rest, "the signal must have arrived during the conversion"
    for name in ("train", "validation"):
        assert not any(output_dir(tmp_path, name).iterdir()), "shards of a stopped run must not look like a dataset"


def test_sigterm_in_the_transform_is_a_flag_checked_between_batches(monkeypatch):
    # Raising from the handler itself could raise inside a __del__, where Python drops it.
    import os
    import signal

    from trainer.contract.errors import TrainingInterrupted
    from trainer.process import stopping

    monkeypatch.setattr(stopping, "_requested_at", None)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        stopping.install()
        stopping.check()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # the handler runs at the next bytecode
        assert stopping.requested()
        with pytest.raises(TrainingInterrupted, match="Processing stopped by SIGTERM"):
            stopping.check()
    finally:
        signal.signal(signal.SIGTERM, previous)
