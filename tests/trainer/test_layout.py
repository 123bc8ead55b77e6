"""The trainer's layout (STYLE.md, "One image, three modes over one contract"), checked from the source with ast.

- train/, serve/ and process/ never import each other; the shared floors (contract/, datasets/,
  user_code/) import no mode. Lazy imports inside functions count.
- Only contract/ reads the job's environment (``os.environ``, ``os.getenv``); the modules listed in
  ENVIRONMENT_EXCEPTIONS still touch it, each for the reason given, and the list may only shrink.
- No function is longer than 150 lines.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

TRAINER = Path(__file__).resolve().parents[2] / "training_image" / "trainer"
MODES = ("train", "serve", "process")
FLOORS = ("contract", "datasets", "user_code")
MAX_FUNCTION_LINES = 150

# Modules outside contract/ that still use os.environ, and why. Setting variables for this process
# or a child, passing the environment on, or saying what a library will see (CUDA_VISIBLE_DEVICES)
# is not reading the job's contract; the job's settings themselves are parsed in contract/ (issue
# #22's reads once marked "to move" all went there).
ENVIRONMENT_EXCEPTIONS = {
    "__init__.py": "sets KERAS_BACKEND=tensorflow before anything imports Keras",
    "gpu_check.py": "CUDA_VISIBLE_DEVICES as TensorFlow sees it, to say which GPUs were visible in its report",
    "gpu_driver.py": "CUDA_VISIBLE_DEVICES as the driver sees it, to name the visible GPUs",
    "train/distribute.py": "sets TF_CONFIG and the NCCL/EFA variables for this process, leaving those the job set",
    "train/watchdog.py": "passes this process's environment to the watchdog child",
    "process/runner.py": "hides GPUs for a CPU job; passes the environment (and the instance type, unless the job set one) to the GPU check and the script",
    "user_code/s3_source.py": "AWS_REGION (or AWS_DEFAULT_REGION) for the boto3 S3 client that fetches the code",
    "user_code/guard.py": "runs before the trainer under a replaced entrypoint: detects the job (and whether it is already guarded), keys its one-check-per-session marker on the GPU variables, passes the environment on",
    "user_code/runner.py": "passes this process's environment (plus the script's) to the user's script, the GPU check and the Keras 2 hint",
    "user_code/ps_server.py": "a parameter-server child: its TF_CONFIG, and no GPUs",
    "user_code/hook/sitecustomize.py": "runs inside the user's interpreter, where the trainer must not be imported: TRAINER_GUARD_REPORTS, where to write a failure",
}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(TRAINER.rglob("*.py")):
        yield path.relative_to(TRAINER).as_posix(), ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _room(relative: str) -> str:
    """``train`` for ``train/runner.py``; the module name for a top-level module."""
    return relative.split("/", 1)[0].removesuffix(".py")


def _imported_rooms(tree: ast.Module) -> Iterator[tuple[int, str, str]]:
    """(line, dotted module, room) for every ``trainer...`` import, lazy ones included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from trainer import train`` imports the room named by the alias.
            names = [f"{node.module}.{alias.name}" for alias in node.names] if node.module == "trainer" else [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "trainer" and len(parts) > 1:
                yield node.lineno, name, parts[1]


def mode_crossings() -> list[str]:
    """A mode importing another mode, or a shared floor importing any mode."""
    found = []
    for relative, tree in _modules():
        room = _room(relative)
        if room not in MODES and room not in FLOORS:
            continue
        for line, name, target in _imported_rooms(tree):
            if target in MODES and target != room:
                found.append(f"{relative}:{line} imports {name}")
    return found


def _environment_uses(tree: ast.Module) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
            if node.attr in ("environ", "environb", "getenv", "putenv", "unsetenv"):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(alias.name in ("environ", "getenv") for alias in node.names):
                lines.append(node.lineno)
    return lines


def environment_readers() -> dict[str, list[int]]:
    """Modules outside contract/ that use os.environ, with the lines."""
    return {
        relative: lines
        for relative, tree in _modules()
        if _room(relative) != "contract" and (lines := _environment_uses(tree))
    }


def long_functions() -> list[str]:
    found = []
    for relative, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{relative}:{node.lineno} {node.name} has {length} lines")
    return found


def test_the_three_modes_and_the_shared_floors_are_packages() -> None:
    for room in (*MODES, *FLOORS):
        assert (TRAINER / room / "__init__.py").is_file(), f"trainer/{room}/ is not a package"


def test_no_mode_imports_another_and_no_floor_imports_a_mode() -> None:
    assert mode_crossings() == []


def test_only_the_contract_reads_the_environment() -> None:
    unexplained = {relative: lines for relative, lines in environment_readers().items() if relative not in ENVIRONMENT_EXCEPTIONS}
    assert unexplained == {}, "read the job's environment through trainer.contract, or add a reason to ENVIRONMENT_EXCEPTIONS"


@pytest.mark.slow  # seconds on CI: out of the quick loop
def test_every_environment_exception_is_still_needed() -> None:
    # The list only shrinks: an entry whose module no longer touches os.environ goes.
    stale = sorted(set(ENVIRONMENT_EXCEPTIONS) - set(environment_readers()))
    assert stale == []


def test_no_function_is_longer_than_150_lines() -> None:
    assert long_functions() == []


@pytest.mark.parametrize("room", (*MODES, *FLOORS))
def test_each_package_says_what_lives_there_and_what_it_may_import(room: str) -> None:
    docstring = ast.get_docstring(ast.parse((TRAINER / room / "__init__.py").read_text(encoding="utf-8"))) or ""
    assert "May import" in docstring, f"trainer/{room}/__init__.py: say what lives there and what it may import"


def test_the_walk_sees_a_crossing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The check itself: a lazy import of the training mode from the serving mode is found.
    (tmp_path / "serve").mkdir()
    (tmp_path / "serve" / "model.py").write_text("def load():\n    from trainer.train import runner\n", encoding="utf-8")
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "runner.py").write_text("import os\nos.environ['X'] = '1'\n", encoding="utf-8")
    monkeypatch.setattr(__import__(__name__, fromlist=["TRAINER"]), "TRAINER", tmp_path)
    assert mode_crossings() == ["serve/model.py:2 imports trainer.train"]
    assert environment_readers() == {"train/runner.py": [2]}
