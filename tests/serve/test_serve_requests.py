"""Requests the server must refuse or answer alone, in process: fake models, no TensorFlow, no port.

Each test builds the serving state by hand (a model is a Python function) and talks to the real
aiohttp application through aiohttp's test client, so the answer is what a client gets: status,
content type and the one-line JSON error, never aiohttp's plain-text 500 with a traceback.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.trainer.helpers import free_ports
from trainer.contract.serving import load_settings
from trainer.serve import handlers, server
from trainer.serve.model import LoadedModel, ModelSource, TensorModel
from trainer.serve.tfserving import Signature, TensorSpec

JSON = {"Content-Type": "application/json"}
Call = tuple[str, bytes, dict[str, str]]


def _state(tmp_path: Path, **env: str) -> server.ServingState:
    settings = load_settings({"SM_MODEL_DIR": str(tmp_path), "EXPECTED_GPU_COUNT": "0", **env})
    state = server.ServingState(settings)
    state.workers = 1
    return state


def _tensor_state(tmp_path: Path, signatures: dict[str, Signature], run: Callable[[dict[str, np.ndarray]], Any], **env: str) -> server.ServingState:
    state = _state(tmp_path, **env)
    state.tensor_replicas = [TensorModel(ModelSource("saved_model", tmp_path), signatures, {"serving_default": run})]
    state.ready.set()
    return state


def _classifier_state(tmp_path: Path, **env: str) -> server.ServingState:
    """The built-in classifier over two features whose logits are the features, in float32 as TF computes them."""
    state = _state(tmp_path, **env)
    model = LoadedModel(ModelSource("trainer", tmp_path), 2, 2, "logits", lambda rows: np.asarray(rows, np.float32))
    state.model, state.replicas = model, [model]
    state.ready.set()
    return state


def _with_code(tmp_path: Path, state: server.ServingState, script: str) -> server.ServingState:
    code = tmp_path / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "inference.py").write_text(textwrap.dedent(script))
    state.user_code = handlers.load(tmp_path)
    if state.user_code is not None and state.user_code.loads_own_model:
        state.user_code.load_model(tmp_path)
    return state


async def _send(client: TestClient, calls: Iterable[Call]) -> list[tuple[int, str, bytes]]:
    answers = []
    for path, body, headers in calls:
        response = await asyncio.wait_for(client.post(path, data=body, headers=headers), 20)
        answers.append((response.status, response.headers.get("Content-Type", ""), await response.read()))
    return answers


def _serve(state: server.ServingState, calls: Iterable[Call], port: int | None = None) -> list[tuple[int, str, bytes]]:
    async def go() -> list[tuple[int, str, bytes]]:
        async with TestClient(TestServer(server.create_app(state), host="127.0.0.1", port=port)) as client:
            return await _send(client, calls)

    return asyncio.run(go())


def _one_line_error(answer: tuple[int, str, bytes], status: int) -> str:
    got, content_type, body = answer
    assert (got, content_type.split(";")[0]) == (status, "application/json"), body
    error = json.loads(body)["error"]
    assert "\n" not in error and "Traceback" not in error
    return error


INT_PAIR = {"serving_default": Signature({"x": TensorSpec((None, 2), "int64")}, {"y": TensorSpec((None, 2), "int64")})}
PIXELS = {"serving_default": Signature({"img": TensorSpec((None, 2), "uint8")}, {"y": TensorSpec((None, 2), "uint8")})}
IMAGE = {"serving_default": Signature({"img": TensorSpec((None, 2, 3), "float32")}, {"y": TensorSpec((None, 2, 3), "float32")})}


@pytest.mark.parametrize(
    ("signatures", "body", "message"),
    [
        (INT_PAIR, '{"instances": [[1.7, 2]]}', "Input 'x': JSON Value: 1.7 Type: number is not of expected type: int64."),
        (INT_PAIR, '{"instances": [["3", 4]]}', "Input 'x': JSON Value: \"3\" Type: string is not of expected type: int64."),
        (INT_PAIR, '{"instances": [[true, 1]]}', "Input 'x': JSON Value: true Type: boolean is not of expected type: int64."),
        (INT_PAIR, '{"instances": [[1e30, 1]]}', "Input 'x': JSON Value: 1e+30 Type: number is not of expected type: int64."),
        (INT_PAIR, '{"instances": [[99999999999999999999999, 1]]}', "Input 'x': JSON Value: 99999999999999999999999 is out of range for int64."),
        (PIXELS, '{"instances": [[300, 1]]}', "Input 'img': JSON Value: 300 is out of range for uint8."),
        (PIXELS, '{"instances": [[0, -1]]}', "Input 'img': JSON Value: -1 is out of range for uint8."),
        (IMAGE, '{"instances": [[[1, 2], [3, 4], [5, 6]]]}', "Input 'img' has shape (1, 3, 2) but the signature takes (-1, 2, 3)"),
        (IMAGE, '{"instances": [[[1, 2, 3], [4, 5, true]]]}', "Input 'img': JSON Value: true Type: boolean is not of expected type: float32."),
        (IMAGE, '{"instances": [[[1, 2, 3], [4, 5, 1e39]]]}', "Input 'img': JSON Value: 1e+39 is out of range for float32."),
    ],
    ids=["fraction-for-int", "string-for-int", "bool-for-int", "float-beyond-int64", "int-beyond-int64", "uint8-over", "uint8-negative",
         "transposed-image", "bool-for-float", "beyond-float32"],
)
def test_tf_serving_values_of_another_type_or_shape_are_400_not_coerced(tmp_path, signatures, body, message):
    calls = []
    state = _tensor_state(tmp_path, signatures, lambda tensors: calls.append(tensors) or {"y": next(iter(tensors.values()))})
    (answer,) = _serve(state, [("/invocations", body.encode(), JSON)])
    assert message in _one_line_error(answer, 400)
    assert calls == []  # refused before the model


def test_tf_serving_values_of_the_inputs_type_still_pass(tmp_path):
    state = _tensor_state(tmp_path, INT_PAIR, lambda tensors: {"y": tensors["x"] * 10})
    floats = _tensor_state(tmp_path, IMAGE, lambda tensors: {"y": tensors["img"]})
    (ints,) = _serve(state, [("/invocations", b'{"instances": [[1, -2]]}', JSON)])
    flat, image = _serve(floats, [("/invocations", b'{"instances": [[1, 2, 3, 4, 5, 6.5]]}', JSON),
                                  ("/invocations", b'{"inputs": [[[1, 2, 3], [4, 5, 6]]]}', JSON)])
    assert (ints[0], json.loads(ints[2])) == (200, {"predictions": [[10, -20]]})
    assert (flat[0], json.loads(flat[2])) == (200, {"predictions": [[[1, 2, 3], [4, 5, 6.5]]]})  # the documented flat row
    assert (image[0], json.loads(image[2])) == (200, {"outputs": [[[1, 2, 3], [4, 5, 6]]]})  # ints for a float input


def test_the_classifier_refuses_values_beyond_float32_instead_of_answering_nan(tmp_path):
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.array([[1e39, 0.5]], np.float64))
    answers = _serve(
        _classifier_state(tmp_path),
        [("/invocations", b'{"instances": [[1e39, 0.5]]}', JSON), ("/invocations", b"0.5,-1e39\n", {"Content-Type": "text/csv"}),
         ("/invocations", buffer.getvalue(), {"Content-Type": "application/x-npy"}), ("/invocations", b"[[3e38, 1]]", JSON)],
    )
    assert _one_line_error(answers[0], 400).startswith("Row 1 value 1 is 1e+39, beyond float32's range")
    assert _one_line_error(answers[1], 400).startswith("Row 1 value 2 is -1e+39, beyond float32's range")
    assert "beyond float32's range" in _one_line_error(answers[2], 400)
    assert answers[3][0] == 200 and json.loads(answers[3][2])["predictions"][0]["predicted_class"] == 0  # 3e38 fits


def test_the_classifier_refuses_pixels_that_a_uint8_model_would_truncate(tmp_path):
    # An image model takes uint8 pixels: [0, 1] floats would be cast to nearly all zeros, one constant answer with 200.
    state = _classifier_state(tmp_path)
    state.model.input_dtype = "uint8"
    answers = _serve(state, [("/invocations", b'{"instances": [[0.5, 0.25]]}', JSON), ("/invocations", b"[[300, 1]]", JSON),
                             ("/invocations", b"[[255, 0]]", JSON)])  # fmt: skip
    scaled = _one_line_error(answers[0], 400)
    assert "takes 0-255 integers (pixel values)" in scaled and "from 0.25 to 0.5" in scaled, scaled
    assert "from 1 to 300" in _one_line_error(answers[1], 400)
    assert answers[2][0] == 200


TOOLKIT_DEFAULTS = """\
    def predict_fn(data, model):
        return {"echo": data}
