"""A training job's per-epoch figures, read from its log lines: a row per epoch, and a plot.

The trainer prints one ``[metrics]`` line per epoch and, at the end, one ``[diagnosis]`` line
(training_image/trainer/train/metrics.py and diagnosis.py). The figures are read with the image's own
metric definitions (``metric_definitions.json``), the regexes SageMaker applies, so what this
shows is what CloudWatch records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from stacks.components.training_job_spec import load_metric_definitions

DIAGNOSIS_PREFIX = "[diagnosis] "

_FIELDS = {
    "train:epoch": "epoch",
    "train:loss": "loss",
    "train:examples_per_sec": "examples_per_sec",
    "train:step_time_ms": "step_time_ms",
    "train:input_wait_pct": "input_wait_pct",
    "train:gpu_utilization": "gpu_util_pct",
    "train:gpu_memory_mib": "gpu_mem_mib",
    "validation:loss": "val_loss",
}


@dataclass(frozen=True)
class EpochFigures:
    """One epoch's figures as the metric line gave them (``None``: not on the line).

    Attributes:
        epoch: The epoch number.
        examples_per_sec: Throughput, all workers together.
        step_time_ms: Mean time of one step, input included.
        input_wait_pct: Share of step time spent waiting for the next batch.
        gpu_util_pct: Mean GPU utilization (GPU runs).
        gpu_mem_mib: Mean GPU memory used (GPU runs).
        loss: Training loss.
        val_loss: Validation loss, in epochs that evaluated it.
    """

    epoch: int
    examples_per_sec: Optional[float] = None
    step_time_ms: Optional[float] = None
    input_wait_pct: Optional[float] = None
    gpu_util_pct: Optional[float] = None
    gpu_mem_mib: Optional[float] = None
    loss: Optional[float] = None
    val_loss: Optional[float] = None

    def row(self) -> str:
        """``epoch 3: 10234.1 examples/s, step 3.21 ms, input wait 12.0%, GPU 87.0% 20480 MiB, loss 0.4123``."""
        parts = []
        if self.examples_per_sec is not None:
            parts.append(f"{self.examples_per_sec:.1f} examples/s")
        if self.step_time_ms is not None:
            parts.append(f"step {self.step_time_ms:.2f} ms")
        if self.input_wait_pct is not None:
            parts.append(f"input wait {self.input_wait_pct:.1f}%")
        if self.gpu_util_pct is not None:
            gpu = f"GPU {self.gpu_util_pct:.1f}%"
            if self.gpu_mem_mib is not None:
                gpu += f" {self.gpu_mem_mib:.0f} MiB"
            parts.append(gpu)
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4f}")
        if self.val_loss is not None:
            parts.append(f"val_loss {self.val_loss:.4f}")
        return f"epoch {self.epoch}: " + ", ".join(parts)


class EpochReader:
    """Collects epochs and the diagnosis from log lines fed one at a time.

    A repeated epoch (a spot restart resumes and prints it again) replaces the earlier one.
    """

    def __init__(self, definitions: Optional[Sequence[dict[str, str]]] = None) -> None:
        source = definitions if definitions is not None else load_metric_definitions()
        self._patterns = [(_FIELDS[d["Name"]], re.compile(d["Regex"])) for d in source if d["Name"] in _FIELDS]
        self._epochs: dict[int, EpochFigures] = {}
        self.diagnosis: Optional[str] = None

    @property
    def epochs(self) -> list[EpochFigures]:
        """The epochs seen, in epoch order."""
        return [self._epochs[n] for n in sorted(self._epochs)]

    def feed(self, line: str) -> Optional[EpochFigures]:
        """Reads one line; the epoch's figures if it was a metric line."""
        if line.startswith(DIAGNOSIS_PREFIX):
            self.diagnosis = line[len(DIAGNOSIS_PREFIX) :].strip()
            return None
        values: dict[str, float] = {}
        for name, pattern in self._patterns:
            match = pattern.search(line)
            if match:
                values[name] = float(match.group(1))
        if "epoch" not in values:
            return None
        figures = EpochFigures(epoch=int(values.pop("epoch")), **values)
        self._epochs[figures.epoch] = figures
        return figures


@dataclass
class RecordedLog:
    """A log file's epochs and diagnosis."""

    epochs: list[EpochFigures] = field(default_factory=list)
    diagnosis: Optional[str] = None


def read_log(path: Path) -> RecordedLog:
    """The epochs and diagnosis of a recorded log (trainer stdout, ``docker logs``, a CloudWatch export)."""
    reader = EpochReader()
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            # CloudWatch exports and `aws logs tail` put a timestamp and stream before the message.
            start = min((i for i in (line.find("[metrics] "), line.find(DIAGNOSIS_PREFIX)) if i >= 0), default=0)
            reader.feed(line[start:].rstrip("\n"))
    return RecordedLog(reader.epochs, reader.diagnosis)


def plot(epochs: Sequence[EpochFigures], path: Path, *, title: str, diagnosis: Optional[str] = None) -> Path:
    """Writes a PNG: throughput, input wait and GPU utilization per epoch, one panel each.

    Args:
        epochs: The epochs, in order (at least one).
        path: The PNG to write (its directory must exist).
        title: The figure's title (the job's name).
        diagnosis: The run's verdict, printed under the panels when known.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server or in CI
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    numbers = [e.epoch for e in epochs]
    panels = (
        ("throughput (examples/s)", [e.examples_per_sec for e in epochs], None, "tab:blue"),
        ("input wait (% of step time)", [e.input_wait_pct for e in epochs], 100.0, "tab:orange"),
        ("GPU utilization (%)", [e.gpu_util_pct for e in epochs], 100.0, "tab:green"),
    )
    figure, axes = plt.subplots(len(panels), 1, sharex=True, figsize=(8, 7.5))
    for axis, (label, values, top, colour) in zip(axes, panels):
        points = [(n, v) for n, v in zip(numbers, values) if v is not None]
        axis.set_ylabel(label, fontsize=9)
        axis.grid(True, alpha=0.3)
        if points:
            xs, ys = zip(*points)
            axis.plot(xs, ys, marker="o", color=colour)
            axis.set_ylim(0, top if top is not None else max(ys) * 1.15 or 1.0)
        else:
            axis.set_ylim(0, top or 1.0)
            axis.text(0.5, 0.5, "not measured in this run (no GPU)" if "GPU" in label else "not in the log",
                      ha="center", va="center", transform=axis.transAxes, color="grey")  # fmt: skip
    axes[-1].set_xlabel("epoch")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    figure.suptitle(title)
    if diagnosis:
        figure.text(0.01, 0.01, _wrap(diagnosis, 110), fontsize=8, va="bottom")
        figure.tight_layout(rect=(0, 0.08, 1, 0.97))
    else:
        figure.tight_layout(rect=(0, 0, 1, 0.97))
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _wrap(text: str, width: int) -> str:
    lines, current = [], ""
    for word in text.split():
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}".strip()
    return "\n".join([*lines, current])
