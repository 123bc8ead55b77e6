"""The emulator's iam:SimulatePrincipalPolicy (moto has none; SageMaker SDK v3 calls it before a job).

The answers must be IAM's for a simulation without context values: what a least-privilege role
allows only on specific ARNs, or under a condition, is not "allowed" on the implicit "*".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from scripts.emulator import server

POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
        {"Effect": "Allow", "Action": "cloudwatch:PutMetricData", "Resource": "*",
         "Condition": {"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/TrainingJobs"}}},
        {"Effect": "Allow", "Action": ["ec2:Describe*"], "Resource": "*",
         "Condition": {"StringEqualsIfExists": {"aws:RequestedRegion": "us-east-1"}}},
        {"Effect": "Allow", "Action": "ec2:CreateNetworkInterface", "Resource": "arn:aws:ec2:us-east-1:123456789012:subnet/*"},
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
        {"Effect": "Deny", "Action": "s3:DeleteBucket", "Resource": "*"},
    ],
}


@pytest.fixture()
def iam(tmp_path: Path) -> Iterator[object]:
    emu = server.start(log_file=tmp_path / "moto.log")
    try:
        client = server.client("iam", endpoint_url=emu.endpoint_url)
        client.create_role(RoleName="job", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}))
        arn = client.create_policy(PolicyName="job", PolicyDocument=json.dumps(POLICY))["Policy"]["Arn"]
        client.attach_role_policy(RoleName="job", PolicyArn=arn)
        client.put_role_policy(RoleName="job", PolicyName="inline", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "logs:PutLogEvents", "Resource": "*"}]}))
        yield client
    finally:
        emu.stop()


@pytest.mark.slow
def test_decisions_are_iams_for_a_simulation_without_resources_or_context(iam) -> None:
    role = f"arn:aws:iam::{server.ACCOUNT}:role/job"
    actions = ["ecr:GetAuthorizationToken", "cloudwatch:PutMetricData", "ec2:DescribeVpcs", "ec2:CreateNetworkInterface",
               "s3:GetObject", "s3:DeleteBucket", "logs:PutLogEvents", "sagemaker:CreateTrainingJob"]
    results = iam.simulate_principal_policy(PolicySourceArn=role, ActionNames=actions)["EvaluationResults"]
    decisions = {r["EvalActionName"]: r["EvalDecision"] for r in results}
    assert decisions == {
        "ecr:GetAuthorizationToken": "allowed",
        "cloudwatch:PutMetricData": "implicitDeny",  # its condition needs a context value
        "ec2:DescribeVpcs": "allowed",  # ...IfExists holds without one
        "ec2:CreateNetworkInterface": "implicitDeny",  # allowed on subnets only, not on "*"
        "s3:GetObject": "allowed",
        "s3:DeleteBucket": "explicitDeny",
        "logs:PutLogEvents": "allowed",  # inline policies count too
        "sagemaker:CreateTrainingJob": "implicitDeny",
    }
    metric = next(r for r in results if r["EvalActionName"] == "cloudwatch:PutMetricData")
    assert metric["MissingContextValues"] == ["cloudwatch:namespace"] and metric["EvalResourceName"] == "*"


def test_a_resource_arn_is_matched_against_the_statements(iam) -> None:
    role = f"arn:aws:iam::{server.ACCOUNT}:role/job"
    (result,) = iam.simulate_principal_policy(PolicySourceArn=role, ActionNames=["ec2:CreateNetworkInterface"],
                                              ResourceArns=["arn:aws:ec2:us-east-1:123456789012:subnet/subnet-1"])["EvaluationResults"]
    assert result["EvalDecision"] == "allowed"


def test_an_unknown_role_is_no_such_entity(iam) -> None:
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError) as err:
        iam.simulate_principal_policy(PolicySourceArn=f"arn:aws:iam::{server.ACCOUNT}:role/none", ActionNames=["s3:GetObject"])
    assert err.value.response["Error"]["Code"] == "NoSuchEntity"
