"""List the project's training jobs, newest first (or its tuning, processing or transform jobs).

Usage (from the repository root)::

    python -m scripts.list_jobs
    python -m scripts.list_jobs --status InProgress --max 50
    python -m scripts.list_jobs --kind tuning        # tuning jobs (scripts.launch --tune)
    python -m scripts.list_jobs --kind all           # every kind, with a KIND column

Only jobs named ``<project>-*`` are listed (every job the workflow, the pipeline or ``launch``
creates, and the SageMaker SDK's with the platform's ``base_job_name``), and of those only the
project's (:class:`scripts.common.ProjectOwnership`): not one whose ``Project`` tag names another
project, nor an untagged ``gputrain-dev-*`` job where project ``gputrain-dev`` is deployed.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Any, Optional, Sequence

from scripts.common import (
    AWS_CREDENTIALS,
    JOB_KINDS,
    TRAINING_JOB,
    JobKind,
    RUNNING_JOB_STATES,
    UsageError,
    add_common_arguments,
    count_argument,
    format_duration,
    help_epilog,
    parse_operator_args,
    print_table,
    project_jobs,
    run,
)
from stacks.sagemaker_limits import sagemaker_service_model

KINDS = {kind.label.split()[0]: kind for kind in JOB_KINDS}
"""``--kind`` choices: training, tuning, processing, transform."""


def kind_statuses(kind: JobKind) -> tuple[str, ...]:
    """The statuses a kind's listing filters on (``StatusEquals``), from botocore's model of SageMaker: a tuning
    job can be ``DeleteFailed``, a training job ``Deleting``, a processing or transform job neither (the model the
    config's limits read, parsed once)."""
    operation = "".join(part.capitalize() for part in kind.lister.split("_"))  # list_training_jobs: ListTrainingJobs
    return tuple(sagemaker_service_model().shape(f"{operation}Request", "StatusEquals")["enum"])


STATUSES = tuple(dict.fromkeys(status for kind in JOB_KINDS for status in kind_statuses(kind)))
"""``--status`` choices: every kind's."""


def job_rows(jobs: Sequence[dict[str, Any]], now: Optional[datetime] = None, kind: JobKind = TRAINING_JOB) -> list[list[str]]:
    """Table rows: name, status, secondary status (training jobs; ``-`` for the others), created (UTC), duration."""
    now = now or datetime.now(timezone.utc)
    rows = []
    for job in jobs:
        created = job["CreationTime"]
        end = job.get(kind.end_key) if job[kind.status_key] not in RUNNING_JOB_STATES else None
        rows.append(
            [
                job[kind.name_key],
                job[kind.status_key],
                job.get("SecondaryStatus", "-"),
                created.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M"),
                format_duration(((end or now) - created).total_seconds()),
            ]
        )
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.list_jobs",
        description="List the project's training jobs (or tuning, processing, transform jobs), newest first.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.list_jobs",
            [
                ("", "the newest 20 jobs named <project>-*"),
                ("--status InProgress --max 50", "only the running ones"),
                ("--kind all --status InProgress", "every kind of job still running (tuning, processing, transform too)"),
            ],
            credentials=AWS_CREDENTIALS,
            done="listed (no job at all is not an error)",
        ),
    )
    parser.add_argument("--status", choices=STATUSES, help="only jobs in this status")
    parser.add_argument("--max", type=count_argument, default=20, help="at most this many (default 20; of each kind with --kind all)")
    parser.add_argument(
        "--kind", choices=[*KINDS, "all"], default="training",
        help="which jobs: training (default), tuning, processing, transform, or all of them",
    )
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, deployment = parse_operator_args(build_parser(), argv)
    kinds = list(KINDS.values()) if args.kind == "all" else [KINDS[args.kind]]
    if args.status is not None:
        if args.kind != "all" and args.status not in kind_statuses(kinds[0]):
            raise UsageError(f"--status {args.status}: {kinds[0].label}s have no such status (theirs: "
                             f"{', '.join(kind_statuses(kinds[0]))})")  # fmt: skip
        kinds = [kind for kind in kinds if args.status in kind_statuses(kind)]  # the others have none in it
    rows: list[tuple[datetime, list[str]]] = []
    for kind in kinds:
        jobs = project_jobs(deployment, status=args.status, limit=args.max, kind=kind)
        for job, row in zip(jobs, job_rows(jobs, kind=kind)):
            rows.append((job["CreationTime"], [kind.label.split()[0], *row] if args.kind == "all" else row))
    if not rows:
        what = "jobs" if args.kind == "all" else f"{kinds[0].label}s"
        print(f"no {what} named {deployment.job_name_prefix}* in {deployment.aws.region}")
        return 0
    rows.sort(key=lambda item: item[0], reverse=True)
    header = ["NAME", "STATUS", "SECONDARY", "CREATED (UTC)", "DURATION"]
    print_table([row for _, row in rows], ["KIND", *header] if args.kind == "all" else header)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
