"""Every link between README.md, the folder READMEs and docs/ reaches a file that exists, and an
anchor that one of its headings makes (GitHub's rule: lowercase, punctuation dropped, spaces to
hyphens), so moving a section cannot leave a reader at a dead link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *(ROOT / folder / "README.md" for folder in ("stacks", "scripts", "scripts/emulator", "training_image", "benchmarks")),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [link for link in LINK.findall(text) if not re.match(r"[a-z]+://|mailto:", link)]


@pytest.mark.parametrize("page", [p for p in PAGES if p.exists()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_reaches_its_file_and_heading(page):
    dead = []
    for link in links(page):
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            dead.append(f"{link}: no file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            dead.append(f"{link}: no heading makes #{anchor} in {path.relative_to(ROOT)}")
    assert dead == []


def test_the_slug_is_githubs():
    assert slug("Serving user code (`code/inference.py`)") == "serving-user-code-codeinferencepy"
    assert slug("`gpu_training.cluster`") == "gpu_trainingcluster"
    assert slug("The processing mode (`python -m trainer process [ARGS]`)") == "the-processing-mode-python--m-trainer-process-args"


def test_a_dead_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nSee [there](#nowhere) and [file](missing.md).\n")
    assert links(page) == ["#nowhere", "missing.md"]
    assert "nowhere" not in anchors(page)
