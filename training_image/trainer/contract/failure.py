"""Recording a failure the way SageMaker expects: a one-line reason in a file plus a non-zero exit.

The one mapping from an outcome to what SageMaker reports, for every mode: :func:`run_recorded`
turns a :class:`~trainer.contract.errors.TrainerError` into its message and exit code, and any
other exception into "Unexpected ..." and 1; :func:`write_reason` writes the reason where the
job's contract says (``output/failure`` for training, ``output/message`` for processing).
Used by the entrypoint, the processing runner, the user-code guard and the rendezvous watchdog.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from trainer.contract.environment import Paths
from trainer.contract.errors import TrainerError

MAX_FAILURE_CHARS = 4096
"""The longest reason printed to the job's log."""
MAX_REASON_BYTES = 1024
"""SageMaker reports the first 1 KB of ``output/failure`` (FailureReason) and ``output/message``
(ExitMessage), and fails a job whose message file is not UTF-8: the file holds at most that many
bytes, newline included, cut between characters (the log has the whole reason)."""


def write_reason(file: Path, message: str) -> None:
    """Writes the reason, on one line, to ``file`` (and stdout, in case the file cannot be written)."""
    text = " ".join(message.split())[:MAX_FAILURE_CHARS]
    print(f"[trainer] failed reason={text}", file=sys.stdout, flush=True)
    kept = text.encode("utf-8", "replace")[: MAX_REASON_BYTES - 1].decode("utf-8", "ignore")
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(kept + "\n", encoding="utf-8")
    except OSError as err:  # the reason is on stdout either way
        print(f"[trainer] could not write {file}: {err}", file=sys.stderr, flush=True)


def run_recorded(work: Callable[[], None], record: Callable[[str], None], what: str) -> int:
    """Runs ``work`` and returns the exit status; every failure is passed to ``record`` first.

    Args:
        work: The mode's job; raises a TrainerError subclass for every failure it can name.
        record: Writes the reason where the mode's contract says.
        what: Names the runner in the reason for an unexpected exception ("the trainer").

    Returns:
        0 on success, the error's exit code for a TrainerError, 1 for anything else.
    """
    try:
        work()
    except TrainerError as err:
        record(str(err))
        return err.exit_code
    except Exception as err:  # noqa: BLE001 - the last resort must still leave a failure file
        traceback.print_exc()
        record(f"Unexpected {type(err).__name__} in {what}: {err}")
        return 1
    return 0


def record_failure(paths: Paths, message: str) -> None:
    """Writes the reason to ``output/failure`` and removes any ``model/model.keras``, ``model/last.keras`` and
    ``model/best.keras`` (an older trainer's).

    The final model is written last, atomically, so a model present when a failure is being
    recorded is stale (from an earlier run in the same directory) and must not look like this
    run's result.
    """
    write_reason(paths.failure_file, message)
    for stale_model in (paths.model_dir / "model.keras", paths.model_dir / "last.keras", paths.model_dir / "best.keras"):
        try:
            stale_model.unlink(missing_ok=True)
        except OSError as err:
            print(f"[trainer] could not remove {stale_model}: {err}", file=sys.stderr, flush=True)
