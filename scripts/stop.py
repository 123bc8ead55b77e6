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
(exit 0). Exit 3 when there is neither a job nor an execution of that name.
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
    deployment: Deployment, name: str, kind: JobKind = TRAINING_JOB, *, job: Optional[Mapping[str, Any]] = None
) -> Optional[str]:
    """Ask SageMaker to stop the ``kind`` job ``name``; its status before (``None`` if it does not exist).
    ``job``: its description, where the caller has just read it (not read again)."""
    job = job if job is not None else describe_sagemaker_job(deployment.aws, kind, name)
    if job is None:
        return None
    status = str(job[kind.status_key])
    if status in ACTIVE_JOB_STATES:
        try:
            getattr(deployment.aws.client("sagemaker"), kind.stop)(**{kind.name_key: name})
        except ClientError as err:
            # The workflow's own stop may have got there first.
            if not (error_code(err) == "ValidationException" and "stop" in error_message(err).lower()):
                raise
    return status


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
        if status not in ("InProgress", "Stopping"):
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
    stopped_execution = stop_execution(deployment, name)
    found = find_sagemaker_job(deployment.aws, name, JOB_KINDS)
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
    kind = found[0]
    before = stop_job(deployment, name, kind, job=found[1])
    if before is None or before not in ACTIVE_JOB_STATES:
        print(f"{kind.label} {name} already {before or 'gone'}; nothing to stop")
        return 0
    print(f"stopping {kind.label} {name}" + (" (and its running trials)" if kind.label == "tuning job" else ""))
    if args.wait:
        print(f"{name} {wait_until_ended(deployment, name, timeout=args.timeout, interval=args.interval, kind=kind)}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
