"""List the project's training jobs, newest first.

Usage (from the repository root)::

    python -m scripts.list_jobs
    python -m scripts.list_jobs --status InProgress --max 50

Only jobs named ``<project>-*`` are listed (every job the workflow or ``launch`` creates).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Any, Optional, Sequence

from scripts.common import (
    AWS_CREDENTIALS,
    add_common_arguments,
    format_duration,
    help_epilog,
    parse_operator_args,
    print_table,
    project_jobs,
    run,
)

STATUSES = ("InProgress", "Completed", "Failed", "Stopping", "Stopped")


def job_rows(jobs: Sequence[dict[str, Any]], now: Optional[datetime] = None) -> list[list[str]]:
    """Table rows: name, status, secondary status, created (UTC), duration."""
    now = now or datetime.now(timezone.utc)
    rows = []
    for job in jobs:
        created = job["CreationTime"]
        end = job.get("TrainingEndTime") if job["TrainingJobStatus"] not in ("InProgress", "Stopping") else None
        rows.append(
            [
                job["TrainingJobName"],
                job["TrainingJobStatus"],
                job.get("SecondaryStatus", "-"),
                created.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M"),
                format_duration(((end or now) - created).total_seconds()),
            ]
        )
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.list_jobs",
        description="List the project's training jobs, newest first.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.list_jobs",
            [
                ("", "the newest 20 jobs named <project>-*"),
                ("--status InProgress --max 50", "only the running ones"),
                ("--region eu-west-1 -c gpu_training.project_name=team2", "another project's, in another region"),
            ],
            credentials=AWS_CREDENTIALS,
            done="listed (no job at all is not an error)",
        ),
    )
    parser.add_argument("--status", choices=STATUSES, help="only jobs in this status")
    parser.add_argument("--max", type=int, default=20, help="at most this many (default 20)")
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, deployment = parse_operator_args(build_parser(), argv)
    jobs = project_jobs(deployment.aws, deployment.job_name_prefix, status=args.status, limit=args.max)
    if not jobs:
        print(f"no training jobs named {deployment.job_name_prefix}* in {deployment.aws.region}")
        return 0
    print_table(job_rows(jobs), ["NAME", "STATUS", "SECONDARY", "CREATED (UTC)", "DURATION"])
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
