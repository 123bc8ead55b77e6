"""Lines for the end of the test report, wherever the tests that know them ran.

Under ``pytest -n N`` (scripts/test.sh) a fixture's findings (how the image was built, why the
SageMaker-code tests ran as processes) live in an xdist worker, while the report is written by the
controller. A conftest registers a source with :func:`add`; tests/conftest.py collects every
source when its process's session ends and hands the lines to the controller (xdist's
``workeroutput``), which prints each distinct line once.
"""

from __future__ import annotations

from typing import Callable

_sources: list[Callable[[], list[str]]] = []


def add(source: Callable[[], list[str]]) -> Callable[[], list[str]]:
    """Registers ``source`` (returns it, so it can decorate a function)."""
    _sources.append(source)
    return source


def collect() -> list[str]:
    """Every registered source's lines, in registration order."""
    return [line for source in _sources for line in source()]
