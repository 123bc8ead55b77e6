"""Serving parts without a server: settings, the batcher, the codec's response, the entrypoint dispatch."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from trainer.entrypoint import main as entrypoint_main
from trainer.contract.errors import ConfigError
from trainer.contract.serving import load_settings
from trainer.serve import codec
from trainer.serve.batching import DynamicBatcher, QueueFull


def test_settings_follow_the_hosting_contract():
    settings = load_settings({})
    assert (settings.port, settings.model_dir, settings.host) == (8080, Path("/opt/ml/model"), "0.0.0.0")
    assert settings.batching and settings.expected_gpu_count is None
    settings = load_settings({"SAGEMAKER_BIND_TO_PORT": "9090", "SAGEMAKER_BASE_DIR": "/tmp/job", "EXPECTED_GPU_COUNT": "1"})
    assert (settings.port, settings.model_dir, settings.expected_gpu_count) == (9090, Path("/tmp/job/model"), 1)
    assert load_settings({"SAGEMAKER_BASE_DIR": "/tmp/job", "SM_MODEL_DIR": "/m"}).model_dir == Path("/m")
    assert load_settings({"SERVING_INSTANCE_TYPE": "ml.g5.xlarge"}).instance_type == "ml.g5.xlarge"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SAGEMAKER_BIND_TO_PORT": "http"}, "SAGEMAKER_BIND_TO_PORT must be an integer, got 'http'"),
        ({"SAGEMAKER_BIND_TO_PORT": "70000"}, "SAGEMAKER_BIND_TO_PORT must be between 1 and 65535"),
        ({"SERVE_MAX_BATCH_SIZE": "0"}, "SERVE_MAX_BATCH_SIZE must be between 1 and 65536"),
        ({"SERVE_MAX_BATCH_DELAY_MS": "soon"}, "SERVE_MAX_BATCH_DELAY_MS must be a number of milliseconds"),
        ({"SERVE_BATCHING": "maybe"}, "SERVE_BATCHING must be on or off"),
        ({"SERVE_MODEL_OUTPUT": "scores"}, "SERVE_MODEL_OUTPUT must be one of auto, logits, probabilities"),
    ],
)
def test_bad_settings_name_the_variable(env, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(env)


def test_aws_containers_batching_variables_map_onto_the_batching_settings():
    """SAGEMAKER_TFS_MAX_BATCH_SIZE, _BATCH_TIMEOUT_MICROS and _MAX_ENQUEUED_BATCHES (tfs_utils.create_batching_config)."""
    settings = load_settings({"SAGEMAKER_TFS_MAX_BATCH_SIZE": "8", "SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS": "1500",
                              "SAGEMAKER_TFS_MAX_ENQUEUED_BATCHES": "3"})
    assert (settings.max_batch_size, settings.max_batch_delay_ms, settings.max_queued_requests) == (8, 1.5, 24)
    # Ours alone, or both agreeing, as SERVE_BATCHING and SAGEMAKER_TFS_ENABLE_BATCHING.
    assert load_settings({"SERVE_MAX_BATCH_SIZE": "16", "SAGEMAKER_TFS_MAX_BATCH_SIZE": "16"}).max_batch_size == 16
    assert load_settings({"SERVE_MAX_BATCH_DELAY_MS": "0.5", "SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS": "500"}).max_batch_delay_ms == 0.5
    assert load_settings({"SERVE_MAX_QUEUED_REQUESTS": "10"}).max_queued_requests == 10
    with pytest.raises(ConfigError, match="SERVE_MAX_BATCH_SIZE=16 and SAGEMAKER_TFS_MAX_BATCH_SIZE=8 disagree; set one of them"):
        load_settings({"SERVE_MAX_BATCH_SIZE": "16", "SAGEMAKER_TFS_MAX_BATCH_SIZE": "8"})


def test_aws_containers_timeouts_set_the_request_timeout_unless_ours_is_set():
    """serve.py raises nginx's proxy_read_timeout (default 60) to gunicorn's timeout (default 30) when larger."""
    assert load_settings({"SAGEMAKER_GUNICORN_TIMEOUT_SECONDS": "120"}).request_timeout_s == 120
    assert load_settings({"SAGEMAKER_GUNICORN_TIMEOUT_SECONDS": "10"}).request_timeout_s == 60
    assert load_settings({"SAGEMAKER_NGINX_PROXY_READ_TIMEOUT_SECONDS": "300"}).request_timeout_s == 300
    assert load_settings({"SAGEMAKER_NGINX_PROXY_READ_TIMEOUT_SECONDS": "20", "SAGEMAKER_GUNICORN_TIMEOUT_SECONDS": "45"}).request_timeout_s == 45
    assert load_settings({"SAGEMAKER_BATCH": "true", "SAGEMAKER_NGINX_PROXY_READ_TIMEOUT_SECONDS": "900"}).request_timeout_s == 900
    assert load_settings({"SAGEMAKER_MODEL_SERVER_TIMEOUT": "5", "SAGEMAKER_GUNICORN_TIMEOUT_SECONDS": "120"}).request_timeout_s == 5
    assert load_settings({}).request_timeout_s == 60 and load_settings({"SAGEMAKER_BATCH": "true"}).request_timeout_s == 0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SAGEMAKER_TFS_MAX_BATCH_SIZE": "eight"}, "SAGEMAKER_TFS_MAX_BATCH_SIZE must be an integer, got 'eight'"),
        ({"SAGEMAKER_TFS_MAX_BATCH_SIZE": "0"}, "SAGEMAKER_TFS_MAX_BATCH_SIZE must be between 1 and 65536"),
        ({"SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS": "2000000"}, "SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS must be between 0 and 1000000"),
        ({"SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS": "1.5"}, "SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS must be an integer"),
        ({"SAGEMAKER_TFS_MAX_ENQUEUED_BATCHES": "-1"}, "SAGEMAKER_TFS_MAX_ENQUEUED_BATCHES must be >= 1"),
        ({"SAGEMAKER_TFS_NUM_BATCH_THREADS": "many"}, "SAGEMAKER_TFS_NUM_BATCH_THREADS must be an integer"),
        ({"SAGEMAKER_GUNICORN_TIMEOUT_SECONDS": "soon"}, "SAGEMAKER_GUNICORN_TIMEOUT_SECONDS must be an integer"),
        ({"SAGEMAKER_NGINX_PROXY_READ_TIMEOUT_SECONDS": "0"}, "SAGEMAKER_NGINX_PROXY_READ_TIMEOUT_SECONDS must be >= 1"),
        ({"SAGEMAKER_MULTI_MODEL": "yes"}, "SAGEMAKER_MULTI_MODEL must be true or false, got 'yes'"),
    ],
)
def test_a_bad_aws_variable_names_itself(env, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(env)


def test_aws_variables_without_an_equivalent_are_logged_once_with_why(capsys):
    from trainer.serve.server import log_without_effect

    settings = load_settings({"SAGEMAKER_GUNICORN_WORKERS": "4", "SAGEMAKER_TFS_NGINX_LOGLEVEL": "info",
                              "SAGEMAKER_TFS_NUM_BATCH_THREADS": "8", "SAGEMAKER_GUNICORN_THREADS": " "})
    assert settings.without_effect == ("SAGEMAKER_GUNICORN_WORKERS", "SAGEMAKER_TFS_NGINX_LOGLEVEL", "SAGEMAKER_TFS_NUM_BATCH_THREADS")
    log_without_effect(settings)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[2] for line in lines] == [f"variable={name}" for name in settings.without_effect]
    assert all(line.startswith("[trainer] serve-setting-without-effect ") and "reason='" in line for line in lines)
    assert "SERVE_REPLICAS" in lines[2]  # says what to use instead
    assert load_settings({}).without_effect == ()


def test_a_multi_model_endpoint_stops_serve_with_one_line(monkeypatch, capsys):
    with pytest.raises(ConfigError, match="SAGEMAKER_MULTI_MODEL=true: multi-model endpoints .* are not served by this image"):
        load_settings({"SAGEMAKER_MULTI_MODEL": "True"})
    assert load_settings({"SAGEMAKER_MULTI_MODEL": "false"}).port == 8080
    monkeypatch.setenv("SAGEMAKER_MULTI_MODEL", "true")
    assert entrypoint_main(["serve"]) == 2
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("[trainer] serve-failed reason='SAGEMAKER_MULTI_MODEL=true: multi-model endpoints")
    assert "Deploy one model per endpoint" in line and "tfs-model-name" in line


def test_serve_refuses_arguments_and_bad_settings(monkeypatch, capsys):
    assert entrypoint_main(["serve", "--port", "1"]) == 2
    monkeypatch.setenv("SAGEMAKER_BIND_TO_PORT", "x")
    assert entrypoint_main(["serve"]) == 2
    assert "SAGEMAKER_BIND_TO_PORT must be an integer" in capsys.readouterr().out


class _RecordingModel:
    """Doubles every value; records the rows of each call; can be slowed down or made to fail."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.calls: list[int] = []
        self.delay = delay
        self.fail = fail
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        self.gate.wait(5)
        self.calls.append(len(rows))
        if self.fail:
            raise RuntimeError("boom")
        return rows * 2


