"""The GPU idle alarms of training jobs: the watch state machine (run on the JSONata simulator),
its rules and permissions, the notification, and the settings."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match
from botocore.session import get_session
from botocore.validate import validate_parameters

from stacks.components.gpu_idle_watch import NAMESPACE, gpu_counts, watch_definition
from stacks.config import ConfigError, GpuIdleAlarmConfig
from tests.unit.states_simulator import node_env, simulate, validate
from tests.unit.test_config import error_of
from tests.unit.test_training_job_stack import parse_definition

NODE_ENV = node_env("jsonata", "asl-validator")
if NODE_ENV is None:
    pytest.fail("needs node and the npm packages jsonata and asl-validator: npm install", pytrace=False)

STOPPING = GpuIdleAlarmConfig(minutes=20, threshold_percent=15, stop_job=True)
SERVICES = {name: get_session().get_service_model(name) for name in ("cloudwatch", "sagemaker")}
OPERATIONS = {"putMetricAlarm": ("cloudwatch", "PutMetricAlarm"), "deleteAlarms": ("cloudwatch", "DeleteAlarms"),
              "stopTrainingJob": ("sagemaker", "StopTrainingJob")}  # fmt: skip


def job_event(status: str, job: str = "gputrain-20260101-000000-abcd", instance_type: str = "ml.g5.12xlarge") -> dict[str, Any]:
    """A SageMaker Training Job State Change event as EventBridge delivers it (detail abridged)."""
    return {
        "source": "aws.sagemaker",
        "detail-type": "SageMaker Training Job State Change",
        "detail": {
            "TrainingJobName": job,
            "TrainingJobStatus": status,
            "SecondaryStatus": "Training" if status == "InProgress" else status,
            "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": 2, "VolumeSizeInGB": 100},
        },
    }


def alarm_event(name: str, state: str = "ALARM") -> dict[str, Any]:
    return {
        "source": "aws.cloudwatch",
        "detail-type": "CloudWatch Alarm State Change",
        "detail": {"alarmName": name, "state": {"value": state, "reason": "Threshold Crossed"}},
    }


def run(definition: dict[str, Any], event: dict[str, Any], **script: Any) -> dict[str, Any]:
    [result] = simulate(definition, [{"input": event, "name": "e1", "script": script}], NODE_ENV)
    for task in result["tasks"]:
        service, operation = OPERATIONS[task["resource"].rsplit(":", 1)[-1]]
        validate_parameters(task["arguments"], SERVICES[service].operation_model(operation).input_shape)
    return result


def test_a_started_job_gets_an_alarm_on_its_first_host_scaled_to_its_gpus():
    result = run(watch_definition("gputrain", GpuIdleAlarmConfig()), job_event("InProgress"))
    assert result["path"] == ["Route", "WatchJob"]
    [task] = result["tasks"]
    assert task["resource"] == "arn:aws:states:::aws-sdk:cloudwatch:putMetricAlarm"
    args = task["arguments"]
    assert args["AlarmName"] == "gputrain-gpu-idle-gputrain-20260101-000000-abcd"
    assert (args["Namespace"], args["MetricName"], args["Statistic"], args["Period"]) == (NAMESPACE, "GPUUtilization", "Average", 60)
    assert args["Dimensions"] == [{"Name": "Host", "Value": "gputrain-20260101-000000-abcd/algo-1"}]
    # SageMaker sums the instance's GPUs: 10% of each of the g5.12xlarge's 4 GPUs is 40.
    assert gpu_counts()["ml.g5.12xlarge"] == 4
    assert (args["Threshold"], args["ComparisonOperator"]) == (40, "LessThanThreshold")
    assert (args["EvaluationPeriods"], args["DatapointsToAlarm"], args["TreatMissingData"]) == (30, 30, "notBreaching")
    assert "below 10% utilization for 30 minutes (4 GPUs per instance" in args["AlarmDescription"]
    assert "AlarmActions" not in args  # the notification goes through EventBridge (the topic's key admits it)


@pytest.mark.parametrize("instance_type, gpus", [("ml.p4d.24xlarge", 8), ("ml.g5.xlarge", 1), ("ml.c5.xlarge", 1)])
def test_the_threshold_follows_the_instance_type(instance_type, gpus):
    result = run(watch_definition("gputrain", STOPPING), job_event("InProgress", instance_type=instance_type))
    args = result["tasks"][0]["arguments"]
    assert (args["Threshold"], args["EvaluationPeriods"]) == (15 * gpus, 20)


@pytest.mark.parametrize("status", ["Completed", "Failed", "Stopped"])
def test_an_ended_job_loses_its_alarm(status):
    result = run(watch_definition("gputrain", GpuIdleAlarmConfig()), job_event(status))
    assert result["path"] == ["Route", "UnwatchJob"]
    assert result["tasks"][0]["arguments"] == {"AlarmNames": ["gputrain-gpu-idle-gputrain-20260101-000000-abcd"]}


def test_a_fired_alarm_stops_the_job_only_with_stop_job():
    event = alarm_event("gputrain-gpu-idle-gputrain-20260101-000000-abcd")
    result = run(watch_definition("gputrain", STOPPING), event)
    assert result["path"] == ["Route", "StopIdleJob"]
    assert result["tasks"][0]["arguments"] == {"TrainingJobName": "gputrain-20260101-000000-abcd"}
    # The job ended between the alarm and the stop.
    ended = run(watch_definition("gputrain", STOPPING), event, StopIdleJob=[{"error": "SageMaker.ValidationException", "cause": "not in progress"}])
    assert ended["path"] == ["Route", "StopIdleJob", "AlreadyEnded"] and ended["end"] == "Succeed"
    # Off by default: the definition has no stop at all.
    default = watch_definition("gputrain", GpuIdleAlarmConfig())
    assert "StopIdleJob" not in default["States"]
    assert run(default, event)["path"] == ["Route", "Ignore"]
    # Another alarm, or an alarm returning to OK, stops nothing.
    assert run(watch_definition("gputrain", STOPPING), alarm_event("other-alarm"))["path"] == ["Route", "Ignore"]
    assert run(watch_definition("gputrain", STOPPING), alarm_event(event["detail"]["alarmName"], "OK"))["path"] == ["Route", "Ignore"]


def test_definitions_are_valid_asl_and_the_deployed_one_is_built_by_the_same_function(synth_app):
    deployed = parse_definition(synth_app().template_json("gputrain-training"), name="gputrain-gpu-idle-watch")
    verdicts = validate([deployed, watch_definition("gputrain", STOPPING)], NODE_ENV)
    assert verdicts == [{"valid": True, "errors": "", "jsonata_errors": []}] * 2
    assert deployed == watch_definition("gputrain", GpuIdleAlarmConfig())


def _policy_statements(template, logical_prefix: str) -> list[dict[str, Any]]:
    policies = template.find_resources("AWS::IAM::ManagedPolicy")
    return [s for k, v in policies.items() if k.startswith(logical_prefix) for s in v["Properties"]["PolicyDocument"]["Statement"]]


def test_rules_roles_and_notification_by_default(synth_app):
    template = synth_app().template("gputrain-training")
    template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "Name": "gputrain-gpu-idle-watch-jobs",
            "EventPattern": {
                "source": ["aws.sagemaker"],
                "detail-type": ["SageMaker Training Job State Change"],
                "detail": {
                    "TrainingJobStatus": ["InProgress", "Completed", "Failed", "Stopped"],
                    "TrainingJobName": [{"prefix": "gputrain-"}],
                    "Tags": {"Project": ["gputrain"]},
                },
            },
            "Targets": [Match.object_like({"RoleArn": Match.any_value()})],
        },
    )
    # The alarm entering ALARM is published on the training jobs' topic, with the alarm's description.
    template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "Name": "gputrain-gpu-idle-alarm",
            "EventPattern": {
                "source": ["aws.cloudwatch"],
                "detail-type": ["CloudWatch Alarm State Change"],
                "detail": {"alarmName": [{"prefix": "gputrain-gpu-idle-"}], "state": {"value": ["ALARM"]}},
            },
            "Targets": [Match.object_like({"InputTransformer": Match.object_like({"InputPathsMap": {"detail-configuration-description": "$.detail.configuration.description"}})})],
        },
    )
    rules = {r["Properties"]["Name"] for r in template.find_resources("AWS::Events::Rule").values()}
    assert "gputrain-gpu-idle-stop" not in rules
    topic_policy = json.dumps(template.find_resources("AWS::SNS::TopicPolicy"))
    assert "rule/gputrain-gpu-idle-alarm" in topic_policy
    watch = _policy_statements(template, "GpuIdleWatchRolePolicy")
    actions = {a for s in watch for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert {"cloudwatch:PutMetricAlarm", "cloudwatch:DeleteAlarms"} <= actions
    assert "sagemaker:StopTrainingJob" not in actions
    alarms = next(s for s in watch if s["Sid"] == "ManageJobAlarms")
    assert ":alarm:gputrain-gpu-idle-*" in json.dumps(alarms["Resource"])
    [start] = _policy_statements(template, "GpuIdleWatchEventsRolePolicy")
    # EventBridge may start the watch and nothing else.
    assert start["Action"] == "states:StartExecution" and list(start["Resource"]) == ["Ref"]
    assert start["Resource"]["Ref"].startswith("GpuIdleWatchStateMachine")


def test_stop_job_adds_the_stop_rule_and_permission(synth_app):
    template = synth_app({"training_job.gpu_idle_alarm.stop_job": True}).template("gputrain-training")
    template.has_resource_properties(
        "AWS::Events::Rule",
        {"Name": "gputrain-gpu-idle-stop", "EventPattern": Match.object_like({"source": ["aws.cloudwatch"]})},
    )
    stop = next(s for s in _policy_statements(template, "GpuIdleWatchRolePolicy") if s["Sid"] == "StopIdleJobs")
    assert stop["Action"] == "sagemaker:StopTrainingJob" and ":training-job/gputrain-*" in json.dumps(stop["Resource"])
    definition = parse_definition(synth_app({"training_job.gpu_idle_alarm.stop_job": True}).template_json("gputrain-training"), name="gputrain-gpu-idle-watch")
    assert "StopIdleJob" in definition["States"]


def _job_state_event(job: str, project: str) -> dict[str, Any]:
    """SageMaker's event of a job tagged ``Project=<project>``: its tags as a map (``detail.Tags``)."""
    event = job_event("InProgress", job=job)
    event["detail"]["Tags"] = {"Project": project, "team": "ml"}
    return event


