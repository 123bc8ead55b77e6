"""Script mode, start to end: GPU check, code, requirements, the user's process, its outcome.

Order is the guarantee: the GPU check runs (in a process of its own, so its TensorFlow runtime
and GPU memory are gone before the script starts) and must pass before any user code is
unpacked or run; on several hosts every host name must then resolve (bounded, as AWS's toolkit
waits); then requirements install; then the script runs in its own process group with
the toolkit's environment. The runner stays in Python without TensorFlow, forwards SIGTERM and
SIGINT to the whole group, and kills it after ``SCRIPT_STOP_GRACE_SECONDS`` (the contract's
:func:`~trainer.contract.environment.script_stop_grace_seconds`) so the job ends inside
the 120 s SageMaker allows after a stop or spot interruption.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trainer
from trainer.contract.environment import (
    ENV_LEGACY_KERAS,
    TrainingEnvironment,
    legacy_keras,
    script_stop_grace_seconds,
    wait_for_dns,
)
from trainer.contract.errors import (
    ConfigError,
    GpuCheckError,
    RendezvousError,
    TrainerError,
    TrainingInterrupted,
    UserScriptError,
)
from trainer.logs import log
from trainer.user_code import contract, keras_hint, source

ENV_JOB_START = "TRAINER_JOB_START_TIME"
# Set for the script: the image's python (bin/python) is then the plain interpreter, not the guard
# (trainer.user_code.guard), whose check and failure file the runner already gives.
ENV_GUARD_ACTIVE = "TRAINER_GUARD_ACTIVE"
LAUNCHER = Path(__file__).resolve().parent / "launcher.py"
STDERR_TAIL_LINES = 20


class Supervisor:
    """Runs one child process at a time in its own group and relays SIGTERM/SIGINT to it."""

    def __init__(self, grace_seconds: float) -> None:
        self.grace_seconds = grace_seconds
        self.stop_requested_at: float | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._killer: threading.Timer | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._relay)
        signal.signal(signal.SIGINT, self._relay)

    def _signal_group(self, signum: int) -> None:
        child = self._child
        if child is not None and child.poll() is None:
            try:
                os.killpg(child.pid, signum)
            except ProcessLookupError:
                pass

    def _relay(self, signum: int, frame: Any) -> None:
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
            log("sigterm", action=f"forwarded to the script; killed after {self.grace_seconds:g} s if still running")
            self._killer = threading.Timer(self.grace_seconds, self._signal_group, args=(signal.SIGKILL,))
            self._killer.daemon = True
            self._killer.start()
        self._signal_group(signum)

    def run(self, command: list[str], *, env: Mapping[str, str], cwd: Path) -> int:
        """Runs ``command`` to its end; its stderr is passed through, the last lines kept in :attr:`stderr_tail`."""
        if self.stop_requested_at is not None:
            raise TrainingInterrupted("Stopped by SIGTERM before the script started.")
        self.stderr_tail = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._child = subprocess.Popen(  # noqa: S603
            command, env=dict(env), cwd=cwd, start_new_session=True, stderr=subprocess.PIPE
        )
        relay = threading.Thread(target=self._relay_stderr, args=(self._child,), daemon=True)
        relay.start()
        try:
            code = self._child.wait()
            relay.join(timeout=10)
            return code
        finally:
            self._child = None
            if self._killer is not None and self.stop_requested_at is None:
                self._killer.cancel()


    def _relay_stderr(self, child: subprocess.Popen[bytes]) -> None:
        assert child.stderr is not None
        for raw in child.stderr:
            sys.stderr.buffer.write(raw)
            sys.stderr.flush()
            line = raw.decode("utf-8", errors="replace").strip()
            if line:
                self.stderr_tail.append(line)


def _trainer_root() -> str:
    return str(Path(trainer.__file__).resolve().parent.parent)


def script_command(code: source.SourceCode, report_file: Path, args: list[str]) -> list[str]:
    """How the user's entry point is started: a ``.py`` through the launcher, anything else as a command.

    The launcher is started by its file with ``-P`` (see :mod:`trainer.user_code.launcher`): the
    working directory is the user's code, and a package of theirs named ``trainer`` must neither
    hide the launcher nor be hidden by the image's package. Other entry points run as AWS's
    toolkit runs a command (:func:`trainer.user_code.source.entry_command`): under their ``#!``
    line, ``/bin/sh`` for a ``.sh`` without one.
    """
    if code.entry_point.suffix == ".py":
        return [sys.executable, "-P", str(LAUNCHER), str(report_file), str(code.directory), str(code.entry_point), *args]
    return [*source.entry_command(code.entry_point), *args]


def user_pythonpath(code: source.SourceCode, inherited: str | None) -> str:
    """The script's PYTHONPATH: its installed requirements, its own directory, the platform, then what was set."""
    return os.pathsep.join(
        filter(None, [str(code.site_dir) if code.site_dir else None, str(code.directory), _trainer_root(), inherited])
    )