def _run(model, sizes, **options):
    async def go():
        batcher = DynamicBatcher(model, max_queued_requests=options.pop("max_queued_requests", 100), **options)
        batcher.start()
        try:
            inputs = [np.full((n, 2), i, dtype=np.float32) for i, n in enumerate(sizes)]
            outputs = await asyncio.wait_for(asyncio.gather(*(batcher.submit(x) for x in inputs)), 10)
            for x, y in zip(inputs, outputs):
                np.testing.assert_array_equal(y, x * 2)
            return batcher.stats
        finally:
            await batcher.stop()

    return asyncio.run(go())


def test_batcher_groups_waiting_requests_up_to_the_row_limit():
    model = _RecordingModel()
    stats = _run(model, [1] * 10, max_batch_size=4, max_delay_seconds=0.05)
    assert model.calls == [4, 4, 2]
    assert list(stats.recent_batch_requests) == [4, 4, 2] and stats.requests == 10


def test_batcher_never_splits_a_request_and_runs_a_large_one_alone():
    model = _RecordingModel()
    _run(model, [3, 2, 9, 1], max_batch_size=4, max_delay_seconds=0.05)
    assert model.calls == [3, 2, 9, 1]  # 3+2 > 4, so 2 starts the next call; 9 > 4 runs alone


