"""A SageMaker real-time endpoint on GPUs serving a trained model with the project's image.

The same image that trains serves: SageMaker hosting starts it as ``<image> serve``
(``python -m trainer serve``), which verifies the GPUs before ``/ping`` turns healthy. Model,
endpoint config and endpoint are CloudFormation resources; a new model artifact makes a new
Model and EndpointConfig, and the Endpoint moves to them with a blue/green deployment that
rolls back on its alarms.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.components.endpoint_spec import (
    STARTUP_TIMEOUT_SECONDS,
    VARIANT_NAME,
    ModelResources,
    component_endpoint_config_properties,
    deployment_config,
    endpoint_config_properties,
    endpoint_name,
    inference_component_name,
    model_properties,
    retained_variant_properties,
    rollback_alarm_names,
    volume_kms_allowed,
)
from stacks.components.encryption_key import topic_key
from stacks.components.endpoint_role import EndpointRole
from stacks.components.image_repository import repository_image_uri
from stacks.components.network import TrainingNetwork, closed_security_group
from stacks.components.policy import acknowledge
from stacks.config import ServingConfig

def cfn_arguments(properties: Mapping[str, Any]) -> dict[str, Any]:
    """An L1 construct's keyword arguments from properties with the API's names (as the spec writes them).

    The top level becomes keyword names (``KmsKeyId`` -> ``kms_key_id``); nested objects keep
    their structure with their keys as the CDK struct fields (``ModelDataUrl`` -> ``modelDataUrl``),
    which render back to the API's names. Maps of the user's own keys (``Environment``) stay as given.
    """
    return {_SNAKE.sub("_", key).lower(): _cfn_value(key, value) for key, value in properties.items()}


_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")
_MAPS = frozenset({"Environment"})
"""Properties whose keys are the user's (not struct fields)."""


