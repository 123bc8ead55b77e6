"""The serving stack: model, endpoint config, endpoint, role, autoscaling, alarms, blue/green."""

from __future__ import annotations

import json
import re

import pytest
from aws_cdk.assertions import Match

from stacks.components.endpoint_spec import rollback_alarm_names
from stacks.config import ConfigError, load_config

DEFAULT = {"serving.enabled": True, "serving.training_job_name": "gputrain-job-1"}
ALTERNATIVE = {
    "serving.enabled": True,
    "serving.model_artifact_key": "models/candidate/model.tar.gz",
    "serving.instance_type": "ml.p3.2xlarge",
    "serving.data_capture": True,
    "serving.data_capture_sampling_percent": 25,
    "serving.min_instances": 2,
    "serving.initial_instance_count": 2,
    "serving.max_instances": 4,
    "serving.rollout": "canary",
    "serving.canary_percent": 25,
    "serving.network_isolation": False,
    "serving.scale_in_schedule": "cron(0 20 ? * MON-FRI *)",
    "serving.scale_out_schedule": "cron(0 6 ? * MON-FRI *)",
}


SCALE_TO_ZERO = {
    "serving.enabled": True,
    "serving.training_job_name": "gputrain-job-1",
    "serving.instance_type": "ml.g5.12xlarge",
    "serving.scale_to_zero": True,
    "serving.max_instances": 3,
    "serving.scale_in_schedule": "cron(0 20 ? * MON-FRI *)",
    "serving.scale_out_schedule": "cron(0 6 ? * MON-FRI *)",
}


@pytest.fixture(scope="module")
def default(synth_app):
    return synth_app(DEFAULT).template("gputrain-serving")


@pytest.fixture(scope="module")
def alternative(synth_app):
    return synth_app(ALTERNATIVE).template("gputrain-serving")


def _only(template, resource_type):
    resources = template.find_resources(resource_type)
    assert len(resources) == 1, resources
    return next(iter(resources.values()))["Properties"]


def _text(value):
    return json.dumps(value, sort_keys=True)


def test_serving_is_off_by_default(default_app):
    assert "gputrain-serving" not in default_app.stack_ids
    assert default_app.platform.serving is None


def test_the_stack_is_its_own_unit_named_after_the_project(synth_app):
    synthesized = synth_app(DEFAULT)
    assert synthesized.platform.serving.stack_name == "gputrain-serving"
    assert "gputrain-serving" in synthesized.stack_ids


def test_model_runs_the_project_image_on_the_finished_jobs_artifact(default):
    model = _only(default, "AWS::SageMaker::Model")
    container = model["PrimaryContainer"]
    assert container["Mode"] == "SingleModel"
    assert _text(container["Image"]).endswith('":tf2.21.0-gpu-1"]]}') and "TrainingImageRepository" in _text(container["Image"])
    assert "training-jobs/gputrain-job-1/output/model.tar.gz" in _text(container["ModelDataUrl"])
    assert "ArtifactsBucket" in _text(container["ModelDataUrl"])
    assert container["Environment"] == {
        "EXPECTED_GPU_COUNT": "1",
        "SERVING_INSTANCE_TYPE": "ml.g5.xlarge",
        "SERVE_MAX_BATCH_SIZE": "64",
        "SERVE_MAX_BATCH_DELAY_MS": "2",
    }


def test_model_is_network_isolated_in_the_private_subnets(default, alternative):
    model = _only(default, "AWS::SageMaker::Model")
    assert model["EnableNetworkIsolation"] is True
    assert len(model["VpcConfig"]["Subnets"]) == 2
    assert all("NetworkVpcTrainingSubnet" in _text(subnet) for subnet in model["VpcConfig"]["Subnets"])
    assert len(model["VpcConfig"]["SecurityGroupIds"]) == 1
    assert _only(alternative, "AWS::SageMaker::Model")["EnableNetworkIsolation"] is False


