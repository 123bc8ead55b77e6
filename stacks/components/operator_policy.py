"""The operators' policy: what the day-to-day tools need, and nothing of the deployer's.

A platform team attaches the customer managed policy ``<project>-<region>-operator`` (the training
stack's ``OperatorPolicyName`` and ``OperatorPolicyArn`` outputs) to its ML engineers' role or
IAM Identity Center permission set (a fixed name, so that a permission set can reference it in
every account). It lets them run ``scripts.launch`` (the workflows, and ``--direct`` launches of
the same hardened requests), ``watch``, ``list_jobs``, ``stop``, ``invoke``, ``sdk_config`` and
``preflight`` on this project's resources:

- start, follow and stop the project's workflows (``<project>-training-job``, ``<project>-pipeline``);
- create only hardened jobs: the conditions the workflows' roles hold (network isolation, the
  Training subnets and the job's security group, the platform key for output and EBS volumes, the
  allowed instance types), passing only the project's job roles, only to SageMaker;
- describe, list and stop ``<project>-*`` jobs, read their logs, invoke ``<project>-*`` endpoints;
- upload source code (``code/`` of the artifacts bucket, with the platform key through S3 only).

Jobs on the GPU cluster (``scripts.cluster_job``, ``watch --cluster``) take the cluster stack's own
``JobOperatorPolicyArn``, which names that cluster's instances by id: attach both.

What it leaves out on purpose: ``scripts.promote``, ``scripts.teardown`` and ``cdk`` deploy and
destroy stacks through the CDK bootstrap roles, which is a deployer's permission (the bootstrap's
CloudFormation execution role is administrator by default), and ``scripts.teardown_audit`` reads
every tagged resource of the account. ``tests/unit/test_operator_policy.py`` checks that each tool's
calls are allowed and that no other project's resources are.
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
from stacks.components.training_job_spec import SAGEMAKER_LOG_GROUP, JobTemplate
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


def operator_policy_name(project_name: str, region: str) -> str:
    """``<project>-<region>-operator``: IAM names are global, and a project may be deployed in several regions."""
    return f"{project_name}-{region}-operator"


class OperatorPolicy(Construct):
    """The customer managed policy ``<project>-<region>-operator`` (module docstring), with its outputs.

    Attributes:
        policy: The managed policy.
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
        statements = [
            *self._stack_statements(),
            *self._workflow_statements(machines),
            *self._creation_statements(training, jobs, key, processing),
            iam.PolicyStatement(
                sid="FollowAndStopProjectJobs",
                actions=[
                    *(f"sagemaker:{action}" for pair in JOB_KINDS.values() for action in pair),
                    "sagemaker:ListTrainingJobsForHyperParameterTuningJob",
                    "sagemaker:ListTags",
                    "sagemaker:AddTags",
                ],
                resources=list(jobs.values()),
            ),
            iam.PolicyStatement(
                sid="ListJobs",
                actions=[
                    "sagemaker:ListTrainingJobs", "sagemaker:ListProcessingJobs", "sagemaker:ListHyperParameterTuningJobs",
                    "sagemaker:ListTransformJobs", "sagemaker:Search",
                ],
                resources=["*"],
            ),  # fmt: skip
            iam.PolicyStatement(
                sid="InvokeProjectEndpoints",
                actions=["sagemaker:DescribeEndpoint", "sagemaker:InvokeEndpoint"],
                resources=[
                    self._arn("sagemaker", "endpoint", f"{project_name}-*"),
                    self._arn("sagemaker", "inference-component", f"{project_name}-*"),
                ],
            ),
            *self._log_statements(),
            *self._source_code_statements(key, artifacts_bucket, datasets_bucket, processing),
            *self._preflight_statements(),
        ]
        name = operator_policy_name(project_name, stack.region)
        self.policy = iam.ManagedPolicy(
            self,
            "Policy",
            managed_policy_name=name,
            description=f"{project_name}: what the operator tools (launch, watch, list_jobs, stop, invoke, preflight) need",
            statements=statements,
        )
        acknowledge_wildcard_resources(
            self.policy,
            "The operators' tools act on every job, endpoint and execution a launch creates, so on the project's name "
            "prefix (<project>-*) and on each workflow's executions; the listings (jobs, stacks, zones, images, "
            "quotas) support no resource-level permissions; logs are read per stream of "
            "SageMaker's fixed log groups.",
            [
                *jobs.values(), *self._workflow_wildcards(machines), *self._log_wildcards(), *self._stack_arns(),
                self._arn("sagemaker", "endpoint", f"{project_name}-*"),
                self._arn("sagemaker", "inference-component", f"{project_name}-*"),
                artifacts_bucket.arn_for_objects(f"{USER_CODE_PREFIX}*"),
                *self._preflight_parameters(),
                "*",
            ],
        )  # fmt: skip
        CfnOutput(stack, "OperatorPolicyName", value=name, description="Attach to the operators' role or permission set")
        CfnOutput(stack, "OperatorPolicyArn", value=self.policy.managed_policy_arn, description="The operators' policy")

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
        self, training: JobTemplate, jobs: dict[str, str], key: kms.IKey, processing: Optional[ProcessingTemplate]
    ) -> list[iam.PolicyStatement]:
        """A direct launch sends the workflow's request: only what the workflows' roles may create."""
        r = training.resources
        hardened = hardened_job_conditions(r.key_arn, r.subnet_ids, r.security_group_ids)
        types = list(training.allowed_instance_types or [training.default_instance_type])
        statements = [
            *pinned_job_creation_statements(
                "CreateHardenedTrainingJobs", "sagemaker:CreateTrainingJob", [jobs["training-job"]], hardened,
                instance_types=types, volume_key_arn=key.key_arn,
            ),
            *pinned_job_creation_statements(
                "CreateHardenedTuningJobs", "sagemaker:CreateHyperParameterTuningJob", [jobs["hyper-parameter-tuning-job"]],
                hardened, instance_types=types, volume_key_arn=key.key_arn,
            ),
            pass_role_to_sagemaker("PassJobRole", r.role_arn, [jobs["training-job"], jobs["hyper-parameter-tuning-job"]]),
        ]  # fmt: skip
        if processing is not None:
            p = processing.resources
            statements += [
                *pinned_job_creation_statements(
                    "CreateHardenedProcessingJobs", "sagemaker:CreateProcessingJob", [jobs["processing-job"]],
                    hardened_job_conditions(p.key_arn, p.subnet_ids, p.security_group_ids),
                    instance_types=list(processing.allowed_instance_types or [processing.default_instance_type]),
                    volume_key_arn=key.key_arn,
                ),
                pass_role_to_sagemaker("PassProcessingRole", p.role_arn, jobs["processing-job"]),
            ]  # fmt: skip
        return statements

    def _log_groups(self) -> list[str]:
        groups = (SAGEMAKER_LOG_GROUP, SAGEMAKER_PROCESSING_LOG_GROUP, SAGEMAKER_TRANSFORM_LOG_GROUP)
        return [self._arn("logs", "log-group", group, colon=True) for group in groups]

    def _log_wildcards(self) -> list[str]:
        return [f"{group}:log-stream:*" for group in self._log_groups()]

    def _log_statements(self) -> list[iam.PolicyStatement]:
        """``watch`` pages through a job's streams (SageMaker names them ``<job>/algo-N-...``)."""
        return [
            iam.PolicyStatement(sid="FindJobLogStreams", actions=["logs:DescribeLogStreams"], resources=self._log_groups()),
            iam.PolicyStatement(sid="ReadJobLogs", actions=["logs:GetLogEvents"], resources=self._log_wildcards()),
        ]

    def _source_code_statements(
        self,
        key: kms.IKey,
        artifacts_bucket: s3.IBucket,
        datasets_bucket: s3.IBucket,
        processing: Optional[ProcessingTemplate],
    ) -> list[iam.PolicyStatement]:
        """``--source-dir`` uploads ``code/<job>/sourcedir.tar.gz`` under the platform key (the bucket policy
        refuses any other), whose data keys are only for S3's requests; a direct processing launch checks
        that its output prefix is empty."""
        statements = [
            iam.PolicyStatement(
                sid="UploadSourceCode", actions=["s3:PutObject"], resources=[artifacts_bucket.arn_for_objects(f"{USER_CODE_PREFIX}*")]
            ),
            iam.PolicyStatement(
                sid="EncryptUploadsWithPlatformKey",
                actions=["kms:GenerateDataKey"],
                resources=[key.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{self._stack.region}.amazonaws.com"}},
            ),
        ]
        if processing is not None:
            statements.append(
                iam.PolicyStatement(
                    sid="CheckProcessingOutputPrefix",
                    actions=["s3:ListBucket"],
                    resources=[datasets_bucket.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": f"{processing.output_prefix}*"}},
                )
            )
        return statements

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
