"""SIGTERM during the built-in transform: a flag the transform's loops check between batches.

A handler that raised at once would raise wherever the main thread happens to be, and Python
drops an exception raised inside a ``__del__`` (TensorFlow frees iterators and tensors in
them): the stop would be lost and the job would finish as if never stopped. So the handler only
records the request; :func:`check` raises where the transform can clean up (between batches,
and before anything that marks the output as a dataset).
"""

from __future__ import annotations

import signal
import time
from typing import Any

from trainer.contract.errors import TrainingInterrupted
from trainer.logs import log

_requested_at: float | None = None


def install() -> None:
    """Installs the handler; from here SIGTERM stops the transform at its next check."""
    signal.signal(signal.SIGTERM, _handle)


def requested() -> bool:
    return _requested_at is not None


def check() -> None:
    """Raises TrainingInterrupted (exit 143) when SIGTERM has arrived."""
    if _requested_at is not None:
        raise TrainingInterrupted(
            "Processing stopped by SIGTERM (job stopped); the shards written so far were removed, the job wrote no dataset."
        )


def _handle(signum: int, frame: Any) -> None:
    global _requested_at
    if _requested_at is None:
        _requested_at = time.monotonic()
        log("sigterm", action="stopping the transform at its next batch; nothing it wrote is kept")
