"""The operators' policies (``<project>-<region>-operator`` and ``...-operator-direct``,
stacks/components/operator_policy.py).

Checks on the synthesized default deployment:

- every AWS operation the day-to-day tools call (found in their source, as the image's rules are: by
  the botocore operation names they use, tables and paginators included) maps to an IAM action the
  policy grants, so a new call in a tool cannot ship without its permission;
- each tool's calls on this deployment's resources are allowed (action and resource, as IAM
  matches them), and what an operator must not do (delete stacks, overwrite a model, pass another
  role, act on another project) is not;
- direct job creation is granted, in the direct policy only, under exactly the workflows' hardening
  conditions;
- each policy fits IAM's 6,144 characters with the longest names a deployment can have.

``iam_check`` (tests/gates) checks the statements against AWS's authorization data, as for every policy.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
from pathlib import Path
from typing import Any, Mapping

import botocore.session
import pytest
from botocore import xform_name

from scripts.iam_check import PolicyStatement, TemplateResolver, policy_statements
from stacks.components.operator_policy import operator_policy_name

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("launch", "watch", "list_jobs", "stop", "invoke", "sdk_config", "preflight")
"""The tools the policy is for; ``cluster_job`` has the cluster stack's JobOperatorPolicy, and
``promote``, ``teardown`` and ``teardown_audit`` are a deployer's (they run the CDK CLI or read the account)."""
LIBRARIES = ("common", "source_code", "pipeline")
"""What the tools call through."""
IAM_PREFIX = {"stepfunctions": "states", "sagemaker-runtime": "sagemaker", "service-quotas": "servicequotas"}
IAM_ACTION = {("s3", "HeadObject"): "s3:GetObject", ("s3", "ListObjectsV2"): "s3:ListBucket", ("sts", "GetCallerIdentity"): None}
"""Operations whose IAM action is not ``<prefix>:<operation>`` (GetCallerIdentity needs no permission)."""
ACCOUNT, REGION = "123456789012", "us-east-1"
SM = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}"


def _services() -> set[str]:
    """Every service the tools and their libraries make clients of (``client("...")``): a library may
    be handed a client (``pipeline.check_output_prefix_empty(s3, ...)``)."""
    return {
        service
        for module in TOOLS + LIBRARIES
        for service in re.findall(r'client\("([a-z0-9-]+)"\)', (ROOT / "scripts" / f"{module}.py").read_text())
    }


def _regex_method(node: ast.Attribute) -> bool:
    """``pattern.search(...)``, ``re.match``: a regular expression's method, not SageMaker's Search."""
    receiver = node.value.id if isinstance(node.value, ast.Name) else node.value.attr if isinstance(node.value, ast.Attribute) else ""
    return node.attr in {"search", "match"} and (receiver == "re" or "pattern" in receiver.lower() or "regex" in receiver.lower())


def called_actions(module: str) -> set[str]:
    """The IAM actions of every botocore operation ``scripts/<module>.py`` names (method calls, tables,
    paginator names) of those services."""
    source = (ROOT / "scripts" / f"{module}.py").read_text()
    session = botocore.session.get_session()
    operations: dict[str, list[tuple[str, str]]] = {}
    for service in _services():
        for operation in session.get_service_model(service).operation_names:
            operations.setdefault(xform_name(operation), []).append((service, operation))
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and not _regex_method(node):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    actions = set()
    for name in names & set(operations):
        for service, operation in operations[name]:
            action = IAM_ACTION.get((service, operation), f"{IAM_PREFIX.get(service, service)}:{operation}")
            if action:
                actions.add(action)
    return actions


@pytest.fixture(scope="module")
def deployment(default_app) -> tuple[list[PolicyStatement], TemplateResolver, dict[str, dict[str, Any]]]:
    """Both policies' statements (a direct launcher attaches both), the resolver, the templates."""
    templates = default_app.templates_by_stack_name()
    statements = [s for s in policy_statements(templates) if "/OperatorPolicy" in s.where and "gputrain-training/" in s.where]
    return statements, TemplateResolver(templates), templates


