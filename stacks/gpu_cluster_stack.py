"""GPU EC2 nodes on the Deep Learning AMI (compute; destroyed and redeployed freely).

Placeholder: the GPU cluster issue fills this stack in.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from stacks.config import PlatformConfig
from stacks.data_plane_stack import DataPlaneStack


class GpuClusterStack(Stack):
    """GPU nodes that pass a boot-time health check before the deploy succeeds."""

    def __init__(
        self, scope: Construct, construct_id: str, *, config: PlatformConfig, data_plane: DataPlaneStack, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
