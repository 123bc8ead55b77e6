"""The one CreateTransformJob request: built here for the pipeline's transform step and for a direct launch.

Pure Python (no CDK import), so the operator scripts can import it without starting jsii.

Like :mod:`stacks.components.processing_job_spec`, the request is written once, in
:func:`create_transform_job_request`; the job and model names are concrete strings (a direct
launch) or :class:`~stacks.components.request_expressions.Jsonata` (the pipeline's variables).

The job runs a model of the project (the serving mode of the image, ``<image> serve``, as an
endpoint runs it; :func:`transform_model_config` gives the model its own GPU count) over every
object under ``s3://<datasets bucket>/<transform.input_prefix>`` and writes one ``<key>.out`` per
object under ``s3://<artifacts bucket>/<transform.output_prefix><job name>/``, encrypted with the
platform key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Union

from stacks.components.endpoint_spec import ModelResources, volume_kms_allowed
from stacks.components.request_expressions import Jsonata, concat, render
from stacks.config import PlatformConfig, ServingConfig, TransformConfig
from stacks.sagemaker_limits import transform_job_limits

JOB_NAME_SUFFIX = "transform"
"""A pipeline's transform job (and the model it creates for it) is ``<project>-<execution name>-transform``."""
MAX_JOB_NAME_LENGTH = transform_job_limits().job_name.max_length
ASSEMBLE_WITH = "Line"
"""SageMaker adds a newline after each *request's* answer: with the default MultiRecord batches one
output line holds a whole mini-batch's ``{"predictions": [...]}``, one prediction per input line in
order (not one output line per input line; SingleRecord gives that)."""
SAGEMAKER_TRANSFORM_LOG_GROUP = "/aws/sagemaker/TransformJobs"
"""SageMaker writes transform logs here, in streams named ``<job name>/<instance>-<ts>``."""


@dataclass(frozen=True)
class TransformTemplate:
    """Everything about a transform job that is fixed at deploy time.

    Build it with :meth:`from_config`.

    Attributes:
        project_name: Job names start with ``<project_name>-``.
        datasets_bucket: Bucket of the data to score.
        artifacts_bucket: Bucket of the results.
        key_arn: Platform KMS key (results; the ML volume on EBS-only types).
        input_prefix: Key prefix of the data to score (the model role reads only this).
        output_prefix: Key prefix of the results (the model role writes only this).
        instance_type: ``TransformResources.InstanceType``.
        instance_count: ``TransformResources.InstanceCount``.
        content_type: ``TransformInput.ContentType``.
        split_type: ``TransformInput.SplitType``.
        batch_strategy: ``BatchStrategy``.
        max_payload_mb: ``MaxPayloadInMB``.
        max_runtime_seconds: The pipeline step's ``TimeoutSeconds`` (Step Functions stops the job).
        tags: Tags on every job.
    """

    project_name: str
    datasets_bucket: str
    artifacts_bucket: str
    key_arn: str
    input_prefix: str
    output_prefix: str
    instance_type: str
    instance_count: int
    content_type: str
    split_type: str
    batch_strategy: str
    max_payload_mb: int
    max_runtime_seconds: int
    tags: Mapping[str, str]

    @classmethod
    def from_config(cls, config: PlatformConfig, *, datasets_bucket: str, model: ModelResources) -> "TransformTemplate":
        """The template for ``config.transform``; results go to ``model``'s artifacts bucket and key."""
        tr = config.transform
        return cls(
            project_name=config.project_name,
            datasets_bucket=datasets_bucket,
            artifacts_bucket=model.artifacts_bucket,
            key_arn=model.key_arn,
            input_prefix=tr.input_prefix,
            output_prefix=tr.output_prefix,
            instance_type=tr.instance_type,
            instance_count=tr.instance_count,
            content_type=tr.content_type,
            split_type=tr.split_type,
            batch_strategy=tr.batch_strategy,
            max_payload_mb=tr.max_payload_mb,
            max_runtime_seconds=tr.max_runtime_seconds,
            tags=MappingProxyType({"Project": config.project_name, **config.tags}),
        )

    @property
    def input_uri(self) -> str:
        """``s3://<datasets bucket>/<input_prefix>``: every object below it is scored."""
        return f"s3://{self.datasets_bucket}/{self.input_prefix}"


def transform_job_name(project_name: str, run_name: Union[str, Jsonata]) -> Union[str, Jsonata]:
    """``<project>-<run>-transform`` (the pipeline's run is its execution name)."""
    return concat(f"{project_name}-", run_name, f"-{JOB_NAME_SUFFIX}")


def transform_output_uri(template: TransformTemplate, job_name: Union[str, Jsonata]) -> Union[str, Jsonata]:
    """``s3://<artifacts bucket>/<output_prefix><job>/``: the job's ``<key>.out`` files lie below it."""
    return concat(f"s3://{template.artifacts_bucket}/{template.output_prefix}", job_name, "/")


def transform_model_config(serving: ServingConfig, transform: TransformConfig) -> ServingConfig:
    """The serving settings of the model a transform job runs: the endpoint's, on the transform's
    instance type and GPU count, and always without network (SageMaker feeds it the records)."""
    return dataclasses.replace(
        serving,
        instance_type=transform.instance_type,
        expected_gpus_per_instance=transform.gpus_per_instance,
        network_isolation=True,
    )


def reuses_promoted_model(serving: ServingConfig, transform: TransformConfig) -> bool:
    """Whether a model the pipeline promotes is the very model the transform would create (same
    environment and isolation), so that a promoting execution transforms with it."""
    return not serving.scale_to_zero and transform_model_config(serving, transform) == serving


def create_transform_job_request(
    template: TransformTemplate, *, job_name: Union[str, Jsonata], model_name: Union[str, Jsonata]
) -> dict[str, Any]:
    """The CreateTransformJob request (boto3 keyword arguments / the pipeline task's ``Arguments``)."""
    resources: dict[str, Any] = {"InstanceType": template.instance_type, "InstanceCount": template.instance_count}
    # Types with local NVMe keep data on hardware-encrypted instance storage, and SageMaker
    # rejects a volume key for them; EBS-only types get the platform key.
    if volume_kms_allowed(template.instance_type):
        resources["VolumeKmsKeyId"] = template.key_arn
    request = {
        "TransformJobName": job_name,
        "ModelName": model_name,
        "MaxPayloadInMB": template.max_payload_mb,
        "BatchStrategy": template.batch_strategy,
        "TransformInput": {
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": template.input_uri}},
            "ContentType": template.content_type,
            "CompressionType": "None",
            "SplitType": template.split_type,
        },
        "TransformOutput": {
            "S3OutputPath": transform_output_uri(template, job_name),
            "AssembleWith": ASSEMBLE_WITH,
            "KmsKeyId": template.key_arn,
        },
        "TransformResources": resources,
        "Tags": [{"Key": k, "Value": v} for k, v in template.tags.items()],
    }
    return render(request)
