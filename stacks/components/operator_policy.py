"""The operators' policies: what the day-to-day tools need, and nothing of the deployer's.

A platform team attaches the customer managed policy ``<project>-<region>-operator`` (the training
stack's ``OperatorPolicyName`` and ``OperatorPolicyArn`` outputs) to its ML engineers' role or
IAM Identity Center permission set (a fixed name, so that a permission set can reference it in
every account). It lets them run ``scripts.launch`` through the workflows, ``watch``,
``list_jobs``, ``stop``, ``invoke``, ``sdk_config`` and ``preflight`` on this project's resources:

- start, follow and stop the project's workflows (``<project>-training-job``, ``<project>-pipeline``);
- describe, list and stop ``<project>-*`` jobs (ending a training job's warm pool: keep-alive 0 only), read
  their log streams, invoke ``<project>-*`` endpoints;
- upload source code (``code/`` of the artifacts bucket, with the platform key through S3 only).

``<project>-<region>-operator-direct`` (``DirectLaunchPolicyName``) adds the ``--direct`` launches,
which create jobs without a workflow: only hardened ones, under the conditions the workflows' roles
hold (network isolation, the Training subnets and the job's security group, the platform key for
output and EBS volumes, the allowed instance types), passing only the project's job roles, only to
SageMaker, tagging only at creation.

Jobs on the GPU cluster (``scripts.cluster_job``, ``watch --cluster``) take the cluster stack's own
``JobOperatorPolicyArn``, which names that cluster's instances by id.

What they leave out on purpose: ``scripts.promote``, ``scripts.teardown`` and ``cdk`` deploy and
destroy stacks through the CDK bootstrap roles, which is a deployer's permission (the bootstrap's
CloudFormation execution role is administrator by default), and ``scripts.teardown_audit`` reads
every tagged resource of the account. ``tests/unit/test_operator_policy.py`` checks that each tool's
calls are allowed, that no other project's resources are, and that each policy fits IAM's size.
"""
from __future__ import annotations

from typing import Optional, Sequence

from aws_cdk import ArnFormat, CfnOutput, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.components.policy import hardened_job_conditions, pass_role_to_sagemaker, pinned_job_creation_statements
from stacks.components.processing_job_spec import SAGEMAKER_PROCESSING_LOG_GROUP, ProcessingTemplate
from stacks.components.training_job_spec import CHECKPOINT_PREFIX, SAGEMAKER_LOG_GROUP, JobTemplate
from stacks.components.training_job_workflow import acknowledge_wildcard_resources, workflow_name
from stacks.components.transform_job_spec import SAGEMAKER_TRANSFORM_LOG_GROUP
from stacks.config import USER_CODE_PREFIX

JOB_KINDS = {
    "training-job": ("DescribeTrainingJob", "StopTrainingJob"),
    "processing-job": ("DescribeProcessingJob", "StopProcessingJob"),
    "hyper-parameter-tuning-job": ("DescribeHyperParameterTuningJob", "StopHyperParameterTuningJob"),
    "transform-job": ("DescribeTransformJob", "StopTransformJob"),
}
"""SageMaker's job resource types, with the describe and stop actions the tools call on each."""
JOB_LOG_GROUPS = (SAGEMAKER_LOG_GROUP, SAGEMAKER_PROCESSING_LOG_GROUP, SAGEMAKER_TRANSFORM_LOG_GROUP)
"""The log groups SageMaker writes the project's training, processing and transform jobs to."""


def operator_policy_name(project_name: str, region: str) -> str:
    """``<project>-<region>-operator``: IAM names are global, and a project may be deployed in several regions."""
    return f"{project_name}-{region}-operator"


def direct_launch_policy_name(project_name: str, region: str) -> str:
    """``<project>-<region>-operator-direct``: the ``--direct`` launches, apart."""
    return f"{operator_policy_name(project_name, region)}-direct"


