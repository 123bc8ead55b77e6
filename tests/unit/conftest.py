"""Fixtures for template assertions: each configuration is synthesized once per session."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import pytest

from tests.synth import Synth, cached_synth


@pytest.fixture(scope="session")
def synth_app(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Synth]:
    """``synth_app({"cluster.node_count": 2})`` -> a synthesized app (with policy packs)."""
    root = tmp_path_factory.mktemp("synth")

    def _synth(overrides: Mapping[str, Any] | None = None) -> Synth:
        return cached_synth(root, overrides)

    return _synth


@pytest.fixture(scope="session")
def default_app(synth_app: Callable[..., Synth]) -> Synth:
    """The app as cdk.json configures it."""
    return synth_app()
