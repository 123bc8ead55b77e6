"""Prove a client stays on the emulator: every name lookup outside loopback is recorded and refused."""

from __future__ import annotations

import socket
from contextlib import contextmanager
from typing import Any, Iterator

import pytest

LOOPBACK = {"localhost", "127.0.0.1", "::1"}


@contextmanager
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Within the block, resolving a host other than loopback raises; yields the hosts tried.

    Every client library (botocore, requests) resolves the host before it connects, so this
    catches a call to a public AWS endpoint that an explicit ``endpoint_url`` would otherwise
    send past ``AWS_ENDPOINT_URL``.
    """
    tried: list[str] = []
    original = socket.getaddrinfo

    def guarded(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name not in LOOPBACK:
            tried.append(name)
            raise socket.gaierror(socket.EAI_NONAME, f"{name}: outside the emulator (refused by the test)")
        return original(host, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(socket, "getaddrinfo", guarded)
        yield tried
