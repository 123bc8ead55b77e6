"""A processing job start to end: arguments, GPU check, then the user's script or the built-in transform.

Order is the guarantee, as in training: the GPU check (``python -m trainer.gpu_check`` in a
process of its own, ``EXPECTED_GPU_COUNT`` first) must pass before any input is read or any user
code is unpacked. Every failure ends as one line in ``<base>/output/message`` (what SageMaker
Processing reports as the job's ExitMessage) and training's exit codes: 2 configuration, 3 GPU,
5 data, 8 user script, 9 source, 143 SIGTERM. A message left by an earlier attempt is removed at
the start; one the user's script writes is its ExitMessage, kept on success and on failure, as
SageMaker's containers keep it (the platform's reason is then in the log).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from trainer.contract import environment
from trainer.contract.errors import ConfigError, TrainingInterrupted
from trainer.contract.failure import run_recorded, write_reason
from trainer.logs import log
from trainer.process import contract, options, stopping
from trainer.user_code import outputs as user_outputs
from trainer.user_code import runner as script_runner
from trainer.user_code import source

ENV_INSTANCE_TYPE = environment.ENV_INSTANCE_TYPE


def record_message(paths: contract.ProcessingPaths, message: str) -> None:
    """Writes the reason, on one line, to ``output/message`` (what SageMaker reports as ExitMessage),
    unless the user's script wrote one: that one stays (an earlier attempt's is gone by then, see
    :func:`main`)."""
    if _written(paths.message_file):
        log("failed", reason=" ".join(message.split()), kept=str(paths.message_file))
        return
    write_reason(paths.message_file, message)


def _written(file: Path) -> bool:
    """``file`` holds something."""
    try:
        return file.stat().st_size > 0
    except OSError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trainer process [ARGS]``: runs the job; returns its exit status (0 only on success)."""
    args = list(sys.argv[2:] if argv is None else argv)
    paths = contract.resolve_paths()
    # An earlier attempt's message goes first: whatever is there at the end, this run wrote.
    try:
        paths.message_file.unlink(missing_ok=True)
    except OSError as err:
        log("warning", removing=str(paths.message_file), error=str(err))
    status = run_recorded(
        lambda: run(contract.load_environment(), args), lambda reason: record_message(paths, reason), "the processing job"
    )
    if status != 0:
        return status
    log("success")
    return 0


def _check_extra_env(env: contract.ProcessingEnvironment) -> dict[str, str]:
    # The GPU check falls back to the instance type when EXPECTED_GPU_COUNT is unset; in a
    # processing job that type is only in processingjobconfig.json.
    if env.expected_gpu_count is None and env.instance_type and not os.environ.get(ENV_INSTANCE_TYPE):
        return {ENV_INSTANCE_TYPE: env.instance_type}
    return {}


def run(env: contract.ProcessingEnvironment, args: list[str]) -> None:
    """The job: the user's script when ``SAGEMAKER_PROGRAM`` is set, else the built-in transform.

    Raises:
        TrainerError: every failure, as a subclass that carries the exit code.
    """
    started = time.monotonic()
    supervisor = script_runner.Supervisor(environment.script_stop_grace_seconds())
    supervisor.install()
    what = "processing script" if env.program else "processing job"
    transform_options = None
    if env.program is None:
        # Pure-Python checks first, as training checks its hyperparameters: nothing is started yet.
        transform_options = options.parse(args)
        refuse_several_hosts(env)
    log("process-mode", job=env.job_name or "-", program=env.program or "built-in-transform", args=" ".join(args) or "-")
    with tempfile.TemporaryDirectory(prefix="trainer-process-") as scratch_text:
        gpu = script_runner.verify_gpus(supervisor, None, Path(scratch_text), what=what, extra_env=_check_extra_env(env))
        if env.program is None:
            # From here the transform runs in this process: SIGTERM stops it at its next batch.
            stopping.install()
            if supervisor.stop_requested_at is not None:
                raise TrainingInterrupted("Processing stopped by SIGTERM right after the GPU check; no data was read.")
        log("gpu-verified", gpus=gpu["gpus"], seconds=f"{time.monotonic() - started:.1f}")
        if env.program is not None:
            run_script(env, args, supervisor, Path(scratch_text), num_gpus=int(gpu["gpus"]))
            return
    assert transform_options is not None
    if int(gpu["gpus"]) == 0:
        # EXPECTED_GPU_COUNT=0: CPU on purpose, as the check did (TensorFlow is not imported yet).
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    from trainer.process import transform

    transform.run(env, transform_options)


