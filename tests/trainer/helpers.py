"""Running the trainer the way SageMaker does: a base directory, a subprocess, its outputs.

Every trainer run is a separate process, as in production: TensorFlow's device configuration
and MultiWorkerMirroredStrategy can only be set up once per process, before its first op. Runs
start with :func:`trainer_command`: a fork of the session's fork server (tests/forkserver.py,
TensorFlow already imported) that behaves as a fresh ``python -m trainer``, or a fresh process
where a fork would not be one (``TRAINER_TEST_FORKSERVER=0`` makes every run fresh).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.forkserver import python_command
from trainer.datasets.synthetic import SyntheticSpec, write_dataset
from trainer.train.metrics import read_metric_lines

ROOT = Path(__file__).resolve().parents[2]
TRAINING_IMAGE = ROOT / "training_image"
# Bounded waits everywhere: a hung trainer fails the test instead of the whole CI job.
RUN_TIMEOUT_SECONDS = 240
# Variables a developer's shell or CI may have set that would leak into the trainer.
_SCRUBBED_PREFIXES = ("SM_", "TRAINING_", "TF_CONFIG", "SAGEMAKER_", "RENDEZVOUS_", "TRAINER_", "CHECKPOINT_DIR")
_SCRUBBED = ("EXPECTED_GPU_COUNT", "CUDA_VISIBLE_DEVICES")


def trainer_env(base: Path, **overrides: Any) -> dict[str, str]:
    """Environment for a trainer process in ``base``: CPU on purpose, nothing inherited by accident.

    An override of ``None`` removes the variable.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES) and k not in _SCRUBBED}
    env.update(
        SAGEMAKER_BASE_DIR=str(base),
        EXPECTED_GPU_COUNT="0",
        # The caller's PYTHONPATH stays after ours: on the lent GPU machine it is where TensorFlow is
        # (/root/tf-env.sh, from ../shared/gpu/stage-tensorflow), and a run without it has none.
        PYTHONPATH=os.pathsep.join([str(TRAINING_IMAGE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]),
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONUNBUFFERED="1",
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def write_job(
    base: Path,
    hyperparameters: dict[str, Any],
    data: SyntheticSpec | None,
    *,
    channel: str = "train",
    input_data_config: dict[str, Any] | None = None,
) -> Path:
    """Lays out ``base`` like /opt/ml: hyperparameters.json (string values), data, optional configs."""
    config_dir = base / "input" / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "hyperparameters.json").write_text(json.dumps({k: str(v) for k, v in hyperparameters.items()}))
    if input_data_config is not None:
        (config_dir / "inputdataconfig.json").write_text(json.dumps(input_data_config))
    if data is not None:
        write_dataset(base / "input" / "data" / channel, data)
    return base


@dataclass(frozen=True)
class TrainerRun:
    """A finished trainer process and where it wrote.

    Attributes:
        base: Its SAGEMAKER_BASE_DIR.
        returncode: Exit status.
        stdout: Everything it printed on stdout (log, metric and report lines).
        stderr: TensorFlow's own logging and tracebacks.
    """

    base: Path
    returncode: int
    stdout: str
    stderr: str

    @property
    def failure(self) -> str | None:
        """Contents of output/failure, or None when there is none."""
        path = self.base / "output" / "failure"
        return path.read_text(encoding="utf-8") if path.exists() else None

    @property
    def model_path(self) -> Path:
        """Where the chief writes the final model."""
        return self.base / "model" / "model.keras"

    def metrics(self) -> list[dict[str, float]]:
        """Metric lines parsed with the SageMaker MetricDefinitions the stacks use."""
        return read_metric_lines(self.stdout)

    def events(self, name: str) -> list[dict[str, str]]:
        """``[trainer] <name> key=value ...`` lines as dicts."""
        found = []
        for line in self.stdout.splitlines():
            if line.startswith(f"[trainer] {name} ") or line == f"[trainer] {name}":
                found.append(dict(re.findall(r"(\w+)=(\S+)", line[len(f"[trainer] {name}") :])))
        return found

    def report(self, tag: str) -> list[dict[str, Any]]:
        """``[tag] {json}`` report lines."""
        prefix = f"[{tag}] "
        return [json.loads(line[len(prefix) :]) for line in self.stdout.splitlines() if line.startswith(prefix)]

    def explain(self) -> str:
        """Context for assertion messages."""
        return f"exit {self.returncode}\n--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"


def trainer_command(*args: str) -> list[str]:
    """The command for ``python -m trainer [args]``, run from TRAINING_IMAGE (see the module's docstring)."""
    return python_command("-m", "trainer", *args)


def run_trainer(base: Path, *args: str, timeout: float = RUN_TIMEOUT_SECONDS, **env: Any) -> TrainerRun:
    """Runs ``python -m trainer [args]`` from training_image/ to completion."""
    completed = subprocess.run(
        trainer_command(*args),
        cwd=TRAINING_IMAGE,
        env=trainer_env(base, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return TrainerRun(base, completed.returncode, completed.stdout, completed.stderr)


def start_trainer(base: Path, *args: str, **env: Any) -> subprocess.Popen[str]:
    """Starts ``python -m trainer [args]`` with stdout piped line by line; stderr to a file in base."""
    base.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        trainer_command(*args),
        cwd=TRAINING_IMAGE,
        env=trainer_env(base, **env),
        stdout=subprocess.PIPE,
        stderr=(base / "stderr.txt").open("w"),
        text=True,
        bufsize=1,
    )


def finish(
    process: subprocess.Popen[str], base: Path, stdout_so_far: str = "", timeout: float = RUN_TIMEOUT_SECONDS
) -> TrainerRun:
    """Waits (bounded) for a started trainer and collects what it printed."""
    try:
        rest, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()  # the fork server's client: it kills the run's process group with it
        try:
            rest, _ = process.communicate(timeout=10)
        except subprocess.TimeoutExpired as err:
            # The run's user code started processes outside that group (a launcher, a parameter server:
            # sessions of their own, forks of the fork server) that hold the same stdout: it would never
            # reach its end. Keep what was read, end those that name this job, and stop reading.
            rest = err.output.decode(errors="replace") if isinstance(err.output, bytes) else (err.output or "")
            end_processes_naming(base)
            assert process.stdout is not None
            process.stdout.close()
            process.wait()
    stderr = (base / "stderr.txt").read_text(encoding="utf-8", errors="replace")
    return TrainerRun(base, process.returncode, stdout_so_far + (rest or ""), stderr)


def processes_naming(path: Path) -> list[int]:
    """Processes whose command line names ``path`` or a file under it (from /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(arg == str(path) or arg.startswith(f"{path}/") for arg in args):
            found.append(int(cmdline.parent.name))
    return found


def end_processes_naming(path: Path) -> None:
    """SIGKILL every process whose command line names ``path`` (a run's leftovers)."""
    for pid in processes_naming(path):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def read_until(process: subprocess.Popen[str], prefix: str, timeout: float = RUN_TIMEOUT_SECONDS) -> str:
    """Reads stdout lines until one starts with ``prefix``; returns everything read so far."""
    assert process.stdout is not None
    seen = []
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(timeout))
    try:
        for line in process.stdout:
            seen.append(line)
            if line.startswith(prefix):
                return "".join(seen)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    raise AssertionError(f"trainer ended without printing {prefix!r}:\n{''.join(seen)[-4000:]}")


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError("the trainer did not print the expected line in time")


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_ports(count: int) -> list[int]:
    """Ports free right now on every interface, for loopback workers that bind them soon after.

    Drawn below the OS's ephemeral range (Linux: 32768-60999) where it leaves room: a port the OS
    hands out for binding port 0 is also the local end of any outgoing connection, and with two test
    workers, emulators and Docker connecting meanwhile, a worker's gRPC server once found its port
    taken (``Could not start gRPC server``). Checked on 0.0.0.0, as the servers bind it."""
    low, high = 20000, _ephemeral_start() - 1
    found: list[int] = []
    while len(found) < count:
        if high - low < 1000:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("0.0.0.0", 0))
                port = sock.getsockname()[1]
        else:
            port = random.randint(low, high)
        if port in found:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
        found.append(port)
    return found


def read_scalars(directory: Path) -> dict[str, dict[int, float]]:
    """TensorBoard scalars in ``directory``: tag -> {step: value}."""
    import tensorflow as tf

    scalars: dict[str, dict[int, float]] = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(str(path)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                scalars.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
    return scalars


def assert_a_resumed_epoch_keeps_the_rest(spec: Any, skip: int, batches: int, **make_dataset: Any) -> None:
    """``images.make_dataset(..., skip_batches=skip)`` yields exactly the epoch's batches after its first ``skip``
    (in order: ``ordered=True``), as a run resumed after a stop mid-epoch must."""
    import numpy as np

    from trainer.datasets import images

    def pictures(skip_batches: int) -> list[Any]:
        dataset = images.make_dataset(spec, training=True, ordered=True, batches=batches, skip_batches=skip_batches, **make_dataset)
        return [batch.numpy() for batch, _ in dataset]

    whole, resumed = pictures(0), pictures(skip)
    assert len(whole) == batches and len(resumed) == batches - skip
    for kept, replayed in zip(whole[skip:], resumed, strict=True):
        np.testing.assert_array_equal(kept, replayed)
