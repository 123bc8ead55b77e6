"""``code/inference.py`` in the model: both of AWS's handler families, requirements from code/lib, failures.

Each server is the real ``python -m trainer serve`` on a tiny regression SavedModel (``y = 2x + 1``)
with the user's code beside it, as SageMaker extracts ``model.tar.gz`` (``1/`` + ``code/``).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.serve.helpers import serving
from tests.serve.models import save_regression
from tests.trainer.script_helpers import build_wheel

pytestmark = pytest.mark.slow  # each test starts a server (TensorFlow import, model load)


def _model_with_code(tmp_path: Path, files: dict[str, str], model_name: str | None = None) -> Path:
    """``model/1/`` (or ``model/<model_name>/1/``, a model of that name) with ``code/`` holding ``files``."""
    model_dir = tmp_path / "model"
    save_regression(model_dir / model_name if model_name else model_dir)
    code = model_dir / "code"
    code.mkdir()
    for name, text in files.items():
        (code / name).write_text(textwrap.dedent(text))
    return model_dir


def _line_of(model_dir: Path, needle: str) -> int:
    lines = (model_dir / "code" / "inference.py").read_text().splitlines()
    return next(number for number, line in enumerate(lines, start=1) if needle in line)


SERVING_CONTAINER_HANDLERS = """\
    import json

    import platformdemo
    from helper import rows_from_csv


    def input_handler(data, context):
        if context.request_content_type == "text/csv":
            return json.dumps({"instances": rows_from_csv(data.read().decode("utf-8"))})
        if context.request_content_type == "application/json":
            return data.read().decode("utf-8")
        raise ValueError("unsupported content type " + context.request_content_type)


    def output_handler(response, context):
        if response.status_code != 200:
            raise ValueError(response.content.decode("utf-8"))
        body = {"ys": [row[0] for row in response.json()["predictions"]], "marker": platformdemo.VALUE,
                "accept": context.accept_header, "model": context.model_name}
        return json.dumps(body), "application/vnd.user+json"
