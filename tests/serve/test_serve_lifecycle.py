"""Real servers: a model whose output depends on the whole batch, the TF Serving request context
from custom attributes, the request log and timeout, and a SIGTERM during a handler's call to
``context.rest_uri``."""

from __future__ import annotations

import concurrent.futures
import json
import signal
import textwrap
import time
from pathlib import Path

import pytest

from tests.serve.helpers import REQUEST_TIMEOUT_SECONDS, serving
from tests.serve.models import save_regression

pytestmark = pytest.mark.slow  # each test starts a server (TensorFlow import, model load)


def _save_batch_softmax(model_dir: Path) -> None:
    """``y = softmax(x)`` over the batch axis: each row's answer depends on every other row."""
    import tensorflow as tf

    class BatchSoftmax(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")])
        def serve(self, x):
            return {"y": tf.nn.softmax(x, axis=0)}

    module = BatchSoftmax()
    tf.saved_model.save(module, str(model_dir / "1"), signatures={"serving_default": module.serve})


def test_a_batch_dependent_model_answers_each_request_alone_by_default(tmp_path):
    model_dir = tmp_path / "model"
    _save_batch_softmax(model_dir)
    # A long window: were batching on, concurrent requests would surely meet.
    with serving(model_dir, tmp_path / "work", SERVE_MAX_BATCH_DELAY_MS="200") as server:
        bodies = ['{"instances": [[1.0], [1.0]]}', '{"inputs": [[1.0], [1.0]]}'] * 10
        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            replies = list(pool.map(server.invoke, bodies))
        for body, reply in zip(bodies, replies):
            assert reply.status == 200, reply.body
            key = "predictions" if "instances" in body else "outputs"
            assert reply.json()[key] == [[0.5], [0.5]]
        stats = server.stats()
        assert stats["batching"] is False and stats["max_batch_requests"] == 1
        line = next(line for line in server.output().splitlines() if "serve-request" in line and "/invocations" in line)
        assert "status=200" in line and "batch_requests=1" in line and "bytes_out=" in line and "ms=" in line


HANDLER = """\
    import json
    import time

    import requests


    def handler(data, context):
        request = json.loads(data.read())
        time.sleep(request.get("sleep", 0))
        answer = requests.post(context.rest_uri, data=json.dumps({"instances": [[1.0]]}))
        fields = {name: getattr(context, name) for name in context._fields}
        return json.dumps({"status": answer.status_code, "answer": answer.json(), "context": fields}), "application/json"
"""


def _model_with_handler(tmp_path: Path) -> Path:
    """The regression as model ``reg``, version 3 (``reg/3/``), with the handler in ``code/``."""
    model_dir = tmp_path / "model"
    save_regression(model_dir / "reg", version="3")
    (model_dir / "code").mkdir()
    (model_dir / "code" / "inference.py").write_text(textwrap.dedent(HANDLER))
    return model_dir


def _invoke(server, body: str, attributes: str | None = None):
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json"}
    if attributes is not None:
        headers["X-Amzn-SageMaker-Custom-Attributes"] = attributes
    request = urllib.request.Request(server.url + "/invocations", data=body.encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS) as response:  # nosec B310 - loopback
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_custom_attributes_the_handler_context_the_request_log_and_the_timeout(tmp_path):
    model_dir = _model_with_handler(tmp_path)
    env = {"SAGEMAKER_TFS_DEFAULT_MODEL_NAME": "reg", "SAGEMAKER_MODEL_SERVER_TIMEOUT": "3"}
    with serving(model_dir, tmp_path / "work", **env) as server:
        port = server.url.rsplit(":", 1)[1]
        status, answer = _invoke(server, "{}")
        assert status == 200, answer
        assert answer["answer"] == {"predictions": [[3.0]]}
        assert answer["context"] == {
            "model_name": None, "model_version": None, "method": None,
            "rest_uri": f"http://127.0.0.1:{port}/v1/models/reg:predict",
            "grpc_port": None, "channel": None, "custom_attributes": None,
            "request_content_type": "application/json", "accept_header": "application/json", "content_length": 2,
        }
        named = "tfs-model-name=reg,tfs-model-version=3,tfs-method=predict"
        status, answer = _invoke(server, "{}", named)
        assert status == 200 and answer["status"] == 200, answer
        context = answer["context"]
        assert (context["model_name"], context["model_version"], context["method"]) == ("reg", "3", "predict")
        assert context["rest_uri"] == f"http://127.0.0.1:{port}/v1/models/reg/versions/3:predict"
        assert context["custom_attributes"] == named

        assert _invoke(server, "{}", "tfs-model-name=other") == (
            404, {"error": "Servable not found: X-Amzn-SageMaker-Custom-Attributes names model 'other'; this server holds 'reg'."}
        )
        status, answer = _invoke(server, "{}", "tfs-model-version=7")
        assert status == 404 and "version 7; this server holds version 3" in answer["error"]
        status, answer = server.request("POST", "/v1/models/reg/versions/7:predict", b'{"instances": [[1]]}').status, None
        assert status == 404

        started = time.monotonic()
        status, answer = _invoke(server, '{"sleep": 6}')
        assert status == 504 and answer == {"error": "POST /invocations: no answer within 3s (SAGEMAKER_MODEL_SERVER_TIMEOUT)."}
        assert time.monotonic() - started < 5.5
        log = server.output()
        assert "serve-request method=POST path=/invocations status=404" in log
        assert "error=\"Servable not found: X-Amzn-SageMaker-Custom-Attributes names model 'other'" in log
        assert "status=504" in log and "path=/ping status=200" not in log  # healthy pings are not logged


def test_sigterm_lets_a_handler_in_flight_finish_its_call_to_rest_uri(tmp_path):
    model_dir = _model_with_handler(tmp_path)
    with serving(model_dir, tmp_path / "work") as server:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(_invoke, server, '{"sleep": 2}')
            time.sleep(0.7)  # the handler is sleeping
            server.process.send_signal(signal.SIGTERM)
            status, answer = in_flight.result(timeout=30)
        assert status == 200, answer
        assert answer["status"] == 200 and answer["answer"] == {"predictions": [[3.0]]}
        assert server.process.wait(timeout=30) == 0
        assert "serve-stopping requests_left=0 handler_calls_left=0" in server.output()


def test_sigterm_waits_for_a_request_still_sending_its_body(tmp_path):
    """Accepted before SIGTERM, its body after: the drain counts it, so its handler's rest_uri still answers."""
    import socket

    model_dir = _model_with_handler(tmp_path)
    with serving(model_dir, tmp_path / "work") as server:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        body = b"{}"
        head = (
            f"POST /invocations HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        with socket.create_connection((host, int(port)), timeout=REQUEST_TIMEOUT_SECONDS) as client:
            client.sendall(head.encode())
            time.sleep(0.7)  # the server has the headers and waits for the body
            server.process.send_signal(signal.SIGTERM)
            time.sleep(1.0)  # long enough for a drain that does not count this request to close the listener
            client.sendall(body)
            reply = b""
            while chunk := client.recv(65536):
                reply += chunk
        status_line, _, answer = reply.partition(b"\r\n\r\n")
        assert status_line.startswith(b"HTTP/1.1 200"), reply
        assert json.loads(answer)["answer"] == {"predictions": [[3.0]]}
        assert server.process.wait(timeout=30) == 0
        assert "serve-stopping requests_left=0 handler_calls_left=0" in server.output()
