"""Reports where a guarded Python process failed, for the job's one-line failure reason.

Python imports ``sitecustomize`` at start-up when it is on ``sys.path``; the guard
(:mod:`trainer.user_code.guard`) puts this directory first on the ``PYTHONPATH`` of the command it
runs. The hook installs a ``sys.excepthook`` that, after Python's own traceback on stderr, writes
``<TRAINER_GUARD_REPORTS>/<pid>.json``: the exception, its message and the innermost frame in the
user's code (not in Python itself, its site-packages or the platform). The guard turns the
report into ``output/failure`` or ``output/message``. Standard library only, and nothing
happens at import beyond installing the hook, so a process pays microseconds for it.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

_REPORTS = os.environ.get("TRAINER_GUARD_REPORTS", "")
_MAX_MESSAGE_CHARS = 500
# training_image/trainer: the platform's own frames are never "the user's line".
_PLATFORM = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _platform_roots() -> tuple[str, ...]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, _PLATFORM}
    return tuple(os.path.realpath(root) + os.sep for root in roots if root)


def _where(tb: object) -> dict[str, object]:
    frames = traceback.extract_tb(tb)  # type: ignore[arg-type]
    if not frames:
        return {}
    roots = _platform_roots()
    origin = frames[-1]
    user = None
    for frame in reversed(frames):
        path = os.path.realpath(frame.filename)
        if frame.filename.startswith("<") or path.startswith(roots):
            continue
        user = frame
        break
    report: dict[str, object] = {}
    if user is not None:
        path = os.path.realpath(user.filename)
        cwd = os.path.realpath(os.getcwd()) + os.sep
        report.update(
            file=path[len(cwd) :] if path.startswith(cwd) else path,
            line=user.lineno,
            function=user.name,
            code=(user.line or "").strip()[:200],
        )
    if origin is not user:
        report["raised_in"] = f"{origin.filename}:{origin.lineno}"
    return report


def _report(kind: type[BaseException], value: BaseException, tb: object) -> None:
    _previous(kind, value, tb)
    try:
        message = " ".join(str(value).split())[:_MAX_MESSAGE_CHARS]
        report = {"type": kind.__name__, "message": message, "pid": os.getpid(), "ppid": os.getppid(), **_where(tb)}
        with open(os.path.join(_REPORTS, f"{os.getpid()}.json"), "w", encoding="utf-8") as handle:
            json.dump(report, handle)
    except Exception:  # noqa: BLE001, S110 - the traceback is on stderr already; the report is a bonus
        pass


_previous = sys.excepthook
if _REPORTS and os.path.isdir(_REPORTS):
    sys.excepthook = _report