"""

OWN_MODEL = """\
    class Doubler:
        def __call__(self, rows):
            return rows * 2


    def model_fn(model_dir):
        return Doubler()
"""

UNSERIALIZABLE = """\
    def predict_fn(data, model):
        return {"handle": object()}
"""


def test_toolkit_defaults_answer_one_line_errors_not_a_traceback(tmp_path):
    signatures = {"serving_default": Signature({"x": TensorSpec((None, 2), "float32")}, {"y": TensorSpec((None, 2), "float32")})}
    echo = _with_code(tmp_path / "echo", _tensor_state(tmp_path / "echo", signatures, lambda t: {"y": t["x"]}), TOOLKIT_DEFAULTS)
    malformed, unsupported, fine = _serve(
        echo, [("/invocations", b'{"instances": [[1, 2]', JSON), ("/invocations", b"1,2", {"Content-Type": "text/plain"}),
               ("/invocations", b'{"instances": [[1, 2]]}', JSON)]
    )
    assert _one_line_error(malformed, 400).startswith("Malformed JSON in the body")  # the default input_fn's 400
    assert _one_line_error(unsupported, 415).startswith("Unsupported content type 'text/plain'")
    assert (fine[0], json.loads(fine[2])) == (200, {"echo": {"instances": [[1, 2]]}})

    own = _with_code(tmp_path / "own", _state(tmp_path / "own"), OWN_MODEL)
    own.ready.set()
    doubled, refused = _serve(own, [("/invocations", b'{"instances": [[1, 2]]}', JSON), ("/invocations", b'{"instances": [["a", 2]]}', JSON)])
    assert (doubled[0], json.loads(doubled[2])) == (200, {"predictions": [[2.0, 4.0]]})
    assert _one_line_error(refused, 500).startswith("predict_fn (default) failed: ValueError: could not convert string to float")

    unserializable = _with_code(tmp_path / "out", _tensor_state(tmp_path / "out", signatures, lambda t: {"y": t["x"]}), UNSERIALIZABLE)
    (output,) = _serve(unserializable, [("/invocations", b'{"instances": [[1, 2]]}', JSON)])
    assert _one_line_error(output, 500).startswith("output_fn (default) failed: TypeError: object is not JSON serializable")


INPUT_OUTPUT_HANDLERS = """\
    import json


    def input_handler(data, context):
        return json.dumps({"instances": [[float(v) for v in data.read().decode().split(",")]]})


    def output_handler(response, context):
        return response.content, "application/json"
