"""After ``cdk destroy``: list everything still carrying the project's tag and judge it.

    python -m scripts.teardown_audit                       # the account and region of your credentials
    python -m scripts.teardown_audit --sandbox             # data should be gone too
    python -m scripts.teardown_audit --region eu-west-1 --profile ml -c project_name=team2
    AWS_ENDPOINT_URL=http://localhost:5000 python -m scripts.teardown_audit   # an emulator

Every resource tagged ``Project=<project>`` is listed (Resource Groups Tagging API, plus IAM
roles and ECR repositories, which that API does not cover everywhere) with a verdict:

* ``ERROR``: compute left behind (an instance not terminated, a volume, a network interface, a
  launch template, an Elastic IP, a state machine, a function, a running training, processing,
  hyperparameter tuning or batch transform job, a training job's warm pool still ``Available``,
  a live SageMaker endpoint (jobs, endpoints, models and endpoint configs found by name too, the
  SDK's untagged ones: ``<project>-*`` as :class:`scripts.common.ProjectOwnership` judges it, so
  not project ``<project>-dev``'s), a job still running on the GPU cluster: a command of its
  ``<project>-cluster-train`` document Pending, InProgress or Cancelling), a project stack
  (``<project>-data``, ``-cluster``, ``-training`` or ``-serving``, exactly) that still exists,
  or, with ``--sandbox``, data that should have been deleted;
* ``kept``: data kept by design (buckets, KMS key, image repository) when
  ``delete_data_on_destroy`` is off, and the promotion record (``/<project>/serving/promotion``,
  rollback history): reported, not flagged;
* ``info``: history that cannot be deleted (finished training, processing, tuning and transform jobs, terminated
  instances, a KMS key pending deletion);
* ``UNCHECKED``: a resource (or a listing) the audit could not read: AWS answered its describe with
  an error other than "not found" (``AccessDenied`` to a narrow role, throttling past the retries).
  It fails the audit like an ERROR: what it cannot see may still bill, and a role without the
  permission must not make an audit look clean;
* ``warning``: anything else still there (network, roles, log groups, a model or endpoint config
  the pipeline's promote step created and ``scripts.teardown --stop-running`` did not delete...).

The project comes from the config (``cdk.json`` and ``-c`` overrides, as for ``cdk``), and a
sandbox (``delete_data_on_destroy``) expects its data gone without ``--sandbox``. Exit status 1
when any ERROR is found; 3, with one line, when the audit cannot run (no credentials, no region,
AWS unreachable), like every operator script.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import boto3
from botocore.exceptions import ClientError

from scripts.cluster_job import running_commands
from scripts.common import (
    AWS_CREDENTIALS,
    PROCESSING_JOB,
    RUNNING_JOB_STATES,
    TRAINING_JOB,
    TRANSFORM_JOB,
    TUNING_JOB,
    Aws,
    JobKind,
    ProjectOwnership,
    add_common_arguments,
    help_epilog,
    load_platform_config,
    project_stack_names,
    run,
    error_code,
    error_message,
    sagemaker_project_tag,
)
from stacks.components.cluster_job_document import document_name

ERROR, UNCHECKED, KEPT, INFO, WARNING = "ERROR", "UNCHECKED", "kept", "info", "warning"

GONE_CODES = frozenset({"ValidationException", "ResourceNotFound", "ResourceNotFoundException", "NotFoundException",
                        "InvalidInstanceID.NotFound"})
"""What a describe of a resource that no longer exists answers (SageMaker's ``ValidationException``
"Could not find ...", KMS's and EC2's not-found codes): the resource is gone. Any other error
means the audit could not look (:class:`_Unchecked`)."""

COMPUTE_TYPES = {
    "ec2:instance",
    "ec2:volume",
    "ec2:network-interface",
    "ec2:launch-template",
    "ec2:elastic-ip",
    "ec2:spot-instances-request",
    "ec2:fleet",
    "autoscaling:autoScalingGroup",
    "states:stateMachine",
    "lambda:function",
    "sagemaker:training-job",
    "sagemaker:processing-job",
    "sagemaker:hyper-parameter-tuning-job",
    "sagemaker:transform-job",
    "sagemaker:notebook-instance",
    "sagemaker:endpoint",
    "ecs:cluster",
    "ecs:service",
    "batch:compute-environment",
}
"""Resource types that run or bill by the hour: left behind after destroy is an error."""

DATA_TYPES = {"s3:bucket", "kms:key", "ecr:repository"}
"""Resource types the data plane keeps on destroy unless ``delete_data_on_destroy`` is set."""

JOB_STATUS = {
    "sagemaker:hyper-parameter-tuning-job": ("tuning job (its tuner starts trials, which bill, until it ends)", TUNING_JOB),
    "sagemaker:transform-job": ("batch transform job (it bills per instance-hour)", TRANSFORM_JOB),
}
"""Job kinds judged by their status: what the note calls it, and the kind (how it is described)."""


@dataclass(frozen=True)
class Finding:
    """One tagged resource still present.

    Attributes:
        arn: The resource's ARN (an SSM command, which has none: ``command/<id>``).
        kind: ``service:type`` taken from the ARN (``ec2:instance``, ``s3:bucket``...).
        verdict: ``ERROR``, ``UNCHECKED``, ``kept``, ``info`` or ``warning``.
        note: Why.
    """

    arn: str
    kind: str
    verdict: str
    note: str


@dataclass
class AuditReport:
    """Everything found, judged.

    Attributes:
        project: The ``Project`` tag value audited.
        region: The region audited.
        findings: One per resource, errors first.
        stacks_left: Project stacks that still exist (each also an error finding).
    """

    project: str
    region: str
    findings: list[Finding] = field(default_factory=list)
    stacks_left: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        """Findings that fail the audit: what is left behind, and what could not be checked."""
        return [f for f in self.findings if f.verdict in (ERROR, UNCHECKED)]

    @property
    def ok(self) -> bool:
        """True when nothing that should be gone is left."""
        return not self.errors

    def of(self, *verdicts: str) -> list[Finding]:
        """Findings with any of these verdicts."""
        return [f for f in self.findings if f.verdict in verdicts]

    def render(self) -> str:
        """Human-readable report, one line per resource."""
        order = {ERROR: 0, UNCHECKED: 1, WARNING: 2, KEPT: 3, INFO: 4}
        lines = [f"teardown audit: resources tagged Project={self.project} in {self.region}"]
        if not self.findings:
            lines.append("  nothing left")
        for f in sorted(self.findings, key=lambda f: (order.get(f.verdict, 9), f.kind, f.arn)):
            lines.append(f"  {f.verdict:<9} {f.kind:<28} {short_name(f.arn):<60} {f.note}")
        counts = {v: len(self.of(v)) for v in (ERROR, UNCHECKED, WARNING, KEPT, INFO)}
        lines.append(
            f"  => {'FAIL' if self.errors else 'OK'}: {counts[ERROR]} error(s), {counts[UNCHECKED]} unchecked,"
            f" {counts[WARNING]} warning(s), {counts[KEPT]} kept by design, {counts[INFO]} info"
        )
        return "\n".join(lines)


def short_name(arn: str) -> str:
    """The part of an ARN after the service and account that names the resource."""
    parts = arn.split(":", 5)
    return parts[5] if len(parts) == 6 else arn


def kind_of(arn: str) -> str:
    """``service:type`` of an ARN (``arn:aws:ec2:...:instance/i-1`` -> ``ec2:instance``)."""
    parts = arn.split(":", 5)
    if len(parts) < 6:
        return "unknown"
    service, resource = parts[2], parts[5]
    if service == "s3":
        return "s3:bucket" if "/" not in resource else "s3:object"
    if service == "sns":
        return "sns:topic"
    if service == "sqs":
        return "sqs:queue"
    if service == "elasticloadbalancing":
        return "elasticloadbalancing:" + resource.split("/")[0]
    resource_type = resource.split("/")[0].split(":")[0]
    return f"{service}:{resource_type}"


def audit(
    *,
    project: str,
    data_retained: bool,
    session: boto3.session.Session | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
) -> AuditReport:
    """Audit one account/region for resources tagged ``Project=<project>``.

    Args:
        project: Value of the ``Project`` tag (``gpu_training.project_name``).
        data_retained: ``True`` when buckets/key/repository are kept by design (the default);
            ``False`` for sandboxes deployed with ``delete_data_on_destroy``, where they are errors.
        session: boto3 session (credentials and region); the default session if ``None``.
        endpoint_url: An emulator's endpoint; ``None`` for AWS (or ``AWS_ENDPOINT_URL``).
        region: The region to audit; default the session's, else ``us-east-1``.
    """
    session = session or boto3.session.Session()
    region = region or session.region_name or "us-east-1"

    def client(service: str) -> Any:
        return session.client(service, endpoint_url=endpoint_url, region_name=region)

    report = AuditReport(project=project, region=region)
    arns: dict[str, None] = {}
    tagging = client("resourcegroupstaggingapi")
    for page in tagging.get_paginator("get_resources").paginate(TagFilters=[{"Key": "Project", "Values": [project]}]):
        for item in page.get("ResourceTagMappingList", []):
            arns[item["ResourceARN"]] = None
    stacks = [s for page in client("cloudformation").get_paginator("list_stacks").paginate() for s in page.get("StackSummaries", [])]
    owner = ProjectOwnership.from_stacks(project, stacks)
    sagemaker = client("sagemaker")
    tagged = set(arns)  # the project's by its tag: no ListTags needed for those
    records, unlisted = _project_sagemaker_records(sagemaker, owner, tagged)
    project_resources = _tagged_roles(client("iam"), project) + _tagged_repositories(client("ecr"), project) + records
    for arn in project_resources:
        arns[arn] = None

    ec2 = client("ec2")
    for arn in arns:
        try:
            report.findings.append(_judge(arn, data_retained=data_retained, client=client, ec2=ec2))
        except _Unchecked as unchecked:
            report.findings.append(Finding(arn, kind_of(arn), UNCHECKED, unchecked.note))
    report.findings.extend(unlisted)
    report.findings.extend(_cluster_jobs(client("ssm"), project))

    names = project_stack_names(project)  # exactly: project gputrain-dev's stacks are not gputrain's
    for stack in stacks:
        if stack["StackName"] in names and stack["StackStatus"] != "DELETE_COMPLETE":
            report.stacks_left.append(stack["StackName"])
            note = f"stack still exists ({stack['StackStatus']})"
            if stack["StackName"] == f"{project}-serving":
                # Promoted with -c serving.enabled=true, so `cdk destroy --all` without it does not see it.
                note += "; python -m scripts.teardown --stop-running --destroy removes it"
            report.findings.append(Finding(stack["StackId"], "cloudformation:stack", ERROR, note))
    return report


def _tagged_roles(iam: Any, project: str) -> list[str]:
    # The tagging API does not list IAM roles; CDK names a stack's roles <stack name>-..., and
    # every project stack is named <project>-..., so only those roles' tags need reading.
    roles = [role for role in _listed(iam, "list_roles", "Roles") if role["RoleName"].startswith(f"{project}-")]
    return [
        role["Arn"]
        for role in roles
        if _has_project_tag(iam.list_role_tags(RoleName=role["RoleName"]).get("Tags", []), project)
    ]


def _tagged_repositories(ecr: Any, project: str) -> list[str]:
    # ECR is in the tagging API on AWS but not in every emulator: read the tags directly.
    return [
        repo["repositoryArn"]
        for repo in _listed(ecr, "describe_repositories", "repositories")
        if _has_project_tag(ecr.list_tags_for_resource(resourceArn=repo["repositoryArn"]).get("tags", []), project)
    ]


def _listed(client: Any, operation: str, key: str) -> Iterator[Any]:
    """Every item under ``key`` of every page of the paginated ``operation``."""
    for page in client.get_paginator(operation).paginate():
        yield from page[key]


def _has_project_tag(tags: Sequence[Mapping[str, str]], project: str) -> bool:
    """Whether ``tags`` (``[{"Key": ..., "Value": ...}]``, as IAM and ECR list them) hold ``Project=<project>``."""
    return any(tag["Key"] == "Project" and tag["Value"] == project for tag in tags)


SAGEMAKER_RECORDS = (
    ("list_endpoints", "Endpoints", "EndpointName", "EndpointArn"),
    *((kind.lister, kind.summaries_key, kind.name_key, kind.arn_key) for kind in (TRAINING_JOB, PROCESSING_JOB, TUNING_JOB, TRANSFORM_JOB)),
    ("list_models", "Models", "ModelName", "ModelArn"),
    ("list_endpoint_configs", "EndpointConfigs", "EndpointConfigName", "EndpointConfigArn"),
)
"""What the audit also looks for by name: the listing, its summaries, their name and ARN fields."""


def _project_sagemaker_records(sagemaker: Any, owner: ProjectOwnership, tagged: set[str]) -> tuple[list[str], list[Finding]]:
    """The ARNs of the project's SageMaker records by name, and an UNCHECKED finding per listing that failed."""
    # Endpoints, jobs (training, processing, tuning, transform), models and endpoint configs by name
    # too: the pipeline, launch --tune --direct and the SageMaker SDK create them outside
    # CloudFormation, and neither every emulator's tagging API nor an untagged (SDK-made) job or
    # model lists them. A live endpoint or a running job bills by the hour. Which of the names are
    # the project's is ProjectOwnership's rule; tags are read only of those not already found by tag.
    def tag_of(arn: str) -> Optional[str]:
        if arn in tagged:
            return owner.project
        try:
            return sagemaker_project_tag(sagemaker, arn)
        except ClientError:
            return None  # tags unreadable (an emulator, a narrow role): the name decides

    found: list[str] = []
    unlisted: list[Finding] = []
    for operation, key, name_key, arn_key in SAGEMAKER_RECORDS:
        try:
            for page in sagemaker.get_paginator(operation).paginate(NameContains=owner.prefix):
                found += [item[arn_key] for item in owner.select(page.get(key, []), name_key=name_key, arn_key=arn_key, tag_of=tag_of)]
        except ClientError as err:
            what = f"sagemaker:{_operation(operation)}"
            unlisted.append(Finding(f"list/{what}", what, UNCHECKED, _Unchecked(what, err, f"{owner.prefix}* by name").note))
    return found, unlisted


