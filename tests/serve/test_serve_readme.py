"""docs/serving.md's ``code/inference.py`` examples, served as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.serve.helpers import serving
from tests.serve.models import save_regression

pytestmark = pytest.mark.slow  # each example starts a server

README = Path(__file__).resolve().parents[2] / "docs" / "serving.md"


def readme_examples() -> list[str]:
    """The python blocks of the "Serving user code" section, in order."""
    text = README.read_text(encoding="utf-8")
    section = text.split("### Serving user code (`code/inference.py`)", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0] for block in section.split("```python\n")[1:]]


def _model(tmp_path: Path, inference: str, **files: str) -> Path:
    model_dir = tmp_path / "model"
    save_regression(model_dir)
    (model_dir / "code").mkdir()
    (model_dir / "code" / "inference.py").write_text(inference)
    for name, text in files.items():
        (model_dir / "code" / name).write_text(text)
    return model_dir


def test_the_readme_shows_one_example_per_family():
    examples = readme_examples()
    assert len(examples) == 2
    assert "def input_handler(data, context)" in examples[0] and "def model_fn(model_dir)" in examples[1]


def test_the_serving_container_example(tmp_path):
    example = readme_examples()[0]
    with serving(_model(tmp_path, example), tmp_path / "work") as server:
        reply = server.invoke("1\n2\n3\n", "text/csv")
        assert (reply.status, reply.json()) == (200, {"ys": [3.0, 5.0, 7.0]})
        refused = server.invoke('{"instances": [[1]]}')
        # The line the README quotes for a raising handler.
        assert (refused.status, refused.json()["error"]) == (
            500,
            "input_handler failed: ValueError: send text/csv, got application/json (inference.py line 7, in input_handler)",
        )


def test_the_inference_toolkit_example(tmp_path):
    example = readme_examples()[1]
    with serving(_model(tmp_path, example, **{"scale.json": json.dumps({"factor": 10})}), tmp_path / "work") as server:
        reply = server.invoke("1,2.5", "text/csv")
        assert (reply.status, reply.json()) == (200, {"scaled": [10.0, 25.0]})
