"""Log lines on stdout, one event per line, so CloudWatch and ``docker logs`` show them in order.

Two shapes: ``[trainer] <event> key=value ...`` for progress, and ``[<tag>] {json}`` for
structured reports such as the GPU check. Metric lines have their own module (``metrics``)
because their format is a contract with the stacks' metric definitions.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def log(event: str, **fields: Any) -> None:
    """Prints ``[trainer] event key=value ...`` and flushes (stdout is a pipe in containers)."""
    parts = [f"{key}={value}" for key, value in fields.items()]
    print(" ".join(["[trainer]", event, *parts]), file=sys.stdout, flush=True)


def log_json(tag: str, payload: dict[str, Any]) -> None:
    """Prints ``[tag] {json}`` on one line, keys sorted so lines diff cleanly between runs."""
    print(f"[{tag}] {json.dumps(payload, sort_keys=True, default=str)}", file=sys.stdout, flush=True)
