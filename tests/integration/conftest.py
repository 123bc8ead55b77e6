"""The emulator tests' choice of container runtime.

SageMaker users' own code (tests/integration/test_sagemaker_sdk_*.py) runs as SageMaker runs it: in
containers of the built training image (``scripts/run-local.sh --containers``) wherever a Docker
engine answers, as in CI. Where none can run, the local runner plays the image with this machine's
processes, and the test report says so.
"""

from __future__ import annotations

import pytest

from tests import summary
from tests.image.built import BuildFailed, NoEngine, built_image

_PROCESS_REASONS: list[str] = []


@pytest.fixture(scope="session")
def containers(request: pytest.FixtureRequest) -> bool:
    """True: jobs and endpoints run in Docker (the image is built); False: no engine here, or ``-m "not image"``."""
    if "not image" in (request.config.getoption("markexpr") or ""):
        _PROCESS_REASONS.append('-m "not image" leaves Docker out')
        return False
    try:
        built_image()
    except NoEngine as err:
        _PROCESS_REASONS.append(f"no Docker engine ({err})")
        return False
    except BuildFailed as err:
        pytest.fail(str(err))
    return True


@summary.add
def _process_line() -> list[str]:
    return [f"SageMaker-code tests ran the image as processes, not in Docker: {reason}" for reason in _PROCESS_REASONS[:1]]