def verify_gpus(
    supervisor: Supervisor,
    env: TrainingEnvironment | None,
    scratch: Path,
    *,
    what: str = "training script",
    extra_env: Mapping[str, str] | None = None,
    network: bool = False,
) -> dict[str, Any]:
    """The GPU check (``python -m trainer.gpu_check``) in its own process; raises the check's error.

    Args:
        supervisor: Runs the check as a child in its own process group (SIGTERM forwarded).
        env: Unused by the check itself (the child reads the same environment); kept for callers.
        scratch: Where the check writes its result file.
        what: What is not started when the check fails ("training script", "processing job").
        extra_env: Variables added for the check only (processing passes the instance type).
        network: Also the network check (trainer.network_check: EFA where the instance type has it),
            for training, whose hosts may talk over NCCL.

    Raises:
        ConfigError: the check could not read the job's configuration (exit 2).
        GpuCheckError: the GPUs or the network failed the check (exit 3), or the check process
            ended without a result (killed by a signal: a crash in the driver or CUDA libraries).
        TrainerError: the check failed unexpectedly (exit 1).
        TrainingInterrupted: SIGTERM arrived during the check.
    """
    result_file = scratch / "gpu-check.json"
    child_env = {**os.environ, **(extra_env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [_trainer_root(), child_env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "trainer.gpu_check", str(result_file), *(["--network"] if network else [])]
    code = supervisor.run(command, env=child_env, cwd=scratch)
    if supervisor.stop_requested_at is not None:
        raise TrainingInterrupted(f"Stopped by SIGTERM during the GPU check; the {what} never started.")
    try:
        result = json.loads(result_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        ended = f"was killed by {_signal_name(-code)}" if code < 0 else f"ended with status {code}"
        raise GpuCheckError(
            f"GPU check failed: the check process {ended} without a result (a crash in the driver "
            f"or CUDA libraries); see the log above. The {what} was not started."
        ) from None
    if not result.get("ok"):
        raise check_error(result, what)
    return result


def check_error(result: Mapping[str, Any], what: str) -> TrainerError:
    """The failed check's error, of the class its ``exit_code`` names, with the check's own message.

    A configuration mistake is exit 2 here as in ``python -m trainer``, a GPU or network check
    failure 3, anything the check did not expect 1.
    """
    message = f"{result.get('error')} The {what} was not started."
    exit_code = result.get("exit_code")
    if not isinstance(exit_code, int) or exit_code <= 0:
        return GpuCheckError(message)
    for error_class in (ConfigError, GpuCheckError):
        if exit_code == error_class.exit_code:
            return error_class(message)
    error = TrainerError(message)
    error.exit_code = exit_code
    return error


def _signal_name(signum: int) -> str:
    """``SIGSEGV`` for 11; ``signal N`` for a number Python does not name."""
    return signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else f"signal {signum}"


def _last_error_line(stderr_tail: Any) -> str:
    """The script's last stderr line that reads like an error (argparse's usage error, a shell message)."""
    lines = [line for line in stderr_tail if not line.startswith(("WARNING:", "I0000", "W0000", "E0000"))]
    errors = [line for line in lines if "error" in line.lower()]
    chosen = (errors or lines or [""])[-1]
    return chosen[:300]


def script_failure(
    job: contract.ScriptJob | str,
    returncode: int,
    report: dict[str, Any] | None,
    stderr_tail: Any = (),
    *,
    what: str = "training script",
) -> UserScriptError:
    """The one-line UserScriptError for a script that ended with ``returncode`` (``job``: the job or its program)."""
    script = job if isinstance(job, str) else job.program
    said_last = _last_error_line(stderr_tail)
    if returncode < 0:
        signum = -returncode
        name = _signal_name(signum)
        if signum == signal.SIGKILL:
            return UserScriptError(
                f"The {what} {script} was killed by SIGKILL, most often the kernel's out-of-memory killer: "
                "the instance ran out of host memory. Use a larger instance type, a smaller batch, or smaller "
                "shuffle/prefetch buffers.",
                exit_code=128 + signum,
            )
        return UserScriptError(f"The {what} {script} was killed by {name}; see the job's log.", exit_code=128 + signum)
    if report:
        where = ""
        if report.get("file"):
            where = f" at {report['file']} line {report.get('line')}"
            if report.get("function") and report["function"] != "<module>":
                where += f" in {report['function']}()"
            if report.get("code"):
                where += f": {report['code']}"
        inside = f" (raised inside {report['raised_in']})" if report.get("raised_in") and report.get("file") else ""
        if report.get("type") == "SystemExit":
            said = f": {report['message']}" if report.get("message") and report["message"] not in where else ""
            if not said and said_last:
                said = f"; its last error output: {said_last}"
            return UserScriptError(f"The {what} {script} called sys.exit({returncode}){where}{said}.")
        hint = keras_hint.hint(report, stderr_tail, os.environ)
        return UserScriptError(
            f"The {what} {script} raised {report.get('type')}: {report.get('message')}{where}{inside}. "
            + (f"{hint} " if hint else "")
            + "The full traceback is in the job's log."
        )
    last = f"; its last error output: {said_last}" if said_last else ""
    hint = keras_hint.hint(None, stderr_tail, os.environ)
    return UserScriptError(f"The {what} {script} exited with status {returncode}{last}. {hint + ' ' if hint else ''}See the job's log.")


def start_parameter_server(env: TrainingEnvironment, child_env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """This host's ``ps`` task (:mod:`trainer.user_code.ps_server`), started before the script, as the toolkit does."""
    ps_env = dict(child_env)
    ps_config = contract.tf_config_for_ps(env, child_env, ps_task=True)
    ps_env["TF_CONFIG"] = json.dumps(ps_config)
    ps_env["PYTHONPATH"] = os.pathsep.join(filter(None, [_trainer_root(), child_env.get("PYTHONPATH")]))
    log("parameter-server", task=ps_config["task"]["index"], action="starting")
    return subprocess.Popen(  # noqa: S603 - our interpreter and module
        [sys.executable, "-m", "trainer.user_code.ps_server"], env=ps_env, start_new_session=True
    )


def stop_parameter_server(server: subprocess.Popen[bytes]) -> None:
    """Ends this host's parameter server (it serves until told otherwise)."""
    if server.poll() is None:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


def wait_for_hosts(env: TrainingEnvironment, supervisor: Supervisor) -> None:
    """On several hosts, waits until every host name resolves, as AWS's toolkit does before any script runs.

    Bounded by ``RENDEZVOUS_TIMEOUT_SECONDS`` from now, as the built-in trainer's wait.

    Raises:
        RendezvousError: a host name did not resolve in time (the script never started).
        TrainingInterrupted: SIGTERM arrived while waiting.
    """
    if env.cluster.num_workers < 2:
        return
    started = time.monotonic()
    wait_for_dns(env.cluster, started + env.rendezvous_timeout_seconds, lambda: supervisor.stop_requested_at is not None)
    if supervisor.stop_requested_at is not None:
        raise TrainingInterrupted("Stopped by SIGTERM while waiting for the job's host names to resolve; the training script never started.")
    log("hosts-resolved", hosts=",".join(env.cluster.hosts), seconds=f"{time.monotonic() - started:.1f}")


def wait_for_master(env: TrainingEnvironment, process_env: Mapping[str, str], supervisor: Supervisor) -> None:
    """A worker host keeps its parameter server up until the master's port closes (the toolkit's ``_wait_until_master_is_down``)."""
    import socket

    master = contract.ps_addresses(env, process_env)[0][0]
    host, _, port = master.rpartition(":")
    log("parameter-server", action=f"script done; serving until the master {master} ends")
    while supervisor.stop_requested_at is None:
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                pass
        except OSError:
            log("parameter-server", action=f"master {master} is down; stopping")
            return
        time.sleep(1.0)


def run(env: TrainingEnvironment, job: contract.ScriptJob) -> float:
    """Runs the user's script inside the platform's guarantees; returns its wall time in seconds.

    Raises:
        GpuCheckError: the host does not show the GPUs it promised (the script never started).
        SourceError: the code or its requirements cannot be had.
        UserScriptError: the script failed; the message names the exception, file and line.
        TrainingInterrupted: SIGTERM arrived (stop, spot interruption).
    """
    started_wall = time.time()
    started = time.monotonic()
    process_env = os.environ
    supervisor = Supervisor(script_stop_grace_seconds())
    supervisor.install()
    legacy = legacy_keras(process_env)
    log("script-mode", program=job.program, submit_directory=job.submit_directory, legacy_keras=legacy)

    with tempfile.TemporaryDirectory(prefix="trainer-script-") as scratch_text:
        scratch = Path(scratch_text)
        gpu = verify_gpus(supervisor, env, scratch, network=True)
        log("gpu-verified", gpus=gpu["gpus"], seconds=f"{time.monotonic() - started:.1f}")
        wait_for_hosts(env, supervisor)

        code = source.prepare(job.submit_directory, job.program, env.paths, env.input_data_config)
        # SageMaker creates these before the container starts; on an EC2 node or locally we do.
        for directory in (env.paths.model_dir, env.paths.output_dir / "data", env.paths.output_dir / "intermediate"):
            directory.mkdir(parents=True, exist_ok=True)
        child_env = {k: v for k, v in process_env.items() if not k.startswith("SM_")}
        child_env.update(contract.sm_environment(env, job, num_gpus=int(gpu["gpus"]), process_env=process_env))
        config = contract.job_tf_config(env, job, process_env)
        if config is None:
            child_env.pop("TF_CONFIG", None)
        else:
            child_env["TF_CONFIG"] = json.dumps(config)
        parameter_servers = job.parameter_server and config is not None
        if job.multi_worker_mirrored or job.parameter_server:
            spread = contract.distribution(env, job.framework_params)
            log("distribution", hosts=",".join(spread.hosts), this_host=spread.includes_current, tf_config=config is not None)
        if int(gpu["gpus"]) == 0:
            child_env["CUDA_VISIBLE_DEVICES"] = ""  # EXPECTED_GPU_COUNT=0: CPU on purpose, as the check did
        child_env[ENV_LEGACY_KERAS] = "1" if legacy else "0"
        child_env.setdefault("KERAS_BACKEND", "tensorflow")
        child_env[ENV_JOB_START] = f"{started_wall:.3f}"
        child_env["PYTHONUNBUFFERED"] = "1"
        # A python the script starts (subprocess, `python` in train.sh) is the plain interpreter: a
        # probe the script tolerates must not re-run the GPU check or write output/failure.
        child_env[ENV_GUARD_ACTIVE] = "1"
        child_env["PYTHONPATH"] = user_pythonpath(code, process_env.get("PYTHONPATH"))
        report_file = scratch / "script-failure.json"
        args = contract.to_cmd_args(job.user_hyperparameters)
        command = script_command(code, report_file, args)
        log(
            "script-start",
            script=code.entry_point.relative_to(code.directory).as_posix(),
            args=json.dumps(args),
            seconds_since_start=f"{time.monotonic() - started:.1f}",
        )
        # The platform's helpers inside the script (trainer.toolkit's rendezvous watchdog) record
        # their own failure; a stale file from an earlier attempt must not pass for one.
        env.paths.failure_file.unlink(missing_ok=True)
        script_started = time.monotonic()
        ps_server = start_parameter_server(env, child_env) if parameter_servers else None
        try:
            returncode = supervisor.run(command, env=child_env, cwd=code.directory)
            if ps_server is not None and returncode == 0 and config is not None and config["task"]["type"] != "master":
                wait_for_master(env, process_env, supervisor)
        finally:
            if ps_server is not None:
                stop_parameter_server(ps_server)
        seconds = time.monotonic() - script_started
        report = json.loads(report_file.read_text(encoding="utf-8")) if report_file.is_file() else None

    log("script-exit", status=returncode, seconds=f"{seconds:.1f}")
    if returncode == 0:
        model_files = [p for p in env.paths.model_dir.rglob("*") if p.is_file()] if env.paths.model_dir.is_dir() else []
        if not model_files:
            log("warning", message=f"the script wrote nothing to {env.paths.model_dir} (SM_MODEL_DIR); the job's model.tar.gz will be empty")
        return seconds
    if supervisor.stop_requested_at is not None:
        raise TrainingInterrupted(
            f"Training stopped by SIGTERM: the training script {job.program} was stopped after {seconds:.0f} s. "
            f"With trainer.toolkit's callbacks (BackupAndRestore in {env.paths.checkpoint_dir}), a restart resumes at "
            "the last completed epoch."
        )
    if env.paths.failure_file.is_file():
        recorded = " ".join(env.paths.failure_file.read_text(encoding="utf-8", errors="replace").split())
        if recorded:
            # Written inside the script by the platform's helpers; more precise than the exit status.
            error_class = RendezvousError if recorded.startswith("Rendezvous") else UserScriptError
            raise error_class(recorded)
    raise script_failure(job, returncode, report, supervisor.stderr_tail)
