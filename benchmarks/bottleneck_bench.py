"""Benchmark: where a training step's time goes, JPEG files against records, side by side.

The same synthetic pictures (``trainer.datasets.synthetic``, JPEG-encoded) are written twice: as an
``image-dir`` channel (one JPEG file per picture in class folders: the JPEG path a user starts
with, the baseline) and as ``image-tfrecord`` shards (the records path). The trainer, through
its entrypoint in its own process as SageMaker runs it, trains the same model with the same
hyperparameters on each; the figures are its own metric lines and its ``[diagnosis]`` line:
median over the steady epochs (the first, which traces and compiles, left out) of examples/s,
``input_wait``, and on a GPU ``gpu_util`` and ``gpu_mem_mib``. The ratio is the records path's
examples/s over the JPEG path's.

On a GPU host (EXPECTED_GPU_COUNT = the GPUs TensorFlow lists): ResNet-50 at 224x224 from
256x256 JPEGs, batch 256 per GPU, as resnet_bench trains it. Without a GPU: ResNet-50 on 32x32
crops of 40x40 JPEGs on the CPU, a few steps, the same plumbing at CPU scale (its GPU columns say "no GPU").

    .venv/bin/python -m benchmarks.run bottleneck             # recorded in RESULTS.md
    .venv/bin/python -m benchmarks.bottleneck_bench           # print only
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from benchmarks import _trainer
from benchmarks._trainer import cpu_only_tensorflow, job_dir, trainer_command, trainer_env, write_data
from trainer.datasets.synthetic import SyntheticSpec


@dataclass(frozen=True)
class Shape:
    """What one measurement trains on."""

    model: str
    picture: int  # side of the written pictures
    image_size: int  # side the model trains on (random resized crop)
    batch: int  # global
    examples: int
    epochs: int
    classes: int


GPU_SHAPE = Shape(model="resnet50", picture=256, image_size=224, batch=256, examples=256 * 48, epochs=4, classes=100)
CPU_SHAPE = Shape(model="resnet50", picture=40, image_size=32, batch=16, examples=16 * 6, epochs=3, classes=4)


@dataclass(frozen=True)
class PathFigures:
    """Medians over the steady epochs of one path."""

    examples_per_sec: float
    step_time_ms: float
    input_wait_pct: float
    gpu_util_pct: Optional[float]
    gpu_mem_mib: Optional[float]
    diagnosis: str

    def describe(self) -> str:
        gpu = (
            f", GPU {self.gpu_util_pct:.0f}% busy, {self.gpu_mem_mib:.0f} MiB"
            if self.gpu_util_pct is not None and self.gpu_mem_mib is not None
            else ", no GPU"
        )
        return f"{self.examples_per_sec:,.0f} ex/s, step {self.step_time_ms:.1f} ms, input wait {self.input_wait_pct:.0f}%{gpu}"


def _median(rows: list[dict[str, float]], field: str) -> Optional[float]:
    values = [r[field] for r in rows if field in r]
    return statistics.median(values) if values else None


def measure(channel: Path, base: Path, shape: Shape, gpus: int) -> PathFigures:
    """Trains once on ``channel``; the figures of its steady epochs and its verdict."""
    hyperparameters = {
        "model": shape.model,
        "epochs": shape.epochs,
        "batch_size": shape.batch * max(gpus, 1),
        "image_size": shape.image_size,
        "learning_rate": 0.01,
        "optimizer": "sgd",
        "mixed_precision": "auto",
    }
    finished = _trainer.run(trainer_command(), trainer_env(job_dir(base, hyperparameters), channel, gpus=gpus), base / "stderr.txt")
    steady = finished.metrics()[1:] or finished.metrics()
    verdicts = [line.split(" ", 1)[1] for line in finished.stdout.splitlines() if line.startswith("[diagnosis] ")]
    return PathFigures(
        examples_per_sec=_median(steady, "examples_per_sec") or 0.0,
        step_time_ms=_median(steady, "step_time_ms") or 0.0,
        input_wait_pct=_median(steady, "input_wait") or 0.0,
        gpu_util_pct=_median(steady, "gpu_util"),
        gpu_mem_mib=_median(steady, "gpu_mem_mib"),
        diagnosis=verdicts[-1] if verdicts else "no diagnosis line",
    )


def run_paths(shape: Shape, gpus: int, root: Path) -> dict[str, PathFigures]:
    """Writes both channels of the same pictures and trains on each."""
    common: dict[str, Any] = dict(
        examples=shape.examples,
        features=shape.picture * shape.picture * 3,
        classes=shape.classes,
        image_shape=(shape.picture, shape.picture, 3),
        seed=7,
        encoding="jpeg",
    )
    jpeg = write_data(root / "jpeg", SyntheticSpec("image-dir", **common))
    records = write_data(root / "records", SyntheticSpec("image-tfrecord", shards=16, **common))
    return {
        "jpeg": measure(jpeg, root / "job-jpeg", shape, gpus),
        "records": measure(records, root / "job-records", shape, gpus),
    }


def run(repeats: int = 1) -> list[dict]:
    """Rows for benchmarks.run: each path's figures and verdict, records over JPEG."""
    gpus = len(cpu_only_tensorflow().config.list_physical_devices("GPU"))
    shape = GPU_SHAPE if gpus else CPU_SHAPE
    where = f"{gpus} GPU(s), {shape.model} {shape.image_size}px" if gpus else f"CPU, {shape.model} {shape.image_size}px"
    with tempfile.TemporaryDirectory(prefix="bottleneck-") as tmp:
        figures = run_paths(shape, gpus, Path(tmp))
    jpeg, records = figures["jpeg"], figures["records"]
    return [
        {
            "benchmark": "bottleneck",
            "metric": f"JPEG files (image-dir), {where}, batch {shape.batch}/device (baseline)",
            "value": f"{jpeg.describe()}; {jpeg.diagnosis.split(';')[0]}",
            "ratio": "1.00",
        },
        {
            "benchmark": "bottleneck",
            "metric": f"records (image-tfrecord, 16 shards), same pictures, {where}",
            "value": f"{records.describe()}; {records.diagnosis.split(';')[0]}",
            "ratio": f"{records.examples_per_sec / jpeg.examples_per_sec:.2f}x ex/s" if jpeg.examples_per_sec else "",
            "target": "H100 figures: run on the GPU machine" if not gpus else "",
        },
    ]


def main() -> int:
    for row in run():
        print(f"{row['metric']}: {row['value']} ({row.get('ratio', '')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
