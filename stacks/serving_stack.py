"""A GPU SageMaker endpoint serving a trained model (compute; no data of its own).

``cdk destroy`` removes the endpoint, its config, the model, scaling and alarms; the model
artifact stays in the artifacts bucket. Deploy only once the model exists: set
``serving.training_job_name`` (``python -m scripts.promote JOB`` does, after checking the job
completed) or ``serving.model_artifact_key``.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from stacks.components.endpoint_spec import NO_AUTO_ROLLBACK_CONTEXT, NO_AUTOSCALING_CONTEXT, context_flag
from stacks.components.model_endpoint import GpuEndpoint
from stacks.config import PlatformConfig
from stacks.data_plane_stack import DataPlaneStack


class ServingStack(Stack):
    """The GPU endpoint, its autoscaling and alarms.

    Attributes:
        endpoint: The endpoint construct (model, config, endpoint, role, scaling, alarms).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, config: PlatformConfig, data_plane: DataPlaneStack, **kwargs: Any
    ) -> None:
        """Build the endpoint on the data plane's key, artifacts bucket, repository and network."""
        super().__init__(scope, construct_id, **kwargs)
        network = data_plane.network
        # Not settings: markers only scripts.promote's own deploys pass (one deploy each), so a
        # later plain deploy puts autoscaling and the rollback alarms back.
        autoscaling = not context_flag(self.node.try_get_context(NO_AUTOSCALING_CONTEXT))
        auto_rollback = not context_flag(self.node.try_get_context(NO_AUTO_ROLLBACK_CONTEXT))
        self.endpoint = GpuEndpoint(
            self,
            "Endpoint",
            project_name=config.project_name,
            config=config.serving,
            key=data_plane.key,
            artifacts_bucket=data_plane.artifacts_bucket,
            repository=data_plane.repository,
            image_tag=config.image.tag,
            network=network,
            subnet_ids=network.private_subnet_ids,
            autoscaling=autoscaling,
            auto_rollback=auto_rollback,
        )
        outputs = {
            "EndpointName": (self.endpoint.endpoint_name, "python -m scripts.invoke --endpoint <this> FILE"),
            "ModelDataUrl": (self.endpoint.model.primary_container.model_data_url, "The served model artifact"),  # type: ignore[union-attr]
            "EndpointRoleArn": (self.endpoint.role.role_arn, "Execution role of the endpoint"),
            "AlarmTopicArn": (self.endpoint.alarms.topic.topic_arn, "5xx and latency alarms (also roll deployments back)"),
            "InstanceType": (config.serving.instance_type, "GPU hosting instance type"),
        }
        if self.endpoint.inference_component_name is not None:
            outputs["InferenceComponentName"] = (
                self.endpoint.inference_component_name,
                "Scale-to-zero: invocations name this component (scripts.invoke does)",
            )
        for name, (value, description) in outputs.items():
            CfnOutput(self, name, value=value, description=description)
