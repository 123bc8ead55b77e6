"""The served model: one definition of its Model, EndpointConfig and blue/green deployment.

Pure Python (no CDK import). The serving stack declares them as CloudFormation resources
(``AWS::SageMaker::Model``/``EndpointConfig``/``Endpoint``, whose properties have the API's
names and shapes) from the properties built here (:class:`~stacks.components.model_endpoint.GpuEndpoint`);
the pipeline's promote step calls CreateModel, CreateEndpointConfig and UpdateEndpoint with
requests built from the same properties. ``tests/unit/test_pipeline_stack.py`` keeps the
serving stack's resources equal to these requests, so a model promoted by the pipeline is
served exactly as one deployed by ``python -m scripts.promote``.

Values may be :class:`~stacks.components.request_expressions.Jsonata` expressions (the
pipeline's model name and artifact, known at run time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

from stacks.components.request_expressions import Jsonata, render
from stacks.config import ServingConfig
from stacks.gpu_instances import lookup

VARIANT_NAME = "AllTraffic"
STARTUP_TIMEOUT_SECONDS = 900
"""GPU start-up (image pull, model download, GPU check, warm-up) takes minutes."""
EXPECTED_GPU_COUNT_ENV = "EXPECTED_GPU_COUNT"
DATA_CAPTURE_PREFIX = "data-capture/"


def endpoint_name(project_name: str) -> str:
    """The endpoint's fixed name: operators, ``scripts.invoke`` and the pipeline find it without a lookup."""
    return f"{project_name}-endpoint"


MAX_PREVIOUS_PROMOTIONS = 5
"""Approved models the promotion record keeps for rollback at most (and as many rolled-back ones)."""

MAX_PROMOTION_RECORD_BYTES = 4096
"""SSM's limit for a standard (free) parameter's value: the record must fit, or PutParameter fails
after the endpoint already serves the new model."""

PROMOTION_RECORD_SHAPES: tuple[tuple[int, int, bool], ...] = (
    (MAX_PREVIOUS_PROMOTIONS, MAX_PREVIOUS_PROMOTIONS, True),
    (MAX_PREVIOUS_PROMOTIONS, MAX_PREVIOUS_PROMOTIONS, False),
    (MAX_PREVIOUS_PROMOTIONS, 2, False),
    (MAX_PREVIOUS_PROMOTIONS, 0, False),
    (3, 0, False),
    (1, 0, False),
    (0, 0, False),
)
"""How the promotion record is written: the first of these ``(previous models, rolled-back models,
their metrics kept)`` whose compact JSON fits :data:`MAX_PROMOTION_RECORD_BYTES` (the live model
always keeps its metrics). Ten metrics a model make a full history about 7.8 KB: past about five
promotions the older models' metrics go first, then the oldest rolled-back and previous ones.
``scripts.promote`` and the pipeline's promote step both write by it."""


def promotion_record_name(project_name: str) -> str:
    """The promotion record's SSM parameter (JSON): the live model and the previously approved ones.

    Written by ``scripts.promote`` and by the pipeline's promote step, each after the endpoint
    serves the new model; read by the app at synth, so ``cdk deploy`` keeps serving it.
    """
    return f"/{project_name}/serving/promotion"


def inference_component_name(project_name: str) -> str:
    """The model's inference component (``serving.scale_to_zero``): ``<project>-model``."""
    return f"{project_name}-model"


PROMOTE_CONTEXT = "promote:deploy"
"""Context ``scripts.promote`` passes to its own ``cdk deploy`` (``-c promote:deploy=true``): the model
it names on the command line is the one it records once the endpoint serves it, so ``app.py`` does not
hold it against the promotion record. Not a setting (a key holding ``:`` is left to the app)."""

NO_AUTOSCALING_CONTEXT = "promote:no_autoscaling"
"""Context of ``scripts.promote``'s first deploy of an instance type change: the serving stack leaves
the variant's autoscaling out, since SageMaker refuses an UpdateEndpoint that changes the instance type
of a variant that is a scalable target; the second deploy (the new type) puts it back."""

NO_AUTO_ROLLBACK_CONTEXT = "promote:no_auto_rollback"
"""Context of ``scripts.promote --no-auto-rollback``: the endpoint's blue/green deployment names no
rollback alarms (an emergency path while the live model itself trips them); the next deploy names them again."""


TEARDOWN_CONTEXT = "teardown:destroy"
"""Context ``scripts.teardown`` passes to its ``cdk destroy`` (``-c teardown:destroy=true``): a serving
model set by hand that differs from the promotion record does not stop a teardown (which model the
serving stack would deploy no longer matters), as it stops a deploy."""


def context_flag(value: object) -> bool:
    """A ``-c key=true`` value (the CLI passes strings; tests may pass booleans)."""
    return str(value).strip().lower() == "true"