def _operator_only(statements: list[PolicyStatement]) -> list[PolicyStatement]:
    return [s for s in statements if "DirectLaunchPolicy" not in s.where]


def _output(deployment, stack: str, name: str) -> str:
    _, resolver, templates = deployment
    return resolver.resolve(stack, templates[stack]["Outputs"][name]["Value"])


def allows(statements: list[PolicyStatement], action: str, resource: str) -> bool:
    """Whether an Allow statement names ``action`` and ``resource`` as IAM matches them (``*`` and ``?``
    across ``/`` and ``:``; actions without case). Conditions are checked by the tests that need them."""
    for s in statements:
        actions = s.statement["Action"] if isinstance(s.statement["Action"], list) else [s.statement["Action"]]
        if s.statement["Effect"] != "Allow" or not any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in actions):
            continue
        assert not s.unresolved, s.unresolved
        if any(fnmatch.fnmatchcase(resource, r) for r in s.resources or ()):
            return True
    return False


def test_the_policies_have_the_fixed_names_and_outputs_a_permission_set_can_reference(default_app):
    outputs = default_app.template_json("gputrain-training")["Outputs"]
    assert outputs["OperatorPolicyName"]["Value"] == operator_policy_name("gputrain", REGION) == "gputrain-us-east-1-operator"
    assert outputs["DirectLaunchPolicyName"]["Value"] == "gputrain-us-east-1-operator-direct"
    assert {"OperatorPolicyArn", "DirectLaunchPolicyArn"} <= set(outputs)


@pytest.mark.parametrize("module", TOOLS + LIBRARIES)
def test_every_operation_a_tool_calls_is_granted(deployment, module):
    statements, _, _ = deployment
    granted = {a.lower() for s in statements for a in ([s.statement["Action"]] if isinstance(s.statement["Action"], str) else s.statement["Action"])}
    missing = sorted(a for a in called_actions(module) if a.lower() not in granted)
    assert missing == [], f"scripts/{module}.py calls what the operators' policy does not grant"


def test_the_scan_finds_calls_through_tables_paginators_and_methods():
    """Would a new call be seen: a method (start_execution), a table's name (describe_transform_job), a paginator."""
    assert {"states:StartExecution", "sagemaker:CreateTrainingJob"} <= called_actions("launch")
    assert {"sagemaker:DescribeTransformJob", "sagemaker:StopHyperParameterTuningJob", "cloudformation:ListStacks"} <= called_actions("common")
    assert {"logs:DescribeLogStreams", "states:GetExecutionHistory"} <= called_actions("watch")
    assert "sagemaker:Search" not in called_actions("watch")  # pattern.search(line): a regular expression
    assert called_actions("pipeline") == {"s3:ListBucket"}


