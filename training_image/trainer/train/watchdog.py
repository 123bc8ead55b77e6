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
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import trainer
from trainer.contract.environment import resolve_paths
from trainer.contract.failure import record_failure

POLL_SECONDS = 0.5
PROBE_EVERY_SECONDS = 2.0
CONNECT_TIMEOUT_SECONDS = 2.0


class Watchdog:
    """Handle on a running watchdog process; ``cancel`` once the guarded phase is over.

    With ``peers`` (``host:port``), the watchdog also knocks on each peer's port while it waits:
    a peer that refuses connections for ``refused_seconds`` in a row (the host is up, but no
    trainer listens there) ends the phase early; at the deadline, the message names the peers
    that did not answer and how (refused, or silent).
    """

    def __init__(
        self, timeout_seconds: float, message: str, peers: Sequence[str] = (), refused_seconds: float | None = None
    ) -> None:
        package_root = str(Path(trainer.__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        refused = timeout_seconds if refused_seconds is None else refused_seconds
        self._process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "trainer.train.watchdog", str(os.getpid()), str(timeout_seconds), message,
             ",".join(peers), str(refused)],
            env=env,
        )  # fmt: skip

    def cancel(self) -> None:
        """Stops the watchdog; the guarded phase finished in time."""
        if self._process.poll() is None:
            self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()


def knock(address: str) -> str:
    """``answered``, ``refused`` (host up, nothing listening) or ``silent`` (no reply, no route)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_SECONDS):
            return "answered"
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "silent"


def describe_unanswered(states: dict[str, str]) -> str:
    """`` Did not answer: a:2222 (refused the connection), b:2222 (no reply).`` or ``""``."""
    words = {"refused": "refused the connection: the host is up but no trainer listens there", "silent": "no reply"}
    missing = [f"{address} ({words[state]})" for address, state in states.items() if state != "answered"]
    return f" Did not answer: {', '.join(missing)}." if missing else ""


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trainer.train.watchdog PARENT_PID TIMEOUT_SECONDS MESSAGE [PEERS REFUSED_SECONDS]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    parent_text, timeout_text, message = args[:3]
    peers = [p for p in (args[3] if len(args) > 3 else "").split(",") if p]
    refused_seconds = float(args[4]) if len(args) > 4 else float(timeout_text)
    parent = int(parent_text)
    started = time.monotonic()
    deadline = started + float(timeout_text)
    refused_since: dict[str, float] = {}
    states: dict[str, str] = {}
    next_probe = started
    while time.monotonic() < deadline:
        if os.getppid() != parent:  # the trainer is gone; nothing to guard
            return 0
        now = time.monotonic()
        if peers and now >= next_probe:
            next_probe = now + PROBE_EVERY_SECONDS
            states = {peer: knock(peer) for peer in peers}
            for peer, state in states.items():
                if state != "refused":
                    refused_since.pop(peer, None)
                    continue
                since = refused_since.setdefault(peer, now)
                if now - since >= refused_seconds:
                    record_failure(
                        resolve_paths(),
                        f"Rendezvous failed after {now - started:.0f} s: {peer} refused connections for "
                        f"{now - since:.0f} s in a row (RENDEZVOUS_REFUSED_SECONDS={refused_seconds:g}): its host "
                        f"is up, but no trainer listens on that port; it failed before the rendezvous or uses "
                        f"another port. {message}",
                    )
                    os.kill(parent, signal.SIGKILL)
                    return 0
        time.sleep(POLL_SECONDS)
    if peers:
        states = {peer: knock(peer) for peer in peers}
    record_failure(resolve_paths(), message + describe_unanswered(states))
    os.kill(parent, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
