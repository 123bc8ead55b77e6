"""Stop a job: a training job (and the workflow execution running it), a tuning job, a processing or a
batch transform job.

Usage (from the repository root)::

    python -m scripts.stop gputrain-20260101-120000-ab12
    python -m scripts.stop JOB --wait        # until SageMaker reports it Stopped
    python -m scripts.stop gputrain-tune-1   # a tuning job (scripts.launch --tune): its running trials stop with it

The name is looked up as a training job, then a tuning job, a processing job and a transform job
(the pipeline's steps, ``--direct`` launches and the SageMaker SDK's jobs alike). A workflow
execution of that name (``scripts.launch``, ``--tune``) is stopped as well: Step Functions then
stops its job; the job is also stopped directly, so a job launched with ``--direct`` stops the same
way. Stopping a tuning job stops its running trials, and its tuner starts no new one (stopping a
trial alone does not stop its tuner). A job that has already ended is reported and left alone
(exit 0). A training job's SageMaker warm pool bills until it ends: a running job with a keep-alive
gets KeepAlivePeriodInSeconds 0 before its stop (UpdateTrainingJob), so it keeps no pool, and an ended
job whose pool is still ``Available`` has it ended the same way. Exit 3 when there is neither a job
nor an execution of that name.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, Mapping, Optional, Sequence

from botocore.exceptions import ClientError

from scripts.common import (
    AWS_CREDENTIALS,
    JOB_KINDS,
    TRAINING_JOB,
    Deployment,
    JobKind,
    OperatorError,
    RUNNING_JOB_STATES,
    add_common_arguments,
    describe_execution,
    describe_sagemaker_job,
    error_code,
    error_message,
    find_sagemaker_job,
    seconds_argument,
    help_epilog,
    parse_operator_args,
    run,
)

ACTIVE_JOB_STATES = ("InProgress",)


def stop_execution(deployment: Deployment, name: str) -> bool:
    """Stop the running workflow execution named ``name``; whether there was one."""
    if not deployment.has_training_stack():
        return False
    arn = deployment.execution_arn(name)
    execution = describe_execution(deployment.aws, arn)
    if execution is None or execution["status"] != "RUNNING":
        return False
    deployment.aws.client("stepfunctions").stop_execution(
        executionArn=arn, error="StoppedByOperator", cause="python -m scripts.stop"
    )
    return True


def stop_job(
    deployment: Deployment, name: str, kind: JobKind = TRAINING_JOB, *, job: Optional[Mapping[str, Any]] = None,
    keep_alive_done: bool = False,
) -> Optional[str]:
    """Ask SageMaker to stop the ``kind`` job ``name``; its status before (``None`` if it does not exist).
    ``job``: its description, where the caller has just read it (not read again). A training job with a
    warm pool gets KeepAlivePeriodInSeconds 0 first (:func:`no_warm_pool_after`; ``keep_alive_done``:
    the caller did that already): a stopped job keeps none to bill."""
    job = job if job is not None else describe_sagemaker_job(deployment.aws, kind, name)
    if job is None:
        return None
    status = str(job[kind.status_key])
    if status in ACTIVE_JOB_STATES:
        if kind is TRAINING_JOB and not keep_alive_done:
            no_warm_pool_after(deployment, name, job)
        try:
            getattr(deployment.aws.client("sagemaker"), kind.stop)(**{kind.name_key: name})
        except ClientError as err:
            # The workflow's own stop may have got there first.
            if not (error_code(err) == "ValidationException" and "stop" in error_message(err).lower()):
                raise
    return status


def warm_pool_available(job: Mapping[str, Any]) -> bool:
    """Whether a training job's description shows its warm pool kept (``Available``: billing until it ends)."""
    return (job.get("WarmPoolStatus") or {}).get("Status") == "Available"


def end_warm_pool(deployment: Deployment, name: str) -> bool:
    """End the ``Available`` warm pool of training job ``name`` (KeepAlivePeriodInSeconds=0); whether
    SageMaker took the request. An error is printed, not raised."""
    print(f"ending the warm pool of training job {name} (KeepAlivePeriodInSeconds=0)")
    try:
        _keep_alive_off(deployment, name)
    except ClientError as err:
        # Its period may have run out in the meantime.
        print(f"  {name}: {error_code(err)}: {error_message(err)}")
        return False
    return True


def no_warm_pool_after(deployment: Deployment, name: str, job: Mapping[str, Any]) -> None:
    """Before an InProgress training job with a warm pool (``job``: its description) is stopped: its
    KeepAlivePeriodInSeconds set to 0 (UpdateTrainingJob takes it while the job runs), so that it
    leaves no pool to bill. An error is printed, not raised: the stop goes on, and a pool left all the
    same is ended once the job has ended (``--wait``, ``scripts.teardown``)."""
    if job["TrainingJobStatus"] != "InProgress" or not (job.get("ResourceConfig") or {}).get("KeepAlivePeriodInSeconds"):
        return
    try:
        _keep_alive_off(deployment, name)
    except ClientError as err:
        print(f"  {name}: warm pool kept for now: {error_code(err)}: {error_message(err)}")


