"""GPU processing jobs and the pipeline that runs process -> train -> promote -> transform (Step Functions).

CloudFormation has no processing-job resource: like the training job, the processing job is
declared as a ``createProcessingJob.sync`` task with the complete request from
:mod:`stacks.components.processing_job_spec` (the request a direct launch sends). The
definition is built in :mod:`stacks.components.pipeline_definition`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.components.endpoint_spec import (
    ModelResources,
    endpoint_name,
    promotion_record_name,
    rollback_alarm_names,
    volume_kms_allowed,
)
from stacks.components.log_group import encrypted_log_group
from stacks.components.endpoint_role import BatchTransformAccess, EndpointRole
from stacks.components.network import closed_security_group
from stacks.components.pipeline_definition import MODEL_FILE_SUFFIX, pipeline_definition
from stacks.components.policy import (
    follow_tuning_jobs,
    hardened_job_conditions,
    in_security_groups,
    merge_conditions,
    pass_role_to_sagemaker,
    pinned_job_creation_statements,
    sagemaker_job_runtime_statements,
    state_machine_logging_statements,
    state_machine_principal,
)
from stacks.components.processing_job_spec import SAGEMAKER_PROCESSING_LOG_GROUP, ProcessingTemplate
from stacks.components.training_job_spec import CODE_PREFIX, OUTPUT_PREFIX, JobTemplate
from stacks.components.transform_job_spec import TransformTemplate
from stacks.components.training_job_workflow import (
    SYNC_EVENTS_RULE,
    TUNING_SYNC_EVENTS_RULE,
    JobInfrastructure,
    SageMakerExecutionRole,
    TrainingJobWorkflow,
    acknowledge_wildcard_resources,
    logged_state_machine,
)
from stacks.config import PlatformConfig

PROCESSING_SYNC_EVENTS_RULE = "StepFunctionsGetEventsForSageMakerProcessingJobsRule"
"""The managed EventBridge rule through which Step Functions learns that a processing job ended."""
TRANSFORM_SYNC_EVENTS_RULE = "StepFunctionsGetEventsForSageMakerTransformJobsRule"
"""The managed EventBridge rule through which Step Functions learns that a transform job ended."""


def promoted_model_keys(project_name: str) -> str:
    """What the promoted-model role may read: the model file of the project's jobs (every job the
    platform creates, and SDK jobs per docs/sagemaker-code.md, is named ``<project>-*``).

    ``*`` in an S3 ARN also spans ``/``, so the pattern matches any key under a project job that
    ends in ``/output/model.tar.gz``; :data:`NOT_A_MODEL_FILE` keeps the processing role, the
    other writer under the prefix, from writing such a key.
    """
    return f"{OUTPUT_PREFIX}{project_name}-*{MODEL_FILE_SUFFIX}"


NOT_A_MODEL_FILE = f"{OUTPUT_PREFIX}*{MODEL_FILE_SUFFIX}"
"""Keys the processing role may never write: any that a model role could read as a model."""


def pipeline_name(project_name: str) -> str:
    """The pipeline state machine's fixed name."""
    return f"{project_name}-pipeline"


