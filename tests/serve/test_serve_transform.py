"""Serve mode as SageMaker batch transform drives it: ``SAGEMAKER_MAX_PAYLOAD_IN_MB`` and its
sibling variables, ``GET /execution-parameters``, and the emulator's runner sizing its requests by
the container's answer (the real server, the runner's own batching and invocation code)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from scripts.emulator.transform import TransformRequest, batches, execution_parameters, invoke
from tests.serve.helpers import save_tiny_model, serving
from tests.trainer.helpers import TRAINING_IMAGE, trainer_command, trainer_env
from trainer.contract.errors import ConfigError
from trainer.contract.serving import load_settings
from trainer.entrypoint import main as entrypoint_main
from trainer.serve.server import HANDLER_THREADS
from trainer.serve.server import execution_parameters as answer_for

MB = 1024 * 1024
FEATURES = 512  # wide rows: a 7 MB CSV is ~1,800 rows, quick to decode and to answer
RANGE = "must be a whole number of MB from 0 to 100 (the transform job's MaxPayloadInMB; 0: no limit)"


# --- settings and the answer, without a server ------------------------------------------------------


def test_the_jobs_payload_limit_sets_the_request_limit_and_zero_lifts_it() -> None:
    assert load_settings({}).max_request_bytes == 6 * MB
    assert load_settings({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "10"}).max_request_bytes == 10 * MB
    # The job's MaxPayloadInMB wins over the model's own limit: SageMaker sends payloads up to it.
    both = load_settings({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "1", "SERVE_MAX_REQUEST_BYTES": str(20 * MB)})
    assert (both.max_request_bytes, both.request_limit_setting) == (MB, "SAGEMAKER_MAX_PAYLOAD_IN_MB=1")
    assert load_settings({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "0"}).max_request_bytes == 0
    assert load_settings({"SAGEMAKER_MAX_PAYLOAD_IN_MB": " "}).max_payload_in_mb is None


def test_the_batch_variables_are_read_as_sagemaker_and_its_local_mode_set_them() -> None:
    settings = load_settings(
        {"SAGEMAKER_BATCH": "True", "SAGEMAKER_BATCH_STRATEGY": "single_record", "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "3"}
    )
    assert (settings.batch_transform, settings.batch_strategy, settings.max_concurrent_transforms) == (True, "SINGLE_RECORD", 3)
    unset = load_settings({"SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "0"})
    assert (unset.batch_transform, unset.batch_strategy, unset.max_concurrent_transforms) == (False, None, None)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "101"}, f"SAGEMAKER_MAX_PAYLOAD_IN_MB {RANGE}, got '101'."),
        ({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "-1"}, f"SAGEMAKER_MAX_PAYLOAD_IN_MB {RANGE}, got '-1'."),
        ({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "6MB"}, f"SAGEMAKER_MAX_PAYLOAD_IN_MB {RANGE}, got '6MB'."),
        ({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "2.5"}, f"SAGEMAKER_MAX_PAYLOAD_IN_MB {RANGE}, got '2.5'."),
        ({"SAGEMAKER_BATCH_STRATEGY": "MultiRecord"}, "SAGEMAKER_BATCH_STRATEGY must be MULTI_RECORD or SINGLE_RECORD, got 'MultiRecord'."),
        ({"SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "many"}, "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS must be an integer, got 'many'."),
        ({"SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "-2"}, "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS must be >= 0, got -2."),
        ({"SAGEMAKER_BATCH": "yes"}, "SAGEMAKER_BATCH must be true or false, got 'yes'."),
    ],
)
def test_a_bad_batch_variable_names_itself_and_what_it_must_be(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(env)
    assert str(refused.value).endswith(message) and "\n" not in str(refused.value)


def test_a_bad_payload_limit_stops_serve_with_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SAGEMAKER_MAX_PAYLOAD_IN_MB", "200")
    assert entrypoint_main(["serve"]) == 2
    out = capsys.readouterr()
    lines = [line for line in (out.out + out.err).splitlines() if line.strip()]
    assert lines == [f"[trainer] serve-failed reason=\"SAGEMAKER_MAX_PAYLOAD_IN_MB {RANGE}, got '200'.\""]


def test_the_serve_process_with_a_bad_payload_limit_exits_2_without_a_traceback(tmp_path: Path) -> None:
    env = trainer_env(tmp_path, SAGEMAKER_MAX_PAYLOAD_IN_MB="lots", SM_MODEL_DIR=tmp_path / "model")
    done = subprocess.run(trainer_command("serve"), cwd=TRAINING_IMAGE, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if "serve-failed" in line]
    assert failed == [f"[trainer] serve-failed reason=\"SAGEMAKER_MAX_PAYLOAD_IN_MB {RANGE}, got 'lots'.\""]


def test_the_answer_says_back_what_the_job_set() -> None:
    settings = load_settings(
        {"SAGEMAKER_MAX_PAYLOAD_IN_MB": "0", "SAGEMAKER_BATCH_STRATEGY": "SINGLE_RECORD", "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "7"}
    )
    answer = answer_for(settings, 4, user_code=False)
    assert answer == {"MaxConcurrentTransforms": 7, "BatchStrategy": "SINGLE_RECORD", "MaxPayloadInMB": 0}
    assert list(answer) == ["MaxConcurrentTransforms", "BatchStrategy", "MaxPayloadInMB"]  # as AWS's containers order it


def test_the_answer_the_image_chooses_follows_its_devices_and_its_limit() -> None:
    default = load_settings({})
    assert answer_for(default, 1, user_code=False) == {"MaxConcurrentTransforms": 2, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 6}
    # Two requests per device for many-record bodies; inference.py's handler threads bound them.
    assert answer_for(default, 8, user_code=False)["MaxConcurrentTransforms"] == 16
    assert answer_for(default, 8, user_code=True)["MaxConcurrentTransforms"] == HANDLER_THREADS
    # Single records: enough to fill a batch on every device, at most the queue (1 MB records).
    single = load_settings({"SAGEMAKER_BATCH_STRATEGY": "SINGLE_RECORD", "SERVE_MAX_BATCH_SIZE": "32", "SAGEMAKER_MAX_PAYLOAD_IN_MB": "1"})
    assert answer_for(single, 2, user_code=False)["MaxConcurrentTransforms"] == 64
    queued = load_settings({"SAGEMAKER_BATCH_STRATEGY": "SINGLE_RECORD", "SERVE_MAX_QUEUED_REQUESTS": "40", "SAGEMAKER_MAX_PAYLOAD_IN_MB": "1"})
    assert answer_for(queued, 2, user_code=False)["MaxConcurrentTransforms"] == 40
    unbatched = load_settings({"SAGEMAKER_BATCH_STRATEGY": "SINGLE_RECORD", "SERVE_BATCHING": "off"})
    assert answer_for(unbatched, 2, user_code=False)["MaxConcurrentTransforms"] == 4
    # The model's own request limit, in whole MB, at most SageMaker's 100; none under 1 MB.
    assert answer_for(load_settings({"SERVE_MAX_REQUEST_BYTES": str(20 * MB + 5)}), 1, user_code=False)["MaxPayloadInMB"] == 20
    assert answer_for(load_settings({"SERVE_MAX_REQUEST_BYTES": str(500 * MB)}), 1, user_code=False)["MaxPayloadInMB"] == 100
    assert "MaxPayloadInMB" not in answer_for(load_settings({"SERVE_MAX_REQUEST_BYTES": "4096"}), 1, user_code=False)


@pytest.mark.parametrize(
    ("environment", "workers", "concurrent"),
    [
        ({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "60"}, 1, 1),  # two 60 MB requests would be 120 MB in flight
        ({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "20"}, 8, 5),
        ({"SAGEMAKER_BATCH_STRATEGY": "SINGLE_RECORD", "SERVE_MAX_BATCH_SIZE": "32"}, 2, 16),  # 6 MB records
        ({"SERVE_MAX_REQUEST_BYTES": str(500 * MB)}, 1, 1),
        ({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "0"}, 8, 16),  # no limit: nothing to bound
        # Under 1 MB no MaxPayloadInMB is said, and SageMaker sends up to its default 6 MB.
        ({"SAGEMAKER_BATCH_STRATEGY": "SINGLE_RECORD", "SERVE_MAX_REQUEST_BYTES": "4096"}, 2, 16),
    ],
    ids=["60mb-1-gpu", "20mb-8-gpus", "single-record-6mb", "100mb", "unlimited", "under-1-mb"],
)
def test_the_chosen_concurrency_keeps_sagemakers_100_mb_bound(environment: dict, workers: int, concurrent: int) -> None:
    """CreateTransformJob: MaxConcurrentTransforms x MaxPayloadInMB may not exceed 100 (MB in flight at once)."""
    answer = answer_for(load_settings(environment), workers, user_code=False)
    assert answer["MaxConcurrentTransforms"] == concurrent
    assert answer["MaxConcurrentTransforms"] * answer.get("MaxPayloadInMB", 6) <= 100


def test_beside_the_jobs_concurrency_the_chosen_payload_keeps_the_bound() -> None:
    """The job set MaxConcurrentTransforms 32 and no MaxPayloadInMB: the image's 6 MB would be 192 MB."""
    answer = answer_for(load_settings({"SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "32"}), 1, user_code=False)
    assert answer == {"MaxConcurrentTransforms": 32, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 3}


# --- over HTTP ----------------------------------------------------------------------------------------


def _csv(megabytes: float, seed: int = 5) -> tuple[bytes, int]:
    """A CSV body of about ``megabytes`` MB of FEATURES-wide rows, and its row count."""
    rng = np.random.default_rng(seed)
    row_bytes = len(",".join(["+0.1234"] * FEATURES)) + 1
    rows = int(megabytes * MB / row_bytes) + 1
    values = rng.uniform(-0.9999, 0.9999, size=(rows, FEATURES))
    return ("\n".join(",".join(f"{v:+.4f}" for v in row) for row in values) + "\n").encode(), rows


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("wide-model")
    save_tiny_model(directory, num_features=FEATURES, num_classes=2)
    return directory


@pytest.fixture(scope="module")
def transform_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Started as SageMaker starts it for a transform job with MaxPayloadInMB=10 and MultiRecord."""
    work = tmp_path_factory.mktemp("transform")
    with serving(model_dir, work, SAGEMAKER_BATCH="true", SAGEMAKER_MAX_PAYLOAD_IN_MB=10, SAGEMAKER_BATCH_STRATEGY="MULTI_RECORD") as server:
        yield server


@pytest.fixture(scope="module")
def plain_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Started with no SAGEMAKER_* variable: an endpoint, or a transform job that set none."""
    with serving(model_dir, tmp_path_factory.mktemp("plain")) as server:
        yield server


def test_a_7_mb_body_is_served_when_the_job_raised_the_limit_to_10(transform_server: Any) -> None:
    body, rows = _csv(7)
    assert 7 * MB <= len(body) < 10 * MB
    reply = transform_server.invoke(body, "text/csv")
    assert reply.status == 200, reply.body[:300]
    assert len(reply.json()["predictions"]) == rows
    over, _ = _csv(10.2)
    refused = transform_server.invoke(over, "text/csv")
    assert refused.status == 413
    assert refused.json()["error"] == f"Request body of {len(over)} bytes is over the {10 * MB}-byte limit (SAGEMAKER_MAX_PAYLOAD_IN_MB=10)."


def test_a_7_mb_body_is_refused_with_413_under_the_default_limit(plain_server: Any) -> None:
    body, _ = _csv(7)
    refused = plain_server.invoke(body, "text/csv")
    assert refused.status == 413
    assert refused.json()["error"] == f"Request body of {len(body)} bytes is over the {6 * MB}-byte limit (SERVE_MAX_REQUEST_BYTES)."
    assert plain_server.ping().status == 200


def test_execution_parameters_answer_as_aws_containers_do(transform_server: Any, plain_server: Any) -> None:
    said_back = transform_server.request("GET", "/execution-parameters")
    assert (said_back.status, said_back.content_type.split(";")[0]) == (200, "application/json")
    assert said_back.json() == {"MaxConcurrentTransforms": 2, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 10}
    assert "[trainer] serve-batch-transform MaxConcurrentTransforms=2 BatchStrategy=MULTI_RECORD MaxPayloadInMB=10" in transform_server.output()
    chosen = plain_server.request("GET", "/execution-parameters")
    # One CPU replica: two requests at a time; the default 6 MB request limit.
    assert chosen.json() == {"MaxConcurrentTransforms": 2, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 6}
    assert "serve-batch-transform" not in plain_server.output()


def test_the_runner_sizes_its_requests_by_the_containers_answer(plain_server: Any) -> None:
    """A job that set no MaxPayloadInMB: the runner asks, gets 6, and a 7 MB object goes in two requests."""
    body, rows = _csv(7, seed=9)
    job = {
        "TransformJobName": "t",
        "ModelName": "m",
        "TransformInput": {"DataSource": {"S3DataSource": {"S3Uri": "s3://in/x/"}}, "ContentType": "text/csv", "SplitType": "Line"},
        "TransformOutput": {"S3OutputPath": "s3://out/x", "Accept": "application/json", "AssembleWith": "Line"},
    }
    request = TransformRequest.from_description(job)
    assert request.unsettled == ["MaxConcurrentTransforms", "BatchStrategy", "MaxPayloadInMB"]
    request = request.settled(execution_parameters(plain_server.url))
    assert (request.max_payload_bytes, request.batch_strategy, request.max_concurrent) == (6 * MB, "MultiRecord", 2)
    sent = list(batches(body.splitlines(), request, "s3://in/x/rows.csv"))
    assert len(sent) == 2 and all(len(payload) <= 6 * MB for _, _, payload in sent)
    answered = [invoke(plain_server.url, payload, request, "s3://in/x/rows.csv", first, last) for first, last, payload in sent]
    assert sum(len(json.loads(answer)["predictions"]) for answer in answered) == rows


@pytest.mark.slow
def test_no_limit_serves_a_chunked_body_larger_than_any_default(model_dir: Path, tmp_path: Path) -> None:
    body, rows = _csv(7, seed=3)
    job = {
        "TransformJobName": "t",
        "ModelName": "m",
        "MaxPayloadInMB": 0,
        "TransformInput": {"DataSource": {"S3DataSource": {"S3Uri": "s3://in/x/"}}, "ContentType": "text/csv", "SplitType": "Line"},
        "TransformOutput": {"S3OutputPath": "s3://out/x"},
    }
    request = TransformRequest.from_description(job)
    with serving(model_dir, tmp_path, **request.batch_environment()) as server:
        assert server.request("GET", "/execution-parameters").json()["MaxPayloadInMB"] == 0
        request = request.settled(execution_parameters(server.url))
        ((first, last, payload),) = batches(body.splitlines(), request, "s3://in/x/rows.csv")  # the whole object at once
        assert len(json.loads(invoke(server.url, payload, request, "s3://in/x/rows.csv", first, last))["predictions"]) == rows