"""


def test_tf_servings_route_reads_json_whatever_the_content_type_for_the_classifier_too(tmp_path):
    """AWS's container posts input_handler's result with requests.post(rest_uri, data=str): no Content-Type."""
    (port,) = free_ports(1)
    state = _with_code(tmp_path, _classifier_state(tmp_path, SAGEMAKER_BIND_TO_PORT=str(port)), INPUT_OUTPUT_HANDLERS)
    through_handlers, no_type, other_type = _serve(
        state,
        [("/invocations", b"1,2", {"Content-Type": "text/csv"}), ("/v1/models/model:predict", b'{"instances": [[2, 1]]}', {}),
         ("/v1/models/model:predict", b'{"instances": [[2, 1]]}', {"Content-Type": "text/plain"})],
        port=port,
    )
    assert through_handlers[0] == 200 and json.loads(through_handlers[2])["predictions"][0]["predicted_class"] == 1
    for answer in (no_type, other_type):
        assert answer[0] == 200 and json.loads(answer[2])["predictions"][0]["predicted_class"] == 0


def test_a_request_that_fails_the_model_fails_alone_and_is_counted(tmp_path):
    """An embedding lookup fails on an id out of its vocabulary: only that request gets the 500."""
    calls: list[list[int]] = []

    def lookup(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ids = tensors["ids"]
        calls.append(ids[:, 0].tolist())
        if (ids >= 100).any():
            raise ValueError(f"indices = {int(ids.max())} is not in [0, 100)")
        return {"y": ids * 2}

    signatures = {"serving_default": Signature({"ids": TensorSpec((None, 1), "int64")}, {"y": TensorSpec((None, 1), "int64")})}
    state = _tensor_state(tmp_path, signatures, lookup, SERVE_MAX_BATCH_DELAY_MS="500", SAGEMAKER_TFS_ENABLE_BATCHING="true")

    async def go() -> tuple[list[tuple[int, str, bytes]], dict[str, Any]]:
        async with TestClient(TestServer(server.create_app(state), host="127.0.0.1")) as client:
            await _send(client, [("/invocations", b'{"instances": [[0]]}', JSON)])  # the batcher exists
            server._batcher(state)._mean_requests_per_call = 4.0  # waits for company, as under load
            bodies = [json.dumps({"instances": [[v]]}).encode() for v in (1, 2, 1000, 3)]
            answers = await asyncio.gather(*(_send(client, [("/invocations", body, JSON)]) for body in bodies))
            stats = await (await client.get("/stats")).json()
            return [a for (a,) in answers], stats

    answers, stats = asyncio.run(go())
    assert [a[0] for a in answers] == [200, 200, 500, 200]
    assert [json.loads(a[2])["predictions"] for i, a in enumerate(answers) if i != 2] == [[[2]], [[4]], [[6]]]
    assert "The model failed on this request (ValueError)" in _one_line_error(answers[2], 500)
    assert sorted(calls[1]) == [1, 2, 3, 1000]  # they did share the call that failed
    assert stats["requests"] == 5 and stats["failed_requests"] == 1 and stats["recent_batch_requests"] == [1, 4]


JSON_LINES_BODY = b"[2, 1]\n[0, 3]\n[4, 1]\n"


@pytest.mark.parametrize("content_type", ["application/json", "application/jsonlines", "application/jsons", "application/x-jsonlines"])
def test_the_classifier_answers_a_json_lines_batch_one_prediction_per_row_in_order(tmp_path, content_type):
    """What a transform job with SplitType=Line and MultiRecord sends: JSON records joined by newlines."""
    (answer,) = _serve(_classifier_state(tmp_path), [("/invocations", JSON_LINES_BODY, {"Content-Type": content_type})])
    assert answer[:2] == (200, "application/json"), answer[2]
    assert [p["predicted_class"] for p in json.loads(answer[2])["predictions"]] == [0, 1, 0]


def test_the_classifier_answers_accept_json_lines_in_one_line_with_that_type(tmp_path):
    """As AWS's TensorFlow serving container answers (TF Serving's document, newlines removed); npy and CSV are refused."""
    lines, npy = _serve(
        _classifier_state(tmp_path),
        [("/invocations", JSON_LINES_BODY, {"Content-Type": "application/jsonlines", "Accept": "application/jsonlines"}),
         ("/invocations", JSON_LINES_BODY, {"Content-Type": "application/jsonlines", "Accept": "application/x-npy"})],
    )
    assert lines[:2] == (200, "application/jsonlines") and lines[2].count(b"\n") == 0
    assert len(json.loads(lines[2])["predictions"]) == 3
    assert _one_line_error(npy, 406) == (
        "Unsupported Accept 'application/x-npy'; predictions are returned as application/json or application/jsonlines."
    )


def test_a_json_lines_batch_transform_joins_each_record_with_its_prediction(tmp_path):
    """End to end through the emulator's transform runner (batching, invocation, JoinSource=Input)."""
    import concurrent.futures
    import io

    from scripts.emulator.transform import InputObject, TransformRequest, transform_object

    job = {
        "TransformJobName": "t",
        "ModelName": "m",
        "BatchStrategy": "MultiRecord",
        "TransformInput": {"DataSource": {"S3DataSource": {"S3Uri": "s3://in/x/"}}, "ContentType": "application/json", "SplitType": "Line"},
        "TransformOutput": {"S3OutputPath": "s3://out/x", "Accept": "application/jsonlines", "AssembleWith": "Line"},
        "DataProcessing": {"JoinSource": "Input", "OutputFilter": "$['id','SageMakerOutput']"},
    }
    request = TransformRequest.from_description(job).settled(None)  # MultiRecord, 6 MB: one request
    records = b'{"id": "a", "instances": [[2, 1]]}\n{"id": "b", "instances": [[0, 3]]}\n{"id": "c", "instances": [[4, 1]]}\n'

    class Objects:
        def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803 - boto3's names
            return {"Body": io.BytesIO(records)}

    async def go() -> tuple[bytes, int]:
        async with TestClient(TestServer(server.create_app(_classifier_state(tmp_path)), host="127.0.0.1")) as client:
            url = str(client.make_url("")).rstrip("/")
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                item = InputObject("in", "x/rows.jsonl", "rows.jsonl")
                return await asyncio.get_running_loop().run_in_executor(None, transform_object, Objects(), url, item, request, pool)

    body, count = asyncio.run(go())
    outputs = [json.loads(line) for line in body.splitlines()]
    assert count == 3 and [(o["id"], o["SageMakerOutput"]["predicted_class"]) for o in outputs] == [("a", 0), ("b", 1), ("c", 0)]


