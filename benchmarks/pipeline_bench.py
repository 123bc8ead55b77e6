"""Benchmark 2: the trainer fed from its own files against the plain ``keras.fit`` a user would write.

The baseline is ``benchmarks._keras_fit``: the same model (MLP 128-64, built by
``trainer.train.models``), batch 256 and Adam, trained with ``model.fit`` on NumPy arrays already in
memory (the CSV channel loaded before timing), Keras' defaults otherwise. The trainer variants
run the real entrypoint (``python -m trainer train``) on the CSV and TFRecord files the
trainer's synthetic writer produced from the same seed. Throughput is each run's own
``[metrics]`` ``examples_per_sec``; the baseline prints the same line from a Keras callback.

Variants run interleaved (keras.fit, csv, tfrecord, keras.fit, ...) so drift in machine load
lands on each alike; epoch 1 of every run (tracing, the trainer's cache fill) is dropped and
the median of the rest is reported.

    .venv/bin/python -m benchmarks.pipeline_bench [repeats]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from benchmarks._trainer import PYTHON, SyntheticSpec, Throughput, job_dir, median_epoch, run as run_process
from benchmarks._trainer import steady_epochs, trainer_command, trainer_env, write_data

TARGET_RATIO = 1.0
FORMATS = ("csv", "tfrecord")
# For the record, not the target: the trainer with one step per call, as keras.fit runs by default.
ONE_STEP = "csv-one-step-per-call"
VARIANTS = ("keras-fit", *FORMATS, ONE_STEP)
# Tabular data for the trainer's default model (mlp 128,64) and default global batch (256).
DATA = {"examples": 40_000, "features": 64, "classes": 8, "shards": 4, "seed": 11}
HYPERPARAMETERS = {"epochs": 4, "batch_size": 256}


def _measure(variant: str, channels: dict[str, Path], base: Path) -> list[dict[str, float]]:
    job_dir(base, {**HYPERPARAMETERS, "steps_per_execution": 1} if variant == ONE_STEP else HYPERPARAMETERS)
    if variant == "keras-fit":
        env = trainer_env(base, channels["csv"])
        command = [PYTHON, "-m", "benchmarks._keras_fit", str(channels["csv"]), str(HYPERPARAMETERS["epochs"]),
                   str(HYPERPARAMETERS["batch_size"])]  # fmt: skip
    else:
        env = trainer_env(base, channels["csv" if variant == ONE_STEP else variant])
        command = trainer_command()
    return steady_epochs(run_process(command, env, base / "stderr.txt").metrics())


def run(repeats: int = 3) -> list[dict]:
    """Measure and return result rows."""
    samples: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        channels = {
            fmt: write_data(Path(tmp) / "data" / fmt, SyntheticSpec(data_format=fmt, **DATA)) for fmt in FORMATS
        }
        for index in range(max(repeats, 1)):
            for variant in VARIANTS:
                samples[variant] += _measure(variant, channels, Path(tmp) / f"{variant}-{index}")
    base: Throughput = median_epoch(samples["keras-fit"])
    setup = (f"mlp 128,64, batch {HYPERPARAMETERS['batch_size']}, {DATA['features']} features, "
             f"{DATA['examples']:,} examples per epoch")
    rows = [{
        "benchmark": "pipeline", "metric": f"plain keras.fit on in-memory arrays (baseline; {setup})",
        "value": base.describe(), "ratio": "1.00", "target": "",
    }]  # fmt: skip
    for fmt in FORMATS:
        result = median_epoch(samples[fmt])
        ratio = result.examples_per_sec / base.examples_per_sec
        rows.append({
            "benchmark": "pipeline",
            "metric": f"trainer from {'CSV' if fmt == 'csv' else 'TFRecord'} files vs keras.fit",
            "value": result.describe(), "ratio": f"{ratio:.2f}",
            "target": f">= {TARGET_RATIO}x of keras.fit: {'met' if ratio >= TARGET_RATIO else 'NOT met'}",
        })  # fmt: skip
    one_step = median_epoch(samples[ONE_STEP])
    rows.append({
        "benchmark": "pipeline", "metric": "trainer from CSV files, steps_per_execution=1 (keras.fit's default)",
        "value": one_step.describe(), "ratio": f"{one_step.examples_per_sec / base.examples_per_sec:.2f}", "target": "",
    })  # fmt: skip
    return rows


if __name__ == "__main__":
    for row in run(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        print(row)
