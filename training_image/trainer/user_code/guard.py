"""The platform's guarantees for a job that replaced the image's entrypoint.

``python -m trainer.user_code.guard ARGS...`` runs ``python ARGS...`` as a SageMaker job's command,
inside the same guarantees as ``python -m trainer``: the GPU check first (the command never starts
when it fails), SIGTERM/SIGINT forwarded to the command's process group (SIGKILL after the grace),
and any failure written as one line to the job's failure file (``output/failure`` for training,
``output/message`` for processing) naming the user's file and line.

Nobody types this: the image's ``python``/``python3`` (``training_image/bin/python``, first on
``PATH``) starts it when it finds a SageMaker job tree (``$SAGEMAKER_BASE_DIR`` or ``/opt/ml``, with
``config/processingjobconfig.json`` for processing or ``input/config/*.json`` for training) and
``TRAINER_GUARD_ACTIVE`` is unset. The guard sets ``TRAINER_GUARD_ACTIVE=1`` for its command (as
script mode's runner does for the script it runs), so every Python the command starts (pip, a
driver's ``subprocess``, multiprocessing) is the plain interpreter; several guarded commands in one shell script (``sm_train.sh``) share one GPU check
per process session. ``python -m trainer ...`` is never guarded: it runs the same check itself.

The user's exception and line come from :mod:`trainer.user_code.hook`'s ``sitecustomize``, put
first on the command's ``PYTHONPATH``: each Python process of the command that dies of an
uncaught exception leaves a small JSON report; the command's own report wins, else the first one
in user code (a driver such as ModelTrainer's runs the script in a child process).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.contract import environment
from trainer.contract.errors import GpuCheckError, TrainerError, TrainingInterrupted
from trainer.contract.failure import write_reason
from trainer.logs import log
from trainer.user_code import outputs, runner

ENV_ACTIVE = runner.ENV_GUARD_ACTIVE  # also set by the runner for a script it runs itself
ENV_REPORTS = "TRAINER_GUARD_REPORTS"
HOOK_DIR = Path(__file__).resolve().parent / "hook"
PROCESSING_CONFIG = Path("config") / "processingjobconfig.json"
TRAINING_CONFIGS = tuple(Path("input") / "config" / name for name in ("hyperparameters.json", "resourceconfig.json", "inputdataconfig.json"))


@dataclass(frozen=True)
class Job:
    """The SageMaker job the guarded command belongs to.

    Attributes:
        kind: ``training`` or ``processing``.
        base_dir: The job's tree (``SAGEMAKER_BASE_DIR`` or ``/opt/ml``).
        failure_file: Where the one-line reason goes: ``output/failure`` (training, ``SM_OUTPUT_DIR``
            honoured) or ``output/message`` (processing's ExitMessage).
        what: How messages name the command ("training script", "processing script").
        instance_type: The processing job's instance type, for the GPU-count fallback (training
            reads its own from ``resourceconfig.json``).
    """

    kind: str
    base_dir: Path
    failure_file: Path
    what: str
    instance_type: str | None = None


def detect_job(env: Mapping[str, str]) -> Job | None:
    """The job whose tree this container has, or ``None`` outside SageMaker (the same test as ``bin/python``)."""
    base = Path(env.get(environment.ENV_BASE_DIR) or environment.DEFAULT_BASE_DIR)
    if (base / PROCESSING_CONFIG).is_file():
        instance_type = None
        try:
            config = json.loads((base / PROCESSING_CONFIG).read_text(encoding="utf-8"))
            instance_type = ((config.get("ProcessingResources") or {}).get("ClusterConfig") or {}).get("InstanceType")
        except (OSError, ValueError, AttributeError):
            pass  # the GPU check then names the setting it lacks
        return Job("processing", base, base / "output" / "message", "processing script", instance_type or None)
    if any((base / name).is_file() for name in TRAINING_CONFIGS):
        return Job("training", base, environment.resolve_paths(env).failure_file, "training script")
    return None


def describe(args: Sequence[str]) -> str:
    """The command as a failure message names it: ``train.py``, ``-m package.main``, ``python -c ...``."""
    rest = list(args)
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c", "-"):
        # Interpreter options (-u, -B, -X dev, -W error) say nothing about what failed.
        takes_value = rest.pop(0) in ("-X", "-W")
        if takes_value and rest:
            rest.pop(0)
    if not rest:
        return "python (interactive)"
    if rest[0] == "-m" and len(rest) > 1:
        return f"-m {rest[1]}"
    if rest[0] == "-c":
        return "python -c " + shlex.quote(" ".join(rest[1:2]))[:80]
    return rest[0]


def record(job: Job, message: str) -> None:
    """Writes the reason on one line to the job's failure file (and stdout, in case it cannot be written)."""
    write_reason(job.failure_file, message)


def _session_marker(job: Job) -> Path:
    """Where the GPU check's result is kept for the rest of this process session (one check per job)."""
    # What the check depends on is part of the key: a command asking for other GPUs is checked again.
    asked = [os.environ.get(name, "") for name in (environment.ENV_EXPECTED_GPU_COUNT, environment.ENV_INSTANCE_TYPE, "CUDA_VISIBLE_DEVICES")]
    identity = "|".join([str(job.base_dir.resolve()), str(os.getsid(0)), job.instance_type or "", *asked])
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"trainer-guard-{key}.json"


