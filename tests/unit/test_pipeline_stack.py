"""The pipeline's resources in the training stack: roles (exact prefixes and conditions), outputs,
notifications, and the serving stack's model and endpoint config equal to the shared builder."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest

from stacks.components.endpoint_spec import (
    ModelResources,
    deployment_config,
    endpoint_config_properties,
    model_properties,
    rollback_alarm_names,
    update_endpoint_request,
)
from stacks.components.processing_job_spec import SAGEMAKER_PROCESSING_LOG_GROUP
from stacks.config import load_config
from tests.synth import project_context
from tests.unit.test_serving_stack import ALTERNATIVE, DEFAULT
from tests.unit.test_training_job_stack import _policy_statements, parse_definition

ARN = "arn:aws:sagemaker:us-east-1:123456789012:"


@pytest.fixture(scope="module")
def training(default_app):
    return default_app.template("gputrain-training")


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _security_group(template, prefix: str) -> str:
    (logical_id,) = [k for k in template.find_resources("AWS::EC2::SecurityGroup") if k.startswith(prefix)]
    return logical_id


def _role_of(template, policy_prefix: str) -> str:
    (policy,) = [p for k, p in template.find_resources("AWS::IAM::ManagedPolicy").items() if k.startswith(policy_prefix)]
    (role,) = policy["Properties"]["Roles"]
    return role["Ref"]


# --------------------------------------------------------------------------------------------
# The processing role
# --------------------------------------------------------------------------------------------


def test_processing_role_reads_raw_data_and_code_and_writes_only_processed_data(training):
    statements = _policy_statements(training, "PipelineProcessingRolePolicy")
    assert statements["ReadRawData"]["Action"] == "s3:GetObject"
    assert _text(statements["ReadRawData"]["Resource"]).endswith('/raw/*"]]}')
    assert statements["ListRawData"]["Condition"] == {"StringLike": {"s3:prefix": ["raw/*"]}}
    assert sorted(statements["WriteProcessedData"]["Action"]) == ["s3:AbortMultipartUpload", "s3:PutObject"]
    assert _text(statements["WriteProcessedData"]["Resource"]).endswith('/processed/*"]]}')
    assert statements["ReadUserCode"]["Action"] == "s3:GetObject"
    assert _text(statements["ReadUserCode"]["Resource"]).endswith('/code/*"]]}')
    assert statements["ListUserCode"]["Condition"] == {
        "StringLike": {"s3:prefix": ["code/*", "training-jobs/gputrain-*/input/*", "training-jobs/gputrain-*/source/*"]}}
    # No other S3 access at all: not the training channels, not the artifacts' outputs.
    s3 = [s for s in statements.values() if s["Effect"] == "Allow"
          and any(a.startswith("s3:") for a in json.dumps(s["Action"]).strip('[]"').split('", "'))]
    assert sorted(s["Sid"] for s in s3) == ["ListRawData", "ListUserCode", "ReadRawData", "ReadSdkProcessingInputs", "ReadUserCode",
                                           "WriteProcessedData", "WriteSdkProcessingOutputs"]
    assert set(statements["UsePlatformKey"]["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey"}
    assert set(statements["EncryptOutputsWithPlatformKey"]["Action"]) == {"kms:Encrypt", "kms:DescribeKey"}
    assert statements["EncryptMlVolumes"]["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}
    assert "PullProcessingImage" in statements and statements["EcrLogin"]["Resource"] == "*"
    assert statements["PublishProcessingMetrics"]["Condition"] == {"StringEquals": {"cloudwatch:namespace": SAGEMAKER_PROCESSING_LOG_GROUP}}
    streams = _text(statements["WriteProjectLogStreams"]["Resource"])
    assert f"log-group:{SAGEMAKER_PROCESSING_LOG_GROUP}:log-stream:gputrain-*" in streams
    assert "ec2:Vpc" in statements["NetworkInterfacesInTrainingVpc"]["Condition"]["ArnEquals"]


def test_processing_role_trusts_only_sagemaker_for_this_account(training):
    role = training.find_resources("AWS::IAM::Role")[_role_of(training, "PipelineProcessingRolePolicy")]
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": "123456789012"}
    assert "sagemaker:us-east-1:123456789012:*" in _text(statement["Condition"]["ArnLike"])


def test_training_jobs_read_the_processed_prefix_but_processing_reads_no_training_channel(training):
    job = _policy_statements(training, "WorkflowJobRolePolicy")
    assert job["ListInputChannels"]["Condition"] == {"StringLike": {"s3:prefix": ["processed/*", "train/*"]}}
    processing = _policy_statements(training, "PipelineProcessingRolePolicy")
    assert "/train/*" not in _text(processing)
    # The SDK's processing defaults only: the project's jobs' input/source (read) and named
    # output folders (write), never a training job's output/model.tar.gz.
    reads = _text(processing["ReadSdkProcessingInputs"]["Resource"])
    assert reads.count("/training-jobs/gputrain-*/input/*") == 1 and reads.count("/training-jobs/gputrain-*/source/*") == 1
    assert _text(processing["WriteSdkProcessingOutputs"]["Resource"]).endswith('/training-jobs/gputrain-*/output/*/*"]]}')
    assert sorted(processing["WriteSdkProcessingOutputs"]["Action"]) == ["s3:AbortMultipartUpload", "s3:PutObject"]
    assert [s for s in processing.values() if "training-jobs" in _text(s) and "s3:GetObject" in _text(s["Action"])] == [
        processing["ReadSdkProcessingInputs"]]


def test_promoted_models_read_only_model_files(training):
    statements = _policy_statements(training, "PipelineModelRolePolicy")
    assert statements["ReadModelArtifact"]["Action"] == "s3:GetObject"
    # The project's jobs only (every job the platform creates is <project>-*); see also
    # test_no_processing_output_is_a_model_the_model_role_reads.
    assert _text(statements["ReadModelArtifact"]["Resource"]).endswith('/training-jobs/gputrain-*/output/model.tar.gz"]]}')
    assert "s3:PutObject" not in _text(statements)  # no data capture by default
    assert "/aws/sagemaker/Endpoints/gputrain-endpoint" in _text(statements["WriteEndpointLogs"]["Resource"])
    # SageMaker reads the rollback alarms with the execution role during a blue/green deployment.
    assert statements["ReadRollbackAlarms"]["Resource"] == [
        f"arn:aws:cloudwatch:us-east-1:123456789012:alarm:{n}" for n in rollback_alarm_names("gputrain")]


def _artifact_keys(statement: dict[str, Any]) -> list[str]:
    """The object-key patterns of ``statement`` in the artifacts bucket (``*`` spans ``/``, as in IAM)."""
    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    return [r["Fn::Join"][1][-1].lstrip("/") for r in resources if "ArtifactsBucket" in _text(r)]


def test_no_processing_output_is_a_model_the_model_role_reads(training):
    processing = _policy_statements(training, "PipelineProcessingRolePolicy")
    writes = [k for s in processing.values() if s["Effect"] == "Allow" and "s3:PutObject" in s["Action"] for k in _artifact_keys(s)]
    denied = [k for s in processing.values() if s["Effect"] == "Deny" and "s3:PutObject" in s["Action"] for k in _artifact_keys(s)]
    (reads,) = _artifact_keys(_policy_statements(training, "PipelineModelRolePolicy")["ReadModelArtifact"])
    # An SDK output named "output" holding a model.tar.gz: the outputs' "*/*" reaches it, and so
    # does the model role's "<project>-*" (which spans "/" too), so only a deny keeps it out.
    planted = "training-jobs/gputrain-x/output/out/output/model.tar.gz"
    assert any(fnmatch.fnmatchcase(planted, w) for w in writes) and fnmatch.fnmatchcase(planted, reads)
    assert denied == ["training-jobs/*/output/model.tar.gz"]
    # Every key the model role reads is denied (the read pattern is an instance of the denied one)...
    assert fnmatch.fnmatchcase(reads, denied[0])
    # ...and ordinary SDK outputs are still written.
    ordinary = "training-jobs/gputrain-x/output/scaled/part-0.csv"
    assert any(fnmatch.fnmatchcase(ordinary, w) for w in writes) and not fnmatch.fnmatchcase(ordinary, denied[0])


# --------------------------------------------------------------------------------------------
# The pipeline's role
# --------------------------------------------------------------------------------------------


def test_pipeline_role_creates_only_hardened_project_jobs_and_models(training):
    statements = _policy_statements(training, "PipelineRolePolicy")
    for sid, action, kind in (
        ("CreateHardenedProcessingJobs", "sagemaker:CreateProcessingJob", "processing-job"),
        ("CreateHardenedTrainingJobs", "sagemaker:CreateTrainingJob", "training-job"),
        # A tuning step (train.tuning): its TrainingJobDefinition as hardened as a training job.
        ("CreateHardenedTuningJobs", "sagemaker:CreateHyperParameterTuningJob", "hyper-parameter-tuning-job"),
    ):
        statement = statements[sid]
        assert statement["Action"] == action and statement["Resource"] == f"{ARN}{kind}/gputrain-*"
        condition = statement["Condition"]
        assert condition["Bool"] == {"sagemaker:NetworkIsolation": "true"}
        assert "PlatformKey" in _text(condition["ArnEquals"]["sagemaker:OutputKmsKey"])
        assert len(condition["ForAllValues:StringEquals"]["sagemaker:VpcSubnets"]) == 2
        # The jobs' own security group (the training workflow's), no other.
        assert condition["ForAllValues:StringEquals"]["sagemaker:VpcSecurityGroupIds"] == [
            {"Fn::GetAtt": [_security_group(training, "WorkflowNetworkSecurityGroup"), "GroupId"]}]
        assert condition["Null"] == {
            "sagemaker:VpcSubnets": "false", "sagemaker:VpcSecurityGroupIds": "false", "sagemaker:InstanceTypes": "false"}
    model = statements["CreateIsolatedModels"]
    assert model["Resource"] == f"{ARN}model/gputrain-*"
    assert model["Condition"]["Bool"] == {"sagemaker:NetworkIsolation": "true"}
    assert model["Condition"]["ForAllValues:StringEquals"]["sagemaker:VpcSecurityGroupIds"] == [
        {"Fn::GetAtt": [_security_group(training, "PipelineModelSecurityGroup"), "GroupId"]}]
    assert model["Condition"]["Null"] == {"sagemaker:VpcSubnets": "false", "sagemaker:VpcSecurityGroupIds": "false"}
    config = statements["CreateEndpointConfigs"]
    assert config["Resource"] == f"{ARN}endpoint-config/gputrain-*"
    assert config["Condition"]["ForAllValues:StringEquals"] == {"sagemaker:InstanceTypes": ["ml.g5.xlarge"]}
    assert config["Condition"]["ForAllValues:ArnLike"] == {"sagemaker:ModelArn": [f"{ARN}model/gputrain-*"]}
    assert config["Condition"]["Null"] == {"sagemaker:InstanceTypes": "false", "sagemaker:ModelArn": "false"}


def test_pipeline_role_updates_only_the_projects_endpoint(training):
    statements = _policy_statements(training, "PipelineRolePolicy")
    assert sorted(statements["UpdateTheEndpoint"]["Resource"]) == [f"{ARN}endpoint-config/gputrain-*", f"{ARN}endpoint/gputrain-endpoint"]
    assert statements["DescribeTheEndpoint"]["Resource"] == f"{ARN}endpoint/gputrain-endpoint"
    assert statements["ReadRollbackAlarms"]["Resource"] == [
        f"arn:aws:cloudwatch:us-east-1:123456789012:alarm:{n}" for n in rollback_alarm_names("gputrain")]
    # Grants on the platform key (an EBS-only endpoint volume, data capture) only for AWS resources.
    assert statements["GrantEndpointVolumeKey"]["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}
    actions = {a for s in statements.values() for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
    assert not {"sagemaker:DeleteEndpoint", "sagemaker:CreateEndpoint", "sagemaker:DeleteModel"} & actions


def test_pipeline_role_keeps_only_the_projects_promotion_record(training, default_app):
    """The promote step reads, writes and tags the record, the one parameter scripts.promote and the app use."""
    statements = _policy_statements(training, "PipelineRolePolicy")
    record = statements["KeepThePromotionRecord"]
    assert sorted(record["Action"]) == ["ssm:AddTagsToResource", "ssm:GetParameters", "ssm:PutParameter"]
    assert record["Resource"] == "arn:aws:ssm:us-east-1:123456789012:parameter/gputrain/serving/promotion"
    ssm = {a for s in statements.values() for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]]) if a.startswith("ssm:")}
    assert ssm == set(record["Action"])
    # Every SSM call of the deployed definition is one of these, on that parameter.
    states = parse_definition(default_app.template_json("gputrain-training"), name="gputrain-pipeline")["States"]
    calls = {s["Resource"].rsplit(":", 1)[-1]: s["Arguments"] for s in states.values() if ":::aws-sdk:ssm:" in s.get("Resource", "")}
    assert {f"ssm:{a[0].upper()}{a[1:]}" for a in calls} == ssm
    assert {json.dumps(a.get("Names", [a.get("Name", a.get("ResourceId"))])) for a in calls.values()} == {'["/gputrain/serving/promotion"]'}


def test_pipeline_role_passes_each_of_the_three_roles_to_sagemaker_for_its_own_resources(training):
    statements = _policy_statements(training, "PipelineRolePolicy")
    passes = {sid: s for sid, s in statements.items() if s["Action"] == "iam:PassRole"}
    expected = {
        "PassProcessingRole": ("PipelineProcessingRole", "processing-job"),
        "PassTrainingJobRole": ("WorkflowJobRole", ["training-job", "hyper-parameter-tuning-job"]),
        "PassModelRole": ("PipelineModelRole", "model"),
    }
    assert set(passes) == set(expected)
    for sid, (role, kinds) in expected.items():
        assert passes[sid]["Resource"]["Fn::GetAtt"][0].rstrip("0123456789ABCDEF") == role
        # IfExists: SageMaker does not document setting the key (scripts.security_report names it).
        resources = [f"{ARN}{kind}/gputrain-*" for kind in kinds] if isinstance(kinds, list) else f"{ARN}{kinds}/gputrain-*"
        assert passes[sid]["Condition"] == {
            "StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"},
            "ArnLikeIfExists": {"iam:AssociatedResourceArn": resources},
        }


def test_endpoint_configs_take_the_platform_volume_key_on_ebs_only_types(training, synth_app):
    """CreateModel has no volume (no sagemaker:VolumeKmsKey); the endpoint config has: on an
    EBS-only hosting type it must name the platform key; an NVMe type takes none (SageMaker rejects one)."""
    assert "ArnEquals" not in _policy_statements(training, "PipelineRolePolicy")["CreateEndpointConfigs"]["Condition"]
    ebs = synth_app({"serving.instance_type": "ml.p3.2xlarge"}).template("gputrain-training")
    condition = _policy_statements(ebs, "PipelineRolePolicy")["CreateEndpointConfigs"]["Condition"]
    assert "PlatformKey" in _text(condition["ArnEquals"]["sagemaker:VolumeKmsKey"])
    assert condition["ForAllValues:StringEquals"] == {"sagemaker:InstanceTypes": ["ml.p3.2xlarge"]}


def test_pipeline_role_sync_rules_listing_and_notifications(training):
    statements = _policy_statements(training, "PipelineRolePolicy")
    assert statements["SyncIntegrationRules"]["Resource"] == [
        "arn:aws:events:us-east-1:123456789012:rule/StepFunctionsGetEventsForSageMakerProcessingJobsRule",
        "arn:aws:events:us-east-1:123456789012:rule/StepFunctionsGetEventsForSageMakerTrainingJobsRule",
        "arn:aws:events:us-east-1:123456789012:rule/StepFunctionsGetEventsForSageMakerTuningJobsRule",
    ]
    # A tuning step's .sync follows (and, on a stop, stops) the project's tuning jobs, no other.
    follow = statements["FollowAndStopProjectTuningJobs"]
    assert follow["Resource"] == f"{ARN}hyper-parameter-tuning-job/gputrain-*"
    assert "sagemaker:DescribeHyperParameterTuningJob" in follow["Action"] and "sagemaker:StopHyperParameterTuningJob" in follow["Action"]
    listing = statements["ListProcessedData"]
    assert listing["Action"] == "s3:ListBucket" and listing["Condition"] == {"StringLike": {"s3:prefix": ["processed/*"]}}
    assert statements["Notify"]["Action"] == "sns:Publish" and "NotificationsTopic" in _text(statements["Notify"]["Resource"])
    assert "NotificationsTopicKey" in _text(statements["EncryptNotifications"]["Resource"])
    # Only through SNS (the state machine's Publish), never by calling KMS directly.
    assert statements["EncryptNotifications"]["Condition"] == {"StringEquals": {"kms:ViaService": "sns.us-east-1.amazonaws.com"}}
    # Nothing else in S3: the pipeline itself reads and writes no data.
    assert [s["Sid"] for s in statements.values() if "s3:" in _text(s["Action"])] == ["ListProcessedData"]
    assert training.find_resources("AWS::IAM::Policy") == {}


def test_pipeline_role_trusts_only_its_state_machine(training):
    role = training.find_resources("AWS::IAM::Role")[_role_of(training, "PipelineRolePolicy")]
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "states.amazonaws.com"}
    assert statement["Condition"]["ArnLike"] == {"aws:SourceArn": "arn:aws:states:us-east-1:123456789012:stateMachine:gputrain-pipeline"}


# --------------------------------------------------------------------------------------------
# The state machine, outputs, notifications, switches
# --------------------------------------------------------------------------------------------


def test_state_machine_is_named_logged_traced_and_outputs_are_exported(training):
    machines = training.find_resources("AWS::StepFunctions::StateMachine")
    (pipeline,) = [m for m in machines.values() if m["Properties"]["StateMachineName"] == "gputrain-pipeline"]
    assert pipeline["Properties"]["TracingConfiguration"] == {"Enabled": True}
    assert pipeline["Properties"]["LoggingConfiguration"]["Level"] == "ALL"
    outputs = training.find_outputs("*")
    assert {"PipelineStateMachineArn", "ProcessingRoleArn", "PipelineLogGroup"} <= set(outputs)
    logs = training.find_resources("AWS::Logs::LogGroup")
    assert any(g["Properties"]["LogGroupName"] == "/aws/vendedlogs/states/gputrain-pipeline" for g in logs.values())


def test_the_deployed_definition_runs_the_jobs_with_the_project_roles(default_app):
    definition = parse_definition(default_app.template_json("gputrain-training"), name="gputrain-pipeline")
    states = definition["States"]
    assert states["ProcessData"]["Resource"] == "arn:aws:states:::sagemaker:createProcessingJob.sync"
    assert states["ProcessData"]["Arguments"]["RoleArn"].startswith("${GetAtt:PipelineProcessingRole")
    assert states["TrainModel"]["Arguments"]["RoleArn"].startswith("${GetAtt:WorkflowJobRole")
    assert states["CreateModel"]["Arguments"]["ExecutionRoleArn"].startswith("${GetAtt:PipelineModelRole")
    assert states["ProcessData"]["Arguments"]["NetworkConfig"]["EnableNetworkIsolation"] is True
    assert states["NotifyFailure"]["Arguments"]["TopicArn"].startswith("${Ref:NotificationsTopic")


def test_interrupted_pipeline_executions_are_notified(training):
    rules = training.find_resources("AWS::Events::Rule")
    (rule,) = [r for r in rules.values() if r["Properties"]["Name"] == "gputrain-pipeline-interrupted"]
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["detail"]["status"] == ["TIMED_OUT", "ABORTED"]
    assert pattern["detail"]["stateMachineArn"] == ["arn:aws:states:us-east-1:123456789012:stateMachine:gputrain-pipeline"]


def test_processing_disabled_leaves_the_training_workflow_as_it_was(synth_app):
    template = synth_app({"processing.enabled": False}).template("gputrain-training")
    machines = {r["Properties"]["StateMachineName"] for r in template.find_resources("AWS::StepFunctions::StateMachine").values()}
    assert machines == {"gputrain-training-job", "gputrain-gpu-idle-watch"}
    assert "PipelineStateMachineArn" not in template.find_outputs("*")
    job = _policy_statements(template, "WorkflowJobRolePolicy")
    assert job["ListInputChannels"]["Condition"] == {"StringLike": {"s3:prefix": ["train/*"]}}
    rules = {r["Properties"]["Name"] for r in template.find_resources("AWS::Events::Rule").values()}
    assert rules == {
        "gputrain-training-job-state", "gputrain-training-workflow-failure", "gputrain-gpu-idle-alarm", "gputrain-gpu-idle-watch-jobs"
    }


def test_training_disabled_still_synthesizes(synth_app):
    synthesized = synth_app({"training_job.enabled": False})
    assert synthesized.platform.training_job is None
    assert "gputrain-training" not in synthesized.stack_ids


def test_scale_to_zero_pipeline_has_no_promotion_permissions(synth_app):
    template = synth_app({"serving.scale_to_zero": True}).template("gputrain-training")
    statements = _policy_statements(template, "PipelineRolePolicy")
    assert not {"CreateIsolatedModels", "UpdateTheEndpoint", "CreateEndpointConfigs", "KeepThePromotionRecord"} & set(statements)
    assert {sid for sid, s in statements.items() if s["Action"] == "iam:PassRole"} == {"PassProcessingRole", "PassTrainingJobRole"}
    assert not [k for k in template.find_resources("AWS::IAM::Role") if k.startswith("PipelineModelRole")]


# --------------------------------------------------------------------------------------------
# The serving stack and the pipeline build the model and endpoint config alike
# --------------------------------------------------------------------------------------------


def _resolve_refs(value: Any, resources: dict[str, Any]) -> Any:
    """``{"Ref": alarm}`` -> the alarm's AlarmName (the fixed names the pipeline uses)."""
    if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in resources:
        return resources[value["Ref"]]["Properties"].get("AlarmName", value)
    if isinstance(value, dict):
        return {k: _resolve_refs(v, resources) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve_refs(v, resources) for v in value]
    return value


