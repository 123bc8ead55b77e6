"""The image every test here runs: built once per session by scripts/build-image.sh (tests/image/built.py).

Skipped, with the one line scripts/docker-engine.sh prints, only where no Docker engine can run at
all. A build that fails is a failure of every test here: the Dockerfile is what ships.
"""

from __future__ import annotations

import pytest

from tests.image.built import BuildFailed, BuiltImage, NoEngine, built_image


@pytest.fixture(scope="session")
def image() -> BuiltImage:
    try:
        return built_image()
    except NoEngine as err:
        pytest.skip(f"no Docker engine: {err}")
    except BuildFailed as err:
        pytest.fail(str(err))


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest's hook signature
    """The build's last line (base, size, build time) in the run's summary: the image stage's cost in CI's log."""
    if built_image.cache_info().currsize:
        try:
            built = built_image()
        except (NoEngine, BuildFailed):
            return
        lines = built.build_output.strip().splitlines()
        terminalreporter.write_line(f"image tests: {lines[-1] if lines else built.tag} (session fixture {built.build_seconds:.0f} s)")
