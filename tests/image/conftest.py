"""The image every test here runs: built once per session by scripts/build-image.sh.

Skipped, with the one line scripts/docker-engine.sh prints, only where no Docker engine can run at
all. A build that fails is a failure of every test here: the Dockerfile is what ships.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

import pytest

from tests.image.containers import BUILD_SCRIPT, BUILD_TIMEOUT_SECONDS, ENGINE_SCRIPT, TAG, inspect_image


@dataclass(frozen=True)
class BuiltImage:
    """The image under test.

    Attributes:
        tag: What ``docker run`` names.
        base: ``gputrain.base`` label: the CUDA base, or ``debian-bookworm-standin``.
        build_seconds: How long build-image.sh took this session (seconds from the layer cache).
        build_output: What build-image.sh printed.
    """

    tag: str
    base: str
    build_seconds: float
    build_output: str


@pytest.fixture(scope="session")
def image() -> BuiltImage:
    engine = subprocess.run(["bash", str(ENGINE_SCRIPT)], capture_output=True, text=True, timeout=300, check=False)
    if engine.returncode != 0:
        reason = (engine.stderr.strip().splitlines() or ["docker-engine.sh failed without a message"])[-1]
        pytest.skip(f"no Docker engine: {reason}")
    start = time.monotonic()
    try:
        built = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "--tag", TAG], capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS, check=False
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"scripts/build-image.sh did not finish within {BUILD_TIMEOUT_SECONDS} s:\n{err.stdout!r}")
    seconds = time.monotonic() - start
    if built.returncode != 0:
        pytest.fail(f"scripts/build-image.sh failed (exit {built.returncode}):\n{built.stdout[-3000:]}\n{built.stderr[-5000:]}")
    labels = inspect_image(TAG)["Config"].get("Labels") or {}
    _BUILT.append(BuiltImage(TAG, labels.get("gputrain.base", "unknown"), seconds, built.stdout))
    return _BUILT[-1]


_BUILT: list[BuiltImage] = []


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest's hook signature
    """The build's last line (base, size, build time) in the run's summary: the image stage's cost in CI's log."""
    for built in _BUILT:
        lines = built.build_output.strip().splitlines()
        terminalreporter.write_line(f"image tests: {lines[-1] if lines else built.tag} (session fixture {built.build_seconds:.0f} s)")
