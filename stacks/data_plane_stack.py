"""The stateful half of the platform: key, buckets, image repository and network.

It lives apart from compute so that clusters and job workflows can be destroyed and redeployed
freely while datasets and artifacts stay.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from aws_cdk import CfnOutput, Fn, Stack
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.components.buckets import AccessLogBucket, DataBucket, checkpoint_expiry_rules
from stacks.components.dashboard import PlatformDashboard
from stacks.components.dns_firewall import DnsFirewall
from stacks.components.encryption_key import PlatformKey
from stacks.components.image_repository import TrainingImageRepository
from stacks.components.network import TrainingNetwork
from stacks.config import PlatformConfig


class DataPlaneStack(Stack):
    """KMS key, datasets/artifacts/log buckets, ECR repository and the training VPC, and the
    deployment's dashboard (here because every deployment has this stack; it references no
    compute stack, see :mod:`stacks.components.dashboard`).

    Attributes:
        key: Platform KMS key.
        log_bucket: Access-log and flow-log bucket.
        datasets_bucket: Training data.
        artifacts_bucket: Models, checkpoints (under ``checkpoints/``) and job outputs.
        repository: Training image repository.
        network: The training VPC and its endpoints.
        dashboard: The deployment's CloudWatch dashboard.
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: PlatformConfig, **kwargs: Any) -> None:
        """Build the data plane from the validated config."""
        super().__init__(scope, construct_id, **kwargs)
        retain = not config.delete_data_on_destroy
        data = config.data

        self.key = PlatformKey(self, "PlatformKey", project_name=config.project_name, retain=retain).key
        self.log_bucket = AccessLogBucket(
            self, "AccessLogs", expiration_days=data.access_log_expiration_days, retain=retain
        ).bucket

        def data_bucket(
            construct_id: str,
            log_prefix: str,
            bucket_name: Optional[str],
            extra_lifecycle_rules: Sequence[s3.LifecycleRule] = (),
        ) -> s3.Bucket:
            """A bucket of the plane's data: on the platform key, access-logged under ``log_prefix``."""
            return DataBucket(
                self,
                construct_id,
                key=self.key,
                access_logs=self.log_bucket,
                log_prefix=log_prefix,
                noncurrent_version_expiration_days=data.noncurrent_version_expiration_days,
                retain=retain,
                bucket_name=bucket_name,
                extra_lifecycle_rules=extra_lifecycle_rules,
            ).bucket

        self.datasets_bucket = data_bucket("Datasets", "s3-access/datasets/", data.datasets_bucket_name)
        self.artifacts_bucket = data_bucket(
            "Artifacts",
            "s3-access/artifacts/",
            data.artifacts_bucket_name,
            checkpoint_expiry_rules(data.checkpoint_expiration_days),
        )
        self.repository = TrainingImageRepository(
            self,
            "TrainingImage",
            repository_name=config.image.repository_name,
            key=self.key,
            keep_images=config.image.keep_images,
            deployed_tag=config.image.tag,
            retain=retain,
        ).repository
        net = config.network
        self.network = TrainingNetwork(
            self,
            "Network",
            cidr=net.vpc_cidr,
            max_azs=net.max_azs,
            nat_gateways=net.nat_gateways,
            interface_endpoints=net.interface_endpoints,
            flow_log_bucket=self.log_bucket,
        )
        if net.dns_firewall:
            DnsFirewall(self, "DnsFirewall", vpc=self.network.vpc, extra_domains=net.dns_allowed_domains)

        self.dashboard = PlatformDashboard(self, "Dashboard", project_name=config.project_name, serving=config.serving)

        private_subnets = self.network.private_subnet_ids
        kept = "kept on cdk destroy" if retain else "EMPTIED AND DELETED on cdk destroy (delete_data_on_destroy=true)"
        outputs = {
            "DatasetsBucketName": (self.datasets_bucket.bucket_name, f"Training data ({kept})"),
            "ArtifactsBucketName": (self.artifacts_bucket.bucket_name, f"Models, checkpoints and outputs ({kept})"),
            "AccessLogBucketName": (self.log_bucket.bucket_name, f"S3 access logs and VPC flow logs ({kept})"),
            "KeyArn": (self.key.key_arn, "KMS key for data, logs and volumes"),
            "RepositoryUri": (self.repository.repository_uri, "Training image repository"),
            "RepositoryName": (self.repository.repository_name, "Training image repository name"),
            "ImageUri": (self.repository.repository_uri_for_tag(config.image.tag), "Image that jobs and nodes run"),
            "VpcId": (self.network.vpc.vpc_id, "Training VPC"),
            "PrivateSubnetIds": (Fn.join(",", private_subnets), "Subnets training runs in"),
            "EndpointSecurityGroupId": (
                self.network.endpoint_security_group.security_group_id,
                "Security group of the VPC interface endpoints",
            ),
            "DataRetention": (kept, "What cdk destroy does with the buckets, key and repository"),
            "DashboardName": (self.dashboard.dashboard_name, "CloudWatch dashboard: GPUs, jobs, endpoint, running compute"),
        }
        for name, (value, description) in outputs.items():
            CfnOutput(self, name, value=value, description=description)