def test_another_projects_jobs_named_alike_get_no_alarm_no_notice_and_cannot_be_stopped(synth_app):
    """Project gputrain-dev's jobs (gputrain-dev-*) begin with gputrain-: only the Project tag tells them apart."""
    from moto.events.models import EventPattern

    template = synth_app({"training_job.gpu_idle_alarm.stop_job": True}).template_json("gputrain-training")
    rules = {r["Properties"]["Name"]: r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::Events::Rule"}
    ours, theirs = _job_state_event("gputrain-20260101-000000-abcd", "gputrain"), _job_state_event("gputrain-dev-20260101-000000-abcd", "gputrain-dev")
    for rule in ("gputrain-gpu-idle-watch-jobs", "gputrain-training-job-state"):  # the watch, the notifications
        pattern = EventPattern.load(json.dumps(rules[rule]["EventPattern"]))
        if rule == "gputrain-training-job-state":
            ours["detail"]["TrainingJobStatus"] = theirs["detail"]["TrainingJobStatus"] = "Completed"
        assert pattern.matches_event(ours), rule
        assert not pattern.matches_event(theirs), rule
    stop = next(s for s in _policy_statements(synth_app({"training_job.gpu_idle_alarm.stop_job": True}).template("gputrain-training"),
                                              "GpuIdleWatchRolePolicy") if s["Sid"] == "StopIdleJobs")
    assert stop["Condition"] == {"StringEqualsIfExists": {"aws:ResourceTag/Project": "gputrain"}}


def test_disabled_deploys_no_watch(synth_app):
    template = synth_app({"training_job.gpu_idle_alarm.enabled": False}).template("gputrain-training")
    names = {r["Properties"]["StateMachineName"] for r in template.find_resources("AWS::StepFunctions::StateMachine").values()}
    assert "gputrain-gpu-idle-watch" not in names
    assert not [r for r in template.find_resources("AWS::Events::Rule").values() if "gpu-idle" in r["Properties"]["Name"]]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"training_job__gpu_idle_alarm__minutes": 4}, "training_job.gpu_idle_alarm.minutes = 4: must be between 5 and 1440"),
        ({"training_job__gpu_idle_alarm__minutes": 1441}, "training_job.gpu_idle_alarm.minutes = 1441: must be between 5 and 1440"),
        ({"training_job__gpu_idle_alarm__threshold_percent": 0}, "training_job.gpu_idle_alarm.threshold_percent = 0: must be between 1 and 100"),
        ({"training_job__gpu_idle_alarm__threshold_percent": 101}, "training_job.gpu_idle_alarm.threshold_percent = 101: must be between 1 and 100"),
        ({"training_job__gpu_idle_alarm__stop_job": "yes"}, "training_job.gpu_idle_alarm.stop_job = \"yes\": expected true or false"),
        ({"training_job__gpu_idle_alarm__minute": 30}, "training_job.gpu_idle_alarm.minute = 30: unknown setting; did you mean gpu_training.training_job.gpu_idle_alarm.minutes?"),
    ],
)
def test_bad_settings_are_one_line_naming_the_field(overrides, message):
    assert message in error_of(**overrides)
    assert issubclass(ConfigError, ValueError)