def _keep_alive_off(deployment: Deployment, name: str) -> None:
    """UpdateTrainingJob ``KeepAlivePeriodInSeconds=0``: an Available warm pool ends, a running job leaves none."""
    deployment.aws.client("sagemaker").update_training_job(TrainingJobName=name, ResourceConfig={"KeepAlivePeriodInSeconds": 0})


def wait_until_ended(
    deployment: Deployment,
    name: str,
    *,
    timeout: float,
    interval: float,
    kind: JobKind = TRAINING_JOB,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Poll until the job leaves InProgress/Stopping; its final status."""
    deadline = time.monotonic() + timeout
    while True:
        job = describe_sagemaker_job(deployment.aws, kind, name)
        status = str(job[kind.status_key]) if job else "Stopped"
        if status not in RUNNING_JOB_STATES:
            return status
        if time.monotonic() > deadline:
            raise OperatorError(f"{name} is still {status} after {timeout:.0f}s", 1)
        sleep(interval)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.stop",
        description="Stop a training job (and the workflow execution running it), a tuning, processing or transform job.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.stop",
            [
                ("gputrain-20260101-120000-ab12", "stop the job and its workflow execution"),
                ("JOB --wait --timeout 600", "and wait until SageMaker reports it Stopped"),
                ("gputrain-tune-1", "a tuning job: its running trials stop with it, and no new one starts"),
            ],
            credentials=AWS_CREDENTIALS,
            done="the stop was requested, or the job had already ended",
            failed="--wait: the job is still stopping after --timeout",
        ),
    )
    parser.add_argument("job_name", help="the job to stop: training (and its workflow execution), tuning, processing or transform")
    parser.add_argument("--wait", action="store_true", help="wait until the job has stopped")
    parser.add_argument("--timeout", type=seconds_argument, default=900.0, help="seconds --wait waits (default 900)")
    parser.add_argument("--interval", type=seconds_argument, default=15.0, help="seconds between polls (default 15)")
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, deployment = parse_operator_args(build_parser(), argv)
    name = args.job_name
    found = find_sagemaker_job(deployment.aws, name, JOB_KINDS)
    keep_alive_done = found is not None and found[0] is TRAINING_JOB
    if keep_alive_done:
        # Before the execution's stop: Step Functions stops the job itself, and a job already Stopping
        # no longer takes a keep-alive of 0 the way a running one does.
        no_warm_pool_after(deployment, name, found[1])
    stopped_execution = stop_execution(deployment, name)
    if stopped_execution and found is not None:
        found = find_sagemaker_job(deployment.aws, name, JOB_KINDS)  # the workflow's stop may have moved it on
    if found is None and not stopped_execution:
        raise OperatorError(
            f"no training, tuning, processing or transform job named {name} in {deployment.aws.region}"
            " (see python -m scripts.list_jobs)"
        )
    if stopped_execution:
        print(f"stopped workflow execution {name}")
    if found is None:
        print(f"{name}: the execution had not created its job yet")
        return 0
    kind, job = found
    before = stop_job(deployment, name, kind, job=job, keep_alive_done=keep_alive_done)
    # Stopping by its workflow execution's stop (just asked): as a stop of this command's, --wait waits for it.
    stopping = before in ACTIVE_JOB_STATES or (before == "Stopping" and stopped_execution)
    if not stopping:
        if kind is TRAINING_JOB and warm_pool_available(job):
            # Ended, but its instances are kept for a next job and bill until the keep-alive runs out.
            print(f"{kind.label} {name} already {before}, but its warm pool is Available (billing)")
            end_warm_pool(deployment, name)
            return 0
        print(f"{kind.label} {name} already {before or 'gone'}; nothing to stop")
        return 0
    print(f"stopping {kind.label} {name}" + (" (and its running trials)" if kind.label == "tuning job" else ""))
    checkpoints = (job.get("CheckpointConfig") or {}).get("S3Uri") if kind is TRAINING_JOB and job else None
    if checkpoints:
        # The built-in trainer checkpoints the steps applied on SIGTERM, in the middle of an epoch too.
        print(f"its checkpoints stay in {checkpoints}: continue it with python -m scripts.launch --resume-from {name}")
    if args.wait:
        print(f"{name} {wait_until_ended(deployment, name, timeout=args.timeout, interval=args.interval, kind=kind)}")
        ended = describe_sagemaker_job(deployment.aws, kind, name) if kind is TRAINING_JOB else None
        if ended is not None and warm_pool_available(ended):
            end_warm_pool(deployment, name)  # the keep-alive could not be set to 0 before the stop
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
