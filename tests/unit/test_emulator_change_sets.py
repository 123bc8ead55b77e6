"""The emulator's CloudFormation keeps each stack's change sets apart (scripts.emulator.gaps).

The CDK CLI names every stack's change set ``cdk-deploy-change-set``; redeploying one stack deletes
its old change set and waits until DescribeChangeSet says ChangeSetNotFound. Plain moto finds change
sets by name alone, so the CLI waited forever on the second deploy of the serving stack.
"""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from scripts.emulator.gaps import apply_all
from scripts.emulator.patching import PATCHES

TEMPLATE = json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}})


@pytest.fixture
def cfn():
    apply_all()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield boto3.client("cloudformation", region_name="us-east-1", endpoint_url=f"http://{host}:{port}",
                           aws_access_key_id="t", aws_secret_access_key="t")
    finally:
        server.stop()
        PATCHES.revert()


def _deploy(cfn, stack: str, kind: str) -> None:
    cfn.create_change_set(StackName=stack, ChangeSetName="cdk-deploy-change-set", ChangeSetType=kind, TemplateBody=TEMPLATE)
    cfn.execute_change_set(StackName=stack, ChangeSetName="cdk-deploy-change-set")


def test_a_redeploy_deletes_its_own_stacks_change_set_and_sees_it_gone(cfn):
    for stack in ("a", "b"):
        _deploy(cfn, stack, "CREATE")
    cfn.delete_change_set(StackName="b", ChangeSetName="cdk-deploy-change-set")
    with pytest.raises(ClientError) as err:
        cfn.describe_change_set(StackName="b", ChangeSetName="cdk-deploy-change-set")
    assert err.value.response["Error"]["Code"] == "ChangeSetNotFound"
    # Stack a's change set is untouched; b's redeploy creates and executes its own.
    assert cfn.describe_change_set(StackName="a", ChangeSetName="cdk-deploy-change-set")["StackName"] == "a"
    cfn.delete_change_set(StackName="b", ChangeSetName="cdk-deploy-change-set")  # gone already: no error
    _deploy(cfn, "b", "UPDATE")
    described = cfn.describe_change_set(StackName="b", ChangeSetName="cdk-deploy-change-set")
    assert described["StackName"] == "b" and described["ExecutionStatus"] == "EXECUTE_COMPLETE"
    assert cfn.describe_stacks(StackName="b")["Stacks"][0]["StackStatus"] == "UPDATE_COMPLETE"
