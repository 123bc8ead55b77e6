"""Composes the platform's stacks from the validated config. ``app.py`` and the tests call it."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import App, Environment, Tags

from stacks.config import PlatformConfig
from stacks.data_plane_stack import DataPlaneStack


@dataclass(frozen=True)
class Platform:
    """Handles to the stacks of one platform instance.

    Attributes:
        data_plane: The stateful stack.
    """

    data_plane: DataPlaneStack


def stack_name(config: PlatformConfig, unit: str) -> str:
    """CloudFormation stack name of a deployable unit, e.g. ``gputrain-data``."""
    return f"{config.project_name}-{unit}"


def build_platform(app: App, config: PlatformConfig, env: Environment) -> Platform:
    """Create every enabled stack under ``app`` and tag all resources with the project."""
    data_plane = DataPlaneStack(
        app,
        "DataPlane",
        config=config,
        env=env,
        stack_name=stack_name(config, "data"),
        description=f"{config.project_name}: GPU training data plane (buckets, key, image repository, network)",
        termination_protection=False,
    )
    Tags.of(app).add("Project", config.project_name)
    Tags.of(app).add("ManagedBy", "cdk")
    for key, value in config.tags.items():
        Tags.of(app).add(key, value)
    return Platform(data_plane=data_plane)
