"""Benchmark 3: training throughput of the real entrypoint on CPU, 1 vs 2 replicas and 1 vs 2 workers.

Each configuration is ``python -m trainer train`` as SageMaker runs it (``EXPECTED_GPU_COUNT=0``),
and the figures are the trainer's own ``[metrics]`` lines, parsed with the stacks' metric
definitions:

- 1 replica (baseline): OneDeviceStrategy on the CPU;
- 2 replicas: MirroredStrategy over 2 logical CPU devices (``TRAINER_LOGICAL_CPU_DEVICES=2``);
- 2 workers: 2 processes with MultiWorkerMirroredStrategy over loopback (``TRAINING_HOSTS``), each
  reading its own 2 of the 4 files.

The global batch is the same everywhere (the trainer's ``batch_size`` is global), and all
replicas share the same cores, so the ideal ratio here is 1.0, not 2.0: what falls short of
1.0 is what the distribution machinery costs, not lack of compute. Configurations run
interleaved; epoch 1 of every run (tracing) is dropped and the median of the rest is reported.

    .venv/bin/python -m benchmarks.throughput_bench [repeats]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from benchmarks._trainer import Finished, SyntheticSpec, finish, free_ports, job_dir, median_epoch, start
from benchmarks._trainer import steady_epochs, trainer_command, trainer_env, write_data

CONFIGS = ("1 replica", "2 replicas", "2 workers")
DATA = {"data_format": "tfrecord", "examples": 40_000, "features": 64, "classes": 8, "shards": 4, "seed": 13}
# The trainer's default model (mlp 128,64) and global batch; 3 epochs, the first one dropped.
HYPERPARAMETERS = {"epochs": 3, "batch_size": 256}
RENDEZVOUS_TIMEOUT_SECONDS = 120


def _run_config(config: str, channel: Path, base: Path) -> Finished:
    """Runs one configuration to completion; returns the chief's output."""
    if config == "2 workers":
        ports = free_ports(2)
        hosts = ",".join(f"localhost:{port}" for port in ports)
        started = []
        for index, port in enumerate(ports):
            worker_base = job_dir(base / f"worker-{index}", HYPERPARAMETERS)
            env = trainer_env(
                worker_base, channel, TRAINING_HOSTS=hosts, TRAINING_CURRENT_HOST=f"localhost:{port}",
                RENDEZVOUS_TIMEOUT_SECONDS=RENDEZVOUS_TIMEOUT_SECONDS,
            )  # fmt: skip
            log = worker_base / "stderr.txt"
            started.append((start(trainer_command(), env, log), log))
        try:
            chief, *_ = [finish(*process, log) for process, log in started]
        finally:
            for (process, _, _), _ in started:
                if process.poll() is None:  # a peer failed: do not leave this one waiting for it
                    process.kill()
                    process.wait()
        return chief
    logical = {"1 replica": None, "2 replicas": 2}[config]
    env = trainer_env(job_dir(base, HYPERPARAMETERS), channel, TRAINER_LOGICAL_CPU_DEVICES=logical)
    return finish(*start(trainer_command(), env, base / "stderr.txt"), base / "stderr.txt")


def _check(config: str, finished: Finished) -> None:
    strategy = finished.event("strategy")
    expected = {"1 replica": ("OneDeviceStrategy", "1", "1"), "2 replicas": ("MirroredStrategy", "2", "1"),
                "2 workers": ("CollectiveAllReduceStrategy", "2", "2")}[config]  # fmt: skip
    if (strategy.get("name"), strategy.get("replicas"), strategy.get("workers")) != expected:
        raise RuntimeError(f"{config}: the trainer reported strategy {strategy}, expected {expected}")


def run(repeats: int = 3) -> list[dict]:
    """Measure and return result rows."""
    epochs: dict[str, list[dict[str, float]]] = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="throughput-bench-") as tmp:
        channel = write_data(Path(tmp) / "data", SyntheticSpec(**DATA))
        for index in range(max(repeats, 1)):
            for config in CONFIGS:
                finished = _run_config(config, channel, Path(tmp) / f"{config.replace(' ', '-')}-{index}")
                _check(config, finished)
                epochs[config] += steady_epochs(finished.metrics())
    summary = {config: median_epoch(rows) for config, rows in epochs.items()}
    base = summary["1 replica"]
    setup = (f"mlp 128,64, global batch {HYPERPARAMETERS['batch_size']}, TFRecord, "
             f"{DATA['examples']:,} examples per epoch")
    notes = {
        "1 replica": f"baseline; {setup}",
        "2 replicas": "MirroredStrategy, 2 logical CPU devices, 1 process",
        "2 workers": "MultiWorkerMirroredStrategy, 2 processes over loopback",
    }
    rows = []
    for config in CONFIGS:
        result = summary[config]
        ratio = f"{result.examples_per_sec / base.examples_per_sec:.2f} ex/s, {result.step_time_ms / base.step_time_ms:.2f} step time"
        rows.append({
            "benchmark": "throughput", "metric": f"{config} ({notes[config]})", "value": result.describe(),
            "ratio": "1.00" if config == "1 replica" else ratio,
            "target": "" if config == "1 replica" else "ideal 1.0 here (same cores); no target set",
        })  # fmt: skip
    return rows


if __name__ == "__main__":
    for row in run(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        print(row)