# --- where AWS's containers answer differently from what a stricter server would -------------------

SINGLE = {"serving_default": Signature({"x": TensorSpec((None, 1), "float32")}, {"y": TensorSpec((None, 1), "float32")})}


def _line(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"y": x["x"] * 2 + 1}


def test_tf_serving_answers_its_json_for_an_accept_it_does_not_know(tmp_path):
    """AWS's container never refuses an Accept: TF Serving's JSON, unchanged, as application/json."""
    csv, html_then_npy, npy = _serve(
        _tensor_state(tmp_path, SINGLE, _line),
        [("/invocations", b'{"instances": [[1], [2]]}', {**JSON, "Accept": "text/csv"}),
         ("/invocations", b'{"instances": [[1]]}', {**JSON, "Accept": "text/html, application/x-npy"}),
         ("/v1/models/model:predict", b'{"instances": [[3]]}', {"Accept": "text/plain"})],
    )
    assert csv[:2] == (200, "application/json") and json.loads(csv[2]) == {"predictions": [[3.0], [5.0]]}
    assert html_then_npy[:2] == (200, "application/x-npy")  # a type it answers, later in the list, still wins
    assert npy[:2] == (200, "application/json") and json.loads(npy[2]) == {"predictions": [[7.0]]}


EXPANDING_HANDLERS = """\
    import json


    def input_handler(data, context):
        # A small request becomes a large TF Serving request (7 MB: the rows, then JSON whitespace),
        # as an input_handler that looks up features or decodes an image makes one.
        return json.dumps({"instances": json.loads(data.read())}) + " " * (7 * 1024 * 1024)


    def output_handler(response, context):
        return response.content, "application/json"
"""


