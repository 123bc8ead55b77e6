"""Importing a user's module in-process, and saying where in the user's code a failure happened.

Serving imports ``code/inference.py`` into the server process (the handlers are called once per
request, as AWS's serving containers call them), where training and processing run a script in a
process of its own (:mod:`trainer.user_code.launcher`). Both map an exception to the user's file
and line with :func:`where`, so a failure reads the same in every mode: the exception, then the
user's file, line and function, never a page of frames from the platform.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from trainer.contract.errors import SourceError
from trainer.user_code.launcher import where  # standard library only: it also runs in the user's process

MAX_MESSAGE_CHARS = 300


def describe_failure(exc: BaseException, source_dir: Path) -> str:
    """One line: ``ValueError: bad row (inference.py line 12, in input_handler)``."""
    message = " ".join(str(exc).split())[:MAX_MESSAGE_CHARS]
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    if isinstance(exc, SyntaxError) and exc.filename:
        try:
            name = Path(exc.filename).resolve().relative_to(source_dir.resolve()).as_posix()
        except ValueError:
            name = exc.filename
        return f"SyntaxError: {exc.msg} ({name} line {exc.lineno})"
    place = where(exc, source_dir)
    if "file" in place:
        return f"{text} ({place['file']} line {place['line']}, in {place['function']})"
    return text


def import_file(path: Path, name: str, search_path: Sequence[Path] = ()) -> ModuleType:
    """Imports ``path`` as module ``name``, with ``search_path`` first on ``sys.path``.

    The directories stay on ``sys.path``: the module's own imports (a helper next to it, a
    package from ``code/lib``) happen when its functions run, not only at import.

    Raises:
        SourceError: the module raised (or has a syntax error) while importing, naming the
            user's file and line.
    """
    for directory in reversed([str(p) for p in search_path]):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SourceError(f"{path} cannot be imported as a Python module.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - any failure of the user's import is reported as theirs
        sys.modules.pop(name, None)
        raise SourceError(f"Importing {path.name} failed: {describe_failure(err, path.parent)}") from err
    return module