def verified_gpus(job: Job, supervisor: runner.Supervisor, scratch: Path) -> int:
    """The GPU check's verified count: run once per session, then read back. Raises GpuCheckError."""
    marker = _session_marker(job)
    try:
        return int(json.loads(marker.read_text(encoding="utf-8"))["gpus"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    extra = {}
    if job.instance_type and not os.environ.get(environment.ENV_INSTANCE_TYPE):
        extra[environment.ENV_INSTANCE_TYPE] = job.instance_type
    started = time.monotonic()
    result = runner.verify_gpus(supervisor, None, scratch, what=job.what, extra_env=extra, network=job.kind == "training")
    gpus = int(result["gpus"])
    log("gpu-verified", gpus=gpus, seconds=f"{time.monotonic() - started:.1f}")
    marker.write_text(json.dumps({"gpus": gpus}), encoding="utf-8")
    return gpus


def command_env(reports: Path, gpus: int, inherited: Mapping[str, str]) -> dict[str, str]:
    """The guarded command's environment: the container's, plus the guard's markers and the hook."""
    env = dict(inherited)
    env[ENV_ACTIVE] = "1"
    env[ENV_REPORTS] = str(reports)
    trainer_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOK_DIR), trainer_root, inherited.get("PYTHONPATH")]))
    if gpus == 0:
        env["CUDA_VISIBLE_DEVICES"] = ""  # EXPECTED_GPU_COUNT=0: CPU on purpose, as the check did
    return env


def pick_report(reports: Path, guard_pid: int) -> dict[str, Any] | None:
    """The command's own report, else the earliest one that points into user code (a driver's child)."""
    found = []
    for path in reports.glob("*.json"):
        try:
            found.append((path.stat().st_mtime, json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            continue
    own = next((report for _, report in found if report.get("ppid") == guard_pid), None)
    if own is not None and own.get("file"):
        return own
    in_user_code = sorted((item for item in found if item[1].get("file")), key=lambda item: item[0])
    return in_user_code[0][1] if in_user_code else own


def _platform_reason(job: Job, since: float) -> str | None:
    """A reason already in the failure file from this run: the platform's, or the user's own.

    A script that writes its own failure file (or ExitMessage) keeps it, as SageMaker's
    containers do (sagemaker-training-toolkit and SDK v3's sm_train.sh write theirs only when
    the file is empty).
    """
    try:
        if job.failure_file.stat().st_mtime < since:
            return None
        text = " ".join(job.failure_file.read_text(encoding="utf-8", errors="replace").split())
    except OSError:
        return None
    return text or None


def run(job: Job, args: Sequence[str]) -> int:
    """Runs ``python ARGS`` inside the guarantees; returns the exit status to end with."""
    supervisor = runner.Supervisor(environment.script_stop_grace_seconds())
    supervisor.install()
    name = describe(args)
    log("guard", job=job.kind, command=name)
    with tempfile.TemporaryDirectory(prefix="trainer-guard-") as scratch_text:
        scratch = Path(scratch_text)
        reports = scratch / "reports"
        reports.mkdir()
        try:
            gpus = verified_gpus(job, supervisor, scratch)
        except TrainerError as err:
            record(job, str(err))
            return err.exit_code
        env = command_env(reports, gpus, os.environ)
        started_wall = time.time()
        started = time.monotonic()
        try:
            returncode = supervisor.run([sys.executable, *args], env=env, cwd=Path.cwd())
        except TrainingInterrupted as err:
            record(job, f"{err} ({name})")
            return err.exit_code
        seconds = time.monotonic() - started
        if returncode == 0:
            if job.kind == "processing":
                try:
                    outputs.check(job.base_dir, outputs.read_declared_paths(job.base_dir), started_wall, name)
                except TrainerError as err:
                    record(job, str(err))
                    return err.exit_code
            return 0
        if supervisor.stop_requested_at is not None:
            record(job, f"Stopped by SIGTERM: the {job.what} {name} was stopped after {seconds:.0f} s.")
            return TrainingInterrupted.exit_code
        platform = _platform_reason(job, started_wall)
        if platform is not None:
            return returncode if returncode > 0 else 128 - returncode
        failure = runner.script_failure(
            name, returncode, pick_report(reports, os.getpid()), supervisor.stderr_tail, what=job.what
        )
        record(job, str(failure))
    return returncode if returncode > 0 else 128 - returncode


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trainer.user_code.guard ARGS``: as ``python ARGS``, inside the job's guarantees."""
    args = list(sys.argv[1:] if argv is None else argv)
    job = detect_job(os.environ)
    if job is None or os.environ.get(ENV_ACTIVE):
        # Not a SageMaker job after all (or already guarded): be the plain interpreter.
        os.execv(sys.executable, [sys.executable, *args])
    try:
        return run(job, args)
    except GpuCheckError as err:  # pragma: no cover - run() records it; kept for callers of verified_gpus
        record(job, str(err))
        return err.exit_code
    except Exception as err:  # noqa: BLE001 - the last resort must still leave a failure file
        record(job, f"Unexpected {type(err).__name__} in the platform's guard around {describe(args)}: {err}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