class OperatorPolicy(Construct):
    """The customer managed policies ``<project>-<region>-operator`` and ``...-operator-direct`` (module
    docstring), with their outputs. Two, not one: a managed policy holds at most 6,144 characters, and
    the direct launches' conditions (subnets, groups, keys, instance types) are most of them; a team
    that launches only through the workflows attaches the first alone.

    Attributes:
        policy: The operators' managed policy.
        direct_policy: The direct launches' managed policy.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project_name: str,
        training: JobTemplate,
        key: kms.IKey,
        artifacts_bucket: s3.IBucket,
        datasets_bucket: s3.IBucket,
        processing: Optional[ProcessingTemplate] = None,
        state_machine_names: Sequence[str] = (),
    ) -> None:
        """``training``/``processing``: the workflows' templates (their resources name the job roles; no
        processing where the pipeline is not deployed); ``state_machine_names``: the workflows besides
        ``<project>-training-job``."""
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self._stack = stack
        self._project = project_name
        jobs = {kind: self._arn("sagemaker", kind, f"{project_name}-*") for kind in JOB_KINDS}
        machines = [workflow_name(project_name), *state_machine_names]
        endpoints = [
            self._arn("sagemaker", "endpoint", f"{project_name}-*"),
            self._arn("sagemaker", "inference-component", f"{project_name}-*"),
        ]
        statements = [
            *self._stack_statements(),
            *self._workflow_statements(machines),
            iam.PolicyStatement(
                sid="FollowAndStopProjectJobs",
                actions=[
                    *(f"sagemaker:{action}" for pair in JOB_KINDS.values() for action in pair),
                    "sagemaker:ListTrainingJobsForHyperParameterTuningJob",
                    "sagemaker:ListTags",
                ],
                resources=list(jobs.values()),
            ),
            # scripts.stop ends a training job's warm pool (billing until it ends): UpdateTrainingJob, and only
            # to set its keep-alive to 0, never to keep instances longer or change anything else.
            iam.PolicyStatement(
                sid="EndWarmPools",
                actions=["sagemaker:UpdateTrainingJob"],
                resources=[jobs["training-job"]],
                conditions={"NumericEquals": {"sagemaker:KeepAlivePeriod": "0"}},
            ),
            iam.PolicyStatement(
                sid="ListJobs",
                actions=[
                    "sagemaker:ListTrainingJobs", "sagemaker:ListProcessingJobs", "sagemaker:ListHyperParameterTuningJobs",
                    "sagemaker:ListTransformJobs",
                ],
                resources=["*"],
            ),  # fmt: skip
            iam.PolicyStatement(
                sid="InvokeProjectEndpoints", actions=["sagemaker:DescribeEndpoint", "sagemaker:InvokeEndpoint"], resources=endpoints
            ),
            *self._log_statements(),
            *self._source_code_statements(key, artifacts_bucket),
            # launch --resume-from JOB checks that JOB's checkpoint location holds a checkpoint (names only).
            iam.PolicyStatement(
                sid="FindJobCheckpoints",
                actions=["s3:ListBucket"],
                resources=[artifacts_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": f"{CHECKPOINT_PREFIX}{project_name}-*"}},
            ),
            *self._preflight_statements(),
        ]
        name = operator_policy_name(project_name, stack.region)
        self.policy = self._managed_policy(
            "Policy", name, "what the operator tools (launch, watch, list_jobs, stop, invoke, preflight) need", statements,
            "The operators' tools act on every job, endpoint and execution a launch creates, so on the project's name "
            "prefix (<project>-*) and on each workflow's executions; the listings (jobs, stacks, zones, images, "
            "quotas) support no resource-level permissions; logs are read in the project's streams of SageMaker's "
            "fixed log groups.",
            [
                *jobs.values(), *self._workflow_wildcards(machines), *self._log_groups(), *self._log_streams(),
                *self._stack_arns(), *endpoints, artifacts_bucket.arn_for_objects(f"{USER_CODE_PREFIX}*"),
                *self._preflight_parameters(), "*",
            ],
        )  # fmt: skip
        direct_name = direct_launch_policy_name(project_name, stack.region)
        self.direct_policy = self._managed_policy(
            "DirectLaunchPolicy", direct_name, "scripts.launch --direct, only the workflows' hardened jobs",
            self._creation_statements(training, jobs, key, processing, datasets_bucket),
            "A direct launch creates a new job under the project's name prefix (<project>-*) each time, under the "
            "workflows' own conditions.",
            [jobs["training-job"], jobs["hyper-parameter-tuning-job"], jobs["processing-job"]],
        )  # fmt: skip
        for output, value, description in (
            ("OperatorPolicyName", name, "Attach to the operators' role or permission set"),
            ("OperatorPolicyArn", self.policy.managed_policy_arn, "The operators' policy"),
            ("DirectLaunchPolicyName", direct_name, "Attach too where operators may launch with --direct"),
            ("DirectLaunchPolicyArn", self.direct_policy.managed_policy_arn, "The direct launches' policy"),
        ):
            CfnOutput(stack, output, value=value, description=description)

    def _managed_policy(
        self, construct_id: str, name: str, purpose: str, statements: list[iam.PolicyStatement], reason: str, wildcards: list[str]
    ) -> iam.ManagedPolicy:
        """The managed policy ``name``, its wildcard resources acknowledged with ``reason``."""
        policy = iam.ManagedPolicy(
            self, construct_id, managed_policy_name=name, description=f"{self._project}: {purpose}", statements=statements
        )
        acknowledge_wildcard_resources(policy, reason, wildcards)
        return policy

    def _arn(self, service: str, resource: str, name: str, *, colon: bool = False) -> str:
        return self._stack.format_arn(
            service=service,
            resource=resource,
            resource_name=name,
            arn_format=ArnFormat.COLON_RESOURCE_NAME if colon else ArnFormat.SLASH_RESOURCE_NAME,
        )

    def _stack_arns(self) -> list[str]:
        return [self._arn("cloudformation", "stack", f"{self._project}-{part}/*") for part in ("data", "training")]

    def _stack_statements(self) -> list[iam.PolicyStatement]:
        """The tools find everything through the project's stacks' outputs; whose a job is, through ListStacks
        (``scripts.common.ProjectOwnership``: a longer project name's data stack)."""
        return [
            iam.PolicyStatement(sid="ReadProjectStackOutputs", actions=["cloudformation:DescribeStacks"], resources=self._stack_arns()),
            iam.PolicyStatement(sid="ListStacks", actions=["cloudformation:ListStacks"], resources=["*"]),
        ]

    def _workflow_wildcards(self, machines: Sequence[str]) -> list[str]:
        return [self._arn("states", "execution", f"{machine}:*", colon=True) for machine in machines]

    def _workflow_statements(self, machines: Sequence[str]) -> list[iam.PolicyStatement]:
        return [
            iam.PolicyStatement(
                sid="StartProjectWorkflows",
                actions=["states:StartExecution", "states:ListExecutions"],
                resources=[self._arn("states", "stateMachine", machine, colon=True) for machine in machines],
            ),
            iam.PolicyStatement(
                sid="FollowAndStopProjectExecutions",
                actions=["states:DescribeExecution", "states:GetExecutionHistory", "states:StopExecution"],
                resources=self._workflow_wildcards(machines),
            ),
        ]

    def _creation_statements(
        self,
        training: JobTemplate,
        jobs: dict[str, str],
        key: kms.IKey,
        processing: Optional[ProcessingTemplate],
        datasets_bucket: s3.IBucket,
    ) -> list[iam.PolicyStatement]:
        """A direct launch sends the workflow's request: only what the workflows' roles may create, tagged
        only by its creation (``sagemaker:TaggingAction``: no retagging of a job's ``Project``)."""
        r = training.resources
        created = [jobs["training-job"], jobs["hyper-parameter-tuning-job"]]
        actions = ["CreateTrainingJob", "CreateHyperParameterTuningJob"]
        statements = [
            *pinned_job_creation_statements(
                "CreateHardenedJobs", [f"sagemaker:{a}" for a in actions], created,
                hardened_job_conditions(r.key_arn, r.subnet_ids, r.security_group_ids),
                instance_types=list(training.allowed_instance_types or [training.default_instance_type]),
                volume_key_arn=key.key_arn,
            ),
            pass_role_to_sagemaker("PassJobRole", r.role_arn, created),
        ]  # fmt: skip
        if processing is not None:
            p = processing.resources
            created.append(jobs["processing-job"])
            actions.append("CreateProcessingJob")
            statements += [
                *pinned_job_creation_statements(
                    "CreateHardenedProcessingJobs", "sagemaker:CreateProcessingJob", [jobs["processing-job"]],
                    hardened_job_conditions(p.key_arn, p.subnet_ids, p.security_group_ids),
                    instance_types=list(processing.allowed_instance_types or [processing.default_instance_type]),
                    volume_key_arn=key.key_arn,
                ),
                pass_role_to_sagemaker("PassProcessingRole", p.role_arn, jobs["processing-job"]),
                # launch --process --direct refuses an output prefix that already holds data.
                iam.PolicyStatement(
                    sid="CheckProcessingOutputPrefix",
                    actions=["s3:ListBucket"],
                    resources=[datasets_bucket.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": f"{processing.output_prefix}*"}},
                ),
            ]  # fmt: skip
        statements.append(
            iam.PolicyStatement(
                sid="TagJobsAtCreation",
                actions=["sagemaker:AddTags"],
                resources=created,
                conditions={"StringEquals": {"sagemaker:TaggingAction": actions}},
            )
        )
        return statements

    def _log_groups(self) -> list[str]:
        """CloudWatch Logs authorizes a call on a log group as ``log-group:<name>:*``."""
        return [self._arn("logs", "log-group", f"{group}:*", colon=True) for group in JOB_LOG_GROUPS]

    def _log_streams(self) -> list[str]:
        """The project's streams: SageMaker names them ``<job>/algo-N-...`` (``<job>/<instance>-...`` for transform)."""
        return [self._arn("logs", "log-group", f"{group}:log-stream:{self._project}-*", colon=True) for group in JOB_LOG_GROUPS]

    def _log_statements(self) -> list[iam.PolicyStatement]:
        """``watch`` pages through a job's streams and reads them; other projects' streams stay unread."""
        return [
            iam.PolicyStatement(sid="FindJobLogStreams", actions=["logs:DescribeLogStreams"], resources=self._log_groups()),
            iam.PolicyStatement(sid="ReadJobLogs", actions=["logs:GetLogEvents"], resources=self._log_streams()),
        ]

    def _source_code_statements(self, key: kms.IKey, artifacts_bucket: s3.IBucket) -> list[iam.PolicyStatement]:
        """``--source-dir`` uploads ``code/<job>/sourcedir.tar.gz`` under the platform key (the bucket policy
        refuses any other), whose data keys are only for S3's requests for the artifacts bucket (its
        bucket key's encryption context)."""
        return [
            iam.PolicyStatement(
                sid="UploadSourceCode", actions=["s3:PutObject"], resources=[artifacts_bucket.arn_for_objects(f"{USER_CODE_PREFIX}*")]
            ),
            iam.PolicyStatement(
                sid="EncryptUploadsWithPlatformKey",
                actions=["kms:GenerateDataKey"],
                resources=[key.key_arn],
                conditions={
                    "StringEquals": {
                        "kms:ViaService": f"s3.{self._stack.region}.amazonaws.com",
                        "kms:EncryptionContext:aws:s3:arn": artifacts_bucket.bucket_arn,
                    },
                },
            ),
        ]

    def _preflight_parameters(self) -> list[str]:
        stack = self._stack
        return [
            f"arn:{stack.partition}:ssm:{stack.region}::parameter/aws/service/deeplearning/*",
            self._arn("ssm", "parameter", "cdk-bootstrap/*"),
        ]

    def _preflight_statements(self) -> list[iam.PolicyStatement]:
        """``scripts.preflight`` (read only): zones, GPU and endpoint offerings, the DLAMI, quotas, the CDK bootstrap's version."""
        return [
            iam.PolicyStatement(
                sid="PreflightReads",
                actions=[
                    "ec2:DescribeAvailabilityZones", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeImages",
                    "ec2:DescribeVpcEndpointServices",
                    "servicequotas:GetServiceQuota", "servicequotas:GetAWSDefaultServiceQuota",
                    "servicequotas:ListServiceQuotas", "servicequotas:ListAWSDefaultServiceQuotas",
                ],
                resources=["*"],
            ),  # fmt: skip
            iam.PolicyStatement(sid="PreflightParameters", actions=["ssm:GetParameter"], resources=self._preflight_parameters()),
        ]
