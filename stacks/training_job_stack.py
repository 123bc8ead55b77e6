"""SageMaker training jobs declared through Step Functions (compute; no data of its own).

Placeholder: the SageMaker training-job issue fills this stack in.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from stacks.config import PlatformConfig
from stacks.data_plane_stack import DataPlaneStack


class TrainingJobStack(Stack):
    """A state machine that runs the configured SageMaker training job."""

    def __init__(
        self, scope: Construct, construct_id: str, *, config: PlatformConfig, data_plane: DataPlaneStack, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
