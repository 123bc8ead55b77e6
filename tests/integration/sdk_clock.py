"""A faster clock for the SageMaker SDK's polling, in the SDK tests.

The SDK waits for a job by sleeping between calls: ``fit`` with logs reads the logs every 10 s
and describes the job only when 30 s have passed since it last did; ``wait`` without logs
polls every 5 s. Against the emulator a job ends seconds after it starts, so most of an SDK
test's time would be those pauses. :func:`fast_sdk_polls` gives the SDK's session module a clock
on which every pause lasts at most :data:`PAUSE` seconds, and ``time()`` moves on by the whole
pause it asked for, so the SDK's own loops (what it describes, when, what it prints, when it
gives up) run unchanged, only sooner. The rest of the process keeps the real clock.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

import pytest

PAUSE = 0.2
"""The longest real pause the SDK gets (seconds): long enough not to spin against the emulator."""


class FastClock:
    """``time`` as the SDK's module sees it: short sleeps, and a ``time()`` ahead by what they skipped."""

    def __init__(self, real: ModuleType = time) -> None:
        self._real = real
        self.skipped = 0.0

    def sleep(self, seconds: float) -> None:
        pause = min(seconds, PAUSE)
        self._real.sleep(pause)
        self.skipped += seconds - pause

    def time(self) -> float:
        return self._real.time() + self.skipped

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def fast_sdk_polls(patch: pytest.MonkeyPatch) -> FastClock:
    """Give the SDK's session module (where its wait and log loops live) a :class:`FastClock`."""
    import sagemaker.session

    clock = FastClock()
    patch.setattr(sagemaker.session, "time", clock)
    return clock
