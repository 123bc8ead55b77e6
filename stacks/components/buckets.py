"""S3 buckets of the data plane: access logs, datasets and artifacts."""

from __future__ import annotations

from typing import Optional, Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.components.policy import acknowledge

CHECKPOINT_PREFIX = "checkpoints/"
"""Key prefix in the artifacts bucket where SageMaker and EC2 nodes sync checkpoints."""

CLUSTER_CHECKPOINT_PREFIX = "cluster-checkpoints/"
"""Key prefix in the artifacts bucket where GPU cluster nodes sync checkpoints
(``cluster-checkpoints/<cluster stack>/node-<i>/``). Not under ``checkpoints/``: SageMaker jobs
write ``checkpoints/<job name>/`` and their roles may write all of ``checkpoints/``, so a job
named like the cluster stack could otherwise overwrite the nodes' checkpoints."""

CLUSTER_OUTPUT_PREFIX = "cluster-outputs/"
"""Key prefix in the artifacts bucket for what GPU cluster nodes write besides checkpoints
(``cluster-outputs/<cluster stack>/``); SageMaker job outputs live elsewhere (``training-jobs/``)."""


def _removal(retain: bool) -> dict:
    if retain:
        return {"removal_policy": RemovalPolicy.RETAIN, "auto_delete_objects": False}
    return {"removal_policy": RemovalPolicy.DESTROY, "auto_delete_objects": True}


def _keep_policy_with_bucket(bucket: s3.Bucket, retain: bool) -> None:
    """Give a kept bucket's policy the bucket's removal policy.

    CDK leaves the policy it creates for a bucket (TLS-only, the encryption denies, the log
    delivery grant) at ``DeletionPolicy: Delete`` even when the bucket is retained
    (aws/aws-cdk#27125), so ``cdk destroy`` would keep the data but strip its bucket policy: the
    kept buckets would take plain-HTTP requests and objects under other keys, and the log bucket
    would refuse the server access logs the kept data buckets still send it.
    """
    if retain and bucket.policy is not None:  # enforce_ssl always creates one
        bucket.policy.apply_removal_policy(RemovalPolicy.RETAIN)


class AccessLogBucket(Construct):
    """Destination for S3 server access logs and VPC flow logs.

    S3 server access logging only delivers to buckets encrypted with SSE-S3, so this bucket
    uses S3-managed keys; everything else in the platform uses the KMS key.

    Attributes:
        bucket: The log bucket.
    """

    def __init__(self, scope: Construct, construct_id: str, *, expiration_days: int, retain: bool) -> None:
        """Create the bucket.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            expiration_days: Log objects expire after this many days.
            retain: Keep the bucket on ``cdk destroy``.
        """
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireLogs",
                    expiration=Duration.days(expiration_days),
                    noncurrent_version_expiration=Duration.days(1),
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                )
            ],
            **_removal(retain),
        )
        acknowledge(
            self.bucket,
            "S3 server access log delivery only supports SSE-S3 destination buckets, so this bucket cannot use the KMS key.",
            "NIST.800.53.R5-S3DefaultEncryptionKMS",
        )
        acknowledge(
            self.bucket,
            "Access logs are an audit trail with a fixed expiry; cross-region replication is a per-organisation decision left to the account's backup policy.",
            "NIST.800.53.R5-S3BucketReplicationEnabled",
        )
        _keep_policy_with_bucket(self.bucket, retain)


class DataBucket(Construct):
    """A KMS-encrypted, versioned, access-logged bucket that denies non-TLS requests and any
    encryption but the platform key (SSE-S3, another KMS key, SSE-C).

    Attributes:
        bucket: The bucket.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        key: kms.IKey,
        access_logs: s3.IBucket,
        log_prefix: str,
        noncurrent_version_expiration_days: int,
        retain: bool,
        bucket_name: Optional[str] = None,
        extra_lifecycle_rules: Sequence[s3.LifecycleRule] = (),
    ) -> None:
        """Create the bucket.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            key: KMS key for default encryption (with an S3 bucket key to cut KMS calls).
            access_logs: Bucket receiving server access logs.
            log_prefix: Prefix of this bucket's access logs.
            noncurrent_version_expiration_days: Old object versions are removed after this long.
            retain: Keep the bucket and its objects on ``cdk destroy`` (the default). ``False``
                empties and deletes it (sandboxes only).
            bucket_name: Explicit name; ``None`` lets CloudFormation generate one.
            extra_lifecycle_rules: Rules beyond noncurrent-version expiry.
        """
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            bucket_name=bucket_name,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=key,
            bucket_key_enabled=True,
            # SSE-C: S3 refuses every write that brings its own key (PutObject, CopyObject,
            # multipart uploads), which would leave objects under a key the platform does not hold.
            blocked_encryption_types=[s3.BlockedEncryptionType.SSE_C],
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix=log_prefix,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireNoncurrentVersions",
                    noncurrent_version_expiration=Duration.days(noncurrent_version_expiration_days),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                ),
                *extra_lifecycle_rules,
            ],
            **_removal(retain),
        )
        # Default encryption covers uploads that name none; an upload naming SSE-S3 or another
        # KMS key would escape the platform key (and its key policy and CloudTrail record).
        # Each header is checked only where the upload names it (SSE-C is blocked above).
        objects = self.bucket.arn_for_objects("*")
        refused_headers = {
            "DenyOtherEncryption": ("StringNotEquals", "s3:x-amz-server-side-encryption", ["aws:kms", "aws:kms:dsse"]),
            "DenyOtherKmsKeys": ("ArnNotEquals", "s3:x-amz-server-side-encryption-aws-kms-key-id", key.key_arn),
        }
        for sid, (operator, header, allowed) in refused_headers.items():
            self.bucket.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=sid,
                    effect=iam.Effect.DENY,
                    principals=[iam.AnyPrincipal()],
                    actions=["s3:PutObject"],
                    resources=[objects],
                    conditions={operator: {header: allowed}, "Null": {header: "false"}},
                )
            )
        acknowledge(
            self.bucket,
            "Data is versioned and retained on stack deletion; cross-region replication doubles storage cost for large datasets and is left to the account's backup policy.",
            "NIST.800.53.R5-S3BucketReplicationEnabled",
        )
        _keep_policy_with_bucket(self.bucket, retain)


def checkpoint_expiry_rules(days: int) -> list[s3.LifecycleRule]:
    """Checkpoints (SageMaker jobs' and the cluster's) are scratch state for resuming; they
    expire instead of piling up."""
    return [
        s3.LifecycleRule(
            id=rule_id, prefix=prefix, expiration=Duration.days(days), noncurrent_version_expiration=Duration.days(1)
        )
        for rule_id, prefix in (("ExpireCheckpoints", CHECKPOINT_PREFIX), ("ExpireClusterCheckpoints", CLUSTER_CHECKPOINT_PREFIX))
    ]