def test_the_loopback_route_takes_a_request_over_sagemakers_limit_that_invocations_refuse(tmp_path):
    """AWS's input_handler posts straight to TF Serving (nginx's client_max_body_size 0): the 6 MB
    invocation limit is SageMaker's, for /invocations, not for the container's own loopback call."""
    (port,) = free_ports(1)
    calls: list[int] = []
    state = _tensor_state(tmp_path, SINGLE, lambda x: calls.append(len(x["x"])) or _line(x), SAGEMAKER_BIND_TO_PORT=str(port))
    state = _with_code(tmp_path, state, EXPANDING_HANDLERS)
    small, large = _serve(
        state,
        [("/invocations", b"[[1], [2]]" + b" " * 1000, JSON), ("/invocations", b"[[1]]" + b" " * (7 * 1024 * 1024), JSON)],
        port=port,
    )
    assert small[0] == 200 and json.loads(small[2]) == {"predictions": [[3.0], [5.0]]}, small[2][:300]
    assert calls == [2]
    assert "over the 6291456-byte limit (SERVE_MAX_REQUEST_BYTES)" in _one_line_error(large, 413)


TOOLKIT_NUMPY = """\
    import numpy as np


    class Doubler:
        def predict(self, data):
            return data * 2


    def model_fn(model_dir):
        return Doubler()


    def predict_fn(data, model):
        assert isinstance(data, np.ndarray) and data.shape == (2, 2), f"got {type(data).__name__} {getattr(data, 'shape', None)}"
        return model.predict(data)
"""


