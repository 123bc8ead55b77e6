"""The execution role of a SageMaker endpoint's instances.

Apart from :mod:`stacks.components.model_endpoint` because the training stack's pipeline makes
one too (the role of the models it promotes): the training stack then builds without importing
the endpoint's own modules (``aws_sagemaker`` alone is ~0.06 s of every ``cdk synth``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.components.endpoint_spec import DATA_CAPTURE_PREFIX
from stacks.components.policy import (
    describe_network_statement,
    platform_key_data_statement,
    sagemaker_image_and_volume_statements,
    sagemaker_job_log_statements,
    sagemaker_vpc_network_statements,
)
from stacks.components.training_job_workflow import SageMakerExecutionRole
from stacks.components.transform_job_spec import SAGEMAKER_TRANSFORM_LOG_GROUP

ENDPOINT_LOG_GROUP_PREFIX = "/aws/sagemaker/Endpoints"


@dataclass(frozen=True)
class BatchTransformAccess:
    """What the role reads and writes as the model of the pipeline's batch transform jobs.

    Attributes:
        project_name: Transform jobs (and their log streams) are named ``<project_name>-...``.
        datasets_bucket: Bucket of the data to score.
        input_prefix: The data to score (read, and listed: an ``S3Prefix`` input is listed).
        output_prefix: Results in the artifacts bucket (written, never read or deleted).
    """

    project_name: str
    datasets_bucket: s3.IBucket
    input_prefix: str
    output_prefix: str


def _batch_transform_statements(
    stack: Stack, access: BatchTransformAccess, *, artifacts_bucket: s3.IBucket, key: kms.IKey
) -> tuple[list[iam.PolicyStatement], list[str]]:
    """Read the scoring prefix, write the results (encrypted with the platform key), the jobs' logs."""
    input_objects = access.datasets_bucket.arn_for_objects(f"{access.input_prefix}*")
    output_objects = artifacts_bucket.arn_for_objects(f"{access.output_prefix}*")
    log_statements, log_wildcards = sagemaker_job_log_statements(
        stack,
        log_group_name=SAGEMAKER_TRANSFORM_LOG_GROUP,
        project_name=access.project_name,
        metrics_sid="PublishTransformMetrics",
        describe_network=False,
    )
    statements = [
        iam.PolicyStatement(sid="ReadTransformInput", actions=["s3:GetObject"], resources=[input_objects]),
        iam.PolicyStatement(
            sid="ListTransformInput",
            actions=["s3:ListBucket"],
            resources=[access.datasets_bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{access.input_prefix}*"]}},
        ),
        iam.PolicyStatement(
            sid="WriteTransformOutput", actions=["s3:PutObject", "s3:AbortMultipartUpload"], resources=[output_objects]
        ),
        # The output KmsKeyId: SageMaker requires kms:Encrypt of the execution role (no plaintext returned).
        iam.PolicyStatement(sid="EncryptTransformOutput", actions=["kms:Encrypt"], resources=[key.key_arn]),
        *log_statements,
    ]
    return statements, [input_objects, output_objects, *log_wildcards]


class EndpointRole(SageMakerExecutionRole):
    """The execution role of the endpoint's instances (and of models the pipeline promotes).

    Reads exactly the model artifact (one object, or for the pipeline the pattern
    ``training-jobs/<project>-*/output/model.tar.gz``: the project jobs' models, which no other
    role but the training jobs' may write), decrypts with
    the platform key (through S3 and SageMaker only), pulls from the project's repository, writes
    only to the endpoint's log group, manages network interfaces only in the training VPC, and
    (with data capture) writes only under ``data-capture/<endpoint>/``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        endpoint: str,
        model_object_arn: str,
        key: kms.IKey,
        artifacts_bucket: s3.IBucket,
        repository: ecr.IRepository,
        vpc: ec2.IVpc,
        data_capture: bool,
        rollback_alarms: Sequence[str] = (),
        batch_transform: Optional[BatchTransformAccess] = None,
    ) -> None:
        """Create the role for ``endpoint`` serving the object ``model_object_arn``.

        ``rollback_alarms``: names of the deployment's rollback alarms, which SageMaker reads
        with the execution role (``cloudwatch:DescribeAlarms``) during a blue/green deployment.
        ``batch_transform``: the role also runs the pipeline's batch transform jobs: it reads the
        scoring prefix and writes the results prefix, nothing wider.
        """
        stack = Stack.of(scope)
        log_group = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"{ENDPOINT_LOG_GROUP_PREFIX}/{endpoint}",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        log_streams = f"{log_group}:*"
        network_statements, network_wildcards = sagemaker_vpc_network_statements(stack, vpc)
        statements = [
            iam.PolicyStatement(sid="ReadModelArtifact", actions=["s3:GetObject"], resources=[model_object_arn]),
            platform_key_data_statement(stack, key),
            iam.PolicyStatement(sid="DescribePlatformKey", actions=["kms:DescribeKey"], resources=[key.key_arn]),
            *sagemaker_image_and_volume_statements(key, repository, pull_sid="PullServingImage"),
            iam.PolicyStatement(
                sid="WriteEndpointLogs",
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[log_group, log_streams],
            ),
            describe_network_statement(),
            *network_statements,
        ]
        if rollback_alarms:
            statements.append(
                iam.PolicyStatement(
                    sid="ReadRollbackAlarms",
                    actions=["cloudwatch:DescribeAlarms"],
                    resources=[
                        stack.format_arn(
                            service="cloudwatch", resource="alarm", resource_name=n, arn_format=ArnFormat.COLON_RESOURCE_NAME
                        )
                        for n in rollback_alarms
                    ],
                )
            )
        wildcards = [log_streams, *network_wildcards, "*"]
        if "*" in model_object_arn:
            wildcards.append(model_object_arn)
        if data_capture:
            capture_objects = artifacts_bucket.arn_for_objects(f"{DATA_CAPTURE_PREFIX}{endpoint}/*")
            statements.append(
                iam.PolicyStatement(sid="WriteDataCapture", actions=["s3:PutObject"], resources=[capture_objects])
            )
            wildcards.append(capture_objects)
        reason = ""
        if batch_transform is not None:
            transform_statements, transform_wildcards = _batch_transform_statements(
                stack, batch_transform, artifacts_bucket=artifacts_bucket, key=key
            )
            statements += transform_statements
            wildcards += transform_wildcards
            reason = (
                " As the model of the pipeline's batch transform jobs: the objects under the scoring prefix (read; "
                "SageMaker lists and reads every object there) and under the results prefix (write: each job writes "
                "<prefix><job>/<key>.out), SageMaker's fixed /aws/sagemaker/TransformJobs log group and the project's "
                "job streams in it, and cloudwatch:PutMetricData (limited by namespace)."
            )
        super().__init__(
            scope,
            construct_id,
            description=f"{endpoint}: execution role of the GPU endpoint (one model artifact, image pull, its logs)",
            statements=statements,
            wildcard_reason=(
                "Each wildcard is the narrowest the API allows: the streams of this endpoint's own log group, captured "
                "requests under data-capture/<endpoint>/ (object keys are generated per hour), and '*' only for "
                "ecr:GetAuthorizationToken and EC2 Describe* (no resource-level permissions); subnets, security groups and "
                "network interfaces of this account and region, limited to the training VPC by the ec2:Vpc condition (a "
                "new interface by the subnet it must be created in). The model artifact is one exact object, or for "
                "models the pipeline promotes training-jobs/<project>-*/output/model.tar.gz: the model file of a project "
                "job and nothing else under its output (the processing role is denied every such key)." + reason
            ),
            wildcards=wildcards,
        )