def test_a_lone_request_does_not_wait_for_company():
    async def go():
        batcher = DynamicBatcher(_RecordingModel(), max_batch_size=64, max_delay_seconds=2.0, max_queued_requests=10)
        batcher.start()
        try:
            started = time.monotonic()
            for _ in range(3):
                await asyncio.wait_for(batcher.submit(np.ones((1, 2), np.float32)), 5)
            return time.monotonic() - started
        finally:
            await batcher.stop()

    assert asyncio.run(go()) < 1.0  # not 3 x the 2 s window: nobody else was waiting


def test_batching_off_makes_one_call_per_request():
    model = _RecordingModel()
    stats = _run(model, [1, 2, 1, 3], max_batch_size=64, max_delay_seconds=0.05, batching=False)
    assert model.calls == [1, 2, 1, 3] and stats.batches == 4


def test_a_failing_model_call_fails_its_requests_not_the_batcher():
    model = _RecordingModel(fail=True)

    async def go():
        batcher = DynamicBatcher(model, max_batch_size=4, max_delay_seconds=0.01, max_queued_requests=10)
        batcher.start()
        try:
            with pytest.raises(RuntimeError, match="boom"):
                await asyncio.wait_for(batcher.submit(np.ones((1, 2), np.float32)), 5)
            model.fail = False
            return await asyncio.wait_for(batcher.submit(np.ones((1, 2), np.float32)), 5)
        finally:
            await batcher.stop()

    np.testing.assert_array_equal(asyncio.run(go()), [[2, 2]])


def test_a_request_that_fails_a_shared_call_fails_alone_and_is_counted():
    calls = []

    def model(rows):
        calls.append(rows[:, 0].tolist())
        if (rows < 0).any():
            raise ValueError("negative row")
        return rows * 2

    async def go():
        batcher = DynamicBatcher(model, max_batch_size=8, max_delay_seconds=0.5, max_queued_requests=10)
        batcher._mean_requests_per_call = 4.0  # waits for company, as under load
        batcher.start()
        try:
            values = [1.0, 2.0, -1.0, 3.0]
            submitted = [batcher.submit(np.full((1, 2), v, np.float32)) for v in values]
            return await asyncio.wait_for(asyncio.gather(*submitted, return_exceptions=True), 10), batcher.stats
        finally:
            await batcher.stop()

    answers, stats = asyncio.run(go())
    assert [a.tolist() for i, a in enumerate(answers) if i != 2] == [[[2, 2]], [[4, 4]], [[6, 6]]]
    assert isinstance(answers[2], ValueError)
    assert calls == [[1, 2, -1, 3], [1], [2], [-1], [3]]  # the shared call failed: each request ran alone
    assert (stats.batches, stats.requests, stats.failed_requests, stats.rows) == (1, 4, 1, 4)
    assert stats.as_dict()["failed_requests"] == 1 and list(stats.recent_batch_requests) == [4]