class ProcessingRole(SageMakerExecutionRole):
    """The execution role SageMaker assumes for a processing job, limited to the project's resources.

    Reads only the raw-data prefix of the datasets bucket and users' ``code/`` in the artifacts
    bucket; writes only under the processed-data prefix; uses the platform key; pulls from the
    project's repository; writes logs only to the project's streams in SageMaker's processing
    log group; manages network interfaces only in the training VPC.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project_name: str,
        input_prefix: str,
        output_prefix: str,
        key: kms.IKey,
        datasets_bucket: s3.IBucket,
        artifacts_bucket: s3.IBucket,
        repository: ecr.IRepository,
        vpc: ec2.IVpc,
    ) -> None:
        """Create the role.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            project_name: Job names and log streams start with ``<project_name>-``.
            input_prefix: Raw data in the datasets bucket (read).
            output_prefix: Processed data in the datasets bucket (write).
            key: Platform KMS key (data, outputs, volumes).
            datasets_bucket: Raw and processed data.
            artifacts_bucket: Users' code.
            repository: The project's image repository.
            vpc: The training VPC.
        """
        stack = Stack.of(scope)
        raw_objects = datasets_bucket.arn_for_objects(f"{input_prefix}*")
        processed_objects = datasets_bucket.arn_for_objects(f"{output_prefix}*")
        code_objects = artifacts_bucket.arn_for_objects(f"{CODE_PREFIX}*")
        # The SageMaker SDK's defaults (scripts.sdk_config makes OUTPUT_PREFIX its default key
        # prefix): a ScriptProcessor/FrameworkProcessor job uploads its code and local inputs to
        # <prefix><job>/input/<name>/ (FrameworkProcessor: <prefix><job>/source/) and, without a
        # destination, writes each output to <prefix><job>/output/<name>/. Only the project's jobs
        # (<project>-*), and never a model file (NeverWriteModelFiles below).
        sdk_jobs = f"{OUTPUT_PREFIX}{project_name}-*"
        sdk_inputs = [artifacts_bucket.arn_for_objects(f"{sdk_jobs}/{part}/*") for part in ("input", "source")]
        sdk_outputs = artifacts_bucket.arn_for_objects(f"{sdk_jobs}/output/*/*")
        runtime_statements, runtime_wildcards = sagemaker_job_runtime_statements(
            stack,
            key=key,
            repository=repository,
            vpc=vpc,
            log_group_name=SAGEMAKER_PROCESSING_LOG_GROUP,
            project_name=project_name,
            metrics_sid="PublishProcessingMetrics",
            pull_sid="PullProcessingImage",
        )
        statements = [
            iam.PolicyStatement(sid="ReadRawData", actions=["s3:GetObject"], resources=[raw_objects]),
            iam.PolicyStatement(
                sid="ListRawData",
                actions=["s3:ListBucket"],
                resources=[datasets_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{input_prefix}*"]}},
            ),
            # Outputs are uploaded at the end of the job; the role cannot read or delete them.
            iam.PolicyStatement(
                sid="WriteProcessedData", actions=["s3:PutObject", "s3:AbortMultipartUpload"], resources=[processed_objects]
            ),
            # Script mode: the user's sourcedir.tar.gz arrives as the job's code input; read only.
            iam.PolicyStatement(sid="ReadUserCode", actions=["s3:GetObject"], resources=[code_objects]),
            iam.PolicyStatement(
                sid="ListUserCode",
                actions=["s3:ListBucket"],
                resources=[artifacts_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{CODE_PREFIX}*", f"{sdk_jobs}/input/*", f"{sdk_jobs}/source/*"]}},
            ),
            iam.PolicyStatement(sid="ReadSdkProcessingInputs", actions=["s3:GetObject"], resources=sdk_inputs),
            iam.PolicyStatement(
                sid="WriteSdkProcessingOutputs", actions=["s3:PutObject", "s3:AbortMultipartUpload"], resources=[sdk_outputs]
            ),
            # "*" spans "/": <job>/output/<name>/output/model.tar.gz would match both the outputs
            # above and the model role's promoted_model_keys; so a processing job can never plant a
            # model the pipeline's model role serves.
            iam.PolicyStatement(
                sid="NeverWriteModelFiles",
                effect=iam.Effect.DENY,
                actions=["s3:PutObject"],
                resources=[artifacts_bucket.arn_for_objects(NOT_A_MODEL_FILE)],
            ),
            *runtime_statements,
        ]
        super().__init__(
            scope,
            construct_id,
            description=f"{project_name}: execution role of the project's SageMaker processing jobs",
            statements=statements,
            wildcard_reason=(
                "Each wildcard is the narrowest the API allows: objects under the raw-data prefix (read), under the "
                "processed-data prefix (write: each run writes a new prefix named after its job) and users' code under "
                "the code prefix (read); the SageMaker SDK's default locations of the project's own processing jobs "
                "(<prefix><project>-*/input|source/*: code and inputs the SDK uploads, read; <prefix><project>-*/output/"
                "<name>/*: outputs without a destination, write; an explicit deny keeps it from any key ending in "
                "/output/model.tar.gz, so it never writes a key a model role reads as a training job's model), whose "
                "names the SDK makes per job; SageMaker's fixed /aws/sagemaker/ProcessingJobs log group and the project's job "
                "streams in it; '*' only for ecr:GetAuthorizationToken and EC2 Describe* (no resource-level permissions) "
                "and cloudwatch:PutMetricData (limited by namespace); subnets, security groups and network interfaces of "
                "this account and region, limited to the training VPC by the ec2:Vpc condition (a new interface by the "
                "subnet it must be created in)."
            ),
            wildcards=[raw_objects, processed_objects, code_objects, *sdk_inputs, sdk_outputs, *runtime_wildcards],
        )


class PipelineWorkflow(Construct):
    """The ``<project>-pipeline`` state machine: process -> train -> promote, each step optional.

    See :mod:`stacks.components.pipeline_definition` for its input, steps and failures. Runs
    processing jobs with :class:`ProcessingRole` in the training jobs' VPC, subnets and security
    group, the training job (or, with ``train.tuning``, the tuning job) exactly as the training
    workflow does, with the same hardened grants, and promotes with a model
    role that reads only the project jobs' ``model.tar.gz``. Logging (ALL, with execution data)
    and X-Ray tracing are on.

    Attributes:
        template: The processing job's fixed settings and defaults.
        processing_role: Execution role of the processing jobs.
        model_role: Execution role of the models the pipeline promotes and of its batch transform
            jobs (``None`` with ``serving.scale_to_zero`` and no transform: the pipeline makes no model).
        transform: The batch transform job's settings (``None`` without ``transform.enabled``).
        model_security_group: Security group of the promoted models' hosting instances (or ``None``).
        log_group: The state machine's log group.
        role: The state machine's role.
        state_machine: The pipeline.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PlatformConfig,
        training: TrainingJobWorkflow,
        infrastructure: JobInfrastructure,
        topic: sns.ITopic,
        topic_key: kms.IKey,
    ) -> None:
        """Create the pipeline.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            config: The validated platform config (``processing``, ``serving``, ``project_name``).
            training: The training workflow (its job template, job role and security group).
            infrastructure: What jobs and promoted models run on: the key, buckets (raw and processed
                data; users' code and the models), image repository and tag, training network (its
                VPC; HTTPS to its endpoints for promoted models) and subnets.
            topic: The notification topic every end of an execution publishes to.
            topic_key: The topic's KMS key.
        """
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        project = config.project_name
        pr = config.processing
        key = infrastructure.key
        self.processing_role = ProcessingRole(
            self,
            "ProcessingRole",
            project_name=project,
            input_prefix=pr.input_prefix,
            output_prefix=pr.output_prefix,
            key=key,
            datasets_bucket=infrastructure.datasets_bucket,
            artifacts_bucket=infrastructure.artifacts_bucket,
            repository=infrastructure.repository,
            vpc=infrastructure.network.vpc,
        ).role
        self.template = ProcessingTemplate.from_config(
            config,
            infrastructure.job_resources(
                stack,
                role_arn=self.processing_role.role_arn,
                # Same network rules as training: the instances of one job, HTTPS to AWS endpoints.
                security_group_id=training.security_group.security_group_id,
            ),
        )
        endpoint = endpoint_name(project)
        self.model_role: Optional[iam.Role] = None
        self.model_security_group: Optional[ec2.SecurityGroup] = None
        model_resources = None
        self.transform: Optional[TransformTemplate] = None
        if not config.serving.scale_to_zero or config.transform.enabled:
            model_resources = self._promoted_models(config, endpoint=endpoint, infrastructure=infrastructure)
        if config.transform.enabled:
            assert model_resources is not None
            self.transform = TransformTemplate.from_config(
                config, datasets_bucket=infrastructure.datasets_bucket.bucket_name, model=model_resources
            )
        definition = pipeline_definition(
            project_name=project,
            processing=self.template,
            training=training.template,
            tuning=config.tuning,
            serving=config.serving,
            model_resources=model_resources,
            topic_arn=topic.topic_arn,
            partition=stack.partition,
            transform=self.transform,
            transform_config=config.transform,
        )

        name = pipeline_name(project)
        self.log_group: logs.LogGroup = encrypted_log_group(
            self, "Logs", key=key, log_group_name=f"/aws/vendedlogs/states/{name}"
        )
        self.role = iam.Role(
            self,
            "Role",
            description=f"{project}: the pipeline (processing, training, promotion of the project's jobs and endpoint)",
            assumed_by=state_machine_principal(stack, name),
        )
        statements, wildcards = self._statements(
            config,
            training=training,
            datasets_bucket=infrastructure.datasets_bucket,
            topic=topic,
            topic_key=topic_key,
            subnet_ids=infrastructure.subnet_ids,
            key=key,
        )
        policy = iam.ManagedPolicy(self, "RolePolicy", statements=statements, roles=[self.role])
        acknowledge_wildcard_resources(
            policy,
            "SageMaker actions are limited to the project's names (<project>-*: every run creates new jobs, models and "
            "endpoint configs named after it) and to the one endpoint; the CloudWatch Logs delivery and X-Ray actions "
            "that Step Functions logging and tracing need support no resource-level permissions.",
            wildcards,
        )
        self.state_machine = logged_state_machine(
            self,
            name=name,
            comment=f"{project}: raw data -> GPU processing job -> training job -> endpoint, each step optional",
            definition_body=sfn.DefinitionBody.from_string(stack.to_json_string(definition)),
            role=self.role,
            policy=policy,
            log_group=self.log_group,
        )

    def _promoted_models(
        self, config: PlatformConfig, *, endpoint: str, infrastructure: JobInfrastructure
    ) -> ModelResources:
        """The role and security group of the models the pipeline promotes (not with scale_to_zero) and
        of its batch transform jobs' models."""
        network, artifacts_bucket, key = infrastructure.network, infrastructure.artifacts_bucket, infrastructure.key
        vpc = network.vpc
        self.model_role = model_role = EndpointRole(
            self,
            "ModelRole",
            endpoint=endpoint,
            model_object_arn=artifacts_bucket.arn_for_objects(promoted_model_keys(config.project_name)),
            key=key,
            artifacts_bucket=artifacts_bucket,
            repository=infrastructure.repository,
            vpc=vpc,
            data_capture=config.serving.data_capture,
            rollback_alarms=rollback_alarm_names(config.project_name),
            batch_transform=BatchTransformAccess(
                project_name=config.project_name,
                datasets_bucket=infrastructure.datasets_bucket,
                input_prefix=config.transform.input_prefix,
                output_prefix=config.transform.output_prefix,
            )
            if config.transform.enabled
            else None,
        ).role
        self.model_security_group = group = closed_security_group(
            self,
            "ModelSecurityGroup",
            vpc,
            f"{endpoint}: hosting instances of models the pipeline promotes, HTTPS to AWS endpoints only",
        )
        # As the serving stack's group: HTTPS to the VPC endpoints only (ECR, and S3 through its
        # gateway endpoint's prefix list), never the internet, even with a NAT gateway.
        network.allow_https_to_aws(group, internet=False)
        return ModelResources(
            role_arn=model_role.role_arn,
            image_uri=infrastructure.image_uri(Stack.of(self)),
            artifacts_bucket=artifacts_bucket.bucket_name,
            key_arn=key.key_arn,
            subnet_ids=list(infrastructure.subnet_ids),
            security_group_ids=[group.security_group_id],
        )

    def _statements(
        self,
        config: PlatformConfig,
        *,
        training: TrainingJobWorkflow,
        datasets_bucket: s3.IBucket,
        topic: sns.ITopic,
        topic_key: kms.IKey,
        subnet_ids: Sequence[str],
        key: kms.IKey,
    ) -> tuple[list[iam.PolicyStatement], list[str]]:
        """What the pipeline's tasks, logging and tracing need, limited to the project's names."""
        arns = _ProjectArns.of(Stack.of(self), config.project_name)
        statements = self._job_statements(arns, training=training, subnet_ids=subnet_ids, key=key)
        # Each role only to SageMaker, and only to the kind of resource it is for.
        pass_roles = [
            pass_role_to_sagemaker("PassProcessingRole", self.processing_role.role_arn, arns.processing_jobs),
            # A tuning step's trials run with the training jobs' role too.
            pass_role_to_sagemaker("PassTrainingJobRole", training.job_role.role_arn, [arns.training_jobs, arns.tuning_jobs]),
        ]
        if self.model_role is not None:
            assert self.model_security_group is not None
            model_groups = [self.model_security_group.security_group_id]
            if not config.serving.scale_to_zero:
                statements += _promotion_statements(
                    Stack.of(self), config, arns, subnet_ids=subnet_ids, security_group_ids=model_groups, key=key
                )
            else:
                statements += _transform_model_statements(arns, subnet_ids=subnet_ids, security_group_ids=model_groups)
            pass_roles.append(pass_role_to_sagemaker("PassModelRole", self.model_role.role_arn, arns.models))
        if self.transform is not None:
            statements += _transform_statements(config, arns, key=key)
        statements += _run_statements(
            Stack.of(self),
            config,
            pass_roles=pass_roles,
            datasets_bucket=datasets_bucket,
            topic=topic,
            topic_key=topic_key,
        )
        wildcards = [arns.processing_jobs, arns.training_jobs, arns.tuning_jobs, "*"]
        if self.model_role is not None:
            wildcards += [arns.models, arns.endpoint_configs]
        if self.transform is not None:
            wildcards.append(arns.transform_jobs)
        return statements, wildcards

    def _job_statements(
        self, arns: "_ProjectArns", *, training: TrainingJobWorkflow, subnet_ids: Sequence[str], key: kms.IKey
    ) -> list[iam.PolicyStatement]:
        """Create hardened processing, training and tuning jobs of the project; follow and stop them."""
        # The role itself refuses a job that drops isolation, the VPC (its subnets and the job's
        # security group) or the output key.
        def create_hardened_jobs(
            sid: str, action: str, jobs_arn: str, template: ProcessingTemplate | JobTemplate
        ) -> list[iam.PolicyStatement]:
            """``action`` only for hardened jobs on the instance types ``template`` allows."""
            return pinned_job_creation_statements(
                sid,
                action,
                [jobs_arn],
                hardened_job_conditions(key.key_arn, subnet_ids, template.resources.security_group_ids),
                instance_types=template.allowed_instance_types or [template.default_instance_type],
                volume_key_arn=key.key_arn,
            )

        return [
            *create_hardened_jobs("CreateHardenedProcessingJobs", "sagemaker:CreateProcessingJob", arns.processing_jobs, self.template),
            *create_hardened_jobs("CreateHardenedTrainingJobs", "sagemaker:CreateTrainingJob", arns.training_jobs, training.template),
            # A tuning step: its TrainingJobDefinition as hardened as a training job (the same condition keys
            # are in CreateHyperParameterTuningJob's request context), as the training workflow's role grants it.
            *create_hardened_jobs(
                "CreateHardenedTuningJobs", "sagemaker:CreateHyperParameterTuningJob", arns.tuning_jobs, training.template
            ),
            iam.PolicyStatement(
                sid="FollowAndStopProjectJobs",
                actions=[
                    "sagemaker:DescribeProcessingJob",
                    "sagemaker:StopProcessingJob",
                    "sagemaker:DescribeTrainingJob",
                    "sagemaker:StopTrainingJob",
                    "sagemaker:AddTags",
                    "sagemaker:ListTags",
                ],
                resources=[arns.processing_jobs, arns.training_jobs],
            ),
            follow_tuning_jobs(arns.tuning_jobs),
        ]


