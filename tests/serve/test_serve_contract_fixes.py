"""Serving parts without a server, as AWS's containers define them: batching opt-in for TF Serving
models, columnar requests never joined, the custom attributes and REST URI of tfs_utils, the
inference toolkit's context and body decoding, and the request log and timeout settings."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainer.contract.errors import ConfigError
from trainer.contract.serving import load_settings
from trainer.serve import handlers
from trainer.serve.batching import DynamicBatcher
from trainer.serve.server import rest_uri, tfs_attributes
from trainer.serve.tfserving import PredictRequest


def test_tf_serving_models_batch_only_when_the_user_opts_in():
    default = load_settings({})
    assert default.batching and not default.tfs_batching  # classifier on, TF Serving off (AWS's default)
    assert load_settings({"SAGEMAKER_TFS_ENABLE_BATCHING": "true"}).tfs_batching
    assert load_settings({"SAGEMAKER_TFS_ENABLE_BATCHING": "True"}).tfs_batching
    assert not load_settings({"SAGEMAKER_TFS_ENABLE_BATCHING": "false"}).tfs_batching
    assert load_settings({"SERVE_BATCHING": "on"}).tfs_batching
    off = load_settings({"SERVE_BATCHING": "off"})
    assert not off.batching and not off.tfs_batching
    with pytest.raises(ConfigError, match="SAGEMAKER_TFS_ENABLE_BATCHING must be true or false"):
        load_settings({"SAGEMAKER_TFS_ENABLE_BATCHING": "yes"})
    with pytest.raises(ConfigError, match="SAGEMAKER_TFS_ENABLE_BATCHING=true and SERVE_BATCHING=off disagree"):
        load_settings({"SAGEMAKER_TFS_ENABLE_BATCHING": "true", "SERVE_BATCHING": "off"})


def test_model_name_timeout_and_access_log_settings():
    assert load_settings({"SAGEMAKER_TFS_DEFAULT_MODEL_NAME": "a", "TFS_DEFAULT_MODEL_NAME": "b"}).model_name == "a"
    assert load_settings({"TFS_DEFAULT_MODEL_NAME": "b"}).model_name == "b"
    with pytest.raises(ConfigError, match="SAGEMAKER_TFS_DEFAULT_MODEL_NAME must be letters"):
        load_settings({"SAGEMAKER_TFS_DEFAULT_MODEL_NAME": "a/b"})
    settings = load_settings({})
    assert (settings.request_timeout_s, settings.access_log) == (60, True)
    settings = load_settings({"SAGEMAKER_MODEL_SERVER_TIMEOUT": "5", "SERVE_ACCESS_LOG": "off"})
    assert (settings.request_timeout_s, settings.access_log) == (5, False)
    with pytest.raises(ConfigError, match="SERVE_ACCESS_LOG must be on or off"):
        load_settings({"SERVE_ACCESS_LOG": "quiet"})
    # A batch transform's request (up to 100 MB) is bounded by the job's InvocationsTimeoutInSeconds, not 60 s.
    assert load_settings({"SAGEMAKER_BATCH": "true"}).request_timeout_s == 0
    assert load_settings({"SAGEMAKER_BATCH": "true", "SAGEMAKER_MODEL_SERVER_TIMEOUT": "900"}).request_timeout_s == 900


def test_a_columnar_request_is_never_joined_with_others():
    calls: list[int] = []

    def model(request: PredictRequest) -> dict[str, np.ndarray]:
        calls.append(request.rows or 0)
        x = request.tensors["x"]
        return {"y": np.exp(x) / np.exp(x).sum(axis=0)}  # depends on the whole batch

    def columnar(value: float) -> PredictRequest:
        return PredictRequest("serving_default", {"x": np.full((2, 1), value, np.float32)}, False, 2)

    def rows(value: float) -> PredictRequest:
        return PredictRequest("serving_default", {"x": np.full((2, 1), value, np.float32)}, True, 2)

    async def go() -> list[Any]:
        batcher = DynamicBatcher(model, max_batch_size=64, max_delay_seconds=0.1, max_queued_requests=100)
        batcher.start()
        try:
            requests = [columnar(1.0), columnar(2.0), rows(1.0), rows(2.0), columnar(3.0)]
            return await asyncio.wait_for(asyncio.gather(*(batcher.submit(r) for r in requests)), 10)
        finally:
            await batcher.stop()

    outputs = asyncio.run(go())
    for answer in (outputs[0], outputs[1], outputs[4]):
        np.testing.assert_allclose(answer["y"], [[0.5], [0.5]])
    assert sorted(calls) == [2, 2, 2, 4]  # the row-format pair shared one call; every columnar ran alone


def test_custom_attributes_and_rest_uri_follow_tfs_utils():
    settings = load_settings({"SAGEMAKER_BIND_TO_PORT": "9000", "SAGEMAKER_TFS_DEFAULT_MODEL_NAME": "m"})
    assert tfs_attributes(None) == {} and tfs_attributes("") == {}
    attributes = tfs_attributes("tfs-model-name=other, tfs-model-version=3,tfs-method=classify,user=1")
    assert attributes == {"tfs-model-name": "other", "tfs-model-version": "3", "tfs-method": "classify"}
    assert rest_uri(settings, attributes) == "http://127.0.0.1:9000/v1/models/other/versions/3:classify"
    assert rest_uri(settings, {}) == "http://127.0.0.1:9000/v1/models/m:predict"
    assert handlers.Context._fields == (
        "model_name", "model_version", "method", "rest_uri", "grpc_port", "channel",
        "custom_attributes", "request_content_type", "accept_header", "content_length",
    )


def _toolkit(tmp_path: Path, **functions: Any) -> handlers.UserCode:
    return handlers.UserCode(tmp_path, types.SimpleNamespace(**functions), ())


def _request_context(content_type: str, accept: str = "application/json") -> handlers.ToolkitContext:
    return handlers.ToolkitContext(
        model_dir="/opt/ml/model", gpu_id=None, headers={"Content-Type": content_type, "X-Custom": "v"},
        content_type=content_type, accept=accept,
    )


def test_toolkit_model_fn_gets_a_context_like_the_model_servers(tmp_path):
    seen: dict[str, Any] = {}

    def model_fn(model_dir, context):
        seen.update(context.system_properties, processors=len(context.request_processor))
        return "model"

    user = _toolkit(tmp_path, model_fn=model_fn)
    user.load_model(Path("/opt/ml/model"), gpu_id=0)
    assert user.model == "model"
    assert seen["model_dir"] == "/opt/ml/model" and seen["gpu_id"] == 0 and seen["processors"] == 1
    _toolkit(tmp_path, model_fn=lambda model_dir: "one argument").load_model(Path("/m"))


@pytest.mark.parametrize(
    ("content_type", "decoded"),
    [
        ("application/json", True),
        ("text/csv", True),
        ("application/jsonlines", False),
        ("application/json; charset=utf-8", False),  # the toolkit compares the whole header
        ("application/x-npy", False),
    ],
)
def test_toolkit_functions_get_bytes_unless_the_type_is_exactly_json_or_csv(tmp_path, content_type, decoded):
    got: list[Any] = []

    def input_fn(input_data, content_type):
        got.append(input_data)
        return input_data if isinstance(input_data, str) else input_data.decode("utf-8")

    def transform_fn(model, input_data, content_type, accept):
        got.append(input_data)
        return "ok", "text/plain"

    def predict_fn(data, model, context):
        got.append(context.get_request_header(0, "x-custom"))
        return data

    def output_fn(prediction, accept, context):
        context.set_response_status(201)
        context.set_response_header(0, "X-Out", "1")
        return prediction, "text/plain"

    reply = _toolkit(tmp_path, input_fn=input_fn, predict_fn=predict_fn, output_fn=output_fn).invoke(
        b'{"a": 1}', _request_context(content_type), lambda data: data, lambda uri, data: None
    )
    assert isinstance(got[0], str if decoded else bytes) and got[1] == "v"
    assert (reply.body, reply.status, reply.headers) == (b'{"a": 1}', 201, {"X-Out": "1"})
    _toolkit(tmp_path, transform_fn=transform_fn).invoke(b"1", _request_context(content_type), lambda d: d, lambda u, d: None)
    assert isinstance(got[-1], str if decoded else bytes)
