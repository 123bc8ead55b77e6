"""Policy packs and acknowledgments.

Every acknowledgment goes through :func:`acknowledge` so that it names the finding and carries
a reason, next to the construct it concerns.
"""

from __future__ import annotations

from typing import Sequence

from aws_cdk import Acknowledgment, App, ArnFormat, Stack, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from cdk_nag import AwsSolutionsChecks, NIST80053R5Checks
from constructs import IConstruct

from stacks.config import TRAINING_SUBNET_GROUP
from stacks.gpu_instances import lookup


def add_policy_packs(app: App) -> None:
    """Run AWS Solutions and NIST 800-53 rev 5 on the whole app; a finding fails synth."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    Validations.of(app).add_plugins(NIST80053R5Checks(app))


def acknowledge(construct: IConstruct, reason: str, *rule_ids: str) -> None:
    """Acknowledge findings on ``construct`` with one reason a security reviewer would accept.

    Args:
        construct: The construct the findings are about (they apply to it and its children).
        reason: Why the finding is acceptable here; must be a real sentence.
        rule_ids: Rule ids, with a finding id where the rule reports several
            (``AwsSolutions-IAM5[Resource::*]``).
    """
    if len(reason) < 20:
        raise ValueError(f"acknowledgment of {rule_ids} needs a real reason, got {reason!r}")
    Validations.of(construct).acknowledge(*(Acknowledgment(id=rule_id, reason=reason) for rule_id in rule_ids))


def sagemaker_vpc_network_statements(stack: Stack, vpc: ec2.IVpc) -> tuple[list[iam.PolicyStatement], list[str]]:
    """What a SageMaker execution role needs to put a job's or endpoint's interfaces in ``vpc``.

    CreateNetworkInterface authorizes the new interface, the subnet and the security groups;
    ``ec2:Vpc`` is in the request context of the subnet and the groups only (AWS's Service
    Authorization Reference, checked by tests/gates/test_iam_authorization.py), so the VPC
    condition goes on those, and the interface itself is unconditioned: it can only be created
    in a subnet the first statement allows. Those are the ``Training`` subnets by id, never the
    ``Cluster`` ones: a job launched with another subnet in its ``VpcConfig`` (a direct launch
    holds no workflow's ``sagemaker:VpcSubnets`` pin) fails to start instead of taking the GPU
    nodes' fixed addresses.

    Returns:
        The statements, and the wildcard resource ARNs they use (for the IAM5 acknowledgment).
    """
    vpc_arn = stack.format_arn(service="ec2", resource="vpc", resource_name=vpc.vpc_id)
    security_groups, network_interfaces = (
        stack.format_arn(service="ec2", resource=kind, resource_name="*") for kind in ("security-group", "network-interface")
    )
    subnets = [
        stack.format_arn(service="ec2", resource="subnet", resource_name=subnet_id)
        for subnet_id in vpc.select_subnets(subnet_group_name=TRAINING_SUBNET_GROUP).subnet_ids
    ]
    statements = [
        iam.PolicyStatement(
            sid="NetworkInterfacesInTrainingVpcSubnets",
            actions=["ec2:CreateNetworkInterface"],
            resources=[*subnets, security_groups],
            conditions={"ArnEquals": {"ec2:Vpc": vpc_arn}},
        ),
        iam.PolicyStatement(sid="NewNetworkInterfaces", actions=["ec2:CreateNetworkInterface"], resources=[network_interfaces]),
        iam.PolicyStatement(
            sid="NetworkInterfacesInTrainingVpc",
            actions=["ec2:CreateNetworkInterfacePermission", "ec2:DeleteNetworkInterface", "ec2:DeleteNetworkInterfacePermission"],
            resources=[network_interfaces],
            conditions={"ArnEquals": {"ec2:Vpc": vpc_arn}},
        ),
    ]
    return statements, [security_groups, network_interfaces]


def platform_key_data_statement(stack: Stack, key: kms.IKey) -> iam.PolicyStatement:
    """An execution role's use of the platform key's data keys (``UsePlatformKey``), only in
    requests an AWS service makes for the role (``kms:ViaService``): S3, for the objects the
    role reads and writes, and SageMaker, for what it does with the role on the job's or
    endpoint's behalf. Code in the container holding the role's credentials cannot decrypt or
    generate data keys by calling KMS itself.
    """
    return iam.PolicyStatement(
        sid="UsePlatformKey",
        actions=["kms:Decrypt", "kms:GenerateDataKey"],
        resources=[key.key_arn],
        conditions={
            "StringEquals": {
                "kms:ViaService": [f"{service}.{stack.region}.amazonaws.com" for service in ("s3", "sagemaker")]
            }
        },
    )


def pass_role_to_sagemaker(sid: str, role_arn: str, resource_arn: "str | Sequence[str]") -> iam.PolicyStatement:
    """``iam:PassRole`` of ``role_arn`` to SageMaker only, for the resources ``resource_arn``
    (a pattern, or several: the project's jobs or models) where the request names them.

    ``iam:AssociatedResourceArn`` is in PassRole's request context only where the receiving
    service sets it, and SageMaker does not document doing so: the condition is ``...IfExists``,
    enforced where the key is present and no obstacle where it is not (named in
    ``scripts.security_report``'s output).
    """
    return iam.PolicyStatement(
        sid=sid,
        actions=["iam:PassRole"],
        resources=[role_arn],
        conditions={
            "StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"},
            "ArnLikeIfExists": {"iam:AssociatedResourceArn": resource_arn if isinstance(resource_arn, str) else list(resource_arn)},
        },
    )


def hardened_job_conditions(key_arn: str, subnet_ids: Sequence[str], security_group_ids: Sequence[str]) -> dict[str, dict[str, object]]:
    """Conditions of a Create*Job request that keeps the platform's hardening: network isolation, the
    platform key for its output (an ARN-typed key: an Arn operator, as the Service Authorization
    Reference types it), only ``subnet_ids`` and only ``security_group_ids`` (Null-guarded:
    ``ForAllValues`` over an absent key is true). The workflows' roles and the operators' policy
    grant job creation only under these (a tuning job's TrainingJobDefinition has the same keys)."""
    return merge_conditions(
        {
            "Bool": {"sagemaker:NetworkIsolation": "true"},
            "ArnEquals": {"sagemaker:OutputKmsKey": key_arn},
            "ForAllValues:StringEquals": {"sagemaker:VpcSubnets": list(subnet_ids)},
            "Null": {"sagemaker:VpcSubnets": "false"},
        },
        in_security_groups(security_group_ids),
    )


def in_security_groups(group_ids: Sequence[str]) -> dict[str, dict[str, object]]:
    """Conditions of a Create* request (job or model) whose VPC config uses only ``group_ids``
    (``sagemaker:VpcSecurityGroupIds``; Null-guarded: ``ForAllValues`` over an absent key is true)."""
    return {
        "ForAllValues:StringEquals": {"sagemaker:VpcSecurityGroupIds": list(group_ids)},
        "Null": {"sagemaker:VpcSecurityGroupIds": "false"},
    }


def merge_conditions(*parts: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    """One condition block from several, operator by operator (keys of one operator merged)."""
    merged: dict[str, dict[str, object]] = {}
    for part in parts:
        for operator, keys in part.items():
            merged.setdefault(operator, {}).update(keys)
    return merged


def sagemaker_principal(stack: Stack) -> iam.ServicePrincipal:
    """SageMaker, acting only for this account's resources in this region (confused deputy prevention)."""
    return iam.ServicePrincipal(
        "sagemaker.amazonaws.com",
        conditions={
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnLike": {"aws:SourceArn": stack.format_arn(service="sagemaker", resource="*", resource_name=None)},
        },
    )


def state_machine_principal(stack: Stack, state_machine_name: str) -> iam.ServicePrincipal:
    """Step Functions, acting only for the state machine ``state_machine_name`` of this account
    (confused deputy prevention): the trust of a state machine's own role."""
    return iam.ServicePrincipal(
        "states.amazonaws.com",
        conditions={
            "ArnLike": {
                "aws:SourceArn": stack.format_arn(
                    service="states",
                    resource="stateMachine",
                    resource_name=state_machine_name,
                    arn_format=ArnFormat.COLON_RESOURCE_NAME,
                )
            },
            "StringEquals": {"aws:SourceAccount": stack.account},
        },
    )


def sagemaker_image_and_volume_statements(key: kms.IKey, repository: ecr.IRepository, *, pull_sid: str) -> list[iam.PolicyStatement]:
    """What every SageMaker execution role of the platform needs for its container and ML volume.

    A KMS grant for the ML storage volume (only to AWS services), the image pull from the
    project's repository (``pull_sid`` names the role's use of it), and the ECR login, which
    supports no resource-level permission.
    """
    return [
        iam.PolicyStatement(
            sid="EncryptMlVolumes",
            actions=["kms:CreateGrant"],
            resources=[key.key_arn],
            conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
        ),
        iam.PolicyStatement(
            sid=pull_sid,
            actions=["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"],
            resources=[repository.repository_arn],
        ),
        iam.PolicyStatement(sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"]),
    ]


def describe_network_statement() -> iam.PolicyStatement:
    """EC2 Describe* a SageMaker execution role needs to place a job or endpoint in the VPC.

    These actions support no resource-level permissions, hence ``*`` (acknowledged by callers).
    """
    return iam.PolicyStatement(
        sid="DescribeNetwork",
        actions=[
            "ec2:DescribeNetworkInterfaces",
            "ec2:DescribeVpcs",
            "ec2:DescribeDhcpOptions",
            "ec2:DescribeSubnets",
            "ec2:DescribeSecurityGroups",
        ],
        resources=["*"],
    )


def state_machine_logging_statements() -> list[iam.PolicyStatement]:
    """What a state machine's role needs to deliver its execution logs and X-Ray traces.

    Log delivery and X-Ray's calls have no resource-level permissions: ``"*"`` is the narrowest.
    """
    return [
        iam.PolicyStatement(
            sid="LogDelivery",
            actions=[
                "logs:CreateLogDelivery",
                "logs:GetLogDelivery",
                "logs:UpdateLogDelivery",
                "logs:DeleteLogDelivery",
                "logs:ListLogDeliveries",
                "logs:PutResourcePolicy",
                "logs:DescribeResourcePolicies",
                "logs:DescribeLogGroups",
            ],
            resources=["*"],
        ),
        iam.PolicyStatement(
            sid="Tracing",
            actions=["xray:PutTraceSegments", "xray:PutTelemetryRecords", "xray:GetSamplingRules", "xray:GetSamplingTargets"],
            resources=["*"],
        ),
    ]


def sagemaker_job_log_statements(
    stack: Stack, *, log_group_name: str, project_name: str, metrics_sid: str, describe_network: bool = True
) -> tuple[list[iam.PolicyStatement], list[str]]:
    """What a SageMaker job's execution role needs for its logs and metrics, then (with
    ``describe_network``, for a role that has no such statement yet) its VPC lookups.

    SageMaker writes a job's logs into a fixed group (``/aws/sagemaker/TrainingJobs``,
    ``/aws/sagemaker/ProcessingJobs``) in streams named after the job, and publishes its metrics
    under the same name as namespace. The role may create and describe streams in the group and
    write only to the project's streams (``<project>-*``).

    Returns:
        ``(statements, wildcard resources to acknowledge)``.
    """
    log_group = stack.format_arn(
        service="logs", resource="log-group", resource_name=log_group_name, arn_format=ArnFormat.COLON_RESOURCE_NAME
    )
    log_group_children = f"{log_group}:*"
    project_streams = f"{log_group}:log-stream:{project_name}-*"
    statements = [
        iam.PolicyStatement(
            sid=metrics_sid,
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": log_group_name}},
        ),
        iam.PolicyStatement(
            sid="SageMakerLogGroup",
            actions=["logs:CreateLogGroup", "logs:DescribeLogStreams", "logs:CreateLogStream"],
            resources=[log_group, log_group_children],
        ),
        iam.PolicyStatement(
            sid="WriteProjectLogStreams",
            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
            resources=[project_streams],
        ),
    ]
    if describe_network:
        statements.append(describe_network_statement())
    return statements, [log_group_children, project_streams]


def sagemaker_job_runtime_statements(
    stack: Stack,
    *,
    key: kms.IKey,
    repository: ecr.IRepository,
    vpc: ec2.IVpc,
    log_group_name: str,
    project_name: str,
    metrics_sid: str,
    pull_sid: str,
) -> tuple[list[iam.PolicyStatement], list[str]]:
    """What every SageMaker job's execution role needs to run, whatever the job reads and writes.

    The platform key: its data keys only through S3 and SageMaker
    (:func:`platform_key_data_statement`), and ``kms:Encrypt`` and ``kms:DescribeKey`` without
    that condition (SageMaker requires ``kms:Encrypt`` of the execution role when the job's output
    ``KmsKeyId`` is set and does not say which service calls it; neither returns plaintext), the
    container image and ML volume
    (:func:`sagemaker_image_and_volume_statements`), the job's logs and metrics
    (:func:`sagemaker_job_log_statements`) and its network interfaces in the training VPC
    (:func:`sagemaker_vpc_network_statements`).

    Returns:
        ``(statements, wildcard resources to acknowledge)``, ``"*"`` included.
    """
    log_statements, log_wildcards = sagemaker_job_log_statements(
        stack, log_group_name=log_group_name, project_name=project_name, metrics_sid=metrics_sid
    )
    network_statements, network_wildcards = sagemaker_vpc_network_statements(stack, vpc)
    statements = [
        platform_key_data_statement(stack, key),
        iam.PolicyStatement(
            sid="EncryptOutputsWithPlatformKey", actions=["kms:Encrypt", "kms:DescribeKey"], resources=[key.key_arn]
        ),
        *sagemaker_image_and_volume_statements(key, repository, pull_sid=pull_sid),
        *log_statements,
        *network_statements,
    ]
    return statements, [*log_wildcards, *network_wildcards, "*"]


def pinned_job_creation_statements(
    sid: str,
    action: "str | Sequence[str]",
    resources: list[str],
    conditions: dict[str, dict[str, object]],
    *,
    instance_types: "list[str] | tuple[str, ...]",
    volume_key_arn: str,
) -> list[iam.PolicyStatement]:
    """``action`` (CreateTrainingJob/CreateProcessingJob, or several with the same keys) on ``resources`` with ``conditions``, only
    on ``instance_types`` (``sagemaker:InstanceTypes``, Null-guarded: ``ForAllValues`` over an
    absent key is true) and, on EBS-backed types, only with the platform volume key
    (``sagemaker:VolumeKmsKey``). Local-NVMe types take no volume key (SageMaker rejects one;
    the store is encrypted in hardware), so they get their own statement, named ``sid``; the
    EBS-backed types' statement is ``<sid>EbsVolumeKey``.
    """
    def nvme(instance_type: str) -> bool:
        row = lookup(instance_type)
        return bool(row is not None and row.local_nvme_gb > 0)

    groups = [
        (sid, sorted(t for t in instance_types if nvme(t)), {}),
        (f"{sid}EbsVolumeKey", sorted(t for t in instance_types if not nvme(t)), {"ArnEquals": {"sagemaker:VolumeKmsKey": volume_key_arn}}),
    ]
    statements = []
    for group_sid, types, volume in groups:
        if not types:
            continue
        on_types = {"ForAllValues:StringEquals": {"sagemaker:InstanceTypes": types}, "Null": {"sagemaker:InstanceTypes": "false"}}
        merged = merge_conditions(conditions, volume, on_types)
        actions = [action] if isinstance(action, str) else list(action)
        statements.append(iam.PolicyStatement(sid=group_sid, actions=actions, resources=resources, conditions=merged))
    return statements


def follow_tuning_jobs(tuning_jobs_arn: str) -> iam.PolicyStatement:
    """What a workflow that runs ``createHyperParameterTuningJob.sync`` needs besides creating the job:
    follow it, stop it (an aborted execution), list its trials, and tag it (CreateHyperParameterTuningJob
    with Tags also authorizes AddTags)."""
    return iam.PolicyStatement(
        sid="FollowAndStopProjectTuningJobs",
        actions=[
            "sagemaker:DescribeHyperParameterTuningJob",
            "sagemaker:StopHyperParameterTuningJob",
            "sagemaker:ListTrainingJobsForHyperParameterTuningJob",
            "sagemaker:AddTags",
            "sagemaker:ListTags",
        ],
        resources=[tuning_jobs_arn],
    )