def _operation(snake: str) -> str:
    """``list_endpoint_configs`` -> ``ListEndpointConfigs`` (the API's and IAM's name)."""
    return "".join(part.capitalize() for part in snake.split("_"))


class _Unchecked(Exception):
    """AWS answered a check with an error other than "not found": the audit cannot tell what is there."""

    def __init__(self, action: str, err: ClientError, what: str = "this resource") -> None:
        message = error_message(err)
        self.note = (
            f"could not check {what}: {action} answered {error_code(err) or 'an error'}"
            f"{f' ({message})' if message else ''}; it may still bill: audit with credentials allowed {action}"
        )
        super().__init__(self.note)


def _gone_or_unchecked(action: str, err: ClientError) -> None:
    """Return (the resource is gone) on a not-found answer; raise :class:`_Unchecked` on any other."""
    if error_code(err) not in GONE_CODES:
        raise _Unchecked(action, err) from err


def _cluster_jobs(ssm: Any, project: str) -> list[Finding]:
    # A command is no tagged resource, and the document goes with the cluster stack while its
    # commands stay listed: look for them by the document's name.
    document = document_name(project)
    try:
        commands = running_commands(ssm, document)
    except ClientError as err:
        what = "ssm:ListCommands"
        return [Finding(f"list/{what}", what, UNCHECKED, _Unchecked(what, err, f"the commands of {document}").note)]
    findings: list[Finding] = []
    for c in commands:
        what = f"cluster job {c.job_name}" if c.action == "run" else f"the {c.action} action of cluster job {c.job_name}"
        findings.append(Finding(
            f"command/{c.command_id}", "ssm:command", ERROR,
            f"compute left behind: {what} is {c.status} (SSM command {c.command_id} of {document}); python -m "
            f"scripts.teardown --stop-running stops it while the cluster stack exists, else aws ssm cancel-command "
            f"--command-id {c.command_id}",
        ))  # fmt: skip
    return findings