def rollback_alarm_names(project_name: str) -> tuple[str, str]:
    """The endpoint's fixed-name alarms (5xx errors, model latency) that roll a deployment back."""
    name = endpoint_name(project_name)
    return f"{name}-5xx", f"{name}-latency"


def volume_kms_allowed(instance_type: str) -> bool:
    """SageMaker rejects a volume key on types with local NVMe (the store is hardware-encrypted)."""
    row = lookup(instance_type)
    return row is None or row.local_nvme_gb == 0


@dataclass(frozen=True)
class ModelResources:
    """What the served model runs with (CDK tokens at synth time).

    Attributes:
        role_arn: The model's execution role.
        image_uri: The project's image and tag (it serves as ``<image> serve``).
        artifacts_bucket: Bucket of model artifacts and data capture.
        key_arn: Platform KMS key (ML volume where allowed, data capture).
        subnet_ids: Private subnets of the hosting instances.
        security_group_ids: Their security groups.
    """

    role_arn: str
    image_uri: str
    artifacts_bucket: str
    key_arn: str
    subnet_ids: Sequence[str]
    security_group_ids: Sequence[str]


def model_environment(config: ServingConfig) -> dict[str, str]:
    """The serving mode's environment (``training_image/trainer/contract/serving.py``)."""
    return {
        EXPECTED_GPU_COUNT_ENV: str(config.gpus_per_instance),
        "SERVING_INSTANCE_TYPE": config.instance_type,
        "SERVE_MAX_BATCH_SIZE": str(config.max_batch_size),
        "SERVE_MAX_BATCH_DELAY_MS": str(config.max_batch_delay_ms),
    }


def model_properties(
    config: ServingConfig, resources: ModelResources, *, model_data_url: Union[str, Jsonata]
) -> dict[str, Any]:
    """The Model's properties (CloudFormation's ``AWS::SageMaker::Model`` and CreateModel share them)."""
    return {
        "ExecutionRoleArn": resources.role_arn,
        "PrimaryContainer": {
            "Image": resources.image_uri,
            "Mode": "SingleModel",
            "ModelDataUrl": model_data_url,
            "Environment": model_environment(config),
        },
        "EnableNetworkIsolation": config.network_isolation,
        "VpcConfig": {"SecurityGroupIds": list(resources.security_group_ids), "Subnets": list(resources.subnet_ids)},
    }


def production_variant(config: ServingConfig, model_name: Union[str, Jsonata]) -> dict[str, Any]:
    """The endpoint's one real-time variant."""
    return {
        "VariantName": VARIANT_NAME,
        "ModelName": model_name,
        "InstanceType": config.instance_type,
        "InitialInstanceCount": config.initial_instance_count,
        "InitialVariantWeight": 1.0,
        "ContainerStartupHealthCheckTimeoutInSeconds": STARTUP_TIMEOUT_SECONDS,
        "ModelDataDownloadTimeoutInSeconds": STARTUP_TIMEOUT_SECONDS,
    }


def data_capture_config(config: ServingConfig, resources: ModelResources, endpoint: str) -> Optional[dict[str, Any]]:
    """Request/response capture under ``data-capture/<endpoint>``, or ``None`` when off."""
    if not config.data_capture:
        return None
    return {
        "EnableCapture": True,
        "InitialSamplingPercentage": config.data_capture_sampling_percent,
        "DestinationS3Uri": f"s3://{resources.artifacts_bucket}/{DATA_CAPTURE_PREFIX}{endpoint}",
        "KmsKeyId": resources.key_arn,
        "CaptureOptions": [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}],
        "CaptureContentTypeHeader": {"CsvContentTypes": ["text/csv"], "JsonContentTypes": ["application/json"]},
    }


def endpoint_config_properties(
    config: ServingConfig, resources: ModelResources, *, endpoint: str, model_name: Union[str, Jsonata]
) -> dict[str, Any]:
    """The real-time EndpointConfig's properties (CloudFormation and CreateEndpointConfig share them).

    Raises:
        ValueError: with ``serving.scale_to_zero`` (the endpoint serves an inference component
            and a new model rolls out by UpdateInferenceComponent, which this does not build).
    """
    if config.scale_to_zero:
        raise ValueError("serving.scale_to_zero endpoints serve an inference component; no real-time variant to build")
    properties: dict[str, Any] = {"ProductionVariants": [production_variant(config, model_name)]}
    if volume_kms_allowed(config.instance_type):
        properties["KmsKeyId"] = resources.key_arn
    capture = data_capture_config(config, resources, endpoint)
    if capture is not None:
        properties["DataCaptureConfig"] = capture
    return properties


