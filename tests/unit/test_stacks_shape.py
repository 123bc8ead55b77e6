"""The shape of the infrastructure and operator code: short functions, imports in one direction.

Read from the source with ``ast`` (nothing is imported or synthesized), over every ``.py`` under
``stacks/`` and ``scripts/`` and ``app.py``:

- no function is longer than :data:`MAX_FUNCTION_LINES` (a longer one is several steps waiting
  for names);
- ``stacks/`` (what is deployed) imports neither ``scripts/`` (operator tools) nor the training
  image's code, so the infrastructure synthesizes without either;
- ``scripts/`` reaches into ``stacks/`` only through :data:`STACKS_MODULES_FOR_SCRIPTS` (the
  config, the request specs, the GPU table, SageMaker's limits, the platform for the security report), and only the
  emulator's launch check imports the training image's package (to parse hyperparameters as the
  image does);
- ``app.py`` uses of ``scripts/`` only the promotion record it reads at synth.

``stacks/README.md`` and ``scripts/README.md`` say the same in prose.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import pytest

from tests.synth import ROOT

MAX_FUNCTION_LINES = 150

STACKS_MODULES_FOR_SCRIPTS = frozenset(
    {
        "stacks.config",
        "stacks.gpu_instances",
        "stacks.platform",
        "stacks.sagemaker_limits",
        "stacks.components.cluster_job_document",
        "stacks.components.endpoint_spec",
        "stacks.components.model_endpoint",
        "stacks.components.policy",
        "stacks.components.processing_job_spec",
        "stacks.components.training_job_notifications",
        "stacks.components.training_job_spec",
        "stacks.components.tuning_job_spec",
    }
)
"""The modules of ``stacks/`` that ``scripts/`` may import."""

TRAINER_IMPORTERS = frozenset()
"""Files of ``scripts/`` that import the training image's package (``trainer``): none; the emulator's launch
check goes through ``resolve_launch``, which brings the image's hyperparameter rules."""

STACKS_IMAGE_CONTRACT = {"stacks/components/hyperparameter_rules.py": {"trainer.contract", "trainer.contract.errors"}}
"""What ``stacks/`` may import of the image: its contract's hyperparameter rules (standard library only, by
the contract package's own rule), so a job is checked by the image's rules before it costs anything."""

APP_SCRIPTS_MODULES = frozenset({"scripts.common", "scripts.promote"})
"""What ``app.py`` imports of ``scripts/``: the operator error and the promotion record."""

IMAGE_PACKAGES = ("trainer", "training_image")


def python_files(root: Path = ROOT) -> list[Path]:
    """Every ``.py`` under ``stacks/`` and ``scripts/``, and ``app.py``."""
    return sorted([*(root / "stacks").rglob("*.py"), *(root / "scripts").rglob("*.py"), root / "app.py"])


def long_functions(root: Path = ROOT, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``file:function:lines`` of every function (methods and nested ones included) over ``limit`` lines."""
    found = []
    for path in python_files(root):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root)}:{node.name}:{lines}")
    return found


def imported_modules(path: Path) -> Iterator[str]:
    """The absolute module names ``path`` imports (at any level of the file: lazy imports count)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def _top(module: str) -> str:
    return module.split(".")[0]


def _files_under(folder: str, root: Path = ROOT) -> list[Path]:
    return [p for p in python_files(root) if p.relative_to(root).parts[0] == folder]


def test_no_function_is_longer_than_two_screens():
    assert long_functions() == [], f"functions over {MAX_FUNCTION_LINES} lines: name their steps"


def test_the_length_check_names_a_long_function(tmp_path):
    for folder in ("stacks", "scripts"):
        (tmp_path / folder).mkdir()
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "stacks" / "long.py").write_text(f"def short():\n    pass\n\n\nclass C:\n    def build(self):\n{body}")
    (tmp_path / "app.py").write_text("")
    assert long_functions(tmp_path) == [f"stacks/long.py:build:{MAX_FUNCTION_LINES + 1}"]


def test_stacks_import_neither_scripts_nor_the_training_image():
    offending = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in _files_under("stacks")
        for module in imported_modules(path)
        if _top(module) in ("scripts", "tests", *IMAGE_PACKAGES)
        and module not in STACKS_IMAGE_CONTRACT.get(str(path.relative_to(ROOT)), ())
    ]
    assert offending == []


def test_scripts_reach_stacks_only_through_the_allowed_modules():
    offending = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in _files_under("scripts")
        for module in imported_modules(path)
        if (_top(module) == "stacks" and module not in STACKS_MODULES_FOR_SCRIPTS) or _top(module) == "tests"
    ]
    assert offending == [], f"scripts/ may import of stacks/ only {sorted(STACKS_MODULES_FOR_SCRIPTS)}"


def test_only_the_emulators_launch_check_imports_the_training_image():
    importers = {
        str(path.relative_to(ROOT))
        for path in _files_under("scripts")
        if any(_top(module) in IMAGE_PACKAGES for module in imported_modules(path))
    }
    assert importers <= TRAINER_IMPORTERS


def test_app_uses_only_the_promotion_record_of_scripts():
    used = {m for m in imported_modules(ROOT / "app.py") if _top(m) == "scripts"}
    assert used <= APP_SCRIPTS_MODULES
    assert not {m for m in imported_modules(ROOT / "app.py") if _top(m) in IMAGE_PACKAGES}


@pytest.mark.parametrize(
    ("source", "module"),
    [("import scripts.common\n", "scripts.common"), ("def f():\n    from trainer.config import X\n", "trainer.config")],
)
def test_lazy_and_plain_imports_are_both_seen(tmp_path, source, module):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert module in set(imported_modules(path))