@dataclass(frozen=True)
class _ProjectArns:
    """ARN patterns of the SageMaker resources the pipeline's role may act on."""

    processing_jobs: str
    training_jobs: str
    tuning_jobs: str
    transform_jobs: str
    models: str
    endpoint_configs: str
    endpoint: str

    @classmethod
    def of(cls, stack: Stack, project: str) -> "_ProjectArns":
        def arn(resource: str, name: str) -> str:
            return stack.format_arn(service="sagemaker", resource=resource, resource_name=name)

        return cls(
            processing_jobs=arn("processing-job", f"{project}-*"),
            training_jobs=arn("training-job", f"{project}-*"),
            tuning_jobs=arn("hyper-parameter-tuning-job", f"{project}-*"),
            transform_jobs=arn("transform-job", f"{project}-*"),
            models=arn("model", f"{project}-*"),
            endpoint_configs=arn("endpoint-config", f"{project}-*"),
            endpoint=arn("endpoint", endpoint_name(project)),
        )


def _promotion_statements(
    stack: Stack,
    config: PlatformConfig,
    arns: _ProjectArns,
    *,
    subnet_ids: Sequence[str],
    security_group_ids: Sequence[str],
    key: kms.IKey,
) -> list[iam.PolicyStatement]:
    """Create the project's models and endpoint configs, and move the endpoint to them."""
    hardened_model = merge_conditions(
        {"ForAllValues:StringEquals": {"sagemaker:VpcSubnets": list(subnet_ids)}, "Null": {"sagemaker:VpcSubnets": "false"}},
        in_security_groups(security_group_ids),
    )
    if config.serving.network_isolation:
        hardened_model["Bool"] = {"sagemaker:NetworkIsolation": "true"}
    # Only the configured hosting type, serving only the project's models; Null-guarded, since
    # ForAllValues over an absent key (a serverless variant has no type) is true. CreateModel has
    # no volume; the endpoint config carries the volume key, the platform key on EBS-only types
    # (SageMaker rejects one on types with local NVMe).
    endpoint_config: dict[str, dict[str, object]] = {
        "ForAllValues:StringEquals": {"sagemaker:InstanceTypes": [config.serving.instance_type]},
        "ForAllValues:ArnLike": {"sagemaker:ModelArn": [arns.models]},
        "Null": {"sagemaker:InstanceTypes": "false", "sagemaker:ModelArn": "false"},
    }
    if volume_kms_allowed(config.serving.instance_type):
        endpoint_config["ArnEquals"] = {"sagemaker:VolumeKmsKey": key.key_arn}
    alarms = [
        stack.format_arn(service="cloudwatch", resource="alarm", resource_name=n, arn_format=ArnFormat.COLON_RESOURCE_NAME)
        for n in rollback_alarm_names(config.project_name)
    ]
    return [
        iam.PolicyStatement(
            sid="CreateIsolatedModels",
            actions=["sagemaker:CreateModel"],
            resources=[arns.models],
            conditions=hardened_model,
        ),
        iam.PolicyStatement(
            sid="CreateEndpointConfigs",
            actions=["sagemaker:CreateEndpointConfig"],
            resources=[arns.endpoint_configs],
            conditions=endpoint_config,
        ),
        # CreateModel and CreateEndpointConfig with Tags also authorize sagemaker:AddTags.
        iam.PolicyStatement(
            sid="TagModelsAndConfigs", actions=["sagemaker:AddTags"], resources=[arns.models, arns.endpoint_configs]
        ),
        iam.PolicyStatement(
            sid="UpdateTheEndpoint",
            actions=["sagemaker:UpdateEndpoint"],
            resources=[arns.endpoint, arns.endpoint_configs],
        ),
        iam.PolicyStatement(sid="DescribeTheEndpoint", actions=["sagemaker:DescribeEndpoint"], resources=[arns.endpoint]),
        # UpdateEndpoint's automatic rollback reads the rollback alarms.
        iam.PolicyStatement(sid="ReadRollbackAlarms", actions=["cloudwatch:DescribeAlarms"], resources=alarms),
        # An endpoint config with the platform key (EBS-only types, data capture): SageMaker
        # creates grants on the key for the caller of UpdateEndpoint, only for AWS resources.
        iam.PolicyStatement(
            sid="GrantEndpointVolumeKey",
            actions=["kms:CreateGrant"],
            resources=[key.key_arn],
            conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
        ),
        iam.PolicyStatement(sid="DescribeEndpointVolumeKey", actions=["kms:DescribeKey"], resources=[key.key_arn]),
        # The promotion record: read before anything runs and after the endpoint serves the new
        # model, then written (a new version) and tagged; this one parameter only.
        iam.PolicyStatement(
            sid="KeepThePromotionRecord",
            actions=["ssm:GetParameters", "ssm:PutParameter", "ssm:AddTagsToResource"],
            resources=[
                stack.format_arn(service="ssm", resource="parameter", resource_name=promotion_record_name(config.project_name).lstrip("/"))
            ],
        ),
    ]


