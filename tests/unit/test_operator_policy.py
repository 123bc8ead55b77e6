"""The operators' policy (``<project>-<region>-operator``, stacks/components/operator_policy.py).

Three checks on the synthesized default deployment:

- every AWS operation the day-to-day tools call (found in their source, as the image's rules are: by
  the botocore operation names they use, tables and paginators included) maps to an IAM action the
  policy grants, so a new call in a tool cannot ship without its permission;
- each tool's calls on this deployment's resources are allowed (action and resource, as IAM
  matches them), and what an operator must not do (delete stacks, overwrite a model, pass another
  role, act on another project) is not;
- direct job creation is granted under exactly the workflows' hardening conditions.

``iam_check`` (tests/gates) checks the statements against AWS's authorization data, as for every policy.
"""

from __future__ import annotations

import ast
import fnmatch
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
        if isinstance(node, ast.Attribute):
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
    templates = default_app.templates_by_stack_name()
    statements = [s for s in policy_statements(templates) if "/OperatorPolicy" in s.where and "gputrain-training/" in s.where]
    return statements, TemplateResolver(templates), templates


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


def test_the_policy_has_the_fixed_name_and_outputs_a_permission_set_can_reference(default_app):
    outputs = default_app.template_json("gputrain-training")["Outputs"]
    assert outputs["OperatorPolicyName"]["Value"] == operator_policy_name("gputrain", REGION) == "gputrain-us-east-1-operator"
    assert "OperatorPolicyArn" in outputs


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
            ("sagemaker:CreateTrainingJob", f"{SM}:training-job/{job}"),
            ("sagemaker:AddTags", f"{SM}:training-job/{job}"),
            ("iam:PassRole", job_role),
            ("sagemaker:CreateHyperParameterTuningJob", f"{SM}:hyper-parameter-tuning-job/gputrain-261128-0102-ab"),
            ("sagemaker:CreateProcessingJob", f"{SM}:processing-job/{job}-process"),
            ("iam:PassRole", processing_role),
            ("s3:ListBucket", f"arn:aws:s3:::{datasets}"),
            ("s3:PutObject", f"arn:aws:s3:::{artifacts}/code/{job}/sourcedir.tar.gz"),
            ("kms:GenerateDataKey", key),
            ("sagemaker:DescribeTrainingJob", f"{SM}:training-job/{job}"),
            ("states:DescribeExecution", f"{states}:execution:gputrain-training-job:{job}"),
        ],
        "watch": [
            ("sagemaker:ListTrainingJobs", "*"),
            ("sagemaker:ListTags", f"{SM}:training-job/{job}"),
            ("sagemaker:DescribeProcessingJob", f"{SM}:processing-job/{job}"),
            ("logs:DescribeLogStreams", f"{logs}:/aws/sagemaker/TrainingJobs"),
            ("logs:GetLogEvents", f"{logs}:/aws/sagemaker/TrainingJobs:log-stream:{job}/algo-1-1732755600"),
            ("logs:GetLogEvents", f"{logs}:/aws/sagemaker/ProcessingJobs:log-stream:{job}-process/algo-1-1732755600"),
            ("sagemaker:ListTrainingJobsForHyperParameterTuningJob", f"{SM}:hyper-parameter-tuning-job/gputrain-t1"),
            ("states:ListExecutions", f"{states}:stateMachine:gputrain-pipeline"),
            ("states:GetExecutionHistory", f"{states}:execution:gputrain-pipeline:run-1"),
            ("sagemaker:DescribeEndpoint", f"{SM}:endpoint/gputrain-endpoint"),
            ("sagemaker:Search", "*"),
        ],
        "list_jobs": [
            ("cloudformation:ListStacks", "*"),
            *((f"sagemaker:List{kind}Jobs", "*") for kind in ("Training", "Processing", "HyperParameterTuning", "Transform")),
        ],
        "stop": [
            ("states:StopExecution", f"{states}:execution:gputrain-training-job:{job}"),
            ("sagemaker:StopTrainingJob", f"{SM}:training-job/{job}"),
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
def test_each_tools_calls_on_this_deployment_are_allowed(deployment, tool):
    statements = deployment[0]
    refused = [(action, resource) for action, resource in _calls(deployment)[tool] if not allows(statements, action, resource)]
    assert refused == []


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
    creation = _sids(statements, "CreateHardenedTrainingJobs") | _sids(statements, "CreateHardenedTuningJobs")
    assert creation and creation == _sids(workflow, "CreateHardenedTrainingJobs") | _sids(workflow, "CreateHardenedTuningJobs")
    for sid in creation:
        ours = _conditions(statements, sid)
        assert ours == _conditions(workflow, sid)
        assert ours["Bool"] == {"sagemaker:NetworkIsolation": "true"} and "sagemaker:VpcSubnets" in ours["ForAllValues:StringEquals"]
    (processing_sid,) = _sids(statements, "CreateHardenedProcessingJobs")
    processing = _conditions(statements, processing_sid)
    assert processing["Bool"] == {"sagemaker:NetworkIsolation": "true"} and processing["Null"]["sagemaker:VpcSecurityGroupIds"] == "false"
    for sid in ("PassJobRole", "PassProcessingRole"):
        assert _conditions(statements, sid)["StringEquals"] == {"iam:PassedToService": "sagemaker.amazonaws.com"}
    assert _conditions(statements, "EncryptUploadsWithPlatformKey") == {"StringEquals": {"kms:ViaService": f"s3.{REGION}.amazonaws.com"}}
