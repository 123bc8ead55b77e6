"""The contract package: EXPECTED_GPU_COUNT parsed once, one mapping from a failure to its file and exit code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainer.contract import environment
from trainer.contract.errors import ConfigError, DataError
from trainer.contract.failure import record_failure, run_recorded, write_reason
from trainer.process import contract as process_contract
from trainer.serve.settings import load_settings

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
    (paths.model_dir / "model.keras").write_text("stale", encoding="utf-8")
    record_failure(paths, "line one\n  line two")
    assert paths.failure_file.read_text(encoding="utf-8") == "line one line two\n"
    assert not (paths.model_dir / "model.keras").exists()
    message = tmp_path / "output" / "message"
    write_reason(message, "x" * 5000)
    assert len(message.read_text(encoding="utf-8")) == 4097