def test_toolkit_defaults_with_model_fn_decode_to_numpy_and_encode_by_accept(tmp_path):
    """The inference toolkit's default_input_fn (decoder.decode) and default_output_fn (encoder.encode)."""
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.array([[1.5, 2], [3, 4]]))
    state = _with_code(tmp_path, _state(tmp_path), TOOLKIT_NUMPY)
    state.ready.set()
    csv, json_out, npy, default, refused_accept, refused_type = _serve(
        state,
        [("/invocations", b"[[1, 2], [3, 4]]", {**JSON, "Accept": "text/csv"}),
         ("/invocations", b"1,2\n3,4\n", {"Content-Type": "text/csv", "Accept": "text/html, application/json"}),
         ("/invocations", buffer.getvalue(), {"Content-Type": "application/x-npy", "Accept": "application/x-npy"}),
         ("/invocations", b"[[1, 2], [3, 4]]", JSON),
         ("/invocations", b"[[1, 2], [3, 4]]", {**JSON, "Accept": "text/html"}),
         ("/invocations", b"1 2\n3 4", {"Content-Type": "text/plain"})],
    )
    assert csv == (200, "text/csv", b"2,4\n6,8\n")
    assert json_out[:2] == (200, "application/json") and json.loads(json_out[2]) == [[2.0, 4.0], [6.0, 8.0]]
    assert npy[:2] == (200, "application/x-npy") and np.load(io.BytesIO(npy[2])).tolist() == [[3.0, 4.0], [6.0, 8.0]]
    assert default[:2] == (200, "application/json") and json.loads(default[2]) == [[2, 4], [6, 8]]
    assert "Accept 'text/html' is not encoded by the inference toolkit's default output_fn" in _one_line_error(refused_accept, 406)
    assert "define input_fn in inference.py" in _one_line_error(refused_type, 415)


def test_a_serving_container_handler_gets_exactly_data_and_context(tmp_path):
    """python_service.py calls handler(data, context): extra optional parameters are the user's."""
    state = _with_code(tmp_path, _tensor_state(tmp_path, SINGLE, _line), """\
        import json


        def handler(data, context, **options):
            return json.dumps({"bytes": len(data.read()), "model": context.model_name, "options": options}), "application/json"
    """)
    (answer,) = _serve(state, [("/invocations", b"[[1]]", JSON)])
    assert (answer[0], json.loads(answer[2])) == (200, {"bytes": 5, "model": None, "options": {}})


def test_requirements_are_skipped_with_a_warning_when_code_lib_holds_unpacked_packages(tmp_path, capsys):
    """AWS's serve.py: "loading modules in lib, ignoring requirements.txt"; lib stays importable."""
    code = tmp_path / "code"
    (code / "lib" / "aws_style_extmod").mkdir(parents=True)
    (code / "lib" / "aws_style_extmod" / "__init__.py").write_text("VALUE = 7\n")
    (code / "requirements.txt").write_text("aws-style-extmod==1.0\nnot-on-any-index==9.9\n")
    state = _with_code(tmp_path, _tensor_state(tmp_path, SINGLE, _line), """\
        import aws_style_extmod


        def handler(data, context):
            return str(aws_style_extmod.VALUE), "text/plain"
    """)
    assert state.user_code is not None and state.user_code.installed == ()
    out = capsys.readouterr().out
    (warning,) = [line for line in out.splitlines() if "serve-requirements-skipped" in line]
    assert warning.startswith(f"[trainer] serve-requirements-skipped warning='loading modules in {code / 'lib'}, ignoring requirements.txt")
    assert "installed=none" in out and "Traceback" not in out
    (answer,) = _serve(state, [("/invocations", b"1", JSON)])
    assert answer == (200, "text/plain", b"7")