def test_security_group_admits_nothing_and_sends_only_https(default):
    group = _only(default, "AWS::EC2::SecurityGroup")
    assert "SecurityGroupIngress" not in group
    # HTTPS to the VPC endpoints' group and the S3 prefix list only (tests/unit/test_isolation.py).
    rules = [*group.get("SecurityGroupEgress", []), *(r["Properties"] for r in default.find_resources("AWS::EC2::SecurityGroupEgress").values())]
    assert sorted((r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in rules) == [("tcp", 443, 443)] * 2
    assert not [r for r in rules if "CidrIp" in r]
    assert {r.get("DestinationPrefixListId") for r in rules} == {"pl-00000000", None}


def test_endpoint_config_gpu_variant_without_volume_key_on_local_nvme(default):
    config = _only(default, "AWS::SageMaker::EndpointConfig")
    (variant,) = config["ProductionVariants"]
    assert variant["VariantName"] == "AllTraffic"
    assert variant["InstanceType"] == "ml.g5.xlarge"
    assert variant["InitialInstanceCount"] == 1
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] == 900
    assert "ModelName" in _text(variant["ModelName"])
    assert "KmsKeyId" not in config  # g5 has local NVMe: SageMaker refuses a volume key
    assert "DataCaptureConfig" not in config


def test_endpoint_config_volume_key_and_data_capture_on_ebs_types(alternative):
    config = _only(alternative, "AWS::SageMaker::EndpointConfig")
    assert "PlatformKey" in _text(config["KmsKeyId"])
    capture = config["DataCaptureConfig"]
    assert capture["EnableCapture"] is True and capture["InitialSamplingPercentage"] == 25
    assert "PlatformKey" in _text(capture["KmsKeyId"])
    assert "data-capture/gputrain-endpoint" in _text(capture["DestinationS3Uri"])
    assert {o["CaptureMode"] for o in capture["CaptureOptions"]} == {"Input", "Output"}
    assert config["ProductionVariants"][0]["InstanceType"] == "ml.p3.2xlarge"
    assert config["ProductionVariants"][0]["InitialInstanceCount"] == 2
    model = _only(alternative, "AWS::SageMaker::Model")
    assert "models/candidate/model.tar.gz" in _text(model["PrimaryContainer"]["ModelDataUrl"])


def test_endpoint_blue_green_with_rollback_on_both_alarms(default):
    endpoint = _only(default, "AWS::SageMaker::Endpoint")
    assert endpoint["EndpointName"] == "gputrain-endpoint"
    deployment = endpoint["DeploymentConfig"]
    policy = deployment["BlueGreenUpdatePolicy"]
    assert policy["TrafficRoutingConfiguration"] == {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 600}
    assert policy["TerminationWaitInSeconds"] == 600
    alarms = deployment["AutoRollbackConfiguration"]["Alarms"]
    assert len(alarms) == 2
    alarm_ids = {a["AlarmName"]["Ref"] for a in alarms}
    assert alarm_ids == set(default.find_resources("AWS::CloudWatch::Alarm"))


def test_canary_rollout(alternative):
    traffic = _only(alternative, "AWS::SageMaker::Endpoint")["DeploymentConfig"]["BlueGreenUpdatePolicy"][
        "TrafficRoutingConfiguration"
    ]
    assert traffic == {"Type": "CANARY", "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": 25}, "WaitIntervalInSeconds": 600}


def test_alarms_on_5xx_and_model_latency_notify_an_encrypted_topic(default):
    errors = _error_alarm(default)
    assert (errors["Threshold"], errors["EvaluationPeriods"], errors["ComparisonOperator"]) == (
        1, 2, "GreaterThanOrEqualToThreshold"
    )
    assert len(errors["AlarmActions"]) == 1 and "AlarmsTopic" in errors["AlarmActions"][0]["Ref"]
    default.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"MetricName": "ModelLatency", "Statistic": "Average", "Threshold": 200_000, "EvaluationPeriods": 3},
    )
    topic = _only(default, "AWS::SNS::Topic")
    assert "KmsMasterKeyId" in topic


def _error_alarm(template):
    [alarm] = [
        r["Properties"] for r in template.find_resources("AWS::CloudWatch::Alarm").values()
        if r["Properties"]["AlarmName"] == "gputrain-endpoint-5xx"
    ]
    return alarm


def _failing_minute(alarm, *, errors: int, invocations: int) -> bool:
    """The alarm's metric math for one minute of ``invocations`` of which ``errors`` answered 5xx:
    SageMaker's Invocation5XXErrors is 1 per 5xx answer and 0 per other answer, so its Sum is the
    count and its Average the share."""
    metrics = {m["Id"]: m for m in alarm["Metrics"]}
    [expression] = [m["Expression"] for m in alarm["Metrics"] if "Expression" in m]
    values = {}
    for metric_id, metric in metrics.items():
        if "MetricStat" in metric:
            stat = metric["MetricStat"]
            assert stat["Metric"]["MetricName"] == "Invocation5XXErrors" and stat["Period"] == 60
            assert {"Name": "EndpointName", "Value": "gputrain-endpoint"} in stat["Metric"]["Dimensions"]
            values[metric_id] = {"Sum": errors, "Average": errors / invocations}[stat["Stat"]]
    python = expression.replace(" OR ", " or ").replace(" AND ", " and ")
    match = re.fullmatch(r"IF\((.*), 1, 0\)", python)
    assert match, expression
    return bool(eval(match.group(1), {}, values))  # noqa: S307 - the template's own expression, on numbers


