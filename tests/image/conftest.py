"""The image every test here runs: built once per session by scripts/build-image.sh (tests/image/built.py).

Skipped, with the one line scripts/docker-engine.sh prints, only where no Docker engine can run at
all. A build that fails is a failure of every test here: the Dockerfile is what ships.
"""

from __future__ import annotations

import pytest

from tests import summary
from tests.image.built import BuiltImage, built_image, built_image_or_skip


@pytest.fixture(scope="session")
def image() -> BuiltImage:
    return built_image_or_skip()


@summary.add
def _build_line() -> list[str]:
    """The build's last line (base, size, build time) in the run's summary: the image stage's cost in CI's log."""
    if not built_image.cache_info().currsize:  # only a build that succeeded is cached
        return []
    built = built_image()
    lines = built.build_output.strip().splitlines()
    return [f"image tests: {lines[-1] if lines else built.tag} (session fixture {built.build_seconds:.0f} s)"]
