"""Recording a failure the way SageMaker expects: ``output/failure`` plus a non-zero exit.

Used by the entrypoint for every error and by the rendezvous watchdog process.
"""

from __future__ import annotations

import sys

from trainer.environment import Paths

# SageMaker shows the first 1024 characters of output/failure as the job's FailureReason.
MAX_FAILURE_CHARS = 4096


def record_failure(paths: Paths, message: str) -> None:
    """Writes the reason to ``output/failure`` and removes any ``model/model.keras`` and ``model/best.keras``.

    The final model is written last, atomically, so a model present when a failure is being
    recorded is stale (from an earlier run in the same directory) and must not look like this
    run's result.
    """
    text = " ".join(message.split())[:MAX_FAILURE_CHARS]
    print(f"[trainer] failed reason={text}", file=sys.stdout, flush=True)
    try:
        paths.output_dir.mkdir(parents=True, exist_ok=True)
        paths.failure_file.write_text(text + "\n", encoding="utf-8")
    except OSError as err:  # the reason is on stdout either way
        print(f"[trainer] could not write {paths.failure_file}: {err}", file=sys.stderr, flush=True)
    for stale_model in (paths.model_dir / "model.keras", paths.model_dir / "best.keras"):
        try:
            stale_model.unlink(missing_ok=True)
        except OSError as err:
            print(f"[trainer] could not remove {stale_model}: {err}", file=sys.stderr, flush=True)