def test_a_full_queue_refuses_at_once():
    model = _RecordingModel()
    model.gate.clear()  # the first call blocks, so the queue fills

    async def go():
        batcher = DynamicBatcher(model, max_batch_size=1, max_delay_seconds=0, max_queued_requests=2)
        batcher.start()
        try:
            first = asyncio.ensure_future(batcher.submit(np.ones((1, 2), np.float32)))
            await asyncio.sleep(0.05)  # taken off the queue, blocked in the model
            waiting = [asyncio.ensure_future(batcher.submit(np.ones((1, 2), np.float32))) for _ in range(2)]
            await asyncio.sleep(0)
            with pytest.raises(QueueFull):
                await batcher.submit(np.ones((1, 2), np.float32))
            model.gate.set()
            await asyncio.wait_for(asyncio.gather(first, *waiting), 5)
        finally:
            await batcher.stop()

    asyncio.run(go())


def test_response_has_class_and_probabilities_per_row():
    body = json.loads(codec.encode(np.array([[0.1, 0.7, 0.2], [0.5, 0.25, 0.25]])))
    assert body == {
        "predictions": [
            {"predicted_class": 1, "probabilities": [0.1, 0.7, 0.2]},
            {"predicted_class": 0, "probabilities": [0.5, 0.25, 0.25]},
        ]
    }


def test_the_image_installs_the_serving_package_and_its_pinned_http_stack():
    import tomllib
    from pathlib import Path

    import aiohttp

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "training_image" / "pyproject.toml").read_text())
    # Every subpackage ships (test_trainer_image builds the wheel and finds trainer/serve/ in it).
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["trainer", "trainer.*"]
    image_pins = (root / "training_image" / "requirements.txt").read_text().splitlines()
    dev_pins = (root / "requirements-dev.txt").read_text().splitlines()
    assert f"aiohttp=={aiohttp.__version__}" in image_pins and f"aiohttp=={aiohttp.__version__}" in dev_pins
    import requests  # what inference.py's input_handler result is posted with

    assert f"requests=={requests.__version__}" in image_pins and f"requests=={requests.__version__}" in dev_pins
    assert 'CMD ["train"]' in (root / "training_image" / "Dockerfile").read_text()  # SageMaker passes "serve" itself
    assert "EXPOSE 8080" in (root / "training_image" / "Dockerfile").read_text()


def test_replicas_take_batches_from_the_same_queue_in_parallel():
    first, second = _RecordingModel(), _RecordingModel()
    first.gate.clear()  # the first replica blocks: the second must serve meanwhile

    async def go():
        batcher = DynamicBatcher([first, second], max_batch_size=2, max_delay_seconds=0, max_queued_requests=10)
        batcher.start()
        try:
            blocked = asyncio.ensure_future(batcher.submit(np.ones((1, 2), np.float32)))
            await asyncio.sleep(0.05)
            others = await asyncio.wait_for(asyncio.gather(*(batcher.submit(np.full((1, 2), i, np.float32)) for i in range(4))), 5)
            first.gate.set()
            await asyncio.wait_for(blocked, 5)
            return others, batcher.stats
        finally:
            await batcher.stop()

    others, stats = asyncio.run(go())
    assert [o.tolist() for o in others] == [[[2 * i, 2 * i]] for i in range(4)]
    assert first.calls == [1] and sum(second.calls) == 4
    assert stats.replica_batches == [1, len(second.calls)]


def test_one_replica_per_gpu_found_or_per_logical_cpu():
    from trainer.serve.server import replica_devices

    assert replica_devices({"expected": 4, "found": 4}, 0) == ["/GPU:0", "/GPU:1", "/GPU:2", "/GPU:3"]
    assert replica_devices({"expected": 4, "found": 4}, 2) == ["/GPU:0", "/GPU:1"]
    assert replica_devices({"expected": 0, "found": 0, "logical_cpu_devices": 1}, 0) == ["/CPU:0"]
    assert replica_devices({"expected": 0, "found": 0, "logical_cpu_devices": 2}, 2) == ["/CPU:0", "/CPU:1"]


