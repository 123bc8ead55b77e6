"""TF Serving's REST contract: request forms, named inputs and outputs, signature_name, content types.

The unit tests check the contract module against TF Serving's documented examples; the HTTP tests
serve a regression (``y = 2x + 1``) and a two-input, two-output SavedModel with ``python -m trainer serve``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.serve.helpers import serving
from tests.serve.models import multi_expected, save_multi_output, save_regression
from trainer.serve import tfserving
from trainer.serve.codec import RequestError
from trainer.serve.tfserving import Signature, TensorSpec

SINGLE = {"serving_default": Signature({"x": TensorSpec((None, 1), "float32")}, {"y": TensorSpec((None, 1), "float32")})}
MULTI = {
    "serving_default": Signature(
        {"a": TensorSpec((None, 2), "float32"), "b": TensorSpec((None,), "float32")},
        {"score": TensorSpec((None,), "float32"), "doubled": TensorSpec((None, 2), "float32")},
    ),
    "tags": Signature({"text": TensorSpec((None,), "object")}, {"length": TensorSpec((None,), "int64")}),
}


@pytest.mark.parametrize(
    ("body", "content_type", "want"),
    [
        ('{"instances": [[1], [2]]}', "application/json", {"instances": [[1], [2]]}),
        ('{"signature_name": "s", "inputs": {"a": [1]}}', "application/json", {"signature_name": "s", "inputs": {"a": [1]}}),
        ("[[1], [2]]", "application/json", {"instances": [[1], [2]]}),
        ("[1, 2]", "application/json", {"instances": [[1, 2]]}),
        ('{"a": [1, 2], "b": 3}', "application/json", {"instances": [{"a": [1, 2], "b": 3}]}),
        ('{"a": 1}\n{"a": 2}\n', "application/jsonlines", {"instances": [{"a": 1}, {"a": 2}]}),
        ("[1]\n[2]", "application/json", {"instances": [[1], [2]]}),
        ("1,2.5\n3,4\n", "text/csv", {"instances": [[1, 2.5], [3, 4]]}),
        ("1\n2\n", "text/csv; charset=utf-8", {"instances": [1, 2]}),
        ('"hello",3\n', "text/csv", {"instances": [["hello", 3]]}),
        # One JSON line (batch transform's SplitType=Line with SingleRecord): the container's
        # application/json path, so one record is one instance, never one instance per value.
        ("[1, 2, 3]\n", "application/jsonlines", {"instances": [[1, 2, 3]]}),
        ('{"x": [1, 2]}\n', "application/jsonlines", {"instances": [{"x": [1, 2]}]}),
        ('{"instances": [[1], [2]]}\n', "application/jsonlines", {"instances": [[1], [2]]}),
    ],
    ids=["tfs-row", "tfs-columnar", "list-of-lists", "one-row", "one-object", "jsonlines", "json-lines-detected", "csv", "csv-one-column", "csv-string",
         "one-line-row", "one-line-object", "one-line-tfs-request"],
)
def test_bodies_become_tf_serving_requests_as_aws_container_makes_them(body, content_type, want):
    assert tfserving.to_tfs_request(body.encode(), content_type) == want


@pytest.mark.parametrize(
    ("body", "content_type", "want"),
    [
        ('{"instances": [{"text": "see [1] {note}"}]}', "application/json", {"instances": [{"text": "see [1] {note}"}]}),
        ('{"inputs": {"text": ["a]{b", "c} [d"]}}', "application/json", {"inputs": {"text": ["a]{b", "c} [d"]}}),
        ('{"text": "x] [y"}', "application/json", {"instances": [{"text": "x] [y"}]}),
        ('[["a] [b"], ["c"]]', "application/json", {"instances": [["a] [b"], ["c"]]}),
        ('{\n  "instances": [\n    [1],\n    [2]\n  ]\n}\n', "application/json", {"instances": [[1], [2]]}),
        ('{"text": "a]{b"}\n{"text": "c"}\n', "application/json", {"instances": [{"text": "a]{b"}, {"text": "c"}]}),
        ("[1]\n\n[2]\n", "application/jsons", {"instances": [[1], [2]]}),
        ("[1]\n[2]\n", "application/x-jsonlines", {"instances": [[1], [2]]}),
        ('{"text": "a\u2028b"}\n{"text": "c"}\n', "application/jsonlines", {"instances": [{"text": "a\u2028b"}, {"text": "c"}]}),
    ],
    ids=["one-line-tfs-string-with-brackets", "columnar-string-with-brackets", "plain-object-string-with-brackets",
         "list-string-with-brackets", "pretty-printed-tfs", "json-lines-strings-with-brackets", "jsons-blank-line",
         "x-jsonlines", "line-separator-inside-a-string"],
)
def test_a_body_is_json_lines_only_when_it_is_not_one_document(body, content_type, want):
    """The container's raw-text test ("]" or "}" then "[" or "{") also matches inside a string;
    a one-line TF Serving request must never be wrapped in {"instances": ...} again."""
    assert tfserving.to_tfs_request(body.encode(), content_type) == want


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"a": 1}\n{"a": \n{"a": 3}\n', "Malformed JSON in line 2: Expecting value at column 7."),
        (b'{\n  "instances": [[1]\n}\n', "Malformed JSON in the body: Expecting ',' delimiter at line 3 column 1."),
        (b"[1] [2]", "Malformed JSON in the body: Extra data at line 1 column 5."),
    ],
    ids=["bad-json-line", "pretty-printed-malformed", "two-values-one-line"],
)
def test_a_malformed_body_names_the_line_or_the_body(body, message):
    with pytest.raises(RequestError) as refused:
        tfserving.to_tfs_request(body, "application/json")
    assert (refused.value.status, str(refused.value)) == (400, message)


def test_row_format_single_input_and_single_output():
    request = tfserving.parse({"instances": [[1.0], [2.0], [3.0]]}, SINGLE)
    assert (request.signature_name, request.row_format, request.rows) == ("serving_default", True, 3)
    assert request.tensors["x"].dtype == np.float32 and request.tensors["x"].shape == (3, 1)
    assert tfserving.respond(request, {"y": np.array([[3.0], [5.0], [7.0]])}) == {"predictions": [[3.0], [5.0], [7.0]]}


def test_flat_values_are_reshaped_to_a_fixed_input_shape():
    request = tfserving.parse({"instances": [1, 2]}, SINGLE)
    assert request.tensors["x"].shape == (2, 1)


def test_row_format_named_inputs_and_outputs():
    request = tfserving.parse({"instances": [{"a": [1, 2], "b": 3}, {"a": [0, 1], "b": 0}]}, MULTI)
    np.testing.assert_array_equal(request.tensors["a"], [[1, 2], [0, 1]])
    np.testing.assert_array_equal(request.tensors["b"], [3, 0])
    answer = tfserving.respond(request, {"score": np.array([1.5, 2.0]), "doubled": np.array([[2, 4], [0, 2]])})
    assert answer == {"predictions": [{"score": 1.5, "doubled": [2, 4]}, {"score": 2.0, "doubled": [0, 2]}]}


def test_columnar_format_and_signature_name_and_strings():
    request = tfserving.parse({"inputs": {"a": [[1, 2]], "b": [3]}}, MULTI)
    assert request.row_format is False
    answer = tfserving.respond(request, {"score": np.array([1.5]), "doubled": np.array([[2, 4]])})
    assert answer == {"outputs": {"score": [1.5], "doubled": [[2, 4]]}}
    tagged = tfserving.parse({"signature_name": "tags", "instances": ["ab", {"b64": "YWJj"}]}, MULTI)
    assert tagged.tensors["text"].tolist() == ["ab", b"abc"]
    assert tfserving.respond(tagged, {"length": np.array([2, 3])}) == {"predictions": [2, 3]}
    assert tfserving.respond(tagged, {"length": np.array([b"ok", b"\xff"], dtype=object)}) == {"predictions": ["ok", {"b64": "/w=="}]}


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        ({"signature_name": "nope", "instances": [1]}, "Signature 'nope' is not in the model (it has: serving_default, tags)"),
        ({"instances": [[1, 2]]}, "The signature takes 2 inputs (a, b); each instance must be an object with them."),
        ({"instances": [{"a": [1, 2]}]}, "Instance 1 does not match the inputs (a, b): missing b."),
        ({"instances": [{"a": [1, 2], "b": 1, "c": 2}]}, "Instance 1 does not match the inputs (a, b): unknown c."),
        ({"inputs": {"a": [[1, 2]]}}, "\"inputs\" does not match the signature's inputs (a, b): missing b."),
        ({"instances": [{"a": [1, 2, 3], "b": 1}]}, "Input 'a' has shape (1, 3) but the signature takes (-1, 2)"),
        ({"instances": [{"a": ["x", 2], "b": 1}]}, "Input 'a': JSON Value: \"x\" Type: string is not of expected type: float32."),
        ({"instances": [{"a": [1, 2], "b": 1}], "inputs": {}}, 'Send exactly one of "instances"'),
        ({"examples": []}, '"examples" (the classify/regress APIs) is not served'),
        ({"instances": []}, '"instances" must be a non-empty list'),
        ([1, 2], 'The request must be a JSON object with "instances" or "inputs".'),
    ],
    ids=["signature", "rows-for-two-inputs", "missing-input", "unknown-input", "columnar-missing", "shape", "dtype", "both-forms", "examples", "empty", "not-an-object"],
)
def test_requests_that_do_not_fit_the_signature_are_400_naming_why(request_body, message):
    with pytest.raises(RequestError) as caught:
        tfserving.parse(request_body, MULTI)
    assert caught.value.status == 400 and message in str(caught.value)


def test_only_a_flat_row_per_example_is_reshaped_any_other_shape_is_refused():
    image = {"serving_default": Signature({"img": TensorSpec((None, 2, 2, 3), "float32")}, {})}
    flat = tfserving.parse({"instances": [list(range(12))]}, image)
    assert flat.tensors["img"].shape == (1, 2, 2, 3) and flat.tensors["img"][0, 1, 1].tolist() == [9, 10, 11]
    columnar = tfserving.parse({"inputs": [list(range(12)), list(range(12))]}, image)
    assert columnar.tensors["img"].shape == (2, 2, 2, 3)
    nchw = np.arange(12, dtype=np.float32).reshape(1, 3, 2, 2)  # channels first, for a channels-last input
    for request in ({"instances": nchw.tolist()}, {"inputs": nchw.tolist()}, {"instances": [[list(range(6)), list(range(6))]]}):
        with pytest.raises(RequestError, match=r"Input 'img' has shape \(\d, \d+(, \d)*\) but the signature takes \(-1, 2, 2, 3\)") as caught:
            tfserving.parse(request, image)
        assert caught.value.status == 400
    import io

    buffer = io.BytesIO()
    np.save(buffer, nchw)
    with pytest.raises(RequestError, match=r"Input 'img' has shape \(1, 3, 2, 2\)"):
        tfserving.from_npy(buffer.getvalue(), image)
    wide = {"serving_default": Signature({"x": TensorSpec((None, 4), "float32")}, {})}
    with pytest.raises(RequestError, match=r"Input 'x' has shape \(1, 2, 2\) but the signature takes \(-1, 4\)"):
        tfserving.parse({"instances": [[[1, 2], [3, 4]]]}, wide)


def test_json_values_must_have_the_inputs_type():
    with pytest.raises(RequestError, match=r"Input 'text': JSON Value: 3 Type: number is not of expected type: object"):
        tfserving.parse({"signature_name": "tags", "instances": ["ab", 3]}, MULTI)
    with pytest.raises(RequestError, match=r"Input 'a': JSON Value: \{\"b64\": \"AA==\"\} Type: object is not of expected type: float32"):
        tfserving.parse({"inputs": {"a": [[{"b64": "AA=="}, 1]], "b": [1]}}, MULTI)
    with pytest.raises(RequestError, match=r"Input 'a': JSON Value: null Type: null"):
        tfserving.parse({"inputs": {"a": [[None, 1]], "b": [1]}}, MULTI)
    flags = {"serving_default": Signature({"on": TensorSpec((None,), "bool")}, {})}
    assert tfserving.parse({"instances": [True, False]}, flags).tensors["on"].tolist() == [True, False]
    with pytest.raises(RequestError, match=r"JSON Value: 1 Type: number is not of expected type: bool"):
        tfserving.parse({"instances": [True, 1]}, flags)
    mixed = tfserving.parse({"inputs": {"a": [[1, 2.5]], "b": [3]}}, MULTI)  # ints are numbers for a float input
    assert mixed.tensors["a"].dtype == np.float32 and mixed.tensors["b"].tolist() == [3.0]


def _npy(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_npy_arrays_are_refused_where_the_cast_would_change_a_value():
    """As for JSON values: no float array for an integer input (truncated), no integer out of the
    input's range (wrapped), no value beyond a float input's range (infinity), no booleans for numbers."""
    ids = {"serving_default": Signature({"ids": TensorSpec((None, 2), "int32")}, {})}
    pixels = {"serving_default": Signature({"img": TensorSpec((None, 2), "uint8")}, {})}
    half = {"serving_default": Signature({"x": TensorSpec((None, 2), "float16")}, {})}
    for body, signatures, reason in [
        (_npy(np.array([[1.7, 2.0]])), ids, "dtype float64; input 'ids' takes int32"),
        (_npy(np.array([[300, 1]], np.int64)), pixels, "holds 300, out of range for uint8"),
        (_npy(np.array([[-1, 1]], np.int16)), pixels, "holds -1, out of range for uint8"),
        (_npy(np.array([[1e6, 1.0]])), half, "beyond float16's range"),
        (_npy(np.array([[True, False]])), half, "dtype bool; input 'x' takes float16"),
    ]:
        with pytest.raises(RequestError, match=reason) as caught:
            tfserving.from_npy(body, signatures)
        assert caught.value.status == 400
    # What keeps every value passes: narrower or equal integers, integers for floats, NaN as sent.
    assert tfserving.from_npy(_npy(np.array([[255, 0]], np.int64)), pixels).tensors["img"].tolist() == [[255, 0]]
    assert tfserving.from_npy(_npy(np.array([[3, 4]], np.int64)), half).tensors["x"].tolist() == [[3.0, 4.0]]
    assert np.isnan(tfserving.from_npy(_npy(np.array([[np.nan, 1.0]])), half).tensors["x"][0, 0])


def test_row_format_needs_outputs_with_one_entry_per_instance():
    request = tfserving.parse({"instances": [[1.0], [2.0]]}, SINGLE)
    with pytest.raises(RequestError, match="Output 'y' has shape \\(\\), not one entry per instance"):
        tfserving.respond(request, {"y": np.array(3.0)})


def test_bodies_refused_before_the_model():
    for body, content_type, status in [(b"<x/>", "application/xml", 415), (b" ", "application/json", 400), (b"\xff", "text/csv", 400), (b"{", "application/json", 400), (b"1,inf", "text/csv", 400)]:
        with pytest.raises(RequestError) as caught:
            tfserving.to_tfs_request(body, content_type)
        assert caught.value.status == status


# ---- over HTTP, with real SavedModels --------------------------------------------------------


@pytest.fixture(scope="module")
def regression(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("regression")
    save_regression(model_dir)
    # y = 2x + 1 row by row: batching is safe, so the user opts in as on AWS's container.
    with serving(model_dir, tmp_path_factory.mktemp("serve-regression"), SAGEMAKER_TFS_ENABLE_BATCHING="true") as server:
        yield server


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("multi")
    save_multi_output(model_dir)
    with serving(model_dir, tmp_path_factory.mktemp("serve-multi")) as server:
        yield server


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "content_type", "want"),
    [
        ('{"instances": [[1], [2], [3]]}', "application/json", {"predictions": [[3], [5], [7]]}),
        ('{"inputs": [[1], [2], [3]]}', "application/json", {"outputs": [[3], [5], [7]]}),
        ('{"signature_name": "serving_default", "instances": [[1], [2], [3]]}', "application/json", {"predictions": [[3], [5], [7]]}),
        ("[[1], [2], [3]]", "application/json", {"predictions": [[3], [5], [7]]}),
        ("1\n2\n3\n", "text/csv", {"predictions": [[3], [5], [7]]}),
        ("[1]\n[2]\n[3]\n", "application/jsonlines", {"predictions": [[3], [5], [7]]}),
    ],
    ids=["instances", "inputs", "signature-name", "plain-json", "csv", "jsonlines"],
)
def test_a_regression_answers_its_numbers_as_tf_serving_does(regression, body, content_type, want):
    reply = regression.invoke(body, content_type)
    assert reply.status == 200, reply.body
    assert reply.content_type == "application/json"
    assert reply.json() == want  # never softmax "probabilities" of a regression


@pytest.mark.slow
def test_the_regression_is_described_and_warmed_and_tf_servings_route_answers(regression):
    stats = regression.stats()
    assert stats["model"]["contract"] == "tensorflow-serving"
    assert stats["model"]["signatures"]["serving_default"] == {"inputs": ["x"], "outputs": ["output_0"]}
    assert "warmed_batch_sizes=1,2,4,8,16,32,64" in regression.output()
    route = regression.request("POST", "/v1/models/model:predict", b'{"instances": [[10]]}', "application/json")
    assert (route.status, route.json()) == (200, {"predictions": [[21]]})
    other = regression.request("POST", "/v1/models/other:predict", b'{"instances": [[10]]}', "application/json")
    assert other.status == 404 and "model 'other'" in other.json()["error"]
    jsonlines = regression.invoke('{"instances": [[0]]}', accept="application/jsonlines")
    assert (jsonlines.status, jsonlines.content_type, jsonlines.json()) == (200, "application/jsonlines", {"predictions": [[1]]})
    # AWS's container never refuses an Accept: TF Serving's JSON, as application/json.
    csv = regression.invoke('{"instances": [[0]]}', accept="text/csv")
    assert (csv.status, csv.content_type, csv.json()) == (200, "application/json", {"predictions": [[1.0]]})


@pytest.mark.slow
def test_npy_in_and_out_for_a_one_input_one_output_signature(regression):
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.array([[1.0], [2.0], [3.0]], np.float32))
    as_json = regression.invoke(buffer.getvalue(), "application/x-npy")
    assert (as_json.status, as_json.json()) == (200, {"predictions": [[3], [5], [7]]})
    as_npy = regression.invoke(buffer.getvalue(), "application/x-npy", accept="application/x-npy")
    assert as_npy.status == 200 and as_npy.content_type == "application/x-npy"
    answer = np.load(io.BytesIO(as_npy.body), allow_pickle=False)
    assert answer.dtype == np.float32 and answer.tolist() == [[3.0], [5.0], [7.0]]
    json_body_npy_answer = regression.invoke('{"instances": [[0]]}', accept="application/x-npy")
    assert np.load(io.BytesIO(json_body_npy_answer.body)).tolist() == [[1.0]]


@pytest.mark.slow
def test_npy_is_refused_for_several_inputs_and_several_outputs(multi):
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.ones((2, 2), np.float32))
    reply = multi.invoke(buffer.getvalue(), "application/x-npy")
    assert reply.status == 400 and "application/x-npy feeds one input; signature 'serving_default' takes a, b" in reply.json()["error"]
    refused = multi.invoke(json.dumps({"inputs": {"a": [[1, 2]], "b": [1]}}), accept="application/x-npy")
    assert refused.status == 406 and "this signature has doubled, score" in refused.json()["error"]


@pytest.mark.slow
def test_multiple_inputs_and_named_outputs_in_both_formats(multi):
    a, b = [[1.0, 2.0], [0.5, -1.0]], [1.0, 2.0]
    score, doubled = multi_expected(a, b)
    rows = multi.invoke(json.dumps({"instances": [{"a": a[0], "b": b[0]}, {"a": a[1], "b": b[1]}]}))
    assert rows.status == 200, rows.body
    predictions = rows.json()["predictions"]
    assert [p["score"] for p in predictions] == pytest.approx(score)
    assert [p["doubled"] for p in predictions] == doubled and all(set(p) == {"score", "doubled"} for p in predictions)
    columns = multi.invoke(json.dumps({"inputs": {"a": a, "b": b}}))
    assert columns.status == 200, columns.body
    assert columns.json()["outputs"]["score"] == pytest.approx(score) and columns.json()["outputs"]["doubled"] == doubled
    lines = multi.invoke("\n".join(json.dumps({"a": x, "b": y}) for x, y in zip(a, b)), "application/jsonlines")
    assert lines.json() == rows.json()


@pytest.mark.slow
def test_signature_name_picks_another_signature_and_bad_requests_keep_the_server_up(multi):
    total = multi.invoke(json.dumps({"signature_name": "sum_a", "instances": [[1, 2], [3, 4]]}))
    assert (total.status, total.json()) == (200, {"predictions": [3, 7]})
    missing = multi.invoke(json.dumps({"instances": [{"a": [1, 2]}]}))
    assert (missing.status, missing.json()) == (400, {"error": "Instance 1 does not match the inputs (a, b): missing b."})
    unknown = multi.invoke(json.dumps({"signature_name": "predict", "instances": [[1, 2]]}))
    assert unknown.status == 400 and "it has: serving_default, sum_a" in unknown.json()["error"]
    assert multi.ping().status == 200 and "Traceback" not in multi.output()


@pytest.mark.slow
def test_concurrent_tf_serving_requests_share_model_calls_and_each_gets_its_own_rows(regression):
    import asyncio

    import aiohttp

    before = regression.stats()
    bodies = [[[float(i)], [float(i) + 0.5]][: 1 + i % 2] for i in range(24)]

    async def send_all():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:

            async def one(rows):
                async with session.post(regression.url + "/invocations", json={"instances": rows}) as response:
                    return response.status, await response.json()

            return await asyncio.gather(*(one(rows) for rows in bodies))

    for rows, (status, payload) in zip(bodies, asyncio.run(send_all())):
        assert status == 200
        assert payload == {"predictions": [[2 * x + 1] for (x,) in rows]}
    after = regression.stats()
    calls = after["batches"] - before["batches"]
    assert after["requests"] - before["requests"] == len(bodies)
    assert calls < len(bodies) and max(after["recent_batch_requests"][-calls:]) > 1


@pytest.mark.slow
def test_aws_layouts_serve_every_model_and_version_by_name(tmp_path):
    """half_plus_three/1 and /000002 beside the legacy export/Servo/1: every one loaded and routed by
    tfs-model-name / tfs-model-version, the first found (export/ before half_plus_three/) the default,
    as AWS's container serves them; a stray .keras file stays out of the way."""
    model_dir = tmp_path / "model"
    save_regression(model_dir / "half_plus_three", "1", slope=0.5, intercept=3.0)
    save_regression(model_dir / "half_plus_three", "000002", slope=0.5, intercept=30.0)
    save_regression(model_dir / "export" / "Servo", "1", slope=1.0, intercept=-1.0)
    (model_dir / "half_plus_three" / "stray.keras").write_bytes(b"not a model")
    body = '{"instances": [[2]]}'

    def value(reply):
        assert reply.status == 200, reply.body
        return reply.json()["predictions"][0][0]

    with serving(model_dir, tmp_path / "work") as server:
        assert value(server.invoke(body)) == 1.0  # Servo, version 1
        assert value(server.invoke(body, attributes="tfs-model-name=half_plus_three")) == 31.0  # its highest version, 2
        assert value(server.invoke(body, attributes="tfs-model-name=half_plus_three,tfs-model-version=1")) == 4.0
        assert value(server.invoke(body, attributes="tfs-model-name=half_plus_three,tfs-model-version=2")) == 31.0
        assert value(server.request("POST", "/v1/models/half_plus_three/versions/1:predict", body.encode())) == 4.0
        assert value(server.request("POST", "/v1/models/Servo:predict", body.encode())) == 1.0
        missing = server.invoke(body, attributes="tfs-model-name=model")
        assert missing.status == 404 and "this server holds 'Servo', 'half_plus_three'." in missing.json()["error"]
        assert "models=Servo:1,half_plus_three:1,half_plus_three:2 default_model=Servo" in server.output()
