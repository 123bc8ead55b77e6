"""A separate process that ends the trainer when a blocking phase overruns its deadline.

MultiWorkerMirroredStrategy's rendezvous blocks inside TensorFlow's C++ while holding the GIL,
so no Python thread (or signal handler) of the trainer runs until it returns, which it never
does if a peer is missing. A watchdog thread is therefore useless; this small process is not:
it sleeps until the deadline, then records the failure (``output/failure``) and SIGKILLs the
trainer. It exits on its own when the trainer finishes the phase (``Watchdog.cancel``) or dies.

The image runs the trainer under tini, because the kernel ignores SIGKILL sent to PID 1 from
inside its own PID namespace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import trainer
from trainer.environment import resolve_paths
from trainer.failure import record_failure

POLL_SECONDS = 0.5


class Watchdog:
    """Handle on a running watchdog process; ``cancel`` once the guarded phase is over."""

    def __init__(self, timeout_seconds: float, message: str) -> None:
        package_root = str(Path(trainer.__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        self._process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "trainer.watchdog", str(os.getpid()), str(timeout_seconds), message],
            env=env,
        )

    def cancel(self) -> None:
        """Stops the watchdog; the guarded phase finished in time."""
        if self._process.poll() is None:
            self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trainer.watchdog PARENT_PID TIMEOUT_SECONDS MESSAGE``."""
    parent_text, timeout_text, message = list(sys.argv[1:] if argv is None else argv)
    parent = int(parent_text)
    deadline = time.monotonic() + float(timeout_text)
    while time.monotonic() < deadline:
        if os.getppid() != parent:  # the trainer is gone; nothing to guard
            return 0
        time.sleep(POLL_SECONDS)
    record_failure(resolve_paths(), message)
    os.kill(parent, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
