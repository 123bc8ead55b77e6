"""The SDK tests' fast clock: short real pauses, and a ``time()`` that counts the pauses asked for."""

from __future__ import annotations

import time

import pytest

from tests.integration.sdk_clock import PAUSE, FastClock, fast_sdk_polls


def test_a_long_sleep_is_short_in_real_time_and_whole_on_the_clock():
    clock = FastClock()
    real, seen = time.monotonic(), clock.time()
    clock.sleep(30)
    assert time.monotonic() - real < PAUSE + 0.5
    assert clock.time() - seen >= 30
    clock.sleep(0.01)
    assert clock.skipped == pytest.approx(30 - PAUSE)
    assert clock.strftime("%Y") == time.strftime("%Y"), "what the clock does not change is the time module's"


def test_only_the_sdks_session_module_gets_it():
    import sagemaker.session

    patch = pytest.MonkeyPatch()
    try:
        clock = fast_sdk_polls(patch)
        assert sagemaker.session.time is clock
        assert time.sleep is not clock.sleep
    finally:
        patch.undo()
    assert sagemaker.session.time is time
