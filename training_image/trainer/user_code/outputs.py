"""Files a processing script wrote where SageMaker uploads nothing.

SageMaker Processing uploads each ``ProcessingOutput``'s ``LocalPath`` and nothing else: a file a
script writes to ``/opt/ml/processing/output/result.csv`` while the declared output is
``/opt/ml/processing/output/train`` is gone when the instance is. So after a processing script
succeeds, the places a user would write results (``processing/``, ``output/``, ``model/`` under
the job's tree) are searched for files written during the run outside every declared output and
input; any found fail the job with one line naming them and the declared outputs. Used by
``python -m trainer process`` and by the guard, with the same declared paths.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.contract.environment import DEFAULT_BASE_DIR
from trainer.contract.errors import UserScriptError

# Where a processing job's results are expected; scanning the whole filesystem would be neither cheap nor meaningful.
SEARCHED = ("processing", "output", "model")
# The job's own reason file and what Python leaves behind are not results.
IGNORED_NAMES = ("message",)
IGNORED_PARTS = ("__pycache__",)
MAX_NAMED = 3
# mtime resolution on some filesystems; a file touched in the same second as the start counts.
CLOCK_SLACK_SECONDS = 1.0


@dataclass(frozen=True)
class DeclaredPaths:
    """A processing job's declared local paths.

    Attributes:
        outputs: ``OutputName`` -> ``LocalPath`` (what SageMaker uploads).
        inputs: ``LocalPath`` of every input (downloaded there; not searched).
    """

    outputs: Mapping[str, Path]
    inputs: tuple[Path, ...]


def rooted(base_dir: Path, path: str) -> Path:
    """A container path from the job's config, re-rooted under ``base_dir`` when the tree moved."""
    local = Path(path)
    if local.is_relative_to(DEFAULT_BASE_DIR) and base_dir != Path(DEFAULT_BASE_DIR):
        return base_dir / local.relative_to(DEFAULT_BASE_DIR)
    return local


def declared_paths(base_dir: Path, job_config: Mapping[str, Any]) -> DeclaredPaths:
    """The outputs and inputs a ``processingjobconfig.json`` (DescribeProcessingJob-shaped) declares."""
    outputs = {}
    for item in (job_config.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
        name = str(item.get("OutputName", ""))
        local = (item.get("S3Output") or {}).get("LocalPath") or f"{DEFAULT_BASE_DIR}/processing/output/{name}"
        outputs[name] = rooted(base_dir, local)
    inputs = []
    for item in job_config.get("ProcessingInputs") or []:
        name = str(item.get("InputName", ""))
        local = (item.get("S3Input") or {}).get("LocalPath") or f"{DEFAULT_BASE_DIR}/processing/input/{name}"
        inputs.append(rooted(base_dir, local))
    return DeclaredPaths(outputs=outputs, inputs=tuple(inputs))


def read_declared_paths(base_dir: Path) -> DeclaredPaths:
    """:func:`declared_paths` from ``<base>/config/processingjobconfig.json`` (none declared when unreadable)."""
    try:
        config = json.loads((base_dir / "config" / "processingjobconfig.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return DeclaredPaths(outputs={}, inputs=())
    return declared_paths(base_dir, config if isinstance(config, dict) else {})


def stray_files(base_dir: Path, declared: DeclaredPaths, since: float) -> list[Path]:
    """Files modified at or after ``since`` under the searched places, outside every declared path."""
    kept = [path.resolve() for path in (*declared.outputs.values(), *declared.inputs)]
    found = []
    for top in SEARCHED:
        root = base_dir / top
        if not root.is_dir():
            continue
        for path in root.rglob("*"):
            if path.name in IGNORED_NAMES and path.parent == base_dir / "output":
                continue
            if any(part in IGNORED_PARTS for part in path.parts) or not path.is_file() or path.is_symlink():
                continue
            resolved = path.resolve()
            if any(resolved == keep or keep in resolved.parents for keep in kept):
                continue
            try:
                if path.stat().st_mtime + CLOCK_SLACK_SECONDS < since:
                    continue
            except OSError:
                continue
            found.append(path)
    return sorted(found)


def check(base_dir: Path, declared: DeclaredPaths, since: float, script: str) -> None:
    """Raises UserScriptError naming the files a processing script wrote where nothing uploads them."""
    strays = stray_files(base_dir, declared, since)
    if not strays:
        return
    named = ", ".join(str(p) for p in strays[:MAX_NAMED]) + (f" (and {len(strays) - MAX_NAMED} more)" if len(strays) > MAX_NAMED else "")
    outputs = _describe(declared.outputs.items())
    raise UserScriptError(
        f"The processing script {script} wrote {len(strays)} file(s) outside the job's declared outputs, which "
        f"SageMaker would not upload: {named}. Declared outputs: {outputs}. Write results under a ProcessingOutput's "
        "LocalPath, or declare an output (ProcessingOutput source=...) for that folder."
    )


def _describe(outputs: Iterable[tuple[str, Path]]) -> str:
    listed = [f"{name} -> {path}" for name, path in outputs]
    return ", ".join(listed) if listed else "none"
