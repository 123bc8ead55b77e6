"""Runs the user's script as ``__main__`` and, if it fails, says where in the user's code.

``python -m trainer.user_code.launcher REPORT SOURCE_DIR SCRIPT [ARGS...]`` is what the runner
starts instead of ``python SCRIPT ARGS``: the script sees the same ``sys.argv``, ``sys.path[0]``
and ``__name__``, its traceback still goes to stderr (the job's log), and an exception or a
non-zero ``sys.exit`` also writes a small JSON report (type, message, the user's file and line)
that the runner turns into ``output/failure``: one line a person can act on, not 1 KB of frames.
"""

from __future__ import annotations

import json
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any

from trainer.user_code.modules import where

MAX_MESSAGE_CHARS = 500


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
