"""The SageMaker training job, declared as a Step Functions workflow.

CloudFormation has no training-job resource, and the L2 ``SageMakerCreateTrainingJob`` task
cannot express managed spot, checkpoints, ``MaxWaitTimeInSeconds``, ``RetryStrategy`` or
inter-container traffic encryption. So the workflow calls ``createTrainingJob.sync`` from a
custom state with the complete request from :mod:`stacks.components.training_job_spec`, the
same function ``scripts.launch --direct`` calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import jsii
from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct, IValidation

from stacks.components.image_repository import repository_image_uri
from stacks.components.log_group import encrypted_log_group
from stacks.components.network import TrainingNetwork, closed_security_group
from stacks.components.policy import (
    follow_tuning_jobs,
    hardened_job_conditions,
    pass_role_to_sagemaker,
    pinned_job_creation_statements,
    sagemaker_job_runtime_statements,
    acknowledge,
    sagemaker_principal,
    state_machine_logging_statements,
    state_machine_principal,
)
from stacks.components.request_expressions import no_problems
from stacks.components.training_job_spec import (
    CHECKPOINT_PREFIX,
    CODE_PREFIX,
    OUTPUT_PREFIX,
    SAGEMAKER_LOG_GROUP,
    STATE_MACHINE_VALUES,
    JobResources,
    JobTemplate,
    create_training_job_request,
    launch_rules,
    readable_processing_prefixes,
    state_machine_assignments,
)
from stacks.components.tuning_job_spec import (
    TUNE_OUTPUT,
    TUNING_FAILED_CAUSE,
    TUNING_FAILED_ERROR,
    TUNING_INPUT,
    TUNING_TITLE,
    create_tuning_job_request,
    state_machine_tuning_values,
    tuning_rules,
    tuning_state_machine_assignments,
)
from stacks.config import PlatformConfig

SYNC_EVENTS_RULE = "StepFunctionsGetEventsForSageMakerTrainingJobsRule"
"""The managed EventBridge rule through which Step Functions learns that a ``.sync`` job ended."""
TUNING_SYNC_EVENTS_RULE = "StepFunctionsGetEventsForSageMakerTuningJobsRule"
"""Its counterpart for a ``.sync`` tuning job (``createHyperParameterTuningJob.sync``)."""
LAUNCH_PROBLEMS = "launch_problems"
"""The variable ``FindLaunchProblems`` assigns: the broken launch rules' reasons (:meth:`LaunchRules.problems`)."""
TUNING_PROBLEMS = "tuning_problems"
"""The variable ``FindTuningProblems`` assigns: the broken tuning rules' reasons."""


def _inner(condition: str) -> str:
    """A ``{% %}`` condition's expression, parenthesised, to combine with another."""
    return "(" + condition.removeprefix("{%").removesuffix("%}").strip() + ")"


def workflow_name(project_name: str) -> str:
    """The training workflow state machine's fixed name."""
    return f"{project_name}-training-job"


def _flatten_reference(node: Any) -> str:
    """A resolved CloudFormation value as cdk-nag names it in a finding id (``flattenCfnReference``)."""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, Mapping):
        if "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return delimiter.join(_flatten_reference(i) for i in items)
        if "Fn::Sub" in node:
            return _flatten_reference(node["Fn::Sub"])
        if "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{_flatten_reference(resource)}.{_flatten_reference(attribute)}>"
        if "Fn::ImportValue" in node:
            return _flatten_reference(node["Fn::ImportValue"])
        if "Ref" in node:
            return f"<{_flatten_reference(node['Ref'])}>"
    return json.dumps(node, separators=(",", ":"), ensure_ascii=False)


@jsii.implements(IValidation)
class _AcknowledgeWildcardResources:
    """Acknowledges ``AwsSolutions-IAM5`` for exactly the listed wildcard resources of a policy.

    A finding id names the resource as it appears in the final template, and a reference to the
    data-plane stack (a bucket ARN) only takes that form once CDK has resolved cross-stack
    references. Construct validations run after that and before the policy packs, so the ids are
    computed there; the list of resources stays next to the policy that grants them.
    """

    def __init__(self, scope: Construct, reason: str, resources: Sequence[str]) -> None:
        self._scope = scope
        self._reason = reason
        self._resources = list(resources)

    def validate(self) -> list[str]:
        # One resolve of the whole list: a round trip to the CDK's process per call.
        resolved = Stack.of(self._scope).resolve(self._resources)
        finding_ids = sorted({f"AwsSolutions-IAM5[Resource::{_flatten_reference(r)}]" for r in resolved})
        acknowledge(self._scope, self._reason, *finding_ids)
        return []


