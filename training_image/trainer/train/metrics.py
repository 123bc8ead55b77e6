"""The per-epoch metric line, the single source of its format.

The SageMaker stack reads ``metric_definitions.json`` (in the trainer package, beside ``gpu_instances.json``) for the training job's
MetricDefinitions, so the line printed here and those regexes change together; the tests parse
real trainer output with the JSON file's regexes.

Definitions of the figures that say where an epoch's time went (docs/training-jobs.md, "Where the time goes"):

- ``step_time_ms``: wall-clock time of the epoch's training steps over their number, input
  pipeline included (validation and checkpoints excluded).
- ``input_wait``: the share of that time the step loop spent waiting for its next batch,
  measured in the training graph around each ``next(iterator)`` (``tf.timestamp`` before the
  request, after the batch arrived). ~0% means the input pipeline kept batches ready; a high
  share means the accelerator sat waiting for data (input-bound).
- ``gpu_util`` / ``gpu_mem_mib`` (on GPUs only): NVML's utilization rate (percent of time a kernel
  ran) and memory used, sampled on a background thread during the epoch, averaged over samples
  and over this host's GPUs (memory: the mean over samples of the sum over GPUs).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

METRIC_DEFINITIONS_PATH = Path(__file__).resolve().parent.parent / "metric_definitions.json"
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
        input_wait_pct: Percent of the step time spent waiting for the next batch, when measured.
        gpu_util_pct: Mean NVML GPU utilization of this host's GPUs over the epoch, on GPUs.
        gpu_mem_mib: Mean GPU memory used (MiB, summed over this host's GPUs), on GPUs.
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
    input_wait_pct: float | None = None
    gpu_util_pct: float | None = None
    gpu_mem_mib: float | None = None

    def line(self) -> str:
        """``[metrics] epoch=3 loss=0.412300 accuracy=0.871000 examples_per_sec=10234.1 step_time_ms=3.210``,
        then `` input_wait=12.5%`` where measured, `` gpu_util=87.0% gpu_mem_mib=10240`` on GPUs, and
        `` val_loss=... val_accuracy=...`` in epochs that evaluated the validation channel."""
        line = (
            f"{PREFIX} epoch={self.epoch} loss={self.loss:.6f} accuracy={self.accuracy:.6f} "
            f"examples_per_sec={self.examples_per_sec:.1f} step_time_ms={self.step_time_ms:.3f}"
        )
        if self.input_wait_pct is not None:
            line += f" input_wait={self.input_wait_pct:.1f}%"
        if self.gpu_util_pct is not None:
            line += f" gpu_util={self.gpu_util_pct:.1f}%"
        if self.gpu_mem_mib is not None:
            line += f" gpu_mem_mib={self.gpu_mem_mib:.0f}"
        if self.val_loss is not None and self.val_accuracy is not None:
            line += f" val_loss={self.val_loss:.6f} val_accuracy={self.val_accuracy:.6f}"
        return line


def emit(metrics: EpochMetrics) -> None:
    """Prints the metric line to stdout, flushed so the log agent sees it at once."""
    print(metrics.line(), file=sys.stdout, flush=True)


def metric_definitions() -> list[dict[str, str]]:
    """SageMaker MetricDefinitions (``Name``/``Regex``) matching :meth:`EpochMetrics.line`."""
    return json.loads(METRIC_DEFINITIONS_PATH.read_text(encoding="utf-8"))


def read_metric_lines(text: str) -> list[dict[str, float]]:
    """What SageMaker reads from a log with :func:`metric_definitions`: one dict per line on which a
    definition matches, keyed by the field its regex reads (``loss``, ``val_loss``), not the metric's name."""
    definitions = [(re.findall(r"(\w+)=\(", d["Regex"])[-1], re.compile(d["Regex"])) for d in metric_definitions()]
    rows = []
    for line in text.splitlines():
        row = {name: float(m.group(1)) for name, regex in definitions if (m := regex.search(line))}
        if row:
            rows.append(row)
    return rows
