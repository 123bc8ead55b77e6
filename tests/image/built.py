"""The training image, built once per test session by scripts/build-image.sh (from the layer cache when present).

Used by the image tests (``tests/image``) and by the emulator's SageMaker-code tests, which run the
built image in Docker (``--containers``) wherever a Docker engine answers.
"""

from __future__ import annotations

import functools
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


class NoEngine(Exception):
    """No Docker engine can run here; the message is scripts/docker-engine.sh's one line."""


class BuildFailed(Exception):
    """scripts/build-image.sh failed or ran too long: the Dockerfile is what ships, so this fails tests."""


@functools.cache
def built_image() -> BuiltImage:
    """Start the engine where this machine allows, then build (once per session).

    Raises:
        NoEngine: no Docker engine answers and none can be started.
        BuildFailed: the build failed.
    """
    engine = subprocess.run(["bash", str(ENGINE_SCRIPT)], capture_output=True, text=True, timeout=300, check=False)
    if engine.returncode != 0:
        raise NoEngine((engine.stderr.strip().splitlines() or ["docker-engine.sh failed without a message"])[-1])
    start = time.monotonic()
    try:
        built = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "--tag", TAG], capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS, check=False
        )
    except subprocess.TimeoutExpired as err:
        raise BuildFailed(f"scripts/build-image.sh did not finish within {BUILD_TIMEOUT_SECONDS} s:\n{err.stdout!r}") from err
    seconds = time.monotonic() - start
    if built.returncode != 0:
        raise BuildFailed(f"scripts/build-image.sh failed (exit {built.returncode}):\n{built.stdout[-3000:]}\n{built.stderr[-5000:]}")
    labels = inspect_image(TAG)["Config"].get("Labels") or {}
    return BuiltImage(TAG, labels.get("gputrain.base", "unknown"), seconds, built.stdout)


def built_image_or_skip() -> BuiltImage:
    """The built image, for a test that needs it: skipped with docker-engine.sh's line where no engine can run,
    failed where the build fails (the Dockerfile is what ships)."""
    try:
        return built_image()
    except NoEngine as err:
        pytest.skip(f"no Docker engine: {err}")
    except BuildFailed as err:
        pytest.fail(str(err))
