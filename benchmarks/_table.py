"""The Markdown table every benchmark prints and ``benchmarks.run`` records in RESULTS.md.

A floor below the runner: a benchmark's own ``main`` prints its rows with :func:`table` without
importing ``benchmarks.run``, which imports every benchmark.
"""

from __future__ import annotations

COLUMNS = ("benchmark", "metric", "value", "ratio", "target")


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)
