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


def _serving_template(model_data: str) -> str:
    """A model, its endpoint config and the endpoint naming it, as the serving stack has them."""
    return json.dumps({"Resources": {
        "Model": {"Type": "AWS::SageMaker::Model", "Properties": {
            "ExecutionRoleArn": "arn:aws:iam::123456789012:role/model",
            "PrimaryContainer": {"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/gputrain-training:1",
                                 "ModelDataUrl": model_data}}},
        "Config": {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {"ProductionVariants": [{
            "ModelName": {"Fn::GetAtt": ["Model", "ModelName"]}, "VariantName": "AllTraffic",
            "InitialInstanceCount": 1, "InstanceType": "ml.g5.xlarge", "InitialVariantWeight": 1}]}},
        "Endpoint": {"Type": "AWS::SageMaker::Endpoint", "Properties": {
            "EndpointName": "gputrain-endpoint", "EndpointConfigName": {"Fn::GetAtt": ["Config", "EndpointConfigName"]}}},
    }})  # fmt: skip


def test_a_new_model_moves_the_endpoint_to_the_replaced_config(cfn):
    cfn.create_stack(StackName="serving", TemplateBody=_serving_template("s3://artifacts/training-jobs/a/output/model.tar.gz"))
    sagemaker = boto3.client("sagemaker", region_name="us-east-1", endpoint_url=cfn.meta.endpoint_url,
                             aws_access_key_id="t", aws_secret_access_key="t")
    before = sagemaker.describe_endpoint(EndpointName="gputrain-endpoint")["EndpointConfigName"]
    cfn.update_stack(StackName="serving", TemplateBody=_serving_template("s3://artifacts/training-jobs/b/output/model.tar.gz"))
    after = sagemaker.describe_endpoint(EndpointName="gputrain-endpoint")["EndpointConfigName"]
    # The template's endpoint JSON did not change, its config's name did: CloudFormation updates it.
    assert after != before
    (variant,) = sagemaker.describe_endpoint_config(EndpointConfigName=after)["ProductionVariants"]
    model = sagemaker.describe_model(ModelName=variant["ModelName"])
    assert model["PrimaryContainer"]["ModelDataUrl"] == "s3://artifacts/training-jobs/b/output/model.tar.gz"