def _transform_model_statements(
    arns: _ProjectArns, *, subnet_ids: Sequence[str], security_group_ids: Sequence[str]
) -> list[iam.PolicyStatement]:
    """Create the transform's models where the pipeline promotes none (``serving.scale_to_zero``):
    isolated, in the training VPC's subnets and the models' security group."""
    hardened_model = merge_conditions(
        {
            "Bool": {"sagemaker:NetworkIsolation": "true"},
            "ForAllValues:StringEquals": {"sagemaker:VpcSubnets": list(subnet_ids)},
            "Null": {"sagemaker:VpcSubnets": "false"},
        },
        in_security_groups(security_group_ids),
    )
    return [
        iam.PolicyStatement(
            sid="CreateIsolatedModels", actions=["sagemaker:CreateModel"], resources=[arns.models], conditions=hardened_model
        ),
        # CreateModel with Tags also authorizes sagemaker:AddTags.
        iam.PolicyStatement(sid="TagModels", actions=["sagemaker:AddTags"], resources=[arns.models]),
    ]


def _transform_statements(config: PlatformConfig, arns: _ProjectArns, *, key: kms.IKey) -> list[iam.PolicyStatement]:
    """Create the project's batch transform jobs, hardened; follow and stop them.

    Only on the configured type (``sagemaker:InstanceTypes``, Null-guarded: ``ForAllValues`` over an
    absent key is true), only with the project's models (``sagemaker:ModelArn``), results encrypted
    with the platform key and, on EBS-only types, the volume too (SageMaker rejects a volume key on
    types with local NVMe). ``Arn*`` operators are false for an absent key: no guard needed there.
    """
    instance_type = config.transform.instance_type
    conditions: dict[str, dict[str, object]] = {
        "ForAllValues:StringEquals": {"sagemaker:InstanceTypes": [instance_type]},
        "ArnLike": {"sagemaker:ModelArn": arns.models},
        "ArnEquals": {"sagemaker:OutputKmsKey": key.key_arn},
        "Null": {"sagemaker:InstanceTypes": "false"},
    }
    if volume_kms_allowed(instance_type):
        conditions["ArnEquals"]["sagemaker:VolumeKmsKey"] = key.key_arn
    return [
        iam.PolicyStatement(
            sid="CreateHardenedTransformJobs",
            actions=["sagemaker:CreateTransformJob"],
            resources=[arns.transform_jobs],
            conditions=conditions,
        ),
        # CreateTransformJob with Tags also authorizes sagemaker:AddTags; the .sync integration reads
        # the job's tags (ListTags, in AWS's IAM template for createTransformJob.sync), as for the others.
        iam.PolicyStatement(
            sid="FollowAndStopTransformJobs",
            actions=["sagemaker:DescribeTransformJob", "sagemaker:StopTransformJob", "sagemaker:AddTags", "sagemaker:ListTags"],
            resources=[arns.transform_jobs],
        ),
    ]


