"""Every configuration the template tests synthesize: the snapshot set and the gate set."""

from __future__ import annotations

from typing import Any

from tests.gates.test_policy_gates import GATED_CONFIGS
from tests.snapshot.test_templates import CONFIGS as SNAPSHOT_CONFIGS

ALL_CONFIGS: dict[str, dict[str, Any]] = {
    **{f"snapshot-{name}": overrides for name, overrides in SNAPSHOT_CONFIGS.items()},
    **{f"gate-{name}": overrides for name, overrides in GATED_CONFIGS.items()},
}
"""Name -> overrides; the same overrides under two names synthesize once (``cached_synth``)."""
