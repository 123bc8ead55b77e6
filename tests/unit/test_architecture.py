"""``python -m scripts.architecture`` draws the picture from the synthesized app, and it names every stack.

Skipped where cdk-dia or Graphviz is absent (neither is part of the bootstrap; the skip says how to
get them).
"""

from __future__ import annotations

import dataclasses

import pytest

from scripts.architecture import PICTURE, main, tools
from scripts.common import OperatorError
from stacks.platform import Platform


@pytest.mark.slow
def test_the_picture_is_drawn_and_its_source_names_every_stack(tmp_path, capsys):
    try:
        tools()
    except OperatorError as err:
        pytest.skip(str(err))
    picture, source = tmp_path / "architecture.png", tmp_path / "architecture.dot"
    assert main(["--output", str(picture), "--dot", str(source)]) == 0
    assert picture.read_bytes().startswith(b"\x89PNG")
    stacks = capsys.readouterr().out.strip().split(": ", 1)[1].split(", ")
    assert len(stacks) == len(dataclasses.fields(Platform)), stacks  # serving on: every unit a deploy can create
    dot = source.read_text(encoding="utf-8")
    assert [s for s in stacks if f'label = "{s}"' not in dot] == []


def test_the_committed_picture_is_there():
    assert PICTURE.read_bytes().startswith(b"\x89PNG"), "run python -m scripts.architecture"