def _run_statements(
    stack: Stack,
    config: PlatformConfig,
    *,
    pass_roles: Sequence[iam.PolicyStatement],
    datasets_bucket: s3.IBucket,
    topic: sns.ITopic,
    topic_key: kms.IKey,
) -> list[iam.PolicyStatement]:
    """Pass the project's roles (``pass_roles``), follow .sync jobs, check the output prefix,
    notify, log and trace."""
    return [
        *pass_roles,
        iam.PolicyStatement(
            sid="SyncIntegrationRules",
            actions=["events:PutTargets", "events:PutRule", "events:DescribeRule"],
            resources=[
                stack.format_arn(service="events", resource="rule", resource_name=rule)
                for rule in (PROCESSING_SYNC_EVENTS_RULE, SYNC_EVENTS_RULE, TUNING_SYNC_EVENTS_RULE)
                + ((TRANSFORM_SYNC_EVENTS_RULE,) if config.transform.enabled else ())
            ],
        ),
        # OutputPrefixNotEmpty: ListObjectsV2 under the processed-data prefix only.
        iam.PolicyStatement(
            sid="ListProcessedData",
            actions=["s3:ListBucket"],
            resources=[datasets_bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{config.processing.output_prefix}*"]}},
        ),
        iam.PolicyStatement(sid="Notify", actions=["sns:Publish"], resources=[topic.topic_arn]),
        # The topic is encrypted with its own key, which the role uses only through SNS (the
        # state machine's Publish), never by calling KMS itself.
        iam.PolicyStatement(
            sid="EncryptNotifications",
            actions=["kms:GenerateDataKey", "kms:Decrypt"],
            resources=[topic_key.key_arn],
            conditions={"StringEquals": {"kms:ViaService": f"sns.{stack.region}.amazonaws.com"}},
        ),
        *state_machine_logging_statements(),
    ]