@pytest.mark.parametrize(
    ("errors", "invocations", "fails"),
    [
        (2, 2, True),  # a low-traffic endpoint whose model fails every request
        (1, 1, True),
        (1, 20, False),  # one 5xx among 20: 5 %
        (3, 20, True),  # 15 %
        (5, 10_000, True),  # the count (serving.error_alarm_threshold) still applies at high traffic
        (4, 10_000, False),
        (0, 50, False),
    ],
)
def test_the_5xx_alarm_counts_a_minute_failing_on_the_count_or_the_share(default, errors, invocations, fails):
    """Before: a Sum of 5xx at 5 a minute, which a model failing every one of a few requests a minute
    never reaches, so a deployment of a broken model to a quiet endpoint was never rolled back."""
    assert _failing_minute(_error_alarm(default), errors=errors, invocations=invocations) is fails


def test_no_traffic_is_not_a_failing_minute(default):
    # No invocations, no Invocation5XXErrors datapoint: an idle endpoint must not roll a deployment
    # back (and the alarm stays OK for the topic).
    assert _error_alarm(default)["TreatMissingData"] == "notBreaching"
    assert _only(default, "AWS::SageMaker::Endpoint")["DeploymentConfig"]["AutoRollbackConfiguration"]


def test_an_update_keeps_the_fleet_size_autoscaling_reached(default, alternative, zero):
    """Without RetainAllVariantProperties every promotion started the new fleet at InitialInstanceCount
    while autoscaling is blocked for the whole update."""
    for template in (default, alternative):
        endpoint = _only(template, "AWS::SageMaker::Endpoint")
        assert endpoint["RetainAllVariantProperties"] is True
        assert endpoint["ExcludeRetainedVariantProperties"] == [{"VariantPropertyType": "DesiredWeight"}]
    # An inference component's instances are managed instance scaling's.
    assert "RetainAllVariantProperties" not in _only(zero, "AWS::SageMaker::Endpoint")


def _synth_with_context(tmp_path, extra: dict) -> dict:
    from aws_cdk import App

    from stacks.platform import build_platform
    from tests.synth import TEST_ENV, project_context

    context = project_context()
    context.update({f"gpu_training.{k}": json.dumps(v) for k, v in DEFAULT.items()})
    context.update(extra)
    app = App(context=context, outdir=str(tmp_path))
    platform = build_platform(app, load_config(context), TEST_ENV)
    app.synth()
    return json.loads((tmp_path / platform.serving.template_file).read_text())


def test_promotes_markers_leave_out_autoscaling_or_the_rollback_alarms(tmp_path):
    """scripts.promote's first deploy of an instance type change has no scalable target (SageMaker
    refuses to change the type of one), --no-auto-rollback no rollback alarms; the alarms stay."""
    from stacks.components.endpoint_spec import NO_AUTO_ROLLBACK_CONTEXT, NO_AUTOSCALING_CONTEXT

    template = _synth_with_context(tmp_path / "a", {NO_AUTOSCALING_CONTEXT: "true"})
    types = {r["Type"] for r in template["Resources"].values()}
    assert "AWS::ApplicationAutoScaling::ScalableTarget" not in types and "AWS::CloudWatch::Alarm" in types
    [endpoint] = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Endpoint"]
    assert endpoint["DeploymentConfig"]["AutoRollbackConfiguration"]

    template = _synth_with_context(tmp_path / "b", {NO_AUTO_ROLLBACK_CONTEXT: "true"})
    [endpoint] = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Endpoint"]
    assert "AutoRollbackConfiguration" not in endpoint["DeploymentConfig"]
    assert "BlueGreenUpdatePolicy" in endpoint["DeploymentConfig"]
    assert "AWS::ApplicationAutoScaling::ScalableTarget" in {r["Type"] for r in template["Resources"].values()}


