"""The per-epoch metric line, the single source of its format.

The SageMaker stack reads ``metric_definitions.json`` (next to this file) for the training job's
MetricDefinitions, so the line printed here and those regexes change together; the tests parse
real trainer output with the JSON file's regexes.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

METRIC_DEFINITIONS_PATH = Path(__file__).resolve().parent / "metric_definitions.json"
PREFIX = "[metrics]"


@dataclass(frozen=True)
class EpochMetrics:
    """Training metrics of one completed epoch, aggregated over all workers.

    Attributes:
        epoch: 1-based number of the epoch just completed.
        loss: Mean cross-entropy over the epoch's examples.
        accuracy: Fraction of the epoch's examples classified correctly (training data).
        examples_per_sec: Global throughput, all workers together.
        step_time_ms: Mean wall-clock time of one global step, input pipeline included.
        val_loss: Mean cross-entropy over the validation channel, in epochs that evaluated it.
        val_accuracy: Fraction of the validation channel classified correctly, likewise.
    """

    epoch: int
    loss: float
    accuracy: float
    examples_per_sec: float
    step_time_ms: float
    val_loss: float | None = None
    val_accuracy: float | None = None

    def line(self) -> str:
        """``[metrics] epoch=3 loss=0.412300 accuracy=0.871000 examples_per_sec=10234.1 step_time_ms=3.210``,
        then `` val_loss=... val_accuracy=...`` in epochs that evaluated the validation channel."""
        line = (
            f"{PREFIX} epoch={self.epoch} loss={self.loss:.6f} accuracy={self.accuracy:.6f} "
            f"examples_per_sec={self.examples_per_sec:.1f} step_time_ms={self.step_time_ms:.3f}"
        )
        if self.val_loss is not None and self.val_accuracy is not None:
            line += f" val_loss={self.val_loss:.6f} val_accuracy={self.val_accuracy:.6f}"
        return line


def emit(metrics: EpochMetrics) -> None:
    """Prints the metric line to stdout, flushed so the log agent sees it at once."""
    print(metrics.line(), file=sys.stdout, flush=True)


def metric_definitions() -> list[dict[str, str]]:
    """SageMaker MetricDefinitions (``Name``/``Regex``) matching :meth:`EpochMetrics.line`."""
    return json.loads(METRIC_DEFINITIONS_PATH.read_text(encoding="utf-8"))