def _judge(arn: str, *, data_retained: bool, client: Callable[[str], Any], ec2: Any) -> Finding:
    kind = kind_of(arn)
    name = short_name(arn).split("/")[-1]
    if kind in DATA_TYPES:
        if kind == "kms:key":
            try:
                state = _kms_state(client("kms"), arn)
            except _Unchecked:
                if not data_retained:
                    raise
                state = None  # kept by design either way: its state changes no verdict
            if state == "PendingDeletion":
                return Finding(arn, kind, INFO, "deletion scheduled (KMS waiting period)")
        if data_retained:
            return Finding(arn, kind, KEPT, "data kept by design (delete_data_on_destroy=false)")
        return Finding(arn, kind, ERROR, "sandbox mode: should have been deleted with the stack")
    if kind == "ec2:instance":
        state = _instance_state(ec2, name)
        if state in {None, "terminated"}:
            return Finding(arn, kind, INFO, "terminated")
        return Finding(arn, kind, ERROR, f"compute left behind: instance is {state}")
    if kind == "sagemaker:training-job":
        status, pool = _training_job_status(client("sagemaker"), name)
        if status in RUNNING_JOB_STATES:
            return Finding(arn, kind, ERROR, f"compute left behind: training job is {status}")
        if pool == "Available":
            return Finding(arn, kind, ERROR, "compute left behind: its warm pool is Available (the instances bill until it "
                           "ends); python -m scripts.teardown --stop-running ends it")
        return Finding(arn, kind, INFO, f"job record ({status}); SageMaker keeps job history")
    if kind == "sagemaker:processing-job":
        status = _job_status(client("sagemaker"), PROCESSING_JOB, name)
        if status in RUNNING_JOB_STATES:
            return Finding(arn, kind, ERROR, f"compute left behind: processing job is {status}")
        return Finding(arn, kind, INFO, f"job record ({status}); SageMaker keeps job history")
    if kind in JOB_STATUS:
        what, job_kind = JOB_STATUS[kind]
        status = _job_status(client("sagemaker"), job_kind, name)
        if status in RUNNING_JOB_STATES:
            return Finding(arn, kind, ERROR, f"compute left behind: {what} is {status}; python -m scripts.teardown --stop-running stops it")
        return Finding(arn, kind, INFO, f"job record ({status}); SageMaker keeps job history")
    if kind in {"sagemaker:model", "sagemaker:endpoint-config"}:
        return Finding(
            arn, kind, WARNING,
            "left behind (no cost; made by the pipeline's promote step): python -m scripts.teardown --stop-running deletes it",
        )
    if kind == "sagemaker:endpoint":
        status = _endpoint_status(client("sagemaker"), name)
        if status is None:
            return Finding(arn, kind, INFO, "endpoint deleted")
        return Finding(arn, kind, ERROR, f"compute left behind: endpoint is {status} (GPU instances bill by the hour)")
    if kind == "ssm:parameter" and short_name(arn) == f"parameter/{project_of_record(arn)}/serving/promotion":
        return Finding(arn, kind, KEPT, "the promotion record (rollback history; free): kept by design")
    if kind in COMPUTE_TYPES:
        return Finding(arn, kind, ERROR, "compute left behind")
    return Finding(arn, kind, WARNING, "left behind (not compute, not kept data)")


