"""Start a training job, print its name and console link.

Usage (from the repository root)::

    python -m scripts.launch                                  # the configured job
    python -m scripts.launch --instance-type ml.g5.12xlarge --instance-count 2 --hp epochs=20 --on-demand
    python -m scripts.launch --watch                          # then follow it (scripts.watch)
    python -m scripts.launch --direct                         # CreateTrainingJob without the workflow
    python -m scripts.launch --dry-run [--direct]             # print what would be sent
    python -m scripts.launch --source-dir my_code --entry-point train.py --hp epochs=5   # your own script

By default the job runs through the deployed workflow (``<project>-training``): the execution,
named after the job, carries only the overrides and the workflow fills in the hardened rest.
``--direct`` calls ``CreateTrainingJob`` itself with the request built by the same function the
workflow's definition is built from (:func:`stacks.components.training_job_spec.create_training_job_request`),
using the stacks' outputs and ``cdk.json``; use it where Step Functions cannot run the job (a
local emulator) or to bypass the workflow. Options: ``--instance-type``, ``--instance-count``,
``--spot``/``--on-demand``, ``--hp KEY=VALUE`` (repeatable), ``--name`` (must start with
``<project>-``), plus ``--region``, ``--profile``, ``-c KEY=VALUE``.

Your own script (SageMaker script mode): ``--source-dir DIR --entry-point train.py`` packs DIR
into ``sourcedir.tar.gz``, uploads it KMS-encrypted to ``code/<job name>/`` in the artifacts
bucket (the only code prefix the job role may read), and the job gets it as its ``code``
channel, as the SageMaker SDK does for network-isolated jobs. ``--legacy-keras`` runs the script
with Keras 2 (tf-keras). Hyperparameters reach the script as ``--key value`` arguments.
"""

from __future__ import annotations

import argparse
import io
import json
import secrets
import sys
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence

from scripts.common import (
    Deployment,
    OperatorError,
    add_common_arguments,
    execution_console_url,
    job_console_url,
    run,
)
from stacks.components.training_job_spec import (
    CODE_PREFIX,
    JobResources,
    JobTemplate,
    LaunchError,
    LaunchOptions,
    create_training_job_request,
    default_job_name,
    load_metric_definitions,
    resolve_launch,
)

_PLACEHOLDER_RESOURCES = JobResources(
    role_arn="", image_uri="", datasets_bucket="", artifacts_bucket="", key_arn="", subnet_ids=(), security_group_ids=()
)


@dataclass(frozen=True)
class Launched:
    """A started job.

    Attributes:
        job_name: The training job's name.
        console_url: Its SageMaker console page.
        execution_arn: The workflow execution running it (``None`` for a direct launch).
        request: What was sent (execution input, or the CreateTrainingJob request).
    """

    job_name: str
    console_url: str
    execution_arn: Optional[str]
    request: dict[str, Any]


def parse_hyperparameters(items: Sequence[str]) -> dict[str, str]:
    """``["epochs=3", "lr=0.1"]`` -> ``{"epochs": "3", "lr": "0.1"}``."""
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OperatorError(f"hyperparameter {item!r} is not KEY=VALUE, e.g. --hp epochs=10")
        result[key.strip()] = value
    return result


def options_from_args(args: argparse.Namespace) -> LaunchOptions:
    """The launch options the command line asks for (the code is uploaded later, by :func:`launch`)."""
    if args.source_dir is None and (args.entry_point or args.legacy_keras):
        raise OperatorError("--entry-point and --legacy-keras need --source-dir DIR (the directory with your script)")
    if args.source_dir is not None and not args.entry_point:
        raise OperatorError("--source-dir needs --entry-point, the script to run inside it, e.g. --entry-point train.py")
    return LaunchOptions(
        job_name=args.name,
        instance_type=args.instance_type,
        instance_count=args.instance_count,
        use_spot=args.spot,
        hyperparameters=parse_hyperparameters(args.hp),
        entry_point=args.entry_point,
        legacy_keras=True if args.legacy_keras else None,
    )


_SKIPPED_NAMES = {"__pycache__", ".git", ".ipynb_checkpoints", ".DS_Store"}


def pack_source(source_dir: Path, entry_point: str) -> bytes:
    """``sourcedir.tar.gz`` of ``source_dir``'s contents (what the SageMaker SDK uploads).

    Raises:
        OperatorError: the directory or the entry point inside it is missing.
    """
    if not source_dir.is_dir():
        raise OperatorError(f"--source-dir {source_dir} is not a directory")
    if not (source_dir / entry_point).is_file():
        raise OperatorError(f"--entry-point {entry_point} is not a file in {source_dir}")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(source_dir.rglob("*")):
            relative = path.relative_to(source_dir)
            if any(part in _SKIPPED_NAMES for part in relative.parts) or path.suffix == ".pyc":
                continue
            tar.add(path, arcname=relative.as_posix(), recursive=False)
    return buffer.getvalue()


def code_key(job_name: str) -> str:
    """Where a job's ``sourcedir.tar.gz`` goes in the artifacts bucket."""
    return f"{CODE_PREFIX}{job_name}/sourcedir.tar.gz"