def _calls(deployment) -> dict[str, list[tuple[str, str]]]:
    """What each tool calls, on which resource, on the default deployment (scripts' own naming)."""
    artifacts = _output(deployment, "gputrain-data", "ArtifactsBucketName")
    datasets = _output(deployment, "gputrain-data", "DatasetsBucketName")
    key = _output(deployment, "gputrain-data", "KeyArn")
    job_role = _output(deployment, "gputrain-training", "JobRoleArn")
    processing_role = _output(deployment, "gputrain-training", "ProcessingRoleArn")
    job = "gputrain-20261128-010203-ab12"
    stacks = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack"
    states = f"arn:aws:states:{REGION}:{ACCOUNT}"
    logs = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group"
    return {
        "launch": [
            ("cloudformation:DescribeStacks", f"{stacks}/gputrain-data/0f0e"),
            ("cloudformation:DescribeStacks", f"{stacks}/gputrain-training/0f0e"),
            ("states:StartExecution", f"{states}:stateMachine:gputrain-training-job"),
            ("states:StartExecution", f"{states}:stateMachine:gputrain-pipeline"),
            ("s3:PutObject", f"arn:aws:s3:::{artifacts}/code/{job}/sourcedir.tar.gz"),
            ("kms:GenerateDataKey", key),
            ("sagemaker:DescribeTrainingJob", f"{SM}:training-job/{job}"),
            ("states:DescribeExecution", f"{states}:execution:gputrain-training-job:{job}"),
        ],
        "launch --direct": [
            ("sagemaker:CreateTrainingJob", f"{SM}:training-job/{job}"),
            ("sagemaker:AddTags", f"{SM}:training-job/{job}"),
            ("iam:PassRole", job_role),
            ("sagemaker:CreateHyperParameterTuningJob", f"{SM}:hyper-parameter-tuning-job/gputrain-261128-0102-ab"),
            ("sagemaker:CreateProcessingJob", f"{SM}:processing-job/{job}-process"),
            ("iam:PassRole", processing_role),
            ("sagemaker:AddTags", f"{SM}:processing-job/{job}-process"),
            ("s3:ListBucket", f"arn:aws:s3:::{datasets}"),
        ],
        "watch": [
            ("sagemaker:ListTrainingJobs", "*"),
            ("sagemaker:ListTags", f"{SM}:training-job/{job}"),
            ("sagemaker:DescribeProcessingJob", f"{SM}:processing-job/{job}"),
            # As CloudWatch Logs authorizes it (an empty stream name).
            ("logs:DescribeLogStreams", f"{logs}:/aws/sagemaker/TrainingJobs:log-stream:"),
            ("logs:GetLogEvents", f"{logs}:/aws/sagemaker/TrainingJobs:log-stream:{job}/algo-1-1732755600"),
            ("logs:GetLogEvents", f"{logs}:/aws/sagemaker/ProcessingJobs:log-stream:{job}-process/algo-1-1732755600"),
            ("sagemaker:ListTrainingJobsForHyperParameterTuningJob", f"{SM}:hyper-parameter-tuning-job/gputrain-t1"),
            ("states:ListExecutions", f"{states}:stateMachine:gputrain-pipeline"),
            ("states:GetExecutionHistory", f"{states}:execution:gputrain-pipeline:run-1"),
            ("sagemaker:DescribeEndpoint", f"{SM}:endpoint/gputrain-endpoint"),
        ],
        "list_jobs": [
            ("cloudformation:ListStacks", "*"),
            *((f"sagemaker:List{kind}Jobs", "*") for kind in ("Training", "Processing", "HyperParameterTuning", "Transform")),
        ],
        "stop": [
            ("states:StopExecution", f"{states}:execution:gputrain-training-job:{job}"),
            ("sagemaker:StopTrainingJob", f"{SM}:training-job/{job}"),
            ("sagemaker:UpdateTrainingJob", f"{SM}:training-job/{job}"),  # a warm pool's keep-alive to 0
            ("sagemaker:StopHyperParameterTuningJob", f"{SM}:hyper-parameter-tuning-job/gputrain-t1"),
            ("sagemaker:StopTransformJob", f"{SM}:transform-job/gputrain-run-1-transform"),
        ],
        "invoke": [
            ("sagemaker:InvokeEndpoint", f"{SM}:endpoint/gputrain-endpoint"),
            ("sagemaker:InvokeEndpoint", f"{SM}:inference-component/gputrain-model"),
        ],
        "preflight": [
            ("ec2:DescribeInstanceTypeOfferings", "*"),
            ("servicequotas:GetServiceQuota", "*"),
            ("ssm:GetParameter", f"arn:aws:ssm:{REGION}::parameter/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"),
            ("ssm:GetParameter", f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/cdk-bootstrap/hnb659fds/version"),
        ],
    }


@pytest.mark.parametrize("tool", ["launch", "watch", "list_jobs", "stop", "invoke", "preflight"])
def test_each_tools_calls_on_this_deployment_are_allowed_by_the_operators_policy(deployment, tool):
    statements = _operator_only(deployment[0])
    refused = [(action, resource) for action, resource in _calls(deployment)[tool] if not allows(statements, action, resource)]
    assert refused == []


def test_direct_launches_need_the_direct_policy_too(deployment):
    calls = _calls(deployment)["launch --direct"]
    assert [call for call in calls if not allows(deployment[0], *call)] == []
    creations = [call for call in calls if call[0].startswith("sagemaker:Create") or call[0] == "iam:PassRole"]
    assert len(creations) == 5 and not [call for call in creations if allows(_operator_only(deployment[0]), *call)]


def test_what_an_operator_must_not_do_is_not_allowed(deployment):
    statements = deployment[0]
    artifacts = _output(deployment, "gputrain-data", "ArtifactsBucketName")
    datasets = _output(deployment, "gputrain-data", "DatasetsBucketName")
    stacks = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack"
    forbidden = [
        ("cloudformation:DeleteStack", f"{stacks}/gputrain-data/0f0e"),
        ("cloudformation:DescribeStacks", f"{stacks}/team2-data/0f0e"),
        ("sagemaker:CreateTrainingJob", f"{SM}:training-job/team2-20261128-010203-ab12"),
        ("sagemaker:StopTrainingJob", f"{SM}:training-job/team2-20261128-010203-ab12"),
        ("sagemaker:DeleteEndpoint", f"{SM}:endpoint/gputrain-endpoint"),
        ("sagemaker:UpdateEndpoint", f"{SM}:endpoint/gputrain-endpoint"),
        ("sagemaker:InvokeEndpoint", f"{SM}:endpoint/team2-endpoint"),
        ("sagemaker:Search", "*"),  # every project's jobs, hyperparameters and environments
        ("logs:GetLogEvents", f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/sagemaker/TrainingJobs:log-stream:team2-x/algo-1-1"),
        # The served model and the data: a promoted model.tar.gz is not the operators' to overwrite.
        ("s3:PutObject", f"arn:aws:s3:::{artifacts}/training-jobs/gputrain-x/output/model.tar.gz"),
        ("s3:GetObject", f"arn:aws:s3:::{datasets}/train/part-0"),
        ("s3:DeleteObject", f"arn:aws:s3:::{artifacts}/code/gputrain-x/sourcedir.tar.gz"),
        ("kms:Decrypt", _output(deployment, "gputrain-data", "KeyArn")),
        ("iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/cdk-hnb659fds-cfn-exec-role-{ACCOUNT}-{REGION}"),
        ("sts:AssumeRole", f"arn:aws:iam::{ACCOUNT}:role/cdk-hnb659fds-deploy-role-{ACCOUNT}-{REGION}"),
        ("ssm:PutParameter", f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/gputrain/serving/promotion"),
        ("ssm:SendCommand", f"arn:aws:ssm:{REGION}:{ACCOUNT}:document/gputrain-cluster-train"),
    ]
    assert [call for call in forbidden if allows(statements, *call)] == []


def test_operators_may_update_a_training_job_only_to_end_its_warm_pool(deployment):
    """scripts.stop sets KeepAlivePeriodInSeconds to 0; a longer keep-alive (instances kept, billing) is not theirs."""
    statements = deployment[0]
    assert not allows(statements, "sagemaker:UpdateTrainingJob", f"{SM}:training-job/team2-20261128-010203-ab12")
    assert _conditions(statements, "EndWarmPools") == {"NumericEquals": {"sagemaker:KeepAlivePeriod": "0"}}


def _conditions(statements: list[PolicyStatement], sid: str) -> Mapping[str, Any]:
    (statement,) = [s.statement for s in statements if s.statement.get("Sid") == sid]
    return statement["Condition"]


def _sids(statements: list[PolicyStatement], prefix: str) -> set[str]:
    return {s.statement["Sid"] for s in statements if s.statement.get("Sid", "").startswith(prefix)}


def test_direct_creation_is_pinned_as_the_workflows_roles_are(default_app, deployment):
    """The same conditions as the training workflow's role (isolation, subnets, groups, key, types): a
    direct launch sends the workflow's request, and nothing less hardened."""
    statements = deployment[0]
    workflow = [s for s in policy_statements(default_app.templates_by_stack_name()) if "/WorkflowRolePolicy" in s.where]
    training_sids = _sids(workflow, "CreateHardenedTrainingJobs")
    assert training_sids and _sids(statements, "CreateHardenedJobs") == {s.replace("Training", "") for s in training_sids}
    for sid in training_sids:
        ours = _conditions(statements, sid.replace("Training", ""))
        # One statement for training and tuning jobs: the workflow's role holds the same keys for both.
        assert ours == _conditions(workflow, sid) == _conditions(workflow, sid.replace("Training", "Tuning"))
        assert ours["Bool"] == {"sagemaker:NetworkIsolation": "true"} and "sagemaker:VpcSubnets" in ours["ForAllValues:StringEquals"]
    (processing_sid,) = _sids(statements, "CreateHardenedProcessingJobs")
    processing = _conditions(statements, processing_sid)
    assert processing["Bool"] == {"sagemaker:NetworkIsolation": "true"} and processing["Null"]["sagemaker:VpcSecurityGroupIds"] == "false"
    for sid in ("PassJobRole", "PassProcessingRole"):
        assert _conditions(statements, sid)["StringEquals"] == {"iam:PassedToService": "sagemaker.amazonaws.com"}
    # Tags only as a creation sets them: no retagging a job's Project (whose a job is).
    assert _conditions(statements, "TagJobsAtCreation") == {"StringEquals": {"sagemaker:TaggingAction": [
        "CreateTrainingJob", "CreateHyperParameterTuningJob", "CreateProcessingJob"]}}
    encrypt = _conditions(statements, "EncryptUploadsWithPlatformKey")
    assert encrypt["StringEquals"]["kms:ViaService"] == f"s3.{REGION}.amazonaws.com"
    assert "kms:EncryptionContext:aws:s3:arn" in encrypt["StringEquals"]  # the artifacts bucket's (bucket keys on)


def _longest(value: Any) -> Any:
    """The document with every reference at the longest value it can take: bucket names of 63
    characters, a role's name of 64, subnet and security group ids of 17 hex digits."""
    if isinstance(value, dict) and ("Fn::GetStackOutput" in value or "Fn::ImportValue" in value or "Ref" in value or "Fn::GetAtt" in value):
        text = json.dumps(value)
        if "Key" in text:
            return f"arn:aws:kms:{LONG_REGION}:{ACCOUNT}:key/" + "f" * 36
        if "Bucket" in text:
            return "arn:aws:s3:::" + "b" * 63
        if "Role" in text:
            return f"arn:aws:iam::{ACCOUNT}:role/" + "r" * 64
        if "Subnet" in text:
            return "subnet-" + "0" * 17
        if "SecurityGroup" in text:
            return "sg-" + "0" * 17
        raise AssertionError(f"no longest value for {text}")
    if isinstance(value, dict) and "Fn::Join" in value:
        return value["Fn::Join"][0].join(_longest(v) for v in value["Fn::Join"][1])
    if isinstance(value, dict):
        return {k: _longest(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_longest(v) for v in value]
    return value


LONG_REGION, LONG_PROJECT = "ap-southeast-2", "a" * 20


@pytest.mark.parametrize("direct", [False, True], ids=["operator", "direct"])
def test_each_policy_fits_iams_limit_with_the_longest_names(default_app, direct):
    """IAM's limit: 6,144 characters per managed policy, whitespace not counted; a 20-character project
    name (the config's longest), a 14-character region, the longest bucket, role and key ARNs."""
    resources = default_app.template_json("gputrain-training")["Resources"]
    (document,) = [
        r["Properties"]["PolicyDocument"] for k, r in resources.items()
        if k.startswith("OperatorPolicy") and ("DirectLaunch" in k) == direct and r["Type"] == "AWS::IAM::ManagedPolicy"
    ]  # fmt: skip
    text = json.dumps(_longest(document), separators=(",", ":")).replace("us-east-1", LONG_REGION).replace("gputrain", LONG_PROJECT)
    assert len(text) < 6144, len(text)
