"""GPU EC2 nodes on the Deep Learning AMI (compute; destroyed and redeployed freely).

``cdk destroy`` of this stack terminates every node and removes what it created (network
interfaces, security group, placement group, role, instance profile, alarms, log group); the
data plane's buckets, key, repository and VPC are only referenced.
See :mod:`stacks.components.gpu_cluster` for the AMI cache, host list and cost guards.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Fn, Stack
from constructs import Construct

from stacks.components.gpu_cluster import TRAINING_WORKER_PORT, GpuCluster
from stacks.config import PlatformConfig
from stacks.data_plane_stack import DataPlaneStack


class GpuClusterStack(Stack):
    """GPU nodes that pass a boot-time health check before the deploy succeeds.

    Attributes:
        cluster: The nodes and their security group, role, log group and alarms.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, config: PlatformConfig, data_plane: DataPlaneStack, **kwargs: Any
    ) -> None:
        """Build the cluster from the validated config and the data plane's handles."""
        super().__init__(scope, construct_id, **kwargs)
        # The image URI is built from the repository's name rather than split from its ARN: the
        # same URI, in a template linters can read (cfn-lint cannot see through Fn::Split over
        # a stack output).
        registry = f"{self.account}.dkr.ecr.{self.region}.{Aws.URL_SUFFIX}"
        self.cluster = GpuCluster(
            self,
            "Cluster",
            config=config.cluster,
            project_name=config.project_name,
            image_uri=f"{registry}/{data_plane.repository.repository_name}:{config.image.tag}",
            network=data_plane.network,
            key=data_plane.key,
            datasets_bucket=data_plane.datasets_bucket,
            artifacts_bucket=data_plane.artifacts_bucket,
            repository=data_plane.repository,
            data_stack_name=data_plane.stack_name,
        )
        cluster = self.cluster
        outputs = {
            "InstanceIds": (Fn.join(",", [n.instance.instance_id for n in cluster.nodes]), "Node instance ids, node order"),
            "PrivateIps": (",".join(cluster.hosts), "Node addresses, node order (TRAINING_HOSTS)"),
            "WorkerPort": (str(TRAINING_WORKER_PORT), "Port of the training workers (TRAINING_WORKER_PORT)"),
            "SecurityGroupId": (cluster.security_group.security_group_id, "Security group of the nodes"),
            "LogGroupName": (cluster.log_group.log_group_name, "Boot, health and training logs (<instance id>/...)"),
            "AmiId": (cluster.ami_id, "Deep Learning AMI the nodes run (cached in cdk.context.json)"),
            "ExpectedGpusPerNode": (str(config.cluster.gpus_per_node), "GPUs every node proved at boot"),
            "JobDocumentName": (cluster.job_document_name, "SSM Command document of cluster jobs (scripts.cluster_job)"),
            "JobOperatorPolicyArn": (
                cluster.job_operator_policy.managed_policy_arn,
                "Managed policy for operators of cluster jobs (attach it to their role)",
            ),
        }
        for name, (value, description) in outputs.items():
            CfnOutput(self, name, value=value, description=description)
