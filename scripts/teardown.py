"""The pre-destroy step: stop what ``cdk destroy`` cannot.

CloudFormation has no training-job resource, so ``cdk destroy`` neither stops a running job nor
waits for one; deleting the workflow's role would leave its job running (and billing) with no one
watching. Run this first::

    python -m scripts.teardown                    # list what is still running (exit 1 if anything)
    python -m scripts.teardown --stop-running     # stop it all and wait until it has ended
    python -m scripts.teardown --stop-running --destroy   # then: npx cdk destroy --all --force

``--stop-running`` stops every RUNNING execution of the training workflow (Step Functions then
stops its job) and every InProgress job named ``<project>-*`` (including ``--direct`` launches),
then waits (``--timeout``, default 900 s) until none is InProgress or Stopping. Exit 0 when
nothing is left running, 1 when something still is.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from scripts.common import (
    EXIT_FAILED,
    EXIT_OK,
    ROOT,
    Deployment,
    add_common_arguments,
    project_jobs,
    run,
)
from scripts.stop import stop_job

ACTIVE = ("InProgress", "Stopping")


@dataclass
class Running:
    """What is still running.

    Attributes:
        executions: ARNs of RUNNING workflow executions.
        jobs: Names of the project's jobs that are InProgress or Stopping.
    """

    executions: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.executions or self.jobs)


def find_running(deployment: Deployment) -> Running:
    """RUNNING executions of the workflow and InProgress/Stopping ``<project>-*`` jobs."""
    running = Running()
    if deployment.has_training_stack():
        paginator = deployment.aws.client("stepfunctions").get_paginator("list_executions")
        arn = deployment.training_outputs()["StateMachineArn"]
        for page in paginator.paginate(stateMachineArn=arn, statusFilter="RUNNING"):
            running.executions.extend(e["executionArn"] for e in page["executions"])
    for status in ACTIVE:
        running.jobs.extend(j["TrainingJobName"] for j in project_jobs(deployment.aws, deployment.job_name_prefix, status=status))
    return running


def stop_running(
    deployment: Deployment,
    *,
    wait: bool = True,
    timeout: float = 900.0,
    interval: float = 15.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Running:
    """Stop every running execution and job; with ``wait``, poll until they ended. What is left."""
    running = find_running(deployment)
    sfn = deployment.aws.client("stepfunctions")
    for arn in running.executions:
        print(f"stopping workflow execution {arn.rsplit(':', 1)[-1]}")
        sfn.stop_execution(executionArn=arn, error="StoppedByTeardown", cause="python -m scripts.teardown --stop-running")
    for name in running.jobs:
        print(f"stopping training job {name}")
        stop_job(deployment, name)
    deadline = time.monotonic() + timeout
    while True:
        left = find_running(deployment)
        if not left or not wait or time.monotonic() > deadline:
            return left
        print(f"waiting for {', '.join(left.jobs + [a.rsplit(':', 1)[-1] for a in left.executions])} to end ...")
        sleep(interval)


def cdk_destroy() -> int:
    """``cdk destroy --all --force`` with the project's pinned CLI; its exit code."""
    cdk = ROOT / "node_modules" / ".bin" / "cdk"
    command = [str(cdk)] if cdk.exists() else ["npx", "cdk"]
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    print("running: cdk destroy --all --force")
    return subprocess.run([*command, "destroy", "--all", "--force"], cwd=ROOT, env=env, check=False).returncode


def report(running: Running) -> None:
    for arn in running.executions:
        print(f"running workflow execution: {arn.rsplit(':', 1)[-1]}")
    for name in running.jobs:
        print(f"running training job: {name}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.teardown", description="Stop running training executions and jobs before cdk destroy."
    )
    parser.add_argument("--stop-running", action="store_true", help="stop them (default: only list them)")
    parser.add_argument("--no-wait", dest="wait", action="store_false", help="do not wait until they have ended")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait (default 900)")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between polls (default 15)")
    parser.add_argument("--destroy", action="store_true", help="afterwards run cdk destroy --all --force")
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    deployment = Deployment.from_args(args)
    if not args.stop_running:
        running = find_running(deployment)
        if running:
            report(running)
            print("stop them with: python -m scripts.teardown --stop-running")
            return EXIT_FAILED
        print("nothing running")
        return EXIT_OK if not args.destroy else cdk_destroy()
    left = stop_running(deployment, wait=args.wait, timeout=args.timeout, interval=args.interval)
    if left and args.wait:
        report(left)
        print(f"error: still running after {args.timeout:.0f}s; not destroying", file=sys.stderr)
        return EXIT_FAILED
    print("nothing left running" if not left else "stop requested; not waiting")
    if args.destroy:
        return cdk_destroy()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(run(main))