def project_of_record(arn: str) -> str:
    """``<project>`` of ``arn:...:parameter/<project>/serving/promotion`` (scripts.promote's record)."""
    return short_name(arn).removeprefix("parameter/").split("/", 1)[0]


def _kms_state(kms: Any, arn: str) -> str | None:
    try:
        return kms.describe_key(KeyId=arn)["KeyMetadata"].get("KeyState")
    except ClientError as err:
        _gone_or_unchecked("kms:DescribeKey", err)
        return None


def _instance_state(ec2: Any, instance_id: str) -> str | None:
    try:
        reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    except ClientError as err:
        _gone_or_unchecked("ec2:DescribeInstances", err)
        return None
    instances = [i for r in reservations for i in r["Instances"]]
    return instances[0]["State"]["Name"] if instances else None


def _training_job_status(sagemaker: Any, name: str) -> tuple[str | None, str | None]:
    """The job's status and its warm pool's (``None`` where it has none, or the job is gone)."""
    try:
        job = sagemaker.describe_training_job(TrainingJobName=name)
    except ClientError as err:
        _gone_or_unchecked("sagemaker:DescribeTrainingJob", err)
        return None, None
    return job["TrainingJobStatus"], (job.get("WarmPoolStatus") or {}).get("Status")


def _job_status(sagemaker: Any, kind: JobKind, name: str) -> str | None:
    """The ``kind`` job's status (``None`` where it is gone or cannot be described)."""
    try:
        return str(getattr(sagemaker, kind.describe)(**{kind.name_key: name})[kind.status_key])
    except ClientError as err:
        _gone_or_unchecked(f"sagemaker:{_operation(kind.describe)}", err)
        return None