@pytest.mark.parametrize("overrides", [DEFAULT, ALTERNATIVE], ids=["default", "alternative"])
def test_serving_resources_equal_the_shared_builder(synth_app, overrides):
    synthesized = synth_app(overrides)
    template = synthesized.template_json("gputrain-serving")
    resources = template["Resources"]
    (model,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::SageMaker::Model"]
    (config,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::SageMaker::EndpointConfig"]
    (endpoint,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::SageMaker::Endpoint"]
    context = project_context()
    for key, value in overrides.items():
        context[f"gpu_training.{key}"] = json.dumps(value)
    serving = load_config(context).serving
    # The deployment-specific values (references) are taken from the template; everything else
    # (image mode, environment, isolation, variant, capture, deployment) must be the builder's.
    capture = config.get("DataCaptureConfig", {})
    model_resources = ModelResources(
        role_arn=model["ExecutionRoleArn"],
        image_uri=model["PrimaryContainer"]["Image"],
        artifacts_bucket="<artifacts>",
        key_arn=config.get("KmsKeyId", capture.get("KmsKeyId")),
        subnet_ids=model["VpcConfig"]["Subnets"],
        security_group_ids=model["VpcConfig"]["SecurityGroupIds"],
    )
    expected_model = model_properties(serving, model_resources, model_data_url=model["PrimaryContainer"]["ModelDataUrl"])
    assert {k: v for k, v in model.items() if k != "Tags"} == expected_model
    model_name = config["ProductionVariants"][0]["ModelName"]
    expected_config = endpoint_config_properties(serving, model_resources, endpoint="gputrain-endpoint", model_name=model_name)
    if capture:
        assert "data-capture/gputrain-endpoint" in _text(capture["DestinationS3Uri"])
        expected_config["DataCaptureConfig"]["DestinationS3Uri"] = capture["DestinationS3Uri"]
    assert {k: v for k, v in config.items() if k != "Tags"} == expected_config
    assert _resolve_refs(endpoint["DeploymentConfig"], resources) == deployment_config(serving, rollback_alarm_names("gputrain"))
    # A promotion by the pipeline keeps the fleet size autoscaling reached, as CloudFormation's update does.
    request = update_endpoint_request(serving, endpoint="gputrain-endpoint", config_name="c", alarm_names=rollback_alarm_names("gputrain"))
    update_options = {k: v for k, v in endpoint.items() if k not in ("EndpointName", "EndpointConfigName", "DeploymentConfig", "Tags")}
    assert update_options == {k: v for k, v in request.items() if k not in ("EndpointName", "EndpointConfigName", "DeploymentConfig")}
    assert update_options["RetainAllVariantProperties"] is True


# ------------------------------------------------------------------------------------------
# Security finding 3: ForAllValues conditions are Null-guarded; job creation pins instance
# types and the volume key.
# ------------------------------------------------------------------------------------------

PINNED = {
    "training_job.instance_type": "ml.g5.xlarge",
    "training_job.allowed_instance_types": ["ml.g5.xlarge", "ml.p3.2xlarge"],
    "processing.allowed_instance_types": ["ml.p3.2xlarge"],
}


def _all_statements(synthesized):
    for stack_name, template in synthesized.templates_by_stack_name().items():
        for logical_id, resource in template["Resources"].items():
            document = resource.get("Properties", {}).get("PolicyDocument") or resource.get("Properties", {}).get("KeyPolicy")
            for statement in (document or {}).get("Statement", []):
                yield f"{stack_name}/{logical_id}/{statement.get('Sid')}", statement


@pytest.mark.parametrize("overrides", [{}, DEFAULT, ALTERNATIVE, PINNED, {"transform.enabled": True}],
                         ids=["default", "serving", "serving-alt", "pinned", "transform"])
def test_every_for_all_values_condition_is_null_guarded(synth_app, overrides):
    """ForAllValues over an absent key is true: without Null=false beside it, a request that
    omits the key (a serverless variant has no instance types) passes the condition."""
    checked = 0
    for where, statement in _all_statements(synth_app(overrides)):
        if statement["Effect"] != "Allow":
            continue
        for operator, keys in statement.get("Condition", {}).items():
            if operator.startswith("ForAllValues:"):
                for key in keys:
                    checked += 1
                    assert statement["Condition"].get("Null", {}).get(key) == "false", f"{where}: {operator} {key} has no Null guard"
    assert checked >= 3


def _create_job_statements(statements, sid):
    return {k: v for k, v in statements.items() if k.startswith(sid)}


@pytest.mark.parametrize(
    "policy, sid, allowed",
    [
        ("WorkflowRolePolicy", "CreateHardenedTrainingJobs", ["ml.g5.xlarge", "ml.p3.2xlarge"]),
        ("PipelineRolePolicy", "CreateHardenedTrainingJobs", ["ml.g5.xlarge", "ml.p3.2xlarge"]),
        ("PipelineRolePolicy", "CreateHardenedProcessingJobs", ["ml.g5.xlarge", "ml.p3.2xlarge"]),
    ],
)
def test_job_creation_pins_the_allowed_instance_types_and_the_volume_key(synth_app, policy, sid, allowed):
    """Any GPU size at any price is refused by the role itself; an EBS-backed type's volume must
    use the platform key (local-NVMe types are encrypted in hardware and take no volume key)."""
    statements = _create_job_statements(_policy_statements(synth_app(PINNED).template("gputrain-training"), policy), sid)
    types = sorted(t for s in statements.values() for t in s["Condition"]["ForAllValues:StringEquals"]["sagemaker:InstanceTypes"])
    assert types == allowed
    for statement in statements.values():
        condition = statement["Condition"]
        assert condition["Null"]["sagemaker:InstanceTypes"] == "false"
        (instance_type,) = condition["ForAllValues:StringEquals"]["sagemaker:InstanceTypes"] if "p3" in _text(condition) else (None,)
        if instance_type == "ml.p3.2xlarge":
            assert "PlatformKey" in _text(condition["ArnEquals"]["sagemaker:VolumeKmsKey"])
        else:
            assert "sagemaker:VolumeKmsKey" not in _text(condition)


def test_default_job_creation_is_pinned_to_the_configured_type(training):
    expected = {
        ("WorkflowRolePolicy", "CreateHardenedTrainingJobs"): ["ml.g5.12xlarge", "ml.g5.xlarge"],  # cdk.json's allowed types
        ("PipelineRolePolicy", "CreateHardenedTrainingJobs"): ["ml.g5.12xlarge", "ml.g5.xlarge"],
        ("PipelineRolePolicy", "CreateHardenedProcessingJobs"): ["ml.g5.xlarge"],  # processing.instance_type alone
    }
    for (policy, sid), types in expected.items():
        statement = _policy_statements(training, policy)[sid]
        assert statement["Condition"]["ForAllValues:StringEquals"]["sagemaker:InstanceTypes"] == types
        assert f"{sid}EbsVolumeKey" not in _policy_statements(training, policy)  # both are local-NVMe types


# ------------------------------------------------------------------------------------------
# The batch transform at the end of the pipeline (transform.enabled)
# ------------------------------------------------------------------------------------------

TRANSFORM = {"transform.enabled": True}
TRANSFORM_EBS_ZERO = {"transform.enabled": True, "transform.instance_type": "ml.p3.2xlarge", "serving.scale_to_zero": True}


def test_the_transforms_model_role_reads_the_input_prefix_and_writes_the_output_prefix_only(synth_app, training):
    statements = _policy_statements(synth_app(TRANSFORM).template("gputrain-training"), "PipelineModelRolePolicy")
    assert statements["ReadTransformInput"]["Action"] == "s3:GetObject"
    assert _text(statements["ReadTransformInput"]["Resource"]).endswith('/score/*"]]}')
    assert "DatasetsBucket" in _text(statements["ReadTransformInput"]["Resource"])
    assert statements["ListTransformInput"]["Action"] == "s3:ListBucket"
    assert statements["ListTransformInput"]["Condition"] == {"StringLike": {"s3:prefix": ["score/*"]}}
    assert sorted(statements["WriteTransformOutput"]["Action"]) == ["s3:AbortMultipartUpload", "s3:PutObject"]
    assert _text(statements["WriteTransformOutput"]["Resource"]).endswith('/transform-outputs/*"]]}')
    assert "ArtifactsBucket" in _text(statements["WriteTransformOutput"]["Resource"])
    # Nothing wider: the model file (as before), the scoring prefix and the results, no other S3 access.
    s3 = sorted(sid for sid, s in statements.items() if "s3:" in _text(s["Action"]))
    assert s3 == ["ListTransformInput", "ReadModelArtifact", "ReadTransformInput", "WriteTransformOutput"]
    assert statements["EncryptTransformOutput"]["Action"] == "kms:Encrypt"
    assert "log-group:/aws/sagemaker/TransformJobs:log-stream:gputrain-*" in _text(statements["WriteProjectLogStreams"]["Resource"])
    assert statements["PublishTransformMetrics"]["Condition"] == {"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/TransformJobs"}}
    # Without the transform, the role has none of it.
    assert not {"ReadTransformInput", "WriteTransformOutput"} & set(_policy_statements(training, "PipelineModelRolePolicy"))


def test_pipeline_role_creates_only_hardened_project_transform_jobs(synth_app, training):
    template = synth_app(TRANSFORM).template("gputrain-training")
    statements = _policy_statements(template, "PipelineRolePolicy")
    create = statements["CreateHardenedTransformJobs"]
    assert create["Action"] == "sagemaker:CreateTransformJob"
    assert create["Resource"] == f"{ARN}transform-job/gputrain-*"
    condition = create["Condition"]
    assert condition["ForAllValues:StringEquals"] == {"sagemaker:InstanceTypes": ["ml.g5.xlarge"]}
    assert condition["Null"] == {"sagemaker:InstanceTypes": "false"}
    assert condition["ArnLike"] == {"sagemaker:ModelArn": f"{ARN}model/gputrain-*"}
    # Results with the platform key; ml.g5.xlarge has local NVMe: no volume key (SageMaker rejects one).
    assert list(condition["ArnEquals"]) == ["sagemaker:OutputKmsKey"] and "PlatformKey" in _text(condition["ArnEquals"])
    follow = statements["FollowAndStopTransformJobs"]
    # ListTags: AWS's IAM template for createTransformJob.sync grants it (the .sync integration reads the job's tags).
    assert sorted(follow["Action"]) == ["sagemaker:AddTags", "sagemaker:DescribeTransformJob", "sagemaker:ListTags",
                                        "sagemaker:StopTransformJob"]
    assert follow["Resource"] == f"{ARN}transform-job/gputrain-*"
    assert "arn:aws:events:us-east-1:123456789012:rule/StepFunctionsGetEventsForSageMakerTransformJobsRule" in (
        statements["SyncIntegrationRules"]["Resource"])
    assert not [sid for sid in _policy_statements(training, "PipelineRolePolicy") if "Transform" in sid]
    # The deployed definition ends in the transform, with the role's key and the project's names.
    definition = parse_definition(synth_app(TRANSFORM).template_json("gputrain-training"), name="gputrain-pipeline")
    request = definition["States"]["TransformData"]["Arguments"]
    assert definition["States"]["TransformData"]["Resource"].endswith(":states:::sagemaker:createTransformJob.sync")
    assert "PlatformKey" in _text(request["TransformOutput"]["KmsKeyId"]) and "VolumeKmsKeyId" not in request["TransformResources"]


def test_scale_to_zero_pipelines_create_only_isolated_transform_models_and_pin_the_volume_key(synth_app):
    template = synth_app(TRANSFORM_EBS_ZERO).template("gputrain-training")
    statements = _policy_statements(template, "PipelineRolePolicy")
    assert not {"UpdateTheEndpoint", "CreateEndpointConfigs", "DescribeTheEndpoint"} & set(statements)
    model = statements["CreateIsolatedModels"]
    assert model["Condition"]["Bool"] == {"sagemaker:NetworkIsolation": "true"}
    assert model["Condition"]["Null"] == {"sagemaker:VpcSubnets": "false", "sagemaker:VpcSecurityGroupIds": "false"}
    assert statements["TagModels"]["Resource"] == f"{ARN}model/gputrain-*"
    assert "PassModelRole" in statements
    condition = statements["CreateHardenedTransformJobs"]["Condition"]
    assert condition["ForAllValues:StringEquals"] == {"sagemaker:InstanceTypes": ["ml.p3.2xlarge"]}
    assert sorted(condition["ArnEquals"]) == ["sagemaker:OutputKmsKey", "sagemaker:VolumeKmsKey"]
    assert "PlatformKey" in _text(condition["ArnEquals"]["sagemaker:VolumeKmsKey"])