def test_batch_buckets_are_powers_of_two_up_to_the_largest_batch_and_warmup_is_a_switch():
    assert load_settings({}).batch_buckets == (1, 2, 4, 8, 16, 32, 64)
    assert load_settings({"SERVE_MAX_BATCH_SIZE": "48"}).batch_buckets == (1, 2, 4, 8, 16, 32, 48)
    assert load_settings({"SERVE_MAX_BATCH_SIZE": "1"}).batch_buckets == (1,)
    assert load_settings({}).warmup is True and load_settings({"SERVE_WARMUP": "off"}).warmup is False
    with pytest.raises(ConfigError, match="SERVE_WARMUP must be on or off, got 'sometimes'"):
        load_settings({"SERVE_WARMUP": "sometimes"})


def test_the_classifier_pads_each_call_up_to_its_bucket_and_answers_only_the_real_rows():
    from trainer.serve.model import LoadedModel, ModelSource

    shapes = []

    def logits(batch):
        shapes.append(batch.shape)
        return np.asarray(batch)[:, :3] * 2.0

    model = LoadedModel(ModelSource("trainer", Path("m")), 4, 3, "logits", logits, buckets=(1, 2, 4, 8))
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    padded = model.predict(rows)
    assert shapes == [(4, 4)] and padded.shape == (3, 3)
    np.testing.assert_allclose(padded, LoadedModel(ModelSource("trainer", Path("m")), 4, 3, "logits", logits).predict(rows))
    model.predict(np.ones((9, 4), np.float32))  # above the largest bucket: its own size
    assert shapes[-1] == (9, 4)


def test_calls_are_padded_to_the_buckets_on_a_gpu_only():
    from trainer.serve.server import padding_buckets

    settings = load_settings({"SERVE_MAX_BATCH_SIZE": "8"})
    assert padding_buckets(settings, "/GPU:1") == (1, 2, 4, 8)
    assert padding_buckets(settings, "/CPU:0") == () and padding_buckets(settings, None) == ()


def test_tf_serving_requests_for_one_signature_share_a_call_and_get_their_own_rows():
    from trainer.serve.tfserving import PredictRequest

    calls = []

    def run(request):
        calls.append((request.signature_name, request.rows))
        x = request.tensors["x"]
        if request.signature_name == "total":
            return {"total": np.asarray(x.sum())}  # not one row per input row
        return {"y": x * 2 + 1, "n": np.arange(len(x))}

    def req(signature, values, rows=True):
        x = np.asarray(values, np.float32)
        return PredictRequest(signature, {"x": x}, True, len(x) if rows else None)

    async def go():
        batcher = DynamicBatcher(run, max_batch_size=16, max_delay_seconds=0.05, max_queued_requests=100)
        batcher._mean_requests_per_call = 2.0  # waits for company, as under load
        batcher.start()
        try:
            requests = [req("serving_default", [[1.0]]), req("serving_default", [[2.0], [3.0]]), req("other", [[4.0]]),
                        req("serving_default", [[5.0, 6.0]]), req("total", [[1.0], [2.0]]), req("total", [[3.0]])]
            return requests, await asyncio.wait_for(asyncio.gather(*(batcher.submit(r) for r in requests)), 10)
        finally:
            await batcher.stop()

    requests, answers = asyncio.run(go())
    assert answers[0]["y"].tolist() == [[3.0]] and answers[0]["n"].tolist() == [0]
    assert answers[1]["y"].tolist() == [[5.0], [7.0]] and answers[1]["n"].tolist() == [1, 2]  # rows 1-2 of a shared call
    assert answers[2]["y"].tolist() == [[9.0]]
    assert answers[3]["y"].tolist() == [[11.0, 13.0]]  # another input shape: its own call
    assert answers[4]["total"].item() == 3.0 and answers[5]["total"].item() == 3.0  # joined, then rerun alone
    assert ("serving_default", 3) in calls and ("other", 1) in calls and ("serving_default", 1) in calls
    assert ("total", 3) in calls and ("total", 2) in calls and ("total", 1) in calls