def _endpoint_status(sagemaker: Any, name: str) -> str | None:
    try:
        return sagemaker.describe_endpoint(EndpointName=name)["EndpointStatus"]
    except ClientError as err:
        _gone_or_unchecked("sagemaker:DescribeEndpoint", err)
        return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line: audit, print, exit 1 on errors."""
    parser = argparse.ArgumentParser(
        prog="python -m scripts.teardown_audit",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.teardown_audit",
            [
                ("", "after cdk destroy: what still carries the project's tag"),
                ("--sandbox", "deployed with delete_data_on_destroy=true: the data should be gone too"),
                ("--region eu-west-1 --profile ml -c gpu_training.project_name=team2", "another project, account and region"),
            ],
            credentials=AWS_CREDENTIALS,
            done="nothing left behind that should be gone (kept data is listed, not flagged)",
            failed="an ERROR: compute left behind (a cluster, tuning or transform job still running included), a project stack "
            "still there, or (--sandbox) data not deleted; or UNCHECKED: something the credentials may not read",
        ),
    )
    parser.add_argument("--project", help="value of the Project tag (default: the config's project_name)")
    parser.add_argument(
        "--sandbox", action="store_true", help="the platform was deployed with delete_data_on_destroy=true"
    )
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    config = load_platform_config(args.context)
    aws = Aws.from_args(args)
    report = audit(
        project=args.project or config.project_name,
        data_retained=not (args.sandbox or config.delete_data_on_destroy),
        session=aws.session,
        region=aws.region,  # one clear line when no region is set, before any call
    )
    print(report.render())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(run(main))