def _cfn_value(key: str, value: Any) -> Any:
    if key in _MAPS:
        return value
    if isinstance(value, Mapping):
        return {k[:1].lower() + k[1:]: _cfn_value(k, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_cfn_value("", v) for v in value]
    return value


def typing_cast_str(value: Optional[str]) -> str:
    """A name that is set in the mode that uses it."""
    assert value is not None
    return value


ERROR_RATE_ALARM = 0.1
"""The share of a minute's invocations answered 5xx at which the 5xx alarm counts that minute as
failing, whatever the count (``serving.error_alarm_threshold`` is the count)."""


def per_minute_sagemaker_metric(metric_name: str, dimensions: Mapping[str, str], *, statistic: str) -> cloudwatch.Metric:
    """An endpoint's (or inference component's) ``AWS/SageMaker`` metric, one datapoint a minute."""
    return cloudwatch.Metric(
        namespace="AWS/SageMaker",
        metric_name=metric_name,
        dimensions_map=dimensions,
        statistic=statistic,
        period=Duration.minutes(1),
    )


class EndpointAlarms(Construct):
    """5xx errors and model latency of the endpoint's variant, to an encrypted SNS topic.

    The same alarms roll a blue/green deployment back.

    Attributes:
        topic: Alarm notifications.
        errors: 2 minutes running with 5xx answers at or above ``error_alarm_threshold`` per minute,
            or at or above :data:`ERROR_RATE_ALARM` of the minute's invocations.
        latency: Average ``ModelLatency`` above the threshold, 3 minutes running.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        endpoint: str,
        config: ServingConfig,
        dimensions: dict[str, str],
        alarm_names: Sequence[str],
    ) -> None:
        """Alarms on the metrics of ``dimensions`` (the variant, or the inference component).

        ``alarm_names`` (5xx, latency) are fixed names
        (:func:`~stacks.components.endpoint_spec.rollback_alarm_names`): the pipeline's
        UpdateEndpoint names them as its rollback alarms without a lookup.
        """
        super().__init__(scope, construct_id)
        key = topic_key(self, "TopicKey", description=f"{endpoint}: endpoint alarms topic")
        errors_name, latency_name = alarm_names
        stack = Stack.of(self)
        # Confused deputy: CloudWatch may use the key and publish only for this endpoint's two
        # alarms in this account (as the training stack's topic admits EventBridge for its rules only).
        from_these_alarms = {
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnEquals": {
                "aws:SourceArn": [
                    stack.format_arn(service="cloudwatch", resource="alarm", resource_name=name, arn_format=ArnFormat.COLON_RESOURCE_NAME)
                    for name in alarm_names
                ]
            },
        }
        cloudwatch_alarms = iam.ServicePrincipal("cloudwatch.amazonaws.com")
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsToPublish",
                principals=[cloudwatch_alarms],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy "*" means this key
                conditions=from_these_alarms,
            )
        )
        self.topic = sns.Topic(self, "Topic", display_name=f"{endpoint} alarms", master_key=key, enforce_ssl=True)
        # A topic policy replaces SNS's default one (the account's principals may publish), so
        # without this statement the alarms' notifications would be refused.
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsToPublish",
                principals=[cloudwatch_alarms],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions=from_these_alarms,
            )
        )
        # SageMaker's Invocation5XXErrors is 1 for each invocation answered 5xx and 0 for the others:
        # its Sum is the count of 5xx answers, its Average their share of the invocations. A count
        # alone never fires on a low-traffic endpoint (a model failing every one of 2 requests a
        # minute stays under 5), so a minute also fails on the share. A minute without invocations
        # has no datapoint: missing data is not breaching, so an idle endpoint never rolls a
        # deployment back; CloudWatch evaluates the most recent real datapoints within its
        # evaluation range first, so sparse failing traffic still fires.
        failing_minutes = cloudwatch.MathExpression(
            expression=f"IF(errors >= {config.error_alarm_threshold} OR rate >= {ERROR_RATE_ALARM}, 1, 0)",
            using_metrics={
                "errors": per_minute_sagemaker_metric("Invocation5XXErrors", dimensions, statistic="Sum"),
                "rate": per_minute_sagemaker_metric("Invocation5XXErrors", dimensions, statistic="Average"),
            },
            label="minute failing on 5xx (count or share)",
            period=Duration.minutes(1),
        )
        self.errors = cloudwatch.Alarm(
            self,
            "Errors5xx",
            alarm_name=errors_name,
            alarm_description=(
                f"{endpoint}: the model container answers 5xx ({config.error_alarm_threshold} a minute, or "
                f"{ERROR_RATE_ALARM:.0%} of the invocations, 2 minutes running); rolls a deployment back"
            ),
            metric=failing_minutes,
            threshold=1,
            evaluation_periods=2,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.latency = cloudwatch.Alarm(
            self,
            "ModelLatency",
            alarm_name=latency_name,
            alarm_description=f"{endpoint}: average model latency above {config.latency_alarm_ms} ms; rolls a deployment back",
            metric=per_minute_sagemaker_metric("ModelLatency", dimensions, statistic="Average"),  # microseconds
            threshold=config.latency_alarm_ms * 1000,
            evaluation_periods=3,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        for alarm in (self.errors, self.latency):
            alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
            alarm.add_ok_action(cw_actions.SnsAction(self.topic))


class GpuEndpoint(Construct):
    """Model, endpoint config and endpoint, with autoscaling and alarms.

    Attributes:
        endpoint_name: The endpoint's name (fixed: ``<project>-endpoint``).
        role: The execution role.
        security_group: The instances' security group (HTTPS out to the VPC endpoints only).
        model: ``AWS::SageMaker::Model``.
        endpoint_config: ``AWS::SageMaker::EndpointConfig``.
        endpoint: ``AWS::SageMaker::Endpoint``.
        alarms: 5xx and latency alarms (also the rollback alarms).
        scaling_target: The Application Auto Scaling target of the variant (or, with
            ``scale_to_zero``, of the inference component's copies); ``None`` with ``autoscaling=False``.
        inference_component: With ``scale_to_zero``: the model as an inference component whose
            copies (and the instances under them) scale to zero when idle; else ``None``.
        inference_component_name: Its fixed name (``<project>-model``), else ``None``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project_name: str,
        config: ServingConfig,
        key: kms.IKey,
        artifacts_bucket: s3.IBucket,
        repository: ecr.IRepository,
        image_tag: str,
        network: TrainingNetwork,
        subnet_ids: Sequence[str],
        autoscaling: bool = True,
        auto_rollback: bool = True,
    ) -> None:
        """Create the endpoint for ``config`` (validated: a model source is set).

        ``autoscaling=False`` leaves the variant's scaling out (``scripts.promote``'s first deploy of an
        instance type change); ``auto_rollback=False`` names no rollback alarms in the deployment
        (``scripts.promote --no-auto-rollback``). Both only with a real-time variant.
        """
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.endpoint_name = endpoint_name(project_name)
        execution_role = EndpointRole(
            self,
            "ExecutionRole",
            endpoint=self.endpoint_name,
            model_object_arn=artifacts_bucket.arn_for_objects(config.model_key),
            key=key,
            artifacts_bucket=artifacts_bucket,
            repository=repository,
            vpc=network.vpc,
            data_capture=config.data_capture,
            rollback_alarms=rollback_alarm_names(project_name),
        )
        self.role = execution_role.role
        self.security_group = self._security_group(network)
        resources = ModelResources(
            role_arn=self.role.role_arn,
            image_uri=repository_image_uri(stack, repository, image_tag),
            artifacts_bucket=artifacts_bucket.bucket_name,
            key_arn=key.key_arn,
            subnet_ids=list(subnet_ids),
            security_group_ids=[self.security_group.security_group_id],
        )
        self.model = sagemaker.CfnModel(
            self,
            "Model",
            **cfn_arguments(
                model_properties(config, resources, model_data_url=f"s3://{artifacts_bucket.bucket_name}/{config.model_key}")
            ),
        )
        # The role's managed policy must be attached before SageMaker checks that the role can read the
        # model and pull the image (the role itself is already a dependency, through its ARN).
        self.model.node.add_dependency(execution_role.policy)
        self.endpoint_config = self._endpoint_config(config, resources)
        self.inference_component_name: Optional[str] = None
        if config.scale_to_zero:
            self.inference_component_name = inference_component_name(project_name)
            dimensions = {"InferenceComponentName": self.inference_component_name}
        else:
            dimensions = {"EndpointName": self.endpoint_name, "VariantName": VARIANT_NAME}
        self.alarms = EndpointAlarms(
            self,
            "Alarms",
            endpoint=self.endpoint_name,
            config=config,
            dimensions=dimensions,
            alarm_names=rollback_alarm_names(project_name),
        )
        rollback_alarms = [alarm.alarm_name for alarm in (self.alarms.errors, self.alarms.latency)]
        # With inference components a new model is a rolling update of the component (below), and
        # managed instance scaling owns the instance count.
        update: dict[str, Any] = (
            {}
            if config.scale_to_zero
            else cfn_arguments(
                {
                    "DeploymentConfig": deployment_config(config, rollback_alarms if auto_rollback else ()),
                    **retained_variant_properties(),
                }
            )
        )
        self.endpoint = sagemaker.CfnEndpoint(
            self,
            "Endpoint",
            endpoint_name=self.endpoint_name,
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
            **update,
        )
        self.inference_component: Optional[sagemaker.CfnInferenceComponent] = None
        if config.scale_to_zero:
            self.inference_component = self._inference_component(config, rollback_alarms)
        self.scaling_target: Optional[appscaling.ScalableTarget] = (
            self._scaling(config) if autoscaling or config.scale_to_zero else None
        )

    def _security_group(self, network: TrainingNetwork) -> ec2.SecurityGroup:
        group = closed_security_group(
            self, "SecurityGroup", network.vpc, f"{self.endpoint_name}: SageMaker hosting instances, HTTPS to AWS endpoints only"
        )
        # SageMaker pulls the image and downloads the model through the VPC: the ECR interface
        # endpoints and the S3 gateway endpoint. Never the internet, even where a NAT gateway
        # gives training a route out.
        network.allow_https_to_aws(group, internet=False)
        return group

    def _endpoint_config(self, config: ServingConfig, resources: ModelResources) -> sagemaker.CfnEndpointConfig:
        """The real-time variant of the model, or (``scale_to_zero``) the instances of its inference component."""
        if config.scale_to_zero:
            properties = component_endpoint_config_properties(config, resources, endpoint=self.endpoint_name)
        else:
            properties = endpoint_config_properties(
                config, resources, endpoint=self.endpoint_name, model_name=self.model.attr_model_name
            )
        endpoint_config = sagemaker.CfnEndpointConfig(self, "EndpointConfig", **cfn_arguments(properties))
        if not volume_kms_allowed(config.instance_type):
            acknowledge(
                endpoint_config,
                f"{config.instance_type} serves from local NVMe instance storage, which AWS encrypts in hardware with "
                "keys generated per instance; SageMaker rejects a KmsKeyId for such types. Data capture (when on) is "
                "still encrypted with the platform key.",
                "NIST.800.53.R5-SageMakerEndpointConfigurationKMSKeyConfigured",
            )
        return endpoint_config

    def _scaling(self, config: ServingConfig) -> appscaling.ScalableTarget:
        """Target tracking on invocations (and, with ``scale_to_zero``, out of zero), plus the schedule."""
        target = appscaling.ScalableTarget(
            self,
            "Scaling",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=(
                f"inference-component/{self.inference_component_name}"
                if config.scale_to_zero
                else f"endpoint/{self.endpoint_name}/variant/{VARIANT_NAME}"
            ),
            scalable_dimension=(
                "sagemaker:inference-component:DesiredCopyCount"
                if config.scale_to_zero
                else "sagemaker:variant:DesiredInstanceCount"
            ),
            # Copies of the model (one per instance: each takes every GPU) or instances.
            min_capacity=0 if config.scale_to_zero else config.min_instances,
            max_capacity=config.max_instances,
            role=iam.Role.from_role_arn(
                self,
                "ScalingRole",
                # Application Auto Scaling's service-linked role for SageMaker (created on first use).
                Stack.of(self).format_arn(
                    service="iam",
                    region="",
                    resource="role",
                    resource_name="aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
                    "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint",
                ),
            ),
        )
        target.node.add_dependency(self.inference_component or self.endpoint)
        target.scale_to_track_metric(
            "InvocationsPerInstance",
            target_value=config.target_invocations_per_instance,
            predefined_metric=(
                appscaling.PredefinedMetric.SAGEMAKER_INFERENCE_COMPONENT_INVOCATIONS_PER_COPY
                if config.scale_to_zero
                else appscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE
            ),
            scale_in_cooldown=Duration.seconds(config.scale_in_cooldown_seconds),
            scale_out_cooldown=Duration.seconds(config.scale_out_cooldown_seconds),
        )
        if config.scale_to_zero:
            # Target tracking cannot wake a component at zero copies (no invocations, no metric):
            # a request that finds no copy counts in NoCapacityInvocationFailures, and that adds one.
            target.scale_on_metric(
                "ScaleOutFromZero",
                metric=per_minute_sagemaker_metric(
                    "NoCapacityInvocationFailures",
                    {"InferenceComponentName": typing_cast_str(self.inference_component_name)},
                    statistic="Maximum",
                ),
                scaling_steps=[
                    appscaling.ScalingInterval(upper=0, change=0),
                    appscaling.ScalingInterval(lower=1, change=1),
                ],
                adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
                cooldown=Duration.seconds(config.scale_out_cooldown_seconds),
            )
        if config.scale_in_schedule and config.scale_out_schedule:
            # Real-time variants cannot go below one instance; a component can go to zero copies.
            floor = 0 if config.scale_to_zero else 1
            target.scale_on_schedule(
                "ScaleIn",
                schedule=appscaling.Schedule.expression(config.scale_in_schedule),
                min_capacity=floor,
                max_capacity=floor,
            )
            target.scale_on_schedule(
                "ScaleOut",
                schedule=appscaling.Schedule.expression(config.scale_out_schedule),
                min_capacity=0 if config.scale_to_zero else config.min_instances,
                max_capacity=config.max_instances,
            )
        return target

    def _inference_component(self, config: ServingConfig, rollback_alarms: Sequence[str]) -> sagemaker.CfnInferenceComponent:
        component = sagemaker.CfnInferenceComponent(
            self,
            "InferenceComponent",
            inference_component_name=self.inference_component_name,
            endpoint_name=self.endpoint.attr_endpoint_name,
            variant_name=VARIANT_NAME,
            specification=sagemaker.CfnInferenceComponent.InferenceComponentSpecificationProperty(
                model_name=self.model.attr_model_name,
                compute_resource_requirements=sagemaker.CfnInferenceComponent.InferenceComponentComputeResourceRequirementsProperty(
                    # One copy per instance, with every GPU: the serving mode verifies them all.
                    number_of_accelerator_devices_required=config.gpus_per_instance,
                    min_memory_required_in_mb=1024,
                ),
                startup_parameters=sagemaker.CfnInferenceComponent.InferenceComponentStartupParametersProperty(
                    container_startup_health_check_timeout_in_seconds=STARTUP_TIMEOUT_SECONDS,
                    model_data_download_timeout_in_seconds=STARTUP_TIMEOUT_SECONDS,
                ),
            ),
            runtime_config=sagemaker.CfnInferenceComponent.InferenceComponentRuntimeConfigProperty(
                copy_count=config.initial_instance_count
            ),
            deployment_config=sagemaker.CfnInferenceComponent.InferenceComponentDeploymentConfigProperty(
                rolling_update_policy=sagemaker.CfnInferenceComponent.InferenceComponentRollingUpdatePolicyProperty(
                    maximum_batch_size=sagemaker.CfnInferenceComponent.InferenceComponentCapacitySizeProperty(
                        type="COPY_COUNT", value=1
                    ),
                    wait_interval_in_seconds=config.bake_seconds,
                    maximum_execution_timeout_in_seconds=3 * config.bake_seconds + 3600,
                ),
                auto_rollback_configuration=sagemaker.CfnInferenceComponent.AutoRollbackConfigurationProperty(
                    alarms=[sagemaker.CfnInferenceComponent.AlarmProperty(alarm_name=name) for name in rollback_alarms]
                ),
            ),
        )
        return component
