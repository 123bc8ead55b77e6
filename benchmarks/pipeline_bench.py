"""Benchmark 2: the trainer's input pipeline from files against the same training from memory.

Every variant runs the real entrypoint through ``benchmarks._probe``: the same loop, model,
batch size and step function. The baseline replaces only ``data.make_dataset`` with the same
batches kept as tensors (read once, before the timed epochs); the CSV and TFRecord variants
run the trainer's own ``make_dataset`` over files written by the trainer's synthetic writer.
Throughput is the trainer's own ``examples_per_sec`` (what its ``[metrics]`` line reports);
the probe adds how long the loop was blocked in ``next(iterator)``.

For the diagnosis, the same ``make_dataset`` is also drained alone, with no training step.

Variants run interleaved (memory, csv, tfrecord, memory, ...) so drift in machine load lands on
each alike; epoch 1 of every run (tracing) is dropped and the median of the rest is reported.

    .venv/bin/python -m benchmarks.pipeline_bench [repeats]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import _probe
from benchmarks._trainer import PYTHON, SyntheticSpec, Throughput, job_dir, median_epoch, run as run_process
from benchmarks._trainer import cpu_only_tensorflow, steady_epochs, trainer_env, write_data

TARGET_RATIO = 0.95
FORMATS = ("csv", "tfrecord")
VARIANTS = ("memory", *FORMATS)
# Tabular data for the trainer's default model (mlp 128,64) and default global batch (256).
DATA = {"examples": 40_000, "features": 64, "classes": 8, "shards": 4, "seed": 11}
HYPERPARAMETERS = {"epochs": 3, "batch_size": 256}


@dataclass(frozen=True)
class Sample:
    """One variant's steady epochs (all but the first) from one trainer run.

    Attributes:
        epochs: The trainer's ``[metrics]`` lines.
        timings: The probe's input waits for the same epochs.
    """

    epochs: tuple[dict[str, float], ...]
    timings: tuple[_probe.EpochTiming, ...]


def _measure(variant: str, channels: dict[str, Path], base: Path) -> Sample:
    report_path = base / "probe.json"
    job_dir(base, HYPERPARAMETERS)
    env = trainer_env(
        base,
        channels["tfrecord" if variant == "memory" else variant],
        BENCH_PROBE_INPUT="memory" if variant == "memory" else "files",
        BENCH_PROBE_REPORT=report_path,
    )
    finished = run_process([PYTHON, "-m", "benchmarks._probe"], env, base / "stderr.txt")
    steady = steady_epochs(finished.metrics())
    timings = _probe.epoch_timings(json.loads(report_path.read_text()))
    if len(timings) != HYPERPARAMETERS["epochs"]:
        raise RuntimeError(
            f"the probe saw {len(timings)} epochs, expected {HYPERPARAMETERS['epochs']}:\n{finished.stdout[-2000:]}"
        )
    return Sample(tuple(steady), tuple(timings[1:]))


def _pipeline_alone(channel: Path, data_format: str, epochs: int) -> float:
    """Examples/s of ``make_dataset`` drained with no training step (median over epochs 2..)."""
    from trainer import data
    from trainer.config import TrainingConfig

    cpu_only_tensorflow()
    config = TrainingConfig.from_hyperparameters(HYPERPARAMETERS)
    files = tuple(data.DataFile(path=str(p)) for p in sorted(channel.iterdir()))
    spec = data.scan_channel(data.DatasetSpec("train", channel, data_format, files), config.num_classes)
    (plan,) = data.plan_shards(spec, 1)
    steps = data.steps_per_epoch((plan,), config.batch_size)
    rates = []
    for epoch in range(1, epochs + 2):
        started = time.perf_counter()
        dataset = data.make_dataset(
            spec, plan, pipeline_index=0, num_pipelines=1, per_replica_batch=config.batch_size, batches=steps,
            shuffle_buffer=config.shuffle_buffer, seed=config.seed, epoch=epoch,
        )  # fmt: skip
        count = sum(1 for _ in dataset)
        rates.append(count * config.batch_size / (time.perf_counter() - started))
    return statistics.median(rates[1:])


def _summary(samples: list[Sample]) -> tuple[Throughput, float, float]:
    """The median epoch over all runs; the share of time in next() and the median first-batch wait."""
    timings = [t for s in samples for t in s.timings]
    return (
        median_epoch([e for s in samples for e in s.epochs]),
        sum(t.wait_s for t in timings) / sum(t.wall_s for t in timings),
        statistics.median(t.first_wait_s for t in timings),
    )


def run(repeats: int = 3) -> list[dict]:
    """Measure and return result rows."""
    samples: dict[str, list[Sample]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        channels = {
            fmt: write_data(Path(tmp) / "data" / fmt, SyntheticSpec(data_format=fmt, **DATA)) for fmt in FORMATS
        }
        for index in range(max(repeats, 1)):
            for variant in VARIANTS:
                samples[variant].append(_measure(variant, channels, Path(tmp) / f"{variant}-{index}"))
        alone = {fmt: _pipeline_alone(channels[fmt], fmt, max(repeats, 1)) for fmt in FORMATS}
    base, base_wait, base_first = _summary(samples["memory"])
    steps = DATA["examples"] // HYPERPARAMETERS["batch_size"]
    setup = (f"mlp 128,64, batch {HYPERPARAMETERS['batch_size']}, {DATA['features']} features, "
             f"{DATA['examples']:,} examples ({steps} steps) per epoch")
    rows = [{
        "benchmark": "pipeline", "metric": f"in-memory tensors (baseline; {setup})",
        "value": f"{base.describe()}; {100 * base_wait:.0f}% of the epoch in next()",
        "ratio": "1.00", "target": "",
    }]  # fmt: skip
    for fmt in FORMATS:
        result, wait, first = _summary(samples[fmt])
        ratio = result.examples_per_sec / base.examples_per_sec
        rows.append({
            "benchmark": "pipeline", "metric": f"{fmt.upper() if fmt == 'csv' else 'TFRecord'} files, make_dataset",
            "value": (f"{result.describe()}; {100 * wait:.0f}% of the epoch in next() "
                      f"(in-memory {100 * base_wait:.0f}%); first batch of each epoch {1000 * first:.0f} ms "
                      f"(in-memory {1000 * base_first:.0f} ms); the pipeline alone, no training: "
                      f"{alone[fmt]:,.0f} ex/s ({alone[fmt] / base.examples_per_sec:.2f}x what training from memory "
                      "consumes)"),
            "ratio": f"{ratio:.2f}",
            "target": f">= {TARGET_RATIO}x of in-memory: {'met' if ratio >= TARGET_RATIO else 'NOT met'}",
        })  # fmt: skip
    return rows


if __name__ == "__main__":
    for row in run(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        print(row)
