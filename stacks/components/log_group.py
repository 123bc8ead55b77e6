"""Encrypted CloudWatch log groups with retention: the one way the platform makes log groups."""

from __future__ import annotations

from typing import Optional

from aws_cdk import RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

DEFAULT_RETENTION = logs.RetentionDays.ONE_YEAR


def encrypted_log_group(
    scope: Construct,
    construct_id: str,
    *,
    key: kms.IKey,
    log_group_name: Optional[str] = None,
    retention: logs.RetentionDays = DEFAULT_RETENTION,
) -> logs.LogGroup:
    """A log group encrypted with the platform key, kept for ``retention``.

    Log groups belong to the compute that writes them and are removed with it on ``cdk destroy``
    (the platform's data is in the buckets, not in logs).
    """
    return logs.LogGroup(
        scope,
        construct_id,
        log_group_name=log_group_name,
        encryption_key=key,
        retention=retention,
        removal_policy=RemovalPolicy.DESTROY,
    )
