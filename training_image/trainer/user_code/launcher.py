"""Runs the user's script as ``__main__`` and, if it fails, says where in the user's code.

``python -P .../trainer/user_code/launcher.py REPORT SOURCE_DIR SCRIPT [ARGS...]`` is what the
runner starts instead of ``python SCRIPT ARGS``: the script sees the same ``sys.argv``,
``sys.path`` (its own directory first) and ``__name__``, its traceback still goes to stderr (the
job's log), and an exception or a non-zero ``sys.exit`` also writes a small JSON report (type,
message, the user's file and line) that the runner turns into ``output/failure``: one line a
person can act on, not 1 KB of frames.

Standard library only, started by its file with ``-P`` (neither the working directory, which is
the user's code, nor this directory goes on ``sys.path``): a user's own package or module named
``trainer`` (Google AI Platform's layout, ``trainer/task.py``) can neither hide the launcher nor be
hidden by the image's ``trainer`` package, which nothing here imports before the script runs.
"""

from __future__ import annotations

import json
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any

MAX_MESSAGE_CHARS = 500


def where(exc: BaseException, source_dir: Path) -> dict[str, Any]:
    """The innermost frame of ``exc``'s traceback that lies in ``source_dir``.

    Returns:
        ``file`` (relative to ``source_dir``), ``line``, ``function``, ``code`` for that frame,
        plus ``raised_in`` (``path:line``) when the exception was raised outside the user's code;
        empty when no frame is the user's.
    """
    source_dir = source_dir.resolve()
    frames = traceback.extract_tb(exc.__traceback__)
    origin = frames[-1] if frames else None
    user = None
    for frame in reversed(frames):
        try:
            path = Path(frame.filename).resolve()
        except (OSError, ValueError):
            continue
        if source_dir in path.parents:
            user = frame
            break
    report: dict[str, Any] = {}
    if user is not None:
        report.update(
            file=Path(user.filename).resolve().relative_to(source_dir).as_posix(),
            line=user.lineno,
            function=user.name,
            code=(user.line or "").strip()[:200],
        )
    if origin is not None and origin is not user:
        report["raised_in"] = f"{origin.filename}:{origin.lineno}"
    return report


def _where(exc: BaseException, source_dir: Path) -> dict[str, Any]:
    return where(exc, source_dir)


def _write(report_file: str, report: dict[str, Any]) -> None:
    try:
        Path(report_file).write_text(json.dumps(report), encoding="utf-8")
    except OSError as err:
        print(f"[trainer] could not write the script's failure report {report_file}: {err}", file=sys.stderr)


def main() -> int:
    report_file, source_dir_text, script, *args = sys.argv[1:]
    source_dir = Path(source_dir_text).resolve()
    script_path = Path(script).resolve()
    sys.argv = [str(script_path), *args]
    sys.path.insert(0, str(script_path.parent))
    try:
        runpy.run_path(str(script_path), run_name="__main__")
    except SystemExit as exc:
        if exc.code in (None, 0):
            return 0
        code = exc.code if isinstance(exc.code, int) else 1
        message = "" if isinstance(exc.code, int) else str(exc.code)
        _write(
            report_file,
            {"type": "SystemExit", "message": message[:MAX_MESSAGE_CHARS], "exit_code": code, **_where(exc, source_dir)},
        )
        if message:
            print(message, file=sys.stderr, flush=True)
        return code
    except BaseException as exc:  # noqa: BLE001 - every failure of user code is reported, then re-signalled by the exit code
        traceback.print_exc()
        sys.stderr.flush()
        message = " ".join(str(exc).split())
        _write(
            report_file,
            {"type": type(exc).__name__, "message": message[:MAX_MESSAGE_CHARS], **_where(exc, source_dir)},
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
