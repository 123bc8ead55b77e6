"""Running the training entrypoint for the benchmarks: a job directory, processes, their figures.

Each trainer run is its own process, as in production: TensorFlow's device configuration and
MultiWorkerMirroredStrategy can be set up only once per process, before the first op. The
metric lines are parsed with the stacks' SageMaker MetricDefinitions, so the benchmarks read
exactly what a training job reports.
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

ROOT = Path(__file__).resolve().parent.parent
TRAINING_IMAGE = ROOT / "training_image"
if str(TRAINING_IMAGE) not in sys.path:
    sys.path.insert(0, str(TRAINING_IMAGE))

from trainer.datasets.synthetic import SyntheticSpec, write_dataset  # noqa: E402
from trainer.train.metrics import read_metric_lines  # noqa: E402

PYTHON = sys.executable
RUN_TIMEOUT_SECONDS = 300
# Variables a developer's shell may carry that would change what the trainer does.
_SCRUBBED_PREFIXES = ("SM_", "TRAINING_", "TF_CONFIG", "SAGEMAKER_", "RENDEZVOUS_", "TRAINER_", "CHECKPOINT_DIR")
_SCRUBBED = ("EXPECTED_GPU_COUNT", "CUDA_VISIBLE_DEVICES")


def child_pythonpath(*first: Path) -> str:
    """PYTHONPATH of a child process: ``first``, then what the caller's PYTHONPATH already held.

    The caller's entries are kept, after ours, because that is where TensorFlow lives on the lent
    GPU machine: its ``/root/tf-env.sh`` (written by ``../shared/gpu/stage-tensorflow``'s
    install.sh) puts the staged install on PYTHONPATH, and a child that dropped it would find no
    TensorFlow there.
    """
    inherited = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    ours = [str(path) for path in first]
    return os.pathsep.join([*ours, *(entry for entry in inherited if entry not in ours)])


def cpu_only_tensorflow() -> Any:
    """TensorFlow for the runner's own process, with the GPUs hidden from it; call before any op.

    The benchmarks write data, count FLOPs and drain pipelines in the runner's process. If that
    started TensorFlow's runtime on the GPUs, it would map their memory, which the trainer
    processes measured next need. The physical device list stays readable.
    """
    import tensorflow as tf

    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:
        pass  # already up: an earlier call hid the GPUs before it started
    return tf


def write_data(directory: Path, spec: SyntheticSpec) -> Path:
    """Writes a channel's files with the trainer's synthetic writer; returns the directory."""
    cpu_only_tensorflow()
    write_dataset(directory, spec)
    return directory


def job_dir(base: Path, hyperparameters: Mapping[str, Any]) -> Path:
    """Lays out ``base`` like /opt/ml with string-valued hyperparameters (data via SM_CHANNEL_TRAIN)."""
    config_dir = base / "input" / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "hyperparameters.json").write_text(json.dumps({k: str(v) for k, v in hyperparameters.items()}))
    return base


def trainer_env(base: Path, channel: Path, *, gpus: int = 0, **overrides: Any) -> dict[str, str]:
    """Environment of one trainer process: its own base directory, nothing inherited by accident.

    ``gpus`` is EXPECTED_GPU_COUNT (0 trains on the CPU on purpose). An override of ``None``
    removes the variable.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES) and k not in _SCRUBBED}
    env.update(
        SAGEMAKER_BASE_DIR=str(base),
        SM_CHANNEL_TRAIN=str(channel),
        EXPECTED_GPU_COUNT=str(gpus),
        PYTHONPATH=child_pythonpath(TRAINING_IMAGE, ROOT),
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONUNBUFFERED="1",
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


@dataclass(frozen=True)
class Finished:
    """A trainer process that exited 0.

    Attributes:
        stdout: Everything it printed (log, report and metric lines).
        wall_s: Seconds from just before the process started until it exited.
        started_at: ``time.time()`` just before the process started, to compare with stamps
            the process records itself.
    """

    stdout: str
    wall_s: float
    started_at: float

    def metrics(self) -> list[dict[str, float]]:
        """The ``[metrics]`` lines, parsed."""
        return read_metric_lines(self.stdout)

    def event(self, name: str) -> dict[str, str]:
        """The first ``[trainer] <name> key=value ...`` line as a dict (empty if absent)."""
        for line in self.stdout.splitlines():
            if line.startswith(f"[trainer] {name} "):
                return dict(re.findall(r"(\w+)=(\S+)", line[len(f"[trainer] {name}") :]))
        return {}


def start(command: Sequence[str], env: Mapping[str, str], log: Path) -> tuple[subprocess.Popen[str], float, float]:
    """Starts ``command`` from training_image/ with stdout piped and stderr to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as stderr:
        started_at, started = time.time(), time.perf_counter()
        process = subprocess.Popen(
            list(command), cwd=TRAINING_IMAGE, env=dict(env), stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    return process, started_at, started


def finish(process: subprocess.Popen[str], started_at: float, started: float, log: Path) -> Finished:
    """Waits (bounded) for a started process; raises with its output if it failed."""
    try:
        stdout, _ = process.communicate(timeout=RUN_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, _ = process.communicate()
    wall = time.perf_counter() - started
    if process.returncode != 0:
        stderr = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        raise RuntimeError(
            f"{' '.join(map(str, process.args))} exited {process.returncode}:\n"
            f"--- stdout ---\n{stdout[-3000:]}\n--- stderr ---\n{stderr[-3000:]}"
        )
    return Finished(stdout=stdout, wall_s=wall, started_at=started_at)


def run(command: Sequence[str], env: Mapping[str, str], log: Path) -> Finished:
    """Runs one process to completion (see :func:`start` and :func:`finish`)."""
    return finish(*start(command, env, log), log)


def trainer_command() -> list[str]:
    """``python -m trainer train``: what SageMaker runs."""
    return [PYTHON, "-m", "trainer", "train"]


def free_ports(count: int) -> list[int]:
    """Ports the OS reports free right now, for workers on the loopback interface."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("localhost", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def steady_epochs(metrics: list[dict[str, float]], skip: int = 1) -> list[dict[str, float]]:
    """The epochs after the first ``skip`` (epoch 1 traces the step function and warms caches)."""
    steady = [m for m in metrics if m.get("epoch", 0) > skip]
    if not steady:
        raise RuntimeError(f"no [metrics] line after epoch {skip}: {metrics}")
    return steady


@dataclass(frozen=True)
class Throughput:
    """The median epoch of several, by examples/s, so its step time belongs to the same epoch.

    Attributes:
        examples_per_sec: The median epoch's global examples/s (the lower median if even).
        step_time_ms: That epoch's mean step time.
        low: Slowest epoch's examples/s, to show the spread.
        high: Fastest epoch's examples/s.
        epochs: How many epochs were pooled.
    """

    examples_per_sec: float
    step_time_ms: float
    low: float
    high: float
    epochs: int

    def describe(self) -> str:
        """``41,047 ex/s, 7.93 ms/step (6 epochs: 22,073-60,021)``."""
        return (
            f"{self.examples_per_sec:,.0f} ex/s, {self.step_time_ms:.2f} ms/step "
            f"({self.epochs} epochs: {self.low:,.0f}-{self.high:,.0f})"
        )


def median_epoch(epochs: list[dict[str, float]]) -> Throughput:
    """Summarises ``[metrics]`` epochs pooled over runs."""
    rates = sorted(row["examples_per_sec"] for row in epochs)
    middle = statistics.median_low(rates)
    row = next(r for r in epochs if r["examples_per_sec"] == middle)
    return Throughput(middle, row["step_time_ms"], rates[0], rates[-1], len(rates))