def acknowledge_wildcard_resources(scope: Construct, reason: str, resources: Sequence[str]) -> None:
    """Acknowledge the IAM5 findings of ``resources`` (wildcard ARNs, possibly cross-stack) on ``scope``."""
    scope.node.add_validation(_AcknowledgeWildcardResources(scope, reason, resources))


class SageMakerExecutionRole(Construct):
    """An execution role for SageMaker jobs or endpoints, with its customer-managed policy.

    Only SageMaker acting for this account's resources in this region may assume it
    (cross-service confused deputy prevention). Its permissions are one customer-managed policy
    rather than an inline one (NIST.800.53.R5-IAMNoInlinePolicy), whose wildcard resources are
    acknowledged with ``wildcard_reason``. Subclasses say what the role may do.

    Attributes:
        role: The role.
        policy: Its customer-managed policy.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        description: str,
        statements: Sequence[iam.PolicyStatement],
        wildcard_reason: str,
        wildcards: Sequence[str],
    ) -> None:
        """Create ``Role`` and ``Policy`` (``statements``, with ``wildcards`` acknowledged) in the construct."""
        super().__init__(scope, construct_id)
        self.role = iam.Role(self, "Role", assumed_by=sagemaker_principal(Stack.of(self)), description=description)
        self.policy = iam.ManagedPolicy(self, "Policy", statements=list(statements), roles=[self.role])
        acknowledge_wildcard_resources(self.policy, wildcard_reason, wildcards)


def logged_state_machine(
    scope: Construct,
    *,
    name: str,
    comment: str,
    definition_body: sfn.DefinitionBody,
    role: iam.Role,
    policy: iam.ManagedPolicy,
    log_group: logs.ILogGroup,
    query_language: Optional[sfn.QueryLanguage] = None,
) -> sfn.StateMachine:
    """``scope``'s state machine (id ``StateMachine``): every execution logged to ``log_group``
    (ALL, with execution data) and traced with X-Ray; ``role``'s managed ``policy`` holds every
    permission it has."""
    state_machine = sfn.StateMachine(
        scope,
        "StateMachine",
        state_machine_name=name,
        comment=comment,
        query_language=query_language,
        definition_body=definition_body,
        # The managed policy holds every permission (NIST.800.53.R5-IAMNoInlinePolicy), so the
        # state machine must not add its own inline policy to the role.
        role=role.without_policy_updates(),
        logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
        tracing_enabled=True,
    )
    # Step Functions checks log delivery permissions when it creates the state machine.
    state_machine.node.add_dependency(policy)
    return state_machine

class TrainingJobSecurityGroup(Construct):
    """Network of a job's instances: each other (distributed training) and HTTPS out.

    HTTPS out reaches only the VPC interface endpoints and S3 through the gateway endpoint (and
    the internet only where ``network.nat_gateways > 0``). The container itself has no network at
    all (``EnableNetworkIsolation``).

    Attributes:
        security_group: The group.
    """

    def __init__(self, scope: Construct, construct_id: str, *, network: TrainingNetwork) -> None:
        """Create the group in the training VPC."""
        super().__init__(scope, construct_id)
        self.security_group = closed_security_group(
            self,
            "SecurityGroup",
            network.vpc,
            "SageMaker training instances: traffic between the instances of a job, HTTPS to AWS endpoints",
        )
        self.security_group.connections.allow_internally(
            ec2.Port.all_traffic(), "Between the instances of one training job"
        )
        network.allow_https_to_aws(self.security_group)
        acknowledge(
            self.security_group,
            "The all-protocol rule's source and destination is this group itself, i.e. only the instances of one "
            "training job; distributed training (NCCL over TCP, and EFA, which AWS requires to be allowed for all "
            "protocols within the group) uses arbitrary ports. Nothing outside the group is admitted.",
            "NIST.800.53.R5-EC2RestrictedCommonPorts",
        )


class TrainingJobRole(SageMakerExecutionRole):
    """The execution role SageMaker assumes for a job, limited to the project's resources.

    Reads only the configured channel prefixes of the datasets bucket; reads and writes only the
    output and checkpoint prefixes of the artifacts bucket; uses the platform key; pulls from the
    project's repository; writes logs only to the project's streams in SageMaker's log group;
    manages network interfaces only in the training VPC.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project_name: str,
        channels: Mapping[str, str],
        key: kms.IKey,
        datasets_bucket: s3.IBucket,
        artifacts_bucket: s3.IBucket,
        repository: ecr.IRepository,
        vpc: ec2.IVpc,
        extra_input_prefixes: Sequence[str] = (),
    ) -> None:
        """Create the role.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            project_name: Job names and log streams start with ``<project_name>-``.
            channels: Channel name -> key prefix in the datasets bucket (read access).
            key: Platform KMS key (data, outputs, volumes).
            datasets_bucket: Training data.
            artifacts_bucket: Outputs and checkpoints.
            repository: Training image repository.
            vpc: The training VPC.
            extra_input_prefixes: Further datasets-bucket prefixes a launch's channels may
                point into (read access): the processing output prefix.
        """
        stack = Stack.of(scope)
        input_prefixes = sorted({*channels.values(), *extra_input_prefixes})
        artifact_prefixes = [OUTPUT_PREFIX, CHECKPOINT_PREFIX]
        input_objects = [datasets_bucket.arn_for_objects(f"{p}*") for p in input_prefixes]
        artifact_objects = [artifacts_bucket.arn_for_objects(f"{p}*") for p in artifact_prefixes]
        code_objects = artifacts_bucket.arn_for_objects(f"{CODE_PREFIX}*")
        runtime_statements, runtime_wildcards = sagemaker_job_runtime_statements(
            stack,
            key=key,
            repository=repository,
            vpc=vpc,
            log_group_name=SAGEMAKER_LOG_GROUP,
            project_name=project_name,
            metrics_sid="PublishTrainingMetrics",
            pull_sid="PullTrainingImage",
        )
        statements = [
            iam.PolicyStatement(sid="ReadInputChannels", actions=["s3:GetObject"], resources=input_objects),
            iam.PolicyStatement(
                sid="ListInputChannels",
                actions=["s3:ListBucket"],
                resources=[datasets_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{p}*" for p in input_prefixes]}},
            ),
            iam.PolicyStatement(
                sid="ReadWriteOutputsAndCheckpoints",
                actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
                resources=artifact_objects,
            ),
            iam.PolicyStatement(
                sid="ListOutputsAndCheckpoints",
                actions=["s3:ListBucket"],
                resources=[artifacts_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{p}*" for p in [*artifact_prefixes, CODE_PREFIX]]}},
            ),
            # Script mode: the user's sourcedir.tar.gz arrives as the job's code channel; read only.
            iam.PolicyStatement(
                sid="ReadUserCode",
                actions=["s3:GetObject"],
                resources=[code_objects],
            ),
            *runtime_statements,
        ]
        super().__init__(
            scope,
            construct_id,
            description=f"{project_name}: execution role of the project's SageMaker training jobs",
            statements=statements,
            wildcard_reason=(
                "Each wildcard is the narrowest the API allows: objects under the configured channel prefixes (read) and "
                "under the output and checkpoint prefixes (read/write), users' code under the code prefix (read); SageMaker's fixed /aws/sagemaker/TrainingJobs log "
                "group and the project's job streams in it; '*' only for ecr:GetAuthorizationToken and EC2 Describe* "
                "(no resource-level permissions) and cloudwatch:PutMetricData (limited by namespace); subnets, security "
                "groups and network interfaces of this account and region, limited to the training VPC by the ec2:Vpc "
                "condition (a new interface by the subnet it must be created in)."
            ),
            wildcards=[*input_objects, *artifact_objects, code_objects, *runtime_wildcards],
        )


@dataclass(frozen=True)
class JobInfrastructure:
    """What the project's SageMaker jobs run on: the data plane's key, buckets, repository and network.

    Attributes:
        key: Platform KMS key.
        datasets_bucket: Training data, raw and processed data.
        artifacts_bucket: Users' code, outputs and checkpoints, the models.
        repository: The project's image repository.
        image_tag: The image tag jobs (and the models the pipeline promotes) run.
        network: The training VPC and its endpoints.
        subnet_ids: The private subnets jobs run in.
    """

    key: kms.IKey
    datasets_bucket: s3.IBucket
    artifacts_bucket: s3.IBucket
    repository: ecr.IRepository
    image_tag: str
    network: TrainingNetwork
    subnet_ids: Sequence[str]

    def image_uri(self, stack: Stack) -> str:
        """The URI of the image jobs run (``stack`` is in the repository's account and region)."""
        return repository_image_uri(stack, self.repository, self.image_tag)

    def job_resources(self, stack: Stack, *, role_arn: str, security_group_id: str) -> JobResources:
        """The :class:`JobResources` of jobs run in ``stack`` with ``role_arn`` in ``security_group_id``."""
        return JobResources(
            role_arn=role_arn,
            image_uri=self.image_uri(stack),
            datasets_bucket=self.datasets_bucket.bucket_name,
            artifacts_bucket=self.artifacts_bucket.bucket_name,
            key_arn=self.key.key_arn,
            subnet_ids=list(self.subnet_ids),
            security_group_ids=[security_group_id],
        )


class TrainingJobWorkflow(Construct):
    """A state machine that runs the configured SageMaker training job to completion.

    Input (all optional): ``job_name`` (``<project>-...``; default ``<project>-<execution
    name>``), ``instance_type``, ``instance_count``, ``use_spot``, ``hyperparameters`` (merged
    over the config's). Defaults come from ``config.training_job``. The workflow checks the
    options, then calls ``createTrainingJob.sync``; it fails with SageMaker's error when the job
    fails or is stopped. Logging (ALL, with execution data) and X-Ray tracing are on. Each rule
    is evaluated once, by a Pass state that assigns the broken rules' reasons to a variable
    (``FindLaunchProblems``, ``FindTuningProblems``); the Choice and the refusal read that variable.

    With ``tuning`` in the input (``{"ranges": RANGES.json's object, "max_jobs": N,
    "max_parallel_jobs": N}``, ``scripts.launch --tune``) it runs the Tune branch instead: the same
    option checks (over the tuning job's name and static hyperparameters), the tuning checks
    (:func:`tuning_rules`, refused as ``InvalidLaunchOptions`` with one line), then ``createHyperParameterTuningJob.sync`` with :func:`create_tuning_job_request`'s
    request, every trial this workflow's training job; its output names the tuning job and its
    ``BestTrainingJob``; a failed or stopped tuning job fails it with ``TuningJobFailed`` and SageMaker's reason.

    Attributes:
        template: The job's fixed settings and defaults (:class:`JobTemplate`).
        security_group: The job instances' security group.
        job_role: The jobs' execution role.
        log_group: The state machine's log group.
        role: The state machine's role.
        state_machine: The workflow.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PlatformConfig,
        infrastructure: JobInfrastructure,
    ) -> None:
        """Create the workflow.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            config: The validated platform config (``training_job`` and ``project_name``).
            infrastructure: The key, buckets (input channels; outputs and checkpoints), image
                repository and tag, VPC and subnets jobs run on.
        """
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        project = config.project_name
        self.security_group = TrainingJobSecurityGroup(self, "Network", network=infrastructure.network).security_group
        self.job_role = TrainingJobRole(
            self,
            "JobRole",
            project_name=project,
            channels=config.training_job.channels,
            extra_input_prefixes=readable_processing_prefixes(config),
            key=infrastructure.key,
            datasets_bucket=infrastructure.datasets_bucket,
            artifacts_bucket=infrastructure.artifacts_bucket,
            repository=infrastructure.repository,
            vpc=infrastructure.network.vpc,
        ).role
        self.template = JobTemplate.from_config(
            config,
            infrastructure.job_resources(
                stack, role_arn=self.job_role.role_arn, security_group_id=self.security_group.security_group_id
            ),
        )

        rules = launch_rules(self.template)
        resolve = sfn.Pass.jsonata(
            self,
            "ResolveLaunchOptions",
            comment="Execution input over the deployed defaults",
            assign=state_machine_assignments(self.template),
        )
        find = sfn.Pass.jsonata(
            self,
            "FindLaunchProblems",
            comment="Every launch rule, evaluated once: the reasons of the broken ones",
            assign={LAUNCH_PROBLEMS: rules.problems()},
        )
        invalid = sfn.Fail.jsonata(
            self,
            "InvalidLaunchOptions",
            error="InvalidLaunchOptions",
            cause=rules.refusal(LAUNCH_PROBLEMS),
        )
        failed = sfn.Fail.jsonata(
            self,
            "TrainingJobFailed",
            comment="SageMaker's error for a job that failed or was stopped, or a refused request",
            error="{% $states.input.Error %}",
            cause="{% $states.input.Cause %}",
        )
        train = sfn.CustomState(
            self,
            "CreateTrainingJob",
            state_json={
                "Type": "Task",
                "Comment": "CreateTrainingJob with the full API, then wait for the job to end",
                "Resource": f"arn:{stack.partition}:states:::sagemaker:createTrainingJob.sync",
                "Arguments": create_training_job_request(self.template, STATE_MACHINE_VALUES),
                "Output": (
                    "{% {'TrainingJobName': $states.result.TrainingJobName, 'TrainingJobArn': $states.result.TrainingJobArn,"
                    " 'TrainingJobStatus': $states.result.TrainingJobStatus,"
                    " 'ModelArtifacts': $states.result.ModelArtifacts.S3ModelArtifacts,"
                    " 'BillableTimeInSeconds': $states.result.BillableTimeInSeconds} %}"
                ),
            },
        )
        train.add_catch(failed, errors=["States.ALL"])
        tuned = f"$exists($states.input.{TUNING_INPUT})"
        # A tuning launch resolves its own variables before the launch rules run: they check the
        # tuning job's name and the static hyperparameters, as `launch --tune --direct` does.
        definition = resolve.next(
            sfn.Choice.jsonata(self, "TuningRequested", comment="A tuning launch's options first, then the launch rules")
            .when(sfn.Condition.jsonata(f"{{% {tuned} %}}"), self._resolve_tuning(config).next(find))
            .otherwise(find)
        )
        launch_ok = _inner(no_problems(LAUNCH_PROBLEMS))
        find.next(
            sfn.Choice.jsonata(self, "CheckLaunchOptions")
            .when(sfn.Condition.jsonata(f"{{% $not({tuned}) and {launch_ok} %}}"), train)
            .when(sfn.Condition.jsonata(f"{{% {tuned} and {launch_ok} %}}"), self._tune_branch(stack, config))
            .otherwise(invalid)
        )

        self.log_group: logs.LogGroup = encrypted_log_group(
            self, "Logs", key=infrastructure.key, log_group_name=f"/aws/vendedlogs/states/{workflow_name(project)}"
        )
        state_machine_name = workflow_name(project)
        self.role = iam.Role(
            self,
            "Role",
            description=f"{project}: the training workflow (creates, follows and stops the project's jobs)",
            assumed_by=state_machine_principal(stack, state_machine_name),
        )
        policy = iam.ManagedPolicy(
            self, "RolePolicy", statements=self._workflow_statements(project), roles=[self.role]
        )
        acknowledge_wildcard_resources(
            policy,
            "Training- and tuning-job actions are limited to the project's job names (<project>-*), a prefix because "
            "every launch creates a new job; the CloudWatch Logs delivery and X-Ray actions that Step Functions logging and tracing "
            "need support no resource-level permissions.",
            [self._jobs_arn(project), self._tuning_jobs_arn(project), "*"],
        )
        self.state_machine = logged_state_machine(
            self,
            name=state_machine_name,
            comment=f"{project}: runs one SageMaker training job (spot, checkpoints, VPC, KMS) to completion",
            query_language=sfn.QueryLanguage.JSONATA,
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            role=self.role,
            policy=policy,
            log_group=self.log_group,
        )

    def _resolve_tuning(self, config: PlatformConfig) -> sfn.Pass:
        """With ``tuning`` in the input: the tuning launch's variables over the training launch's."""
        return sfn.Pass.jsonata(
            self,
            "ResolveTuningOptions",
            comment="A tuning launch: the ranges and caps over the deployed tuning section, the static hyperparameters",
            assign=tuning_state_machine_assignments(self.template, config.tuning),
        )

    def _tune_branch(self, stack: Stack, config: PlatformConfig) -> sfn.IChainable:
        """A tuning launch that passed the launch rules: the tuning checks, then
        ``createHyperParameterTuningJob.sync`` with the request ``scripts.launch --tune --direct``
        sends (:func:`create_tuning_job_request`); its output names the best training job."""
        checks = tuning_rules(self.template, config.tuning)
        find = sfn.Pass.jsonata(
            self,
            "FindTuningProblems",
            comment=f"Every tuning rule, evaluated once: the reasons of the broken ones ({TUNING_TITLE})",
            assign={TUNING_PROBLEMS: checks.problems()},
        )
        refused = sfn.Fail.jsonata(
            self, "InvalidTuningLaunch", error="InvalidLaunchOptions", cause=checks.refusal(TUNING_PROBLEMS)
        )
        failed = sfn.Fail.jsonata(
            self,
            "TuningJobFailed",
            comment="SageMaker's reason for a tuning job that failed or was stopped, or a refused request",
            error=TUNING_FAILED_ERROR,
            cause=TUNING_FAILED_CAUSE,
        )
        tune = sfn.CustomState(
            self,
            "Tune",
            state_json={
                "Type": "Task",
                "Comment": "CreateHyperParameterTuningJob (every trial the workflow's training job), then wait for it to end",
                "Resource": f"arn:{stack.partition}:states:::sagemaker:createHyperParameterTuningJob.sync",
                "Arguments": create_tuning_job_request(self.template, state_machine_tuning_values(config.tuning)),
                "Output": TUNE_OUTPUT,
            },
        )
        tune.add_catch(failed, errors=["States.ALL"])
        return find.next(
            sfn.Choice.jsonata(self, "CheckTuningLaunch")
            .when(sfn.Condition.jsonata(no_problems(TUNING_PROBLEMS)), tune)
            .otherwise(refused)
        )

    def _jobs_arn(self, project: str) -> str:
        return Stack.of(self).format_arn(service="sagemaker", resource="training-job", resource_name=f"{project}-*")

    def _tuning_jobs_arn(self, project: str) -> str:
        return Stack.of(self).format_arn(service="sagemaker", resource="hyper-parameter-tuning-job", resource_name=f"{project}-*")

    def _workflow_statements(self, project: str) -> list[iam.PolicyStatement]:
        """What ``createTrainingJob.sync``, logging and tracing need, limited to the project's jobs."""
        stack = Stack.of(self)
        jobs, tuning_jobs = self._jobs_arn(project), self._tuning_jobs_arn(project)
        r = self.template.resources
        # The role itself refuses a request that drops isolation, the VPC (its subnets and security
        # group) or the output key, or that asks for a type the deployment does not allow (or an EBS
        # volume on another key): a training job's, and a tuning job's TrainingJobDefinition (the
        # same keys are in CreateHyperParameterTuningJob's request context).
        hardened = hardened_job_conditions(r.key_arn, r.subnet_ids, r.security_group_ids)
        instance_types = self.template.allowed_instance_types or [self.template.default_instance_type]
        return [
            *pinned_job_creation_statements(
                "CreateHardenedTrainingJobs", "sagemaker:CreateTrainingJob", [jobs], hardened,
                instance_types=instance_types, volume_key_arn=r.key_arn,
            ),
            *pinned_job_creation_statements(
                "CreateHardenedTuningJobs", "sagemaker:CreateHyperParameterTuningJob", [tuning_jobs], hardened,
                instance_types=instance_types, volume_key_arn=r.key_arn,
            ),
            iam.PolicyStatement(
                sid="FollowAndStopProjectJobs",
                actions=[
                    "sagemaker:DescribeTrainingJob",
                    "sagemaker:StopTrainingJob",
                    "sagemaker:AddTags",
                    "sagemaker:ListTags",
                ],
                resources=[jobs],
            ),
            follow_tuning_jobs(tuning_jobs),
            pass_role_to_sagemaker("PassJobRole", self.job_role.role_arn, [jobs, tuning_jobs]),
            iam.PolicyStatement(
                sid="SyncIntegrationRule",
                actions=["events:PutTargets", "events:PutRule", "events:DescribeRule"],
                resources=[
                    stack.format_arn(service="events", resource="rule", resource_name=rule)
                    for rule in (SYNC_EVENTS_RULE, TUNING_SYNC_EVENTS_RULE)
                ],
            ),
            *state_machine_logging_statements(),
        ]
