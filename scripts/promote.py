"""Point the GPU endpoint at a finished training job's model (blue/green, rolled back on alarm).

Usage (from the repository root)::

    python -m scripts.promote gputrain-20260101-120000-ab12
    python -m scripts.promote JOB --dry-run        # check the job and print the deploy command

The job must have completed and its ``model.tar.gz`` must be where the serving stack reads it
(``training-jobs/<job>/output/model.tar.gz`` in the artifacts bucket). Then the serving stack is
deployed with ``serving.training_job_name=<job>``: CloudFormation creates a new Model and
EndpointConfig and updates the Endpoint with its blue/green ``DeploymentConfig``; SageMaker
shifts traffic to the new fleet, bakes, and rolls back if the 5xx or latency alarm fires, in
which case the deploy fails and this script exits 1. A job that failed, was stopped or is still
running is refused (exit 1), as is a missing job or artifact (exit 3).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Optional, Sequence

from botocore.exceptions import ClientError

from scripts.common import (
    EXIT_FAILED,
    ROOT,
    Deployment,
    OperatorError,
    add_common_arguments,
    describe_job,
    error_code,
    run,
    stack_name,
)

ARTIFACT_TEMPLATE = "training-jobs/{job}/output/model.tar.gz"


def check_job(deployment: Deployment, job: str) -> str:
    """The job's model URI, after checking the job completed and the artifact is in place."""
    description = describe_job(deployment.aws, job)
    if description is None:
        raise OperatorError(f"training job {job} not found in {deployment.aws.region} (see python -m scripts.list_jobs)")
    status = str(description["TrainingJobStatus"])
    if status != "Completed":
        reason = f": {description['FailureReason']}" if description.get("FailureReason") else ""
        raise OperatorError(f"{job} is {status}{reason}; only a Completed job's model can be promoted", EXIT_FAILED)
    bucket = deployment.outputs("data", ("ArtifactsBucketName",))["ArtifactsBucketName"]
    key = ARTIFACT_TEMPLATE.format(job=job)
    expected = f"s3://{bucket}/{key}"
    actual = (description.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
    if actual != expected:
        raise OperatorError(
            f"{job} wrote its model to {actual or 'nowhere'}, not {expected} where the serving stack reads it; "
            "deploy with -c serving.model_artifact_key=<key> instead"
        )
    try:
        deployment.aws.client("s3").head_object(Bucket=bucket, Key=key)
    except ClientError as err:
        if error_code(err) in ("404", "NoSuchKey", "NotFound"):
            raise OperatorError(f"{expected} does not exist (deleted, or the job's upload failed)") from None
        raise
    return expected


def deploy_command(deployment: Deployment, job: str, overrides: Sequence[str]) -> list[str]:
    """``cdk deploy <project>-serving`` with the serving stack pointed at ``job``."""
    cdk = ROOT / "node_modules" / ".bin" / "cdk"
    command = [str(cdk)] if cdk.exists() else ["npx", "cdk"]
    context = [arg for item in overrides for arg in ("-c", item if item.startswith("gpu_training.") else f"gpu_training.{item}")]
    return [
        *command,
        "deploy",
        stack_name(deployment.config, "serving"),
        "--require-approval",
        "never",
        *context,
        "-c",
        "gpu_training.serving.enabled=true",
        "-c",
        f"gpu_training.serving.training_job_name={job}",
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.promote", description="Serve a finished job's model.")
    parser.add_argument("job_name", help="a Completed training job of the project")
    parser.add_argument("--dry-run", action="store_true", help="check the job and print the deploy command only")
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    deployment = Deployment.from_args(args)
    model = check_job(deployment, args.job_name)
    command = deploy_command(deployment, args.job_name, args.context)
    print(f"{args.job_name} completed; model {model}")
    print("deploy: cdk " + " ".join(command[command.index("deploy") :]))
    if args.dry_run:
        return 0
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    returncode = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
    if returncode != 0:
        raise OperatorError(
            f"deploy of {stack_name(deployment.config, 'serving')} failed (exit {returncode}); a deployment that "
            "tripped an alarm was rolled back and the endpoint serves the previous model",
            EXIT_FAILED,
        )
    print(f"{stack_name(deployment.config, 'serving')} serves {args.job_name}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