def test_autoscaling_tracks_invocations_per_instance_within_min_and_max(default):
    target = _only(default, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert target["ResourceId"] == "endpoint/gputrain-endpoint/variant/AllTraffic"
    assert target["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 2)
    assert "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint" in _text(target["RoleARN"])
    assert "ScheduledActions" not in target
    policy = _only(default, "AWS::ApplicationAutoScaling::ScalingPolicy")
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["PredefinedMetricSpecification"] == {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"}
    assert (tracking["TargetValue"], tracking["ScaleInCooldown"], tracking["ScaleOutCooldown"]) == (600, 600, 60)
    default.has_resource("AWS::ApplicationAutoScaling::ScalableTarget", {"DependsOn": Match.array_with([Match.string_like_regexp("Endpoint")])})


def test_scheduled_scale_in_and_out(alternative):
    actions = _only(alternative, "AWS::ApplicationAutoScaling::ScalableTarget")["ScheduledActions"]
    by_schedule = {a["Schedule"]: a["ScalableTargetAction"] for a in actions}
    assert by_schedule == {
        "cron(0 20 ? * MON-FRI *)": {"MinCapacity": 1, "MaxCapacity": 1},
        "cron(0 6 ? * MON-FRI *)": {"MinCapacity": 2, "MaxCapacity": 4},
    }


@pytest.fixture(scope="module")
def zero(synth_app):
    return synth_app(SCALE_TO_ZERO).template("gputrain-serving")


def test_scale_to_zero_serves_the_model_as_an_inference_component_with_all_gpus(zero):
    config = _only(zero, "AWS::SageMaker::EndpointConfig")
    (variant,) = config["ProductionVariants"]
    assert "ModelName" not in variant
    assert variant["ManagedInstanceScaling"] == {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 3}
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    assert config["EnableNetworkIsolation"] is True and "ExecutionRole" in _text(config["ExecutionRoleArn"])
    assert len(config["VpcConfig"]["Subnets"]) == 2
    component = _only(zero, "AWS::SageMaker::InferenceComponent")
    assert component["InferenceComponentName"] == "gputrain-model"
    assert component["VariantName"] == "AllTraffic"
    assert "Endpoint" in _text(component["EndpointName"])
    spec = component["Specification"]
    assert "ModelName" in _text(spec["ModelName"])
    assert spec["ComputeResourceRequirements"]["NumberOfAcceleratorDevicesRequired"] == 4  # g5.12xlarge
    assert component["RuntimeConfig"] == {"CopyCount": 1}


def test_scale_to_zero_rolls_new_models_out_with_rollback_on_both_alarms(zero):
    endpoint = _only(zero, "AWS::SageMaker::Endpoint")
    assert "DeploymentConfig" not in endpoint
    deployment = _only(zero, "AWS::SageMaker::InferenceComponent")["DeploymentConfig"]
    assert deployment["RollingUpdatePolicy"]["MaximumBatchSize"] == {"Type": "COPY_COUNT", "Value": 1}
    assert deployment["RollingUpdatePolicy"]["WaitIntervalInSeconds"] == 600
    rollback = {a["AlarmName"]["Ref"] for a in deployment["AutoRollbackConfiguration"]["Alarms"]}
    alarms = zero.find_resources("AWS::CloudWatch::Alarm")
    assert len(rollback) == 2 and rollback <= set(alarms)
    for logical_id in rollback:
        properties = alarms[logical_id]["Properties"]
        watched = [m["MetricStat"]["Metric"] for m in properties.get("Metrics", []) if "MetricStat" in m] or [properties]
        for metric in watched:
            assert metric["Dimensions"] == [{"Name": "InferenceComponentName", "Value": "gputrain-model"}]


def test_scale_to_zero_scales_copies_to_zero_and_wakes_on_a_request(zero):
    target = _only(zero, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert target["ResourceId"] == "inference-component/gputrain-model"
    assert target["ScalableDimension"] == "sagemaker:inference-component:DesiredCopyCount"
    assert (target["MinCapacity"], target["MaxCapacity"]) == (0, 3)
    assert {a["Schedule"]: a["ScalableTargetAction"] for a in target["ScheduledActions"]} == {
        "cron(0 20 ? * MON-FRI *)": {"MinCapacity": 0, "MaxCapacity": 0},
        "cron(0 6 ? * MON-FRI *)": {"MinCapacity": 0, "MaxCapacity": 3},
    }
    policies = {p["Properties"]["PolicyType"]: p["Properties"] for p in zero.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").values()}
    tracking = policies["TargetTrackingScaling"]["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["PredefinedMetricSpecification"] == {"PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"}
    steps = policies["StepScaling"]["StepScalingPolicyConfiguration"]
    assert steps["AdjustmentType"] == "ChangeInCapacity" and steps["StepAdjustments"] == [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]
    zero.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"MetricName": "NoCapacityInvocationFailures", "Threshold": 1, "AlarmActions": [{"Ref": Match.string_like_regexp("ScaleOutFromZero")}]},
    )
    assert zero.find_outputs("InferenceComponentName")["InferenceComponentName"]["Value"] == "gputrain-model"


def _role_policy(template):
    policies = template.find_resources("AWS::IAM::ManagedPolicy")
    (policy,) = policies.values()
    return {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}


def test_execution_role_reads_only_the_model_artifact(default, alternative):
    statements = _role_policy(default)
    read = statements["ReadModelArtifact"]
    assert read["Action"] == "s3:GetObject"
    assert _text(read["Resource"]).endswith('"/training-jobs/gputrain-job-1/output/model.tar.gz"]]}')
    assert "*" not in _text(read["Resource"])
    assert not any("s3:ListBucket" in _text(s["Action"]) for s in statements.values())
    assert "WriteDataCapture" not in statements
    assert "data-capture/gputrain-endpoint/*" in _text(_role_policy(alternative)["WriteDataCapture"]["Resource"])
    assert set(statements["PullServingImage"]["Action"]) == {
        "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"
    }
    assert "/aws/sagemaker/Endpoints/gputrain-endpoint" in _text(statements["WriteEndpointLogs"]["Resource"])
    # The VPC condition only where the authorization data has ec2:Vpc (the IAM gate checks every key).
    assert statements["NetworkInterfacesInTrainingVpc"]["Condition"]["ArnEquals"]["ec2:Vpc"]
    assert statements["NetworkInterfacesInTrainingVpcSubnets"]["Condition"]["ArnEquals"]["ec2:Vpc"]
    assert "Condition" not in statements["NewNetworkInterfaces"]
    role = _only(default, "AWS::IAM::Role")
    trust = role["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    # Confused deputy: SageMaker acting for this account only.
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": "123456789012"}
    assert "arn:aws:sagemaker:us-east-1:123456789012:" in _text(trust["Condition"]["ArnLike"]["aws:SourceArn"])


def test_outputs_name_the_endpoint_and_the_model(default):
    outputs = default.find_outputs("*")
    assert outputs["EndpointName"]["Value"] == "gputrain-endpoint"
    assert {"ModelDataUrl", "EndpointRoleArn", "AlarmTopicArn", "InstanceType"} <= set(outputs)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"serving.enabled": True}, "serving.training_job_name = null: an endpoint needs a model"),
        (
            {"serving.training_job_name": "a", "serving.model_artifact_key": "m/model.tar.gz"},
            "training_job_name and model_artifact_key are exclusive",
        ),
        ({"serving.instance_type": "ml.p3dn.24xlarge"}, "SageMaker hosting does not offer this type"),
        ({"serving.instance_type": "ml.m5.xlarge"}, "not a known NVIDIA GPU instance type"),
        ({"serving.instance_type": "g5.xlarge"}, "SageMaker instance types start with 'ml.'"),
        ({"serving.expected_gpus_per_instance": 4}, "ml.g5.xlarge has 1 GPU(s)"),
        ({"serving.model_artifact_key": "s3://b/model.tar.gz"}, "expected the key of a model.tar.gz"),
        ({"serving.training_job_name": "bad_name"}, "not a training job name"),
        ({"serving.min_instances": 3, "serving.max_instances": 2}, "serving.max_instances = 2: must be between 3 and 100"),
        ({"serving.rollout": "canary"}, "a canary needs a fleet of at least 2 instances"),
        ({"serving.rollout": "linear"}, "unknown rollout"),
        ({"serving.data_capture_sampling_percent": 0}, "data_capture_sampling_percent = 0: must be between 1 and 100"),
        ({"serving.scale_in_schedule": "cron(0 20 * * ? *)"}, "scale_in_schedule and scale_out_schedule go together"),
        ({"serving.bake_seconds": 7200}, "serving.bake_seconds = 7200: must be between 0 and 3600"),
        (
            {"serving.scale_to_zero": True, "serving.rollout": "canary"},
            "with scale_to_zero a new model rolls out as a rolling update of the inference component",
        ),
    ],
)
def test_bad_serving_settings_are_one_line_naming_the_setting(overrides, message):
    context = {f"gpu_training.{k}": json.dumps(v) for k, v in overrides.items()}
    with pytest.raises(ConfigError) as caught:
        load_config(context)
    assert message in str(caught.value)
    assert str(caught.value).startswith("gpu_training.serving.")


def test_alarm_topic_key_admits_cloudwatch_only_for_this_stacks_alarms(default):
    """Confused deputy: cloudwatch.amazonaws.com may use the topic key only on behalf of the
    endpoint's own two alarms in this account, not for any alarm anywhere."""
    statements = [
        s
        for key in default.find_resources("AWS::KMS::Key").values()
        for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert len(statements) == 1
    condition = statements[0].get("Condition", {})
    assert condition.get("StringEquals", {}).get("aws:SourceAccount") == "123456789012"
    arns = condition.get("ArnEquals", {}).get("aws:SourceArn")
    assert isinstance(arns, list) and len(arns) == 2, arns
    rendered = [_text(a) for a in arns]
    for arn, name in zip(rendered, ("gputrain-endpoint-5xx", "gputrain-endpoint-latency")):
        assert ":cloudwatch:us-east-1:123456789012:alarm:" + name in arn.replace('", "', "").replace('"', ""), arn


def test_alarm_topic_lets_cloudwatch_publish_only_for_this_stacks_alarms(default):
    """A topic policy replaces SNS's default one, so CloudWatch must be allowed to publish, and
    only for the endpoint's two alarms in this account (as the key policy above)."""
    (policy,) = default.find_resources("AWS::SNS::TopicPolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    (publish,) = [s for s in statements if s["Effect"] == "Allow"]
    assert publish["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert publish["Action"] == "sns:Publish"
    assert publish["Resource"] == {"Ref": next(iter(default.find_resources("AWS::SNS::Topic")))}
    assert publish["Condition"]["StringEquals"] == {"aws:SourceAccount": "123456789012"}
    assert publish["Condition"]["ArnEquals"]["aws:SourceArn"] == [
        f"arn:aws:cloudwatch:us-east-1:123456789012:alarm:{name}" for name in rollback_alarm_names("gputrain")
    ]
    # The TLS deny stays.
    assert [s["Condition"] for s in statements if s["Effect"] == "Deny"] == [{"Bool": {"aws:SecureTransport": "false"}}]


def test_execution_role_uses_the_platform_key_only_through_s3_and_sagemaker(default):
    statements = _role_policy(default)
    keys = statements["UsePlatformKey"]
    assert sorted(keys["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert keys["Condition"] == {
        "StringEquals": {"kms:ViaService": ["s3.us-east-1.amazonaws.com", "sagemaker.us-east-1.amazonaws.com"]}
    }
    assert statements["DescribePlatformKey"]["Action"] == "kms:DescribeKey"
    decrypting = [s["Sid"] for s in statements.values() if "kms:Decrypt" in _text(s["Action"])]
    assert decrypting == ["UsePlatformKey"]


def test_spec_properties_map_onto_the_l1_arguments():
    """The serving stack hands endpoint_spec's API-named properties to the L1 constructs: keyword
    names at the top, struct fields below, and the user's own map keys (the environment) untouched."""
    from stacks.components.model_endpoint import cfn_arguments

    arguments = cfn_arguments(
        {
            "ExecutionRoleArn": "arn:role",
            "PrimaryContainer": {"ModelDataUrl": "s3://a/m.tar.gz", "Environment": {"EXPECTED_GPU_COUNT": "1", "Key": "v"}},
            "ProductionVariants": [{"VariantName": "AllTraffic", "InitialVariantWeight": 1.0}],
            "DataCaptureConfig": {"DestinationS3Uri": "s3://a/c", "CaptureOptions": [{"CaptureMode": "Input"}]},
        }
    )
    assert arguments == {
        "execution_role_arn": "arn:role",
        "primary_container": {"modelDataUrl": "s3://a/m.tar.gz", "environment": {"EXPECTED_GPU_COUNT": "1", "Key": "v"}},
        "production_variants": [{"variantName": "AllTraffic", "initialVariantWeight": 1.0}],
        "data_capture_config": {"destinationS3Uri": "s3://a/c", "captureOptions": [{"captureMode": "Input"}]},
    }