def _versions_state(tmp_path: Path, **env: str) -> server.ServingState:
    """Three servables as AWS's container finds them: half_plus_three 1 and 2, other 1 (y = x + offset)."""
    def model(offset: float) -> TensorModel:
        return TensorModel(ModelSource("saved_model", tmp_path), SINGLE, {"serving_default": lambda t: {"y": t["x"] + offset}})

    state = _state(tmp_path, **env)
    state.servables = [server.Servable("half_plus_three", "1", (model(100),)), server.Servable("half_plus_three", "2", (model(200),)),
                       server.Servable("other", "1", (model(300),))]
    state.default_model = "half_plus_three"
    state.tensor_replicas = list(state.servables[1].tensor_replicas)
    state.ready.set()
    return state


def _attributes(value: str) -> dict[str, str]:
    return {**JSON, server.CUSTOM_ATTRIBUTES_HEADER: value}


def test_every_model_and_version_found_is_served_by_name_and_version(tmp_path):
    """tfs-model-name / tfs-model-version route as TF Serving routes its config's models and versions."""
    body = b'{"instances": [[1]]}'
    answers = _serve(
        _versions_state(tmp_path),
        [("/invocations", body, JSON), ("/invocations", body, _attributes("tfs-model-version=1")),
         ("/invocations", body, _attributes("tfs-model-version=0001")), ("/invocations", body, _attributes("tfs-model-name=other")),
         ("/v1/models/half_plus_three/versions/1:predict", body, {}), ("/v1/models/other:predict", body, {}),
         ("/invocations", body, _attributes("tfs-model-name=missing")), ("/invocations", body, _attributes("tfs-model-version=3")),
         ("/invocations", body, _attributes("tfs-method=classify"))],
    )
    values = [json.loads(a[2])["predictions"][0][0] for a in answers[:6]]
    assert values == [201.0, 101.0, 101.0, 301.0, 101.0, 301.0]
    assert _one_line_error(answers[6], 404) == (
        f"Servable not found: {server.CUSTOM_ATTRIBUTES_HEADER} names model 'missing'; this server holds 'half_plus_three', 'other'."
    )
    assert "'half_plus_three' version 3; this server holds version 1, 2." in _one_line_error(answers[7], 404)
    assert "TF Serving method 'classify', which is not served: this server answers predict only" in _one_line_error(answers[8], 404)


def test_concurrent_requests_for_different_versions_never_share_a_model_call(tmp_path):
    state = _versions_state(tmp_path, SAGEMAKER_TFS_ENABLE_BATCHING="true", SERVE_MAX_BATCH_DELAY_MS="200")

    async def go() -> tuple[list[tuple[int, str, bytes]], dict[str, Any]]:
        async with TestClient(TestServer(server.create_app(state), host="127.0.0.1")) as client:
            await _send(client, [("/invocations", b'{"instances": [[0]]}', JSON)])  # the batcher exists
            server._batcher(state)._mean_requests_per_call = 4.0  # waits for company, as under load
            calls = [[("/invocations", json.dumps({"instances": [[i]]}).encode(), _attributes(f"tfs-model-version={1 + i // 3}"))]
                     for i in range(6)]
            answers = [a for (a,) in await asyncio.gather(*(_send(client, c) for c in calls))]
            return answers, await (await client.get("/stats")).json()

    answers, stats = asyncio.run(go())
    assert [json.loads(a[2])["predictions"][0][0] for a in answers] == [100.0, 101.0, 102.0, 203.0, 204.0, 205.0]
    assert stats["recent_batch_requests"] == [1, 3, 3]  # each version's three requests shared a call, never the other's
