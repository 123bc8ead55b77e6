"""The serving mode over HTTP on loopback: ping, content types, bad requests, batching, the GPU check."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from tests.serve.helpers import save_tiny_model, serving, softmax_rows

FEATURES = 4
CLASSES = 3
MAX_REQUEST_BYTES = 4096
ROWS = [[0.5, -1.0, 2.0, 0.25], [1.0, 1.0, 1.0, 1.0], [-2.0, 0.0, 3.5, -0.5]]


@pytest.fixture(scope="module")
def model_and_dir(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("model")
    model = save_tiny_model(model_dir, FEATURES, CLASSES)
    return model, model_dir


@pytest.fixture(scope="module")
def server(model_and_dir, tmp_path_factory):
    _, model_dir = model_and_dir
    # A long batching window makes concurrent requests meet deterministically on 2 busy cores.
    with serving(
        model_dir,
        tmp_path_factory.mktemp("serve"),
        SERVE_MAX_BATCH_DELAY_MS=100,
        SERVE_MAX_BATCH_SIZE=16,
        SERVE_MAX_REQUEST_BYTES=MAX_REQUEST_BYTES,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def expected(model_and_dir):
    model, _ = model_and_dir
    return softmax_rows(model.predict(np.asarray(ROWS, dtype=np.float32), verbose=0))


def _check(reply, expected_rows):
    assert reply.status == 200, reply.body
    assert reply.content_type.startswith("application/json")
    predictions = reply.json()["predictions"]
    assert len(predictions) == len(expected_rows)
    for prediction, probabilities in zip(predictions, expected_rows):
        assert prediction["probabilities"] == pytest.approx(probabilities, abs=1e-5)
        assert prediction["predicted_class"] == int(np.argmax(probabilities))
        assert sum(prediction["probabilities"]) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.slow
def test_ping_is_healthy_once_the_model_is_warm(server):
    reply = server.ping()
    assert reply.status == 200
    assert "serve-ready" in server.output()
    assert "warmed_batch_sizes=1,2,4,8,16" in server.output()  # every bucket up to SERVE_MAX_BATCH_SIZE
    stats = server.stats()
    assert stats["model"]["kind"] == "trainer" and stats["model"]["num_features"] == FEATURES


def test_json_instances(server, expected):
    _check(server.invoke(json.dumps({"instances": ROWS})), expected)


def test_json_plain_list_and_single_row(server, expected):
    _check(server.invoke(json.dumps(ROWS)), expected)
    _check(server.invoke(json.dumps(ROWS[1]), "application/json; charset=utf-8"), expected[1:2])


def test_npy_rows_beside_json(server, expected):
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.asarray(ROWS, dtype=np.float32))
    _check(server.invoke(buffer.getvalue(), "application/x-npy"), expected)
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(ROWS[0], dtype=np.float64))  # one row, another float type
    _check(server.invoke(buffer.getvalue(), "application/x-npy"), expected[:1])
    for array, message in [
        (np.ones((2, 5), np.float32), "The .npy array has 5 values per row but the model takes 4 features."),
        (np.array([["a", "b", "c", "d"]]), "The .npy array has dtype <U1; send numbers."),
        (np.array([[1, 2, np.nan, 4]]), "The .npy array holds NaN or infinity"),
    ]:
        buffer = io.BytesIO()
        np.save(buffer, array)
        reply = server.invoke(buffer.getvalue(), "application/x-npy")
        assert (reply.status, message in reply.json()["error"]) == (400, True), reply.body
    pickled = io.BytesIO()
    np.save(pickled, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    refused = server.invoke(pickled.getvalue(), "application/x-npy")
    assert refused.status == 400 and "not a .npy array without pickles" in refused.json()["error"]
    assert server.invoke(b"not npy", "application/x-npy").status == 400


def test_csv(server, expected):
    body = "\n".join(",".join(str(v) for v in row) for row in ROWS) + "\n"
    _check(server.invoke(body, "text/csv"), expected)


@pytest.mark.parametrize(
    ("body", "content_type", "status", "message"),
    [
        ('{"instances": [[1, 2, 3]]}', "application/json", 400, "Row 1 has 3 values but the model takes 4 features."),
        ("1,2,3,4,0\n", "text/csv", 400, "Row 1 has 5 values but the model takes 4 features (send features only, no label column)."),
        ('{"instances": [[1, 2, 3, 4]', "application/json", 400, "Malformed JSON body"),
        ('{"rows": [[1, 2, 3, 4]]}', "application/json", 400, 'JSON object body needs an "instances" list of rows (got keys: rows).'),
        ('[[1, 2, "x", 4]]', "application/json", 400, "Row 1 value 3 is 'x', not a number."),
        ("[[1, 2, true, 4]]", "application/json", 400, "Row 1 value 3 is True, not a number."),
        ("[[1, 2, NaN, 4]]", "application/json", 400, "JSON body holds NaN"),
        ('{"instances": []}', "application/json", 400, "The request holds no rows"),
        ('{"instances": 5}', "application/json", 400, '"instances" must be a list of rows, got int.'),
        ("a,b,c,d\n1,2,3,4\n", "text/csv", 400, "CSV line 1 value 1 is 'a', not a number (no header line)."),
        ("1,2,inf,4\n", "text/csv", 400, "CSV line 1 value 3 is inf; values must be finite."),
        ("", "application/json", 400, "Empty request body"),
        ("   \n", "text/csv", 400, "Empty request body"),
        (b"\xff\xfe1,2", "text/csv", 400, "Request body is not UTF-8 text"),
        ("<rows/>", "application/xml", 415, "Unsupported content type 'application/xml'; send application/json, application/jsonlines, text/csv or application/x-npy."),
        ("1,2,3,4", None, 415, "Unsupported content type"),
        ("[" + ",".join(["[1.0,2.0,3.0,4.0]"] * 400) + "]", "application/json", 413, f"over the {MAX_REQUEST_BYTES}-byte limit"),
    ],
    ids=[
        "json-wrong-feature-count",
        "csv-label-column",
        "json-malformed",
        "json-object-without-instances",
        "json-string-value",
        "json-boolean-value",
        "json-nan",
        "json-no-rows",
        "json-instances-not-a-list",
        "csv-header",
        "csv-infinity",
        "json-empty-body",
        "csv-blank-body",
        "not-utf8",
        "unsupported-content-type",
        "no-content-type",
        "too-large",
    ],
)
def test_bad_request_gets_a_4xx_with_one_line(server, body, content_type, status, message):
    reply = server.invoke(body, content_type)
    assert reply.status == status, reply.body
    assert reply.content_type.startswith("application/json")
    error = reply.json()["error"]
    assert message in error
    assert "\n" not in error and "Traceback" not in error and len(error) < 200


def test_accept_other_than_json_is_406_and_json_or_any_is_served(server, expected):
    reply = server.invoke(json.dumps(ROWS), accept="text/csv")
    assert reply.status == 406
    assert reply.json()["error"] == "Unsupported Accept 'text/csv'; predictions are returned as application/json or application/jsonlines."
    _check(server.invoke(json.dumps(ROWS), accept="application/json"), expected)
    _check(server.invoke(json.dumps(ROWS), accept="*/*"), expected)


def test_bad_requests_never_take_the_server_down(server, expected):
    for body in ("[[", "{}", "[[1]]", "\x00"):
        assert 400 <= server.invoke(body).status < 500
    assert server.ping().status == 200
    _check(server.invoke(json.dumps(ROWS)), expected)
    assert server.process.poll() is None
    assert "Traceback" not in server.output()


def test_unknown_route_and_method_are_one_line_4xx(server):
    not_found = server.request("GET", "/predict")
    assert (not_found.status, not_found.json()) == (404, {"error": "GET /predict: Not Found"})
    wrong_method = server.request("GET", "/invocations")
    assert wrong_method.status == 405 and wrong_method.json()["error"] == "GET /invocations: Method Not Allowed"


def test_concurrent_requests_are_batched_and_each_gets_its_own_rows(server, model_and_dir):
    import aiohttp

    model, _ = model_and_dir
    rng = np.random.default_rng(3)
    bodies = [rng.standard_normal((1 + i % 3, FEATURES)).round(3).tolist() for i in range(24)]
    before = server.stats()

    async def send_all():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:

            async def one(rows):
                async with session.post(server.url + "/invocations", json={"instances": rows}) as response:
                    return response.status, await response.json()

            return await asyncio.gather(*(one(rows) for rows in bodies))

    replies = asyncio.run(send_all())
    after = server.stats()
    for rows, (status, payload) in zip(bodies, replies):
        assert status == 200
        want = softmax_rows(model.predict(np.asarray(rows, dtype=np.float32), verbose=0))
        assert [p["probabilities"] for p in payload["predictions"]] == [pytest.approx(w, abs=1e-5) for w in want]
    calls = after["batches"] - before["batches"]
    assert after["requests"] - before["requests"] == len(bodies)
    recent = after["recent_batch_requests"][-calls:]
    assert sum(recent) == len(bodies)
    assert max(recent) > 1, recent  # requests shared model calls
    assert calls < len(bodies)
    assert max(after["recent_batch_rows"][-calls:]) <= 16  # never more rows than SERVE_MAX_BATCH_SIZE


@pytest.mark.slow
def test_replicas_on_separate_devices_share_the_load(model_and_dir, tmp_path):
    import aiohttp

    model, model_dir = model_and_dir
    # Two logical CPU devices stand in for two GPUs: one replica on each, one queue.
    with serving(model_dir, tmp_path, SERVE_REPLICAS=2, SERVE_MAX_BATCH_SIZE=4, SERVE_MAX_BATCH_DELAY_MS=0) as server:
        assert server.stats()["replicas"] == ["/CPU:0", "/CPU:1"]
        assert "replicas=/CPU:0,/CPU:1" in server.output()

        async def send_all():
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:

                async def one(index):
                    async with session.post(server.url + "/invocations", json=[ROWS[index % 3]]) as response:
                        return response.status, await response.json()

                return await asyncio.gather(*(one(i) for i in range(48)))

        expected = softmax_rows(model.predict(np.asarray(ROWS, dtype=np.float32), verbose=0))
        for index, (status, payload) in enumerate(asyncio.run(send_all())):
            assert status == 200
            assert payload["predictions"][0]["probabilities"] == pytest.approx(expected[index % 3], abs=1e-5)
        stats = server.stats()
        assert stats["requests"] == 48 and all(count > 0 for count in stats["replica_batches"]), stats["replica_batches"]


@pytest.mark.slow
def test_a_host_without_the_promised_gpu_never_turns_healthy(model_and_dir, tmp_path):
    _, model_dir = model_and_dir
    with serving(model_dir, tmp_path, wait_for="failed", EXPECTED_GPU_COUNT=1) as server:
        ping = server.ping()
        assert ping.status == 503
        assert ping.json()["error"].startswith("GPU check failed: expected 1 GPU(s) (EXPECTED_GPU_COUNT) but TensorFlow sees 0")
        invoke = server.invoke(json.dumps(ROWS))
        assert invoke.status == 503 and "GPU check failed" in invoke.json()["error"]
        # The loopback TF Serving route too, whatever model it names: not a 404 "not found" while not ready.
        loopback = server.request("POST", "/v1/models/half_plus_three:predict", json.dumps({"instances": ROWS}).encode())
        assert loopback.status == 503 and "GPU check failed" in loopback.json()["error"]
        assert "serve-ready" not in server.output()
        assert server.process.poll() is None  # still answering /ping, so SageMaker replaces the host


@pytest.mark.slow
def test_a_missing_model_keeps_ping_failing_with_the_reason(tmp_path):
    with serving(tmp_path / "empty", tmp_path, wait_for="failed") as server:
        ping = server.ping()
        assert ping.status == 503
        assert ping.json()["error"].startswith(f"Model directory {tmp_path / 'empty'} does not exist")
    # SIGTERM (SageMaker scaling in) ends the server cleanly.
    assert server.process.returncode == 0
    assert "serve-stopped" in server.output()
