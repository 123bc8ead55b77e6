"""Composes the platform's stacks from the validated config. ``app.py`` and the tests call it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, TypeVar

from aws_cdk import App, Environment, Tags

from stacks.config import PlatformConfig
from stacks.data_plane_stack import DataPlaneStack
from stacks.gpu_cluster_stack import GpuClusterStack
from stacks.training_job_stack import TrainingJobStack

if TYPE_CHECKING:
    from stacks.serving_stack import ServingStack

_ComputeStack = TypeVar("_ComputeStack", GpuClusterStack, TrainingJobStack, "ServingStack")
"""A stack of one compute unit: built on the data plane, destroyed and redeployed freely."""


@dataclass(frozen=True)
class Platform:
    """Handles to the stacks of one platform instance.

    Attributes:
        data_plane: The stateful stack (kept data).
        gpu_cluster: GPU EC2 nodes, or ``None`` when ``cluster.enabled`` is false.
        training_job: SageMaker job workflow, or ``None`` when ``training_job.enabled`` is false.
        serving: GPU endpoint, or ``None`` when ``serving.enabled`` is false.
    """

    data_plane: DataPlaneStack
    gpu_cluster: Optional[GpuClusterStack]
    training_job: Optional[TrainingJobStack]
    serving: Optional[ServingStack] = None


def stack_name(config: PlatformConfig, unit: str) -> str:
    """Name of a deployable unit's stack: ``<project>-data|cluster|training|serving``.

    It is both the CloudFormation stack name and the stack's construct id. The CDK CLI selects
    stacks by construct id only (``cdk deploy gputrain-data``), so the two are one name: the name
    the console, the operator scripts and the README show is the one ``cdk`` accepts. Logical ids
    inside a stack do not depend on the stack's construct id, so no resource is replaced by it.
    """
    return f"{config.project_name}-{unit}"


def build_platform(app: App, config: PlatformConfig, env: Environment) -> Platform:
    """Create every enabled stack under ``app`` and tag all resources with the project."""
    data_plane = DataPlaneStack(
        app,
        stack_name(config, "data"),
        config=config,
        env=env,
        stack_name=stack_name(config, "data"),
        description=f"{config.project_name}: GPU training data plane (buckets, key, image repository, network)",
    )

    def compute_stack(stack_class: type[_ComputeStack], unit: str, description: str) -> _ComputeStack:
        """One of the compute stacks, built on the data plane's resources."""
        return stack_class(
            app,
            stack_name(config, unit),
            config=config,
            data_plane=data_plane,
            env=env,
            stack_name=stack_name(config, unit),
            description=f"{config.project_name}: {description}",
        )

    gpu_cluster = None
    if config.cluster.enabled:
        gpu_cluster = compute_stack(GpuClusterStack, "cluster", "GPU EC2 nodes on the Deep Learning AMI")
    training_job = None
    if config.training_job.enabled:
        training_job = compute_stack(TrainingJobStack, "training", "SageMaker training job workflow")
    serving = None
    if config.serving.enabled:
        # Imported here: the endpoint's modules (aws_sagemaker, autoscaling) cost every synth ~0.1 s,
        # and serving is off until a model is promoted.
        from stacks.serving_stack import ServingStack

        serving = compute_stack(ServingStack, "serving", "SageMaker GPU endpoint serving a trained model")
    Tags.of(app).add("Project", config.project_name)
    Tags.of(app).add("ManagedBy", "cdk")
    for key, value in config.tags.items():
        Tags.of(app).add(key, value)
    return Platform(data_plane=data_plane, gpu_cluster=gpu_cluster, training_job=training_job, serving=serving)