def refuse_several_hosts(env: contract.ProcessingEnvironment) -> None:
    """The built-in transform writes one dataset with one manifest per output: one host only.

    Several hosts would each write ``.trainer-manifest.json`` and ``statistics.json`` to the same
    S3 prefix, the last upload winning; with ``ShardedByS3Key`` each would also see only part of
    the data. So the job is refused before any work, naming the setting to change.
    """
    if len(env.hosts) <= 1:
        return
    raw = env.inputs.get(contract.RAW_INPUT)
    sharded = f" (input '{contract.RAW_INPUT}' is {contract.SHARDED})" if raw and raw.distribution == contract.SHARDED else ""
    raise ConfigError(
        f"The built-in transform runs on one instance, but this job has {len(env.hosts)} "
        f"({', '.join(env.hosts)}){sharded}: set processing.instance_count to 1 in cdk.json (or --instance-count 1); "
        "one GPU instance converts the whole input, and a user processing script (SAGEMAKER_PROGRAM) may use several."
    )


def declared_paths(env: contract.ProcessingEnvironment) -> user_outputs.DeclaredPaths:
    """What the job uploads: its declared outputs (``train`` and ``validation`` when run without a job config)."""
    names = tuple(env.outputs) if env.job_config else (contract.TRAIN_OUTPUT, contract.VALIDATION_OUTPUT)
    inputs = tuple(env.input_dir(name) for name in (*env.inputs, contract.RAW_INPUT, contract.CODE_INPUT))
    return user_outputs.DeclaredPaths(outputs={name: env.output_dir(name) for name in names}, inputs=inputs)


def run_script(
    env: contract.ProcessingEnvironment,
    args: list[str],
    supervisor: script_runner.Supervisor,
    scratch: Path,
    *,
    num_gpus: int,
) -> None:
    """Runs the user's processing script with the container arguments as its argv, like a training script.

    Raises:
        SourceError: the code or its requirements cannot be had.
        UserScriptError: the script failed (exception, file and line when it raised).
        TrainingInterrupted: SIGTERM arrived while it ran.
    """
    assert env.program is not None
    submit = contract.submit_location(env)
    training_paths = environment.resolve_paths()
    code = source.prepare(submit, env.program, training_paths, {}, what="processing script")
    for name in (*env.outputs, contract.TRAIN_OUTPUT):
        # SageMaker creates the output directories before the container starts; locally we do.
        env.output_dir(name).mkdir(parents=True, exist_ok=True)
    process_env = os.environ
    legacy = environment.legacy_keras(process_env)
    child_env = {k: v for k, v in process_env.items() if not k.startswith("SM_")}
    child_env.update(contract.script_environment(env, num_gpus=num_gpus, num_cpus=multiprocessing.cpu_count()))
    child_env.pop("TF_CONFIG", None)
    if num_gpus == 0:
        child_env["CUDA_VISIBLE_DEVICES"] = ""
    child_env[environment.ENV_LEGACY_KERAS] = "1" if legacy else "0"
    child_env.setdefault("KERAS_BACKEND", "tensorflow")
    child_env["PYTHONUNBUFFERED"] = "1"
    # This runner gives the script the guard's guarantees: a python the script starts itself is not
    # checked again, and its tolerated failure never becomes the job's message.
    child_env[script_runner.ENV_GUARD_ACTIVE] = "1"
    child_env["PYTHONPATH"] = script_runner.user_pythonpath(code, process_env.get("PYTHONPATH"))
    report_file = scratch / "script-failure.json"
    command = script_runner.script_command(code, report_file, args)
    log("script-start", script=code.entry_point.relative_to(code.directory).as_posix(), args=" ".join(args) or "-")
    started = time.monotonic()
    started_wall = time.time()
    returncode = supervisor.run(command, env=child_env, cwd=code.directory)
    seconds = time.monotonic() - started
    log("script-exit", status=returncode, seconds=f"{seconds:.1f}")
    if returncode == 0:
        user_outputs.check(env.paths.base_dir, declared_paths(env), started_wall, env.program)
        return
    if supervisor.stop_requested_at is not None:
        raise TrainingInterrupted(
            f"Processing stopped by SIGTERM: the processing script {env.program} was stopped after {seconds:.0f} s."
        )
    import json

    report = json.loads(report_file.read_text(encoding="utf-8")) if report_file.is_file() else None
    raise script_runner.script_failure(env.program, returncode, report, supervisor.stderr_tail, what="processing script")