def component_endpoint_config_properties(config: ServingConfig, resources: ModelResources, *, endpoint: str) -> dict[str, Any]:
    """The EndpointConfig of an endpoint serving an inference component (``serving.scale_to_zero``).

    Its instances come and go with the component's copies, down to none when idle; such an
    endpoint names its role and network itself.
    """
    variant = {
        "VariantName": VARIANT_NAME,
        "InstanceType": config.instance_type,
        "InitialInstanceCount": config.initial_instance_count,
        "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": config.max_instances},
        "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
    }
    properties: dict[str, Any] = {"ProductionVariants": [variant]}
    if volume_kms_allowed(config.instance_type):
        properties["KmsKeyId"] = resources.key_arn
    capture = data_capture_config(config, resources, endpoint)
    if capture is not None:
        properties["DataCaptureConfig"] = capture
    properties["ExecutionRoleArn"] = resources.role_arn
    properties["EnableNetworkIsolation"] = config.network_isolation
    properties["VpcConfig"] = {"SecurityGroupIds": list(resources.security_group_ids), "Subnets": list(resources.subnet_ids)}
    return properties


def deployment_config(config: ServingConfig, alarm_names: Sequence[str]) -> dict[str, Any]:
    """Blue/green with automatic rollback on ``alarm_names`` (the Endpoint's ``DeploymentConfig``);
    none with no alarms (``scripts.promote --no-auto-rollback``)."""
    traffic: dict[str, Any] = (
        {
            "Type": "CANARY",
            "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": config.canary_percent},
            "WaitIntervalInSeconds": config.bake_seconds,
        }
        if config.rollout == "canary"
        else {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": config.bake_seconds}
    )
    policy: dict[str, Any] = {
        "BlueGreenUpdatePolicy": {
            "TrafficRoutingConfiguration": traffic,
            "TerminationWaitInSeconds": config.bake_seconds,
            "MaximumExecutionTimeoutInSeconds": 3 * config.bake_seconds + 3600,
        },
    }
    if alarm_names:
        policy["AutoRollbackConfiguration"] = {"Alarms": [{"AlarmName": name} for name in alarm_names]}
    return policy


def retained_variant_properties() -> dict[str, Any]:
    """How an update treats the live variant (the Endpoint's properties and UpdateEndpoint's alike).

    Without ``RetainAllVariantProperties`` every update starts the new fleet at the config's
    ``InitialInstanceCount``, while autoscaling is blocked for the whole update: a promotion of an
    endpoint scaled out to 4 instances would serve all its traffic from 1 until it ends. Retained,
    the new fleet starts at the variant's current ``DesiredInstanceCount``. Retention covers the
    variant's instance count and weight (AWS's ``VariantProperty``): the model and the instance type
    still change with the new config. AWS lists ``DataCaptureConfig`` as a variant property it does
    not currently support, so it is not in the exclusions. The weight is not retained: the one
    variant always serves all traffic (``InitialVariantWeight`` 1), whatever was set by hand.
    """
    return {
        "RetainAllVariantProperties": True,
        "ExcludeRetainedVariantProperties": [{"VariantPropertyType": "DesiredWeight"}],
    }


def _tags(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def create_model_request(
    config: ServingConfig,
    resources: ModelResources,
    *,
    model_name: Union[str, Jsonata],
    model_data_url: Union[str, Jsonata],
    tags: Mapping[str, str],
) -> dict[str, Any]:
    """CreateModel (boto3 keyword arguments, or ``{% %}`` values for the pipeline)."""
    return render(
        {"ModelName": model_name, **model_properties(config, resources, model_data_url=model_data_url), "Tags": _tags(tags)}
    )


def create_endpoint_config_request(
    config: ServingConfig,
    resources: ModelResources,
    *,
    endpoint: str,
    config_name: Union[str, Jsonata],
    model_name: Union[str, Jsonata],
    tags: Mapping[str, str],
) -> dict[str, Any]:
    """CreateEndpointConfig (boto3 keyword arguments, or ``{% %}`` values for the pipeline)."""
    return render(
        {
            "EndpointConfigName": config_name,
            **endpoint_config_properties(config, resources, endpoint=endpoint, model_name=model_name),
            "Tags": _tags(tags),
        }
    )


def update_endpoint_request(
    config: ServingConfig, *, endpoint: str, config_name: Union[str, Jsonata], alarm_names: Sequence[str]
) -> dict[str, Any]:
    """UpdateEndpoint to ``config_name`` with the serving stack's blue/green deployment, rollback alarms
    and retained variant properties (the current instance count)."""
    return render(
        {
            "EndpointName": endpoint,
            "EndpointConfigName": config_name,
            "DeploymentConfig": deployment_config(config, alarm_names),
            **retained_variant_properties(),
        }
    )
