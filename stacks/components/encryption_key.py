"""The platform's customer-managed KMS keys: the platform key, and the keys of notification topics."""

from __future__ import annotations

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct


def project_log_group_names(project_name: str) -> tuple[str, ...]:
    """Name patterns of the log groups the platform puts on its key.

    The cluster's node logs (``/<project>/gpu-cluster``) and the state machines' vended logs
    (``/aws/vendedlogs/states/<project>-training-job``, ``-gpu-idle-watch``, ``-pipeline``).
    SageMaker's own groups (``/aws/sagemaker/...``) are created by SageMaker without a key and
    are not on it. A new log group on the key must match one of these, or its creation fails
    with AccessDeniedException.
    """
    return (f"/{project_name}/*", f"/aws/vendedlogs/states/{project_name}-*")


class PlatformKey(Construct):
    """A rotating KMS key for buckets, logs, volumes and job outputs.

    The key policy lets CloudWatch Logs in this account and region use the key for the project's
    log groups only (:func:`project_log_group_names`), so every log group the platform creates can
    be encrypted with it and no other log group in the account can.

    Attributes:
        key: The KMS key.
    """

    def __init__(self, scope: Construct, construct_id: str, *, project_name: str, retain: bool) -> None:
        """Create the key.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            project_name: Used in the alias ``alias/<project>-platform``.
            retain: Keep the key on ``cdk destroy`` (default behaviour). When ``False`` the key is
                scheduled for deletion after the shortest waiting period (sandboxes only).
        """
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description=f"{project_name}: datasets, artifacts, logs and training volumes",
            alias=f"alias/{project_name}-platform",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
            pending_window=None if retain else Duration.days(7),
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchLogsInThisAccount",
                principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
                # No kms:Describe* (AWS's example has it): DescribeKey's request context has no
                # encryption context, so under this condition it could never be allowed.
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy "*" means this key
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": [
                            f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:{name}"
                            for name in project_log_group_names(project_name)
                        ]
                    }
                },
            )
        )


def topic_key(scope: Construct, construct_id: str, *, description: str) -> kms.Key:
    """A rotating KMS key for one SNS topic, deleted with its stack after the shortest waiting period.

    A topic keeps no messages, so nothing is lost with its key; the caller's key policy says who
    may publish.
    """
    return kms.Key(
        scope,
        construct_id,
        description=description,
        enable_key_rotation=True,
        removal_policy=RemovalPolicy.DESTROY,
        pending_window=Duration.days(7),
    )
