"""The contract package: EXPECTED_GPU_COUNT parsed once, one mapping from a failure to its file and exit code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainer.contract import environment
from trainer.contract.errors import ConfigError, DataError, GpuCheckError
from trainer.contract.failure import record_failure, run_recorded, write_reason
from trainer.contract.script_runtime import ScriptRuntime, script_runtime
from trainer.contract.serving import load_settings
from trainer.process import contract as process_contract

TRAINER = Path(__file__).resolve().parents[2] / "training_image" / "trainer"


@pytest.mark.parametrize(("raw", "expected"), [("0", 0), ("1", 1), (" 8 ", 8)])
def test_expected_gpu_count_reads_a_whole_number(raw: str, expected: int) -> None:
    assert environment.expected_gpu_count({"EXPECTED_GPU_COUNT": raw}) == expected


@pytest.mark.parametrize("env", [{}, {"EXPECTED_GPU_COUNT": ""}, {"EXPECTED_GPU_COUNT": "  "}])
def test_expected_gpu_count_unset_or_blank_is_none(env: dict[str, str]) -> None:
    assert environment.expected_gpu_count(env) is None


@pytest.mark.parametrize(("raw", "says"), [("two", "must be an integer, got 'two'"), ("1.5", "must be an integer"), ("-1", "must be >= 0, got -1")])
def test_a_bad_expected_gpu_count_is_an_error_naming_the_variable(raw: str, says: str) -> None:
    with pytest.raises(ConfigError, match="EXPECTED_GPU_COUNT") as caught:
        environment.expected_gpu_count({"EXPECTED_GPU_COUNT": raw})
    assert says in str(caught.value)


def test_every_mode_reads_the_same_expected_gpu_count(tmp_path: Path) -> None:
    env = {"SAGEMAKER_BASE_DIR": str(tmp_path), "EXPECTED_GPU_COUNT": "4"}
    assert environment.load_environment(env).expected_gpu_count == 4
    assert process_contract.load_environment(env).expected_gpu_count == 4
    assert load_settings(env).expected_gpu_count == 4
    bad = {**env, "EXPECTED_GPU_COUNT": "four"}
    messages = set()
    for load in (environment.load_environment, process_contract.load_environment, load_settings):
        with pytest.raises(ConfigError) as caught:
            load(bad)
        messages.add(str(caught.value))
    assert messages == {"Environment variable EXPECTED_GPU_COUNT must be an integer, got 'four'."}


def test_the_rendezvous_timeout_and_channel_variables_are_read_in_the_contract() -> None:
    assert environment.rendezvous_timeout_seconds({}) == environment.DEFAULT_RENDEZVOUS_TIMEOUT_SECONDS
    assert environment.rendezvous_timeout_seconds({"RENDEZVOUS_TIMEOUT_SECONDS": "30"}) == 30.0
    for raw in ("soon", "0", "-5"):
        with pytest.raises(ConfigError, match="RENDEZVOUS_TIMEOUT_SECONDS"):
            environment.rendezvous_timeout_seconds({"RENDEZVOUS_TIMEOUT_SECONDS": raw})
    assert environment.channel_variables({"SM_CHANNEL_TRAIN": "/a", "SM_CHANNEL_Validation": "/b", "SM_HOSTS": "[]"}) == {
        "train",
        "validation",
    }


# --- the serving mode's settings (trainer.contract.serving) -----------------------------------------

SERVING_SETTINGS = [
    # variable, valid value, the setting it gives, the default, a bad value
    ("SAGEMAKER_BIND_TO_PORT", "9090", ("port", 9090), 8080, "http"),
    ("SERVE_HOST", "127.0.0.1", ("host", "127.0.0.1"), "0.0.0.0", None),
    ("SERVE_BATCHING", "OFF", ("batching", False), True, "maybe"),
    ("SERVE_MAX_BATCH_SIZE", "16", ("max_batch_size", 16), 64, "0"),
    ("SERVE_MAX_BATCH_DELAY_MS", "0", ("max_batch_delay_ms", 0.0), 2.0, "1001"),
    ("SERVE_MAX_QUEUED_REQUESTS", "10", ("max_queued_requests", 10), 2048, "none"),
    ("SERVE_MAX_REQUEST_BYTES", "2048", ("max_request_bytes", 2048), 6 * 1024 * 1024, "100"),
    ("SERVE_REPLICAS", "2", ("replicas", 2), 0, "65"),
    ("SERVE_MODEL_OUTPUT", "Logits", ("output", "logits"), "auto", "scores"),
    ("TFS_DEFAULT_MODEL_NAME", "regression", ("model_name", "regression"), "model", "a/b"),
    ("SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT", "text/csv", ("default_accept", "text/csv"), "application/json", None),
    ("SERVE_WARMUP", "off", ("warmup", False), True, "sometimes"),
    ("SERVING_INSTANCE_TYPE", "ml.g5.xlarge", ("instance_type", "ml.g5.xlarge"), None, None),
]


@pytest.mark.parametrize(("name", "valid", "setting", "default", "bad"), SERVING_SETTINGS, ids=[row[0] for row in SERVING_SETTINGS])
def test_each_serving_setting_reads_a_value_defaults_when_blank_and_names_itself_when_bad(
    name: str, valid: str, setting: tuple[str, object], default: object, bad: str | None
) -> None:
    field, value = setting
    assert getattr(load_settings({name: valid}), field) == value
    assert getattr(load_settings({name: "  "}), field) == default == getattr(load_settings({}), field)
    if bad is not None:
        with pytest.raises(ConfigError, match=name):
            load_settings({name: bad})


def test_the_setting_helpers_name_the_variable_and_the_range() -> None:
    assert environment.int_setting({"N": " 3 "}, "N", 1, minimum=0) == 3
    assert environment.int_setting({"N": ""}, "N", 1, minimum=0) == 1
    with pytest.raises(ConfigError, match=r"Environment variable N must be between 1 and 4, got 5\."):
        environment.int_setting({"N": "5"}, "N", 1, minimum=1, maximum=4)
    assert environment.seconds_setting({"T": "2.5"}, "T", 9.0) == 2.5
    assert environment.seconds_setting({}, "T", 9.0) == 9.0
    for raw in ("0", "-1", "inf", "nan", "soon"):
        with pytest.raises(ConfigError, match=f"T must be a positive number of seconds, got '{raw}'"):
            environment.seconds_setting({"T": raw}, "T", 9.0)
    with pytest.raises(ConfigError, match=r"T must be in \(0, 115\] seconds \(SageMaker kills at 120 s\), got '116'"):
        environment.seconds_setting({"T": "116"}, "T", 9.0, maximum=115, why="SageMaker kills at 120 s")
    assert environment.switch_setting({"S": "Off"}, "S", True) is False
    assert environment.switch_setting({"S": ""}, "S", False) is False
    with pytest.raises(ConfigError, match="S must be on or off, got 'yes'"):
        environment.switch_setting({"S": "yes"}, "S", True)


def test_the_gpu_check_timeout_is_read_in_the_contract() -> None:
    assert environment.gpu_check_timeout_seconds({"GPU_CHECK_TIMEOUT_SECONDS": "120"}) == 120.0
    assert environment.gpu_check_timeout_seconds({"GPU_CHECK_TIMEOUT_SECONDS": " "}) == 300.0
    assert environment.gpu_check_timeout_seconds({}) == environment.DEFAULT_GPU_CHECK_TIMEOUT_SECONDS
    # A bad bound fails the GPU check (exit 3), as it always has, and says what the variable must be.
    with pytest.raises(GpuCheckError, match="GPU_CHECK_TIMEOUT_SECONDS must be a positive number of seconds, got 'soon'"):
        environment.gpu_check_timeout_seconds({"GPU_CHECK_TIMEOUT_SECONDS": "soon"})


@pytest.mark.parametrize(("raw", "expected"), [("30", 30.0), ("115", 115.0), ("", 100.0), (" ", 100.0), (None, 100.0)])
def test_the_script_stop_grace_is_read_in_the_contract(raw: str | None, expected: float) -> None:
    env = {} if raw is None else {"SCRIPT_STOP_GRACE_SECONDS": raw}
    assert environment.script_stop_grace_seconds(env) == expected


@pytest.mark.parametrize("raw", ["0", "116", "soon", "-1", "nan"])
def test_a_bad_script_stop_grace_names_the_variable_and_its_range(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"SCRIPT_STOP_GRACE_SECONDS must be in \(0, 115\] seconds \(SageMaker kills at 120 s\)"):
        environment.script_stop_grace_seconds({"SCRIPT_STOP_GRACE_SECONDS": raw})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("https://pypi.org/simple", "https://pypi.org/simple"),
        (" http://mirror.internal:8080/simple/ ", "http://mirror.internal:8080/simple/"),
        ("file:///opt/wheels/simple", "file:///opt/wheels/simple"),
        ("", None),
        ("   ", None),
        (None, None),
    ],
)
def test_pip_index_url_is_read_in_the_contract_and_blank_means_offline(raw: str | None, expected: str | None) -> None:
    env = {} if raw is None else {"PIP_INDEX_URL": raw}
    assert environment.pip_index_url(env) == expected


@pytest.mark.parametrize("raw", ["pypi.org/simple", "ftp://host/simple", "https://"])
def test_a_bad_pip_index_url_names_the_variable_and_the_fix(raw: str) -> None:
    with pytest.raises(ConfigError, match="PIP_INDEX_URL must be a package index URL") as caught:
        environment.pip_index_url({"PIP_INDEX_URL": raw})
    assert "unset it to install requirements offline" in str(caught.value)


def test_the_script_variables_are_read_in_the_contract() -> None:
    variables = environment.script_variables(
        {
            "SAGEMAKER_PROGRAM": " train.py ",
            "SAGEMAKER_SUBMIT_DIRECTORY": "s3://bucket/code/sourcedir.tar.gz",
            "SAGEMAKER_TRAINING_MODULE": "sagemaker_tensorflow_container.training:main",
            "TRAINING_JOB_NAME": "job-1",
            "TRAINING_WORKER_PORT": "2345",
        }
    )
    assert variables == environment.ScriptVariables(
        program="train.py",
        submit_directory="s3://bucket/code/sourcedir.tar.gz",
        training_module="sagemaker_tensorflow_container.training:main",
        job_name="job-1",
        worker_port=2345,
    )
    assert environment.script_variables({"SAGEMAKER_PROGRAM": "prep.sh"}).program == "prep.sh"


@pytest.mark.parametrize("env", [{}, {"SAGEMAKER_PROGRAM": " ", "SAGEMAKER_SUBMIT_DIRECTORY": "", "TRAINING_WORKER_PORT": " "}])
def test_unset_or_blank_script_variables_are_none(env: dict[str, str]) -> None:
    assert environment.script_variables(env) == environment.ScriptVariables(None, None, None, None, None)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"SAGEMAKER_PROGRAM": "model.ipynb"}, "SAGEMAKER_PROGRAM: The script 'model.ipynb' is a Jupyter notebook"),
        ({"TRAINING_WORKER_PORT": "http"}, "TRAINING_WORKER_PORT must be an integer, got 'http'"),
        ({"TRAINING_WORKER_PORT": "70000"}, "TRAINING_WORKER_PORT must be a TCP port, got 70000"),
    ],
)
def test_a_bad_script_variable_is_named(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        environment.script_variables(env)
    assert says in str(caught.value)


def test_the_processing_mode_reads_its_variables_through_the_contract(tmp_path: Path) -> None:
    base = {"SAGEMAKER_BASE_DIR": str(tmp_path)}
    env = process_contract.load_environment({**base, "SAGEMAKER_PROGRAM": "prep.py", "SAGEMAKER_SUBMIT_DIRECTORY": " /code "})
    assert (env.paths.base_dir, env.program, env.submit_directory) == (tmp_path, "prep.py", "/code")
    blank = process_contract.load_environment({**base, "SAGEMAKER_PROGRAM": "  ", "SAGEMAKER_SUBMIT_DIRECTORY": ""})
    assert (blank.program, blank.submit_directory) == (None, process_contract.DEFAULT_SUBMIT_DIRECTORY)
    assert process_contract.resolve_paths({}).base_dir == environment.resolve_paths({}).base_dir == Path("/opt/ml")
    with pytest.raises(ConfigError, match="SAGEMAKER_PROGRAM: The script 'prep.ipynb' is a Jupyter notebook"):
        process_contract.load_environment({**base, "SAGEMAKER_PROGRAM": "prep.ipynb"})
    # Any other file may be a command (its #! line is read once the code is there), as AWS's toolkit runs one.
    assert process_contract.load_environment({**base, "SAGEMAKER_PROGRAM": "prep"}).program == "prep"


def test_what_a_users_script_reads_through_the_toolkit_is_read_in_the_contract() -> None:
    tf_config = '{"cluster": {"worker": ["algo-1:8890", "algo-2:8890"]}, "task": {"index": 1, "type": "worker"}}'
    runtime = script_runtime(
        {
            "TF_CONFIG": tf_config,
            "SM_NUM_GPUS": "8",
            "SM_CURRENT_INSTANCE_TYPE": "ml.p5.48xlarge",
            "TF_USE_LEGACY_KERAS": "1",
            "TRAINER_JOB_START_TIME": "1700000000.5",
        }
    )
    assert runtime.cluster is not None and runtime.cluster.hosts == ("algo-1:8890", "algo-2:8890")
    assert (runtime.cluster.current_host, runtime.cluster.is_chief) == ("algo-2:8890", False)
    assert (runtime.gpu_count, runtime.gpu_count_source) == (8, "SM_NUM_GPUS")
    assert (runtime.instance_type, runtime.legacy_keras, runtime.job_start_time) == ("ml.p5.48xlarge", True, 1700000000.5)
    # EXPECTED_GPU_COUNT wins over SM_NUM_GPUS, as in every mode.
    assert script_runtime({"EXPECTED_GPU_COUNT": "0", "SM_NUM_GPUS": "8"}).gpu_count_source == "EXPECTED_GPU_COUNT"
    one_worker = '{"cluster": {"worker": ["algo-1:8890"]}, "task": {"index": 0}}'
    assert script_runtime({"TF_CONFIG": one_worker}).cluster is None


@pytest.mark.parametrize("env", [{}, {"TF_CONFIG": " ", "SM_NUM_GPUS": "", "TRAINER_JOB_START_TIME": "", "TF_USE_LEGACY_KERAS": "0"}])
def test_a_script_without_those_variables_runs_on_one_host_without_gpus(env: dict[str, str]) -> None:
    assert script_runtime(env) == ScriptRuntime(None, 0, "SM_NUM_GPUS", None, False, None)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TF_CONFIG": "{not json"}, "TF_CONFIG must be TensorFlow's cluster JSON"),
        ({"TF_CONFIG": '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"index": 2}}'}, "TF_CONFIG's task.index 2 is not one of its 2 workers"),
        ({"SM_NUM_GPUS": "eight"}, "Environment variable SM_NUM_GPUS must be an integer, got 'eight'"),
        ({"SM_NUM_GPUS": "-1"}, "SM_NUM_GPUS must be >= 0"),
        ({"TRAINER_JOB_START_TIME": "yesterday"}, "TRAINER_JOB_START_TIME must be a time in seconds since the epoch"),
    ],
)
def test_a_bad_script_runtime_variable_is_named(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        script_runtime(env)
    assert says in str(caught.value)


@pytest.mark.parametrize(("raw", "expected"), [("1", True), (" Yes ", True), ("0", False), ("off", False), ("", False), (None, False)])
def test_tf_use_legacy_keras_is_read_in_the_contract(raw: str | None, expected: bool) -> None:
    env = {} if raw is None else {"TF_USE_LEGACY_KERAS": raw}
    assert environment.legacy_keras(env) is expected


def test_a_bad_tf_use_legacy_keras_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="Environment variable TF_USE_LEGACY_KERAS must be 1 or 0, got 'two'"):
        environment.legacy_keras({"TF_USE_LEGACY_KERAS": "two"})
    monkeypatch.setattr(environment.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="TF_USE_LEGACY_KERAS=1 asks for Keras 2, but the tf-keras package is not installed"):
        environment.legacy_keras({"TF_USE_LEGACY_KERAS": "1"})


def _sources_outside_contract() -> dict[str, str]:
    return {
        str(path.relative_to(TRAINER)): path.read_text(encoding="utf-8")
        for path in TRAINER.rglob("*.py")
        if path.relative_to(TRAINER).parts[0] != "contract"
    }


def test_expected_gpu_count_is_parsed_only_in_the_contract() -> None:
    # The old copies: int(...) of the variable's raw text in the process contract, the serving
    # settings and the toolkit, each with its own error message.
    parses = re.compile(r"(env|environ)\.get\(\s*(environment\.)?ENV_EXPECTED_GPU_COUNT")
    found = [name for name, text in _sources_outside_contract().items() if parses.search(text)]
    assert found == []


def test_the_failure_mapping_exists_once() -> None:
    # The old copies: entrypoint.main and process.runner.main each caught TrainerError ->
    # exit_code and Exception -> 1; the guard and the processing runner each wrote the one-line reason.
    writes = re.compile(r'write_text\(text \+ "\\n"')
    last_resort = re.compile(r"except TrainerError as err:\s*\n\s*record\w*\(.*\)\s*\n\s*return err\.exit_code\s*\n\s*except Exception")
    sources = _sources_outside_contract()
    assert [name for name, text in sources.items() if writes.search(text)] == []
    assert [name for name, text in sources.items() if last_resort.search(text)] == []


def test_run_recorded_maps_each_outcome(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reasons: list[str] = []

    def fails_with(err: Exception):
        def work() -> None:
            raise err

        return work

    assert run_recorded(lambda: None, reasons.append, "the trainer") == 0
    assert run_recorded(fails_with(DataError("channel train is empty")), reasons.append, "the trainer") == DataError.exit_code
    assert run_recorded(fails_with(KeyError("x")), reasons.append, "the processing job") == 1
    assert reasons == ["channel train is empty", "Unexpected KeyError in the processing job: 'x'"]
    assert "Traceback" in capsys.readouterr().err


def test_the_reason_is_one_line_and_a_stale_model_goes(tmp_path: Path) -> None:
    paths = environment.resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    paths.model_dir.mkdir(parents=True)
    for stale in ("model.keras", "last.keras", "best.keras"):
        (paths.model_dir / stale).write_text("stale", encoding="utf-8")
    record_failure(paths, "line one\n  line two")
    assert paths.failure_file.read_text(encoding="utf-8") == "line one line two\n"
    assert not list(paths.model_dir.glob("*.keras"))
    message = tmp_path / "output" / "message"
    write_reason(message, "x" * 5000)
    assert message.read_bytes() == b"x" * 1023 + b"\n"


def test_the_reason_file_is_the_first_kilobyte_cut_between_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SageMaker reports the first 1 KB and fails a job whose message file is not UTF-8: a two-byte
    character across byte 1024 is left out whole, and the log keeps the reason entire."""
    message = tmp_path / "output" / "message"
    write_reason(message, "a" + "é" * 2000)
    written = message.read_bytes()
    assert len(written) <= 1024 and written.decode("utf-8") == "a" + "é" * 511 + "\n"
    assert "é" * 2000 in capsys.readouterr().out