def upload_source(deployment: Deployment, options: LaunchOptions, source_dir: Path, *, dry_run: bool) -> LaunchOptions:
    """Packs and uploads the code (KMS, like every object of the platform); returns options with its URI."""
    archive = pack_source(source_dir, str(options.entry_point))
    resources = deployment.job_resources()
    key = code_key(str(options.job_name))
    if not dry_run:
        deployment.aws.client("s3").put_object(
            Bucket=resources.artifacts_bucket,
            Key=key,
            Body=archive,
            ServerSideEncryption="aws:kms",
            SSEKMSKeyId=resources.key_arn,
        )
    return replace(options, code_uri=f"s3://{resources.artifacts_bucket}/{key}")


def with_job_name(deployment: Deployment, options: LaunchOptions) -> LaunchOptions:
    """``options`` with a name: the given one, else ``<project>-<UTC time>-<4 hex>``."""
    if options.job_name:
        return options
    template = JobTemplate.from_config(deployment.config, _PLACEHOLDER_RESOURCES, metric_definitions=())
    return replace(options, job_name=default_job_name(template, suffix=secrets.token_hex(2)))


def direct_request(deployment: Deployment, options: LaunchOptions) -> dict[str, Any]:
    """The CreateTrainingJob request for ``options``, from the stacks' outputs and the config."""
    template = JobTemplate.from_config(deployment.config, deployment.job_resources(), load_metric_definitions())
    try:
        return create_training_job_request(template, resolve_launch(template, options))
    except LaunchError as err:
        raise OperatorError(str(err)) from None


def check_options(deployment: Deployment, options: LaunchOptions) -> None:
    """Refuse what the workflow would refuse, before starting an execution (one clear line)."""
    # A code URI is checked against the deployed artifacts bucket, as the workflow does.
    resources = deployment.job_resources() if options.code_uri else _PLACEHOLDER_RESOURCES
    template = JobTemplate.from_config(deployment.config, resources, metric_definitions=())
    try:
        resolve_launch(template, options)
    except LaunchError as err:
        raise OperatorError(str(err)) from None


def launch(
    deployment: Deployment,
    options: LaunchOptions,
    *,
    direct: bool = False,
    dry_run: bool = False,
    source_dir: Optional[Path] = None,
) -> Launched:
    """Start the job through the workflow, or with CreateTrainingJob when ``direct``.

    Args:
        deployment: Config, session and outputs.
        options: Overrides; a missing job name is generated.
        direct: Call CreateTrainingJob instead of starting a workflow execution.
        dry_run: Build and return the request without sending (or uploading) anything.
        source_dir: Your script's directory (with ``options.entry_point``): packed and uploaded first.
    """
    options = with_job_name(deployment, options)
    name = str(options.job_name)
    if source_dir is not None:
        check_options(deployment, replace(options, code_uri=None, entry_point=None))
        options = upload_source(deployment, options, source_dir, dry_run=dry_run)
    region = deployment.aws.region
    if direct:
        request = direct_request(deployment, options)
        if not dry_run:
            deployment.aws.client("sagemaker").create_training_job(**request)
        return Launched(name, job_console_url(region, name), None, request)

    check_options(deployment, options)
    state_machine_arn = deployment.training_outputs()["StateMachineArn"]
    execution_input = options.state_machine_input()
    execution_arn = deployment.execution_arn(name)
    if not dry_run:
        execution_arn = deployment.aws.client("stepfunctions").start_execution(
            stateMachineArn=state_machine_arn, name=name, input=json.dumps(execution_input)
        )["executionArn"]
    return Launched(name, job_console_url(region, name), execution_arn, execution_input)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.launch", description="Start a SageMaker training job (through the workflow by default)."
    )
    parser.add_argument("--instance-type", help="SageMaker GPU type, e.g. ml.g5.12xlarge (default: config)")
    parser.add_argument("--instance-count", type=int, help="instances (default: config)")
    spot = parser.add_mutually_exclusive_group()
    spot.add_argument("--spot", dest="spot", action="store_true", default=None, help="managed spot training")
    spot.add_argument("--on-demand", dest="spot", action="store_false", help="on-demand instances")
    parser.add_argument("--hp", action="append", default=[], metavar="KEY=VALUE", help="hyperparameter override (repeatable)")
    parser.add_argument("--name", help="job name, <project>-... (default: <project>-<UTC time>-<random>)")
    parser.add_argument("--source-dir", type=Path, help="your training code's directory (SageMaker script mode)")
    parser.add_argument("--entry-point", help="the script in --source-dir to run, e.g. train.py")
    parser.add_argument("--legacy-keras", action="store_true", help="run the script with Keras 2 (tf-keras)")
    parser.add_argument("--direct", action="store_true", help="call CreateTrainingJob instead of starting the workflow")
    parser.add_argument("--dry-run", action="store_true", help="print the request, send nothing")
    parser.add_argument("--watch", action="store_true", help="follow the job until it ends (exit code = outcome)")
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    deployment = Deployment.from_args(args)
    launched = launch(
        deployment, options_from_args(args), direct=args.direct, dry_run=args.dry_run, source_dir=args.source_dir
    )
    if args.dry_run:
        print(json.dumps(launched.request, indent=2, sort_keys=True))
        return 0
    print(f"job: {launched.job_name}")
    print(f"console: {launched.console_url}")
    if launched.execution_arn:
        print(f"execution: {execution_console_url(deployment.aws.region, launched.execution_arn)}")
    if args.watch:
        from scripts.watch import follow

        return follow(deployment, launched.job_name)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