"""


def test_input_and_output_handlers_run_around_tf_serving_with_requirements_from_code_lib(tmp_path):
    model_dir = _model_with_code(
        tmp_path,
        {
            "inference.py": SERVING_CONTAINER_HANDLERS,
            "helper.py": "def rows_from_csv(text):\n    return [[float(v)] for v in text.split()]\n",
            "requirements.txt": "platformdemo==1.0\n",
        },
    )
    build_wheel(model_dir / "code" / "lib", "platformdemo", "1.0", "VALUE = 42\n")
    with serving(model_dir, tmp_path / "work") as server:
        reply = server.invoke("1\n2\n3\n", "text/csv", accept="application/vnd.user+json")
        assert reply.status == 200, reply.body
        assert reply.content_type == "application/vnd.user+json"
        assert reply.json() == {"ys": [3.0, 5.0, 7.0], "marker": 42, "accept": "application/vnd.user+json", "model": None}
        assert server.invoke('{"instances": [[10]]}').json()["ys"] == [21.0]

        # The handler raises: 500 with the user's file and line; the server keeps serving.
        failed = server.invoke("x", "text/plain")
        assert failed.status == 500
        line = _line_of(model_dir, "raise ValueError")
        assert failed.json()["error"] == (
            f"input_handler failed: ValueError: unsupported content type text/plain (inference.py line {line}, in input_handler)"
        )
        # TF Serving refuses the request the handler made: output_handler raises with its message.
        refused = server.invoke('{"instances": [[1, 2]]}')
        assert refused.status == 500 and "output_handler failed" in refused.json()["error"]
        assert "Input 'x' has shape (1, 2)" in refused.json()["error"]
        assert server.ping().status == 200
        assert server.invoke("4\n", "text/csv").json()["ys"] == [9.0]
        assert "installed=platformdemo==1.0" in server.output()
        assert "family=serving-container" in server.output()


def test_a_handler_function_calls_tf_serving_through_context_rest_uri(tmp_path):
    model_dir = _model_with_code(
        tmp_path,
        {
            "inference.py": """\
                import json

                import requests


                def handler(data, context):
                    payload = {"instances": [[v] for v in json.loads(data.read())]}
                    answer = requests.post(context.rest_uri, data=json.dumps(payload)).json()
                    return json.dumps({"handled": answer["predictions"], "uri": context.rest_uri,
                                       "content_type": context.request_content_type}), "application/json"
            """
        },
        model_name="regression",
    )
    with serving(model_dir, tmp_path / "work", TFS_DEFAULT_MODEL_NAME="regression") as server:
        reply = server.invoke("[0, 1.5]")
        assert reply.status == 200, reply.body
        port = server.url.rsplit(":", 1)[1]
        assert reply.json() == {
            "handled": [[1.0], [4.0]],
            "uri": f"http://127.0.0.1:{port}/v1/models/regression:predict",
            "content_type": "application/json",
        }


def test_inference_toolkit_functions_with_their_own_model_and_a_status_of_their_own(tmp_path):
    model_dir = _model_with_code(
        tmp_path,
        {
            "inference.py": """\
                import json
                import os


                class Refused(Exception):
                    status_code = 422


                def model_fn(model_dir):
                    # The user's own model: here a rule read from a file beside the SavedModel.
                    with open(os.path.join(model_dir, "code", "rule.json")) as f:
                        return json.load(f)


                def input_fn(input_data, content_type):
                    assert isinstance(input_data, str), "text types arrive decoded, as the toolkit does"
                    return [float(v) for v in input_data.split(",")]


                def predict_fn(data, model):
                    if any(v < 0 for v in data):
                        raise Refused("negative values are refused")
                    return [model["scale"] * v for v in data]


                def output_fn(prediction, accept, context):
                    return json.dumps({"scaled": prediction, "accept": accept}), accept
            """,
            "rule.json": '{"scale": 10}',
        },
    )
    with serving(model_dir, tmp_path / "work") as server:
        reply = server.invoke("1,2.5", "text/csv")
        assert reply.status == 200, reply.body
        assert reply.json() == {"scaled": [10.0, 25.0], "accept": "application/json"}
        refused = server.invoke("1,-2", "text/csv")
        line = _line_of(model_dir, 'raise Refused("negative')
        assert (refused.status, refused.json()["error"]) == (
            422,
            f"predict_fn failed: Refused: negative values are refused (inference.py line {line}, in predict_fn)",
        )
        assert server.ping().status == 200 and server.invoke("3", "text/csv").json()["scaled"] == [30.0]
        assert "kind=model_fn" in server.output()


def test_inference_toolkit_defaults_predict_with_the_platforms_model(tmp_path):
    model_dir = _model_with_code(
        tmp_path,
        {
            "inference.py": """\
                import json


                def output_fn(prediction, accept):
                    return json.dumps({"user": True, **prediction})
            """
        },
    )
    with serving(model_dir, tmp_path / "work") as server:
        reply = server.invoke('{"instances": [[1], [2]]}')
        assert reply.status == 200, reply.body
        assert reply.json() == {"user": True, "predictions": [[3.0], [5.0]]}
        bad = server.invoke('{"instances": [[1, 2]]}')
        assert bad.status == 400 and "Input 'x' has shape (1, 2)" in bad.json()["error"]


def test_a_requirement_without_a_wheel_in_code_lib_fails_the_start_with_its_line(tmp_path):
    model_dir = _model_with_code(
        tmp_path,
        {"inference.py": SERVING_CONTAINER_HANDLERS, "requirements.txt": "# shipped below\nnot-shipped-package==9.9\n"},
    )
    with serving(model_dir, tmp_path / "work", wait_for="failed") as server:
        ping = server.ping()
        assert ping.status == 503
        error = ping.json()["error"]
        assert error.startswith("requirements.txt line 2 ('not-shipped-package==9.9') cannot be installed: no wheel for it in ")
        assert str(model_dir / "code" / "lib") in error and "-d lib" in error
        assert server.invoke("1\n", "text/csv").status == 503
        assert "serve-ready" not in server.output() and "Traceback" not in server.output()


def test_an_inference_script_that_fails_to_import_fails_the_start_with_its_line(tmp_path):
    model_dir = _model_with_code(tmp_path, {"inference.py": "import json\n\nSETTING = json.loads('{oops')\n"})
    with serving(model_dir, tmp_path / "work", wait_for="failed") as server:
        error = server.ping().json()["error"]
        assert error.startswith("Importing inference.py failed: JSONDecodeError: ")
        assert error.endswith("(inference.py line 3, in <module>)")


def test_handlers_of_both_families_are_refused_with_one_line(tmp_path):
    model_dir = _model_with_code(
        tmp_path, {"inference.py": "def input_handler(d, c):\n    pass\n\ndef output_handler(r, c):\n    pass\n\ndef predict_fn(d, m):\n    pass\n"}
    )
    with serving(model_dir, tmp_path / "work", wait_for="failed") as server:
        error = server.ping().json()["error"]
        assert "keep one family" in error and "\n" not in error
        assert json.loads(server.request("GET", "/stats").body)["ready"] is False
