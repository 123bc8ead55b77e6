"""The pipeline's definition: valid JSONata-mode ASL, and what its executions do.

The definition (built from plain values here, and as synthesized) is checked by the npm package
``asl-validator`` (JSONata mode: ``Arguments``, ``Assign``, ``Condition``, ``Output``...) and
every ``{% %}`` expression is compiled by ``jsonata``. Executions are then run through the
definition with scripted task results (``tests/unit/states_simulator.py``, the reference JSONata
implementation): the requests they send equal the direct launch's and pass botocore's service
model, each step's output reaches the next, and every bad input or failed step ends in its named
failure after a notification.

Needs Node with ``jsonata`` and ``asl-validator`` (package.json); fails rather than skips
without them, so a broken setup cannot hide a regression.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from botocore.session import get_session
from botocore.validate import validate_parameters

from stacks.components.endpoint_spec import (
    ModelResources,
    create_endpoint_config_request,
    create_model_request,
    rollback_alarm_names,
    update_endpoint_request,
)
from stacks.components.pipeline_definition import FAILURES, OUTPUT_KEYS, TRANSFORM_OUTPUT_KEYS, pipeline_definition
from stacks.components.processing_job_spec import (
    ProcessingOptions,
    ProcessingTemplate,
    create_processing_job_request,
    resolve_processing,
)
from stacks.components.training_job_spec import (
    JobResources,
    JobTemplate,
    LaunchError,
    LaunchOptions,
    create_training_job_request,
    resolve_launch,
)
from stacks.components.tuning_job_spec import TuningOptions, create_tuning_job_request, parse_ranges, resolve_tuning
from stacks.components.transform_job_spec import TransformTemplate, create_transform_job_request, transform_model_config
from stacks.config import load_config
from tests.synth import project_context
from tests.unit.states_simulator import node_env, simulate, validate
from tests.unit.test_training_job_stack import parse_definition

NODE_ENV = node_env("jsonata", "asl-validator")
if NODE_ENV is None:
    pytest.fail("needs node and the npm packages jsonata and asl-validator: npm install", pytrace=False)

ACCOUNT = "123456789012"
IMAGE = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/gputrain-training:tf2.21.0-gpu-1"
KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/k"
TOPIC = f"arn:aws:sns:us-east-1:{ACCOUNT}:gputrain-notifications"


def _resources(role: str) -> JobResources:
    return JobResources(f"arn:aws:iam::{ACCOUNT}:role/{role}", IMAGE, "datasets", "artifacts", KEY, ("subnet-a", "subnet-b"), ("sg-1",))


MODEL = ModelResources(f"arn:aws:iam::{ACCOUNT}:role/model", IMAGE, "artifacts", KEY, ("subnet-a", "subnet-b"), ("sg-model",))
SERVICES = {name: get_session().get_service_model(name) for name in ("sagemaker", "s3", "sns", "ssm")}
SHAPES = {
    "createProcessingJob.sync": ("sagemaker", "CreateProcessingJob"),
    "createTrainingJob.sync": ("sagemaker", "CreateTrainingJob"),
    "createHyperParameterTuningJob.sync": ("sagemaker", "CreateHyperParameterTuningJob"),
    "createModel": ("sagemaker", "CreateModel"),
    "createEndpointConfig": ("sagemaker", "CreateEndpointConfig"),
    "updateEndpoint": ("sagemaker", "UpdateEndpoint"),
    "createTransformJob.sync": ("sagemaker", "CreateTransformJob"),
    "describeEndpoint": ("sagemaker", "DescribeEndpoint"),
    "describeTrainingJob": ("sagemaker", "DescribeTrainingJob"),
    "getParameters": ("ssm", "GetParameters"),
    "putParameter": ("ssm", "PutParameter"),
    "addTagsToResource": ("ssm", "AddTagsToResource"),
    "listObjectsV2": ("s3", "ListObjectsV2"),
    "publish": ("sns", "Publish"),
}


def _config(**overrides: Any):
    context = project_context()
    for key, value in overrides.items():
        context[f"gpu_training.{key}"] = json.dumps(value)
    return load_config(context)


def _transform(config) -> TransformTemplate | None:
    return TransformTemplate.from_config(config, datasets_bucket="datasets", model=MODEL) if config.transform.enabled else None


def _build(**overrides: Any) -> tuple[dict, ProcessingTemplate, JobTemplate, Any]:
    config = _config(**overrides)
    processing = ProcessingTemplate.from_config(config, _resources("processing"))
    training = JobTemplate.from_config(config, _resources("job"))
    definition = pipeline_definition(
        project_name=config.project_name,
        processing=processing,
        training=training,
        tuning=config.tuning,
        serving=config.serving,
        model_resources=None if config.serving.scale_to_zero and not config.transform.enabled else MODEL,
        topic_arn=TOPIC,
        partition="aws",
        transform=_transform(config),
        transform_config=config.transform,
    )
    return definition, processing, training, config


# The other types the runs below pick are allowed here (cdk.json allows processing.instance_type alone).
DEFINITION, PROCESSING, TRAINING, CONFIG = _build(**{"processing.allowed_instance_types": ["ml.g6e.12xlarge", "ml.p3.2xlarge"]})
# The pipeline that ends in a batch transform: on the endpoint's type (the promoted model serves it),
# and on an EBS-only type of its own (a model of its own, the volume key).
TRANSFORM_DEFINITION, _, _, TRANSFORM_CONFIG = _build(**{"transform.enabled": True})
TRANSFORM_EBS, _, _, TRANSFORM_EBS_CONFIG = _build(**{"transform.enabled": True, "transform.instance_type": "ml.p3.2xlarge",
                                                      "transform.split_type": "None", "transform.batch_strategy": "SingleRecord"})
OLD_CONFIG = "gputrain-previous"
RECORD = "/gputrain/serving/promotion"
OLD_RECORD = {"live": {"job": "gputrain-old-7", "model_data_url": "s3://artifacts/training-jobs/gputrain-old-7/output/model.tar.gz",
                       "metrics": {"validation:accuracy": 0.9}, "promoted_by": "arn:aws:iam::123456789012:user/ops",
                       "promoted_at": "2026-11-01T10:00:00+00:00"},
              "previous": [{"job": "gputrain-old-3", "model_data_url": "s3://artifacts/training-jobs/gputrain-old-3/output/model.tar.gz"}],
              "rolled_back": []}


def _record(value: Any | None) -> list[dict[str, Any]]:
    """GetParameters of the promotion record: ``value`` as its JSON text (a string as it is), or missing."""
    if value is None:
        return [{"result": {"Parameters": [], "InvalidParameters": [RECORD]}}]
    text = value if isinstance(value, str) else json.dumps(value)
    return [{"result": {"Parameters": [{"Name": RECORD, "Type": "String", "Value": text, "Version": 3}], "InvalidParameters": []}}]


def _script(name: str = "run1", **changes: Any) -> dict[str, list[dict[str, Any]]]:
    """Task outcomes of a run in which every step succeeds (``changes`` replace some)."""
    script = {
        "CheckEndpoint": [{"result": {"EndpointName": "gputrain-endpoint", "EndpointConfigName": OLD_CONFIG, "EndpointStatus": "InService"}}],
        "CheckPromotionRecord": _record(OLD_RECORD),
        "CheckOutputPrefix": [{"result": {"KeyCount": 0, "IsTruncated": False}}],
        "ProcessData": [{"result": {"ProcessingJobName": f"gputrain-{name}-process", "ProcessingJobStatus": "Completed"}}],
        "TrainModel": [
            {
                "result": {
                    "TrainingJobName": f"gputrain-{name}-train",
                    "TrainingJobStatus": "Completed",
                    "ModelArtifacts": {"S3ModelArtifacts": f"s3://artifacts/training-jobs/gputrain-{name}-train/output/model.tar.gz"},
                }
            }
        ],
        "CreateModel": [{"result": {"ModelArn": "arn:model"}}],
        "CreateEndpointConfig": [{"result": {"EndpointConfigArn": "arn:config"}}],
        "UpdateEndpoint": [{"result": {"EndpointArn": "arn:endpoint"}}],
        "DescribeEndpoint": [
            {"result": {"EndpointStatus": "Updating", "EndpointConfigName": OLD_CONFIG}},
            {"result": {"EndpointStatus": "InService", "EndpointConfigName": f"gputrain-{name}"}},
        ],
        "DescribePromotedJob": [{"result": {"TrainingJobStatus": "Completed", "FinalMetricDataList": [
            {"MetricName": "validation:accuracy", "Value": 0.95}, {"MetricName": "validation:loss", "Value": 0.12}]}}],
        "ReadPromotionRecord": _record(OLD_RECORD),
        "RecordPromotion": [{"result": {"Version": 4, "Tier": "Standard"}}],
        "TagPromotionRecord": [{"result": {}}],
        "CreateTransformModel": [{"result": {"ModelArn": "arn:transform-model"}}],
        "TransformData": [{"result": {"TransformJobName": f"gputrain-{name}-transform", "TransformJobStatus": "Completed"}}],
        "NotifySuccess": [{"result": {"MessageId": "m-1"}}],
        "NotifyFailure": [{"result": {"MessageId": "m-2"}}],
    }
    script.update(changes)
    return script


def _run(execution_input: Any, name: str = "run1", definition: dict | None = None, **changes: Any) -> dict[str, Any]:
    [result] = simulate(definition or DEFINITION, [{"input": execution_input, "name": name, "script": _script(name, **changes)}], NODE_ENV)
    return result


def _args(result: dict[str, Any], state: str) -> list[dict[str, Any]]:
    return [t["arguments"] for t in result["tasks"] if t["state"] == state]


def _check_against_the_service_model(result: dict[str, Any]) -> None:
    for task in result["tasks"]:
        action = task["resource"].rsplit(":", 1)[-1]
        service, operation = SHAPES[action]
        validate_parameters(task["arguments"], SERVICES[service].operation_model(operation).input_shape)


# --------------------------------------------------------------------------------------------
# The definition is valid JSONata-mode ASL
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthesized(default_app) -> dict[str, Any]:
    return parse_definition(default_app.template_json("gputrain-training"), name="gputrain-pipeline")


def test_every_field_is_valid_jsonata_mode_asl(synthesized):
    scale_to_zero, *_ = _build(**{"serving.scale_to_zero": True})
    canary, *_ = _build(**{"serving.rollout": "canary", "serving.min_instances": 2, "serving.initial_instance_count": 2,
                           "serving.data_capture": True})
    transform_zero, *_ = _build(**{"transform.enabled": True, "serving.scale_to_zero": True})
    verdicts = validate([DEFINITION, synthesized, scale_to_zero, canary, TRANSFORM_DEFINITION, TRANSFORM_EBS, transform_zero], NODE_ENV)
    for verdict in verdicts:
        assert verdict == {"valid": True, "errors": "", "jsonata_errors": []}
    assert synthesized["QueryLanguage"] == "JSONata"
    # The deployed definition is the one built from the same function (references aside).
    assert list(synthesized["States"]) == list(DEFINITION["States"])
    for state in ("CheckPipelineInput", "EndpointUpdated", "ResolveTrainInput"):
        assert json.dumps(synthesized["States"][state]).count("{%") == json.dumps(DEFINITION["States"][state]).count("{%")


def _broken(change) -> dict:
    definition = copy.deepcopy(DEFINITION)
    change(definition["States"])
    return definition


def test_the_validator_rejects_broken_definitions():
    """The checks would catch a real mistake: JSONPath fields in JSONata mode, a dangling
    transition, a field a state type does not have, a JSONata syntax error."""
    broken = [
        _broken(lambda s: s["ProcessData"].update({"Parameters": {"A": 1}})),
        _broken(lambda s: s["ProcessData"].update({"ResultPath": "$.x"})),
        _broken(lambda s: s["TrainRequested"].update({"Default": "NoSuchState"})),
        _broken(lambda s: s["WaitForEndpoint"].update({"SecondsPath": "$.s"})),
        _broken(lambda s: s["Failed"].update({"Next": "Succeeded"})),
    ]
    syntax = _broken(lambda s: s["CheckPipelineInput"]["Choices"][0].update({"Condition": "{% $run_process and %}"}))
    verdicts = validate([*broken, syntax], NODE_ENV)
    for verdict in verdicts[:-1]:
        assert verdict["valid"] is False, verdict
    assert verdicts[-1]["jsonata_errors"], verdicts[-1]
    # JSONata-mode fields are refused in a JSONPath state machine: the validator knows the modes.
    jsonpath = copy.deepcopy(DEFINITION)
    jsonpath["QueryLanguage"] = "JSONPath"
    assert validate([jsonpath], NODE_ENV)[0]["valid"] is False


def test_every_input_rule_is_evaluated_once_then_the_check_and_the_refusal_read_the_reasons():
    states = DEFINITION["States"]
    assert states["TuningRequested"]["Default"] == states["ResolveTuneOptions"]["Next"] == "FindPipelineProblems"
    find = states["FindPipelineProblems"]
    assert find["Next"] == "CheckPipelineInput" and list(find["Assign"]) == ["pipeline_problems"]
    for name in ("CheckPipelineInput", "InvalidPipelineInput"):
        read = set(re.findall(r"\$\w+", json.dumps(states[name])))
        assert read <= {"$count", "$join", "$pipeline_problems"}, (name, read)


def test_every_failure_name_has_a_path_and_every_end_notifies():
    text = json.dumps(TRANSFORM_DEFINITION)
    for failure in FAILURES:
        assert f'"failure_error": "{failure}"' in text
    assert "TransformJobFailed" not in json.dumps(DEFINITION), "no transform step unless transform.enabled"
    states = TRANSFORM_DEFINITION["States"]
    ends = [n for n, s in states.items() if s["Type"] in ("Succeed", "Fail")]
    assert sorted(ends) == ["Failed", "Succeeded"]
    assert [n for n, s in states.items() if s.get("Next") == "Failed" or s.get("Next") == "Succeeded"] == ["NotifySuccess", "NotifyFailure"]
    for name, state in states.items():
        if state["Type"] == "Pass" and name in FAILURES:
            assert state["Next"] == "NotifyFailure"


# --------------------------------------------------------------------------------------------
# Executions: data passing, the same requests as a direct launch
# --------------------------------------------------------------------------------------------


def test_process_train_promote_pass_each_steps_output_to_the_next():
    result = _run({"process": {}, "train": {}, "promote": True})
    assert result["end"] == "Succeed", result
    assert result["path"][:8] == ["ReadPipelineInput", "ResolveTrainInput", "ResolveTrainOptions", "TuningRequested", "FindPipelineProblems",
                                  "CheckPipelineInput", "PromotionRequested", "CheckEndpoint"]
    _check_against_the_service_model(result)
    # The endpoint is checked before any job is created.
    order = [t["state"] for t in result["tasks"]]
    assert order == ["CheckEndpoint", "CheckPromotionRecord", "CheckOutputPrefix", "ProcessData", "TrainModel", "CreateModel",
                     "CreateEndpointConfig", "UpdateEndpoint", "DescribeEndpoint", "DescribeEndpoint", "DescribePromotedJob",
                     "ReadPromotionRecord", "RecordPromotion", "TagPromotionRecord", "NotifySuccess"]
    [listing] = _args(result, "CheckOutputPrefix")
    assert listing == {"Bucket": "datasets", "Prefix": "processed/gputrain-run1-process/", "MaxKeys": 1}
    [process] = _args(result, "ProcessData")
    assert process == create_processing_job_request(PROCESSING, resolve_processing(PROCESSING, ProcessingOptions(job_name="gputrain-run1-process")))
    # process -> train: the built-in transform's train and validation outputs become the channels.
    out = "s3://datasets/processed/gputrain-run1-process/"
    [train] = _args(result, "TrainModel")
    expected = resolve_launch(TRAINING, LaunchOptions(job_name="gputrain-run1-train", channels={"train": out + "train/", "validation": out + "validation/"}))
    assert train == create_training_job_request(TRAINING, expected)
    assert [(c["ChannelName"], c["DataSource"]["S3DataSource"]["S3Uri"]) for c in train["InputDataConfig"]] == [
        ("train", out + "train/"), ("validation", out + "validation/")]
    # train -> promote: the job's model artifact, served as the serving stack serves it.
    model_uri = "s3://artifacts/training-jobs/gputrain-run1-train/output/model.tar.gz"
    tags = dict(TRAINING.tags)
    assert _args(result, "CreateModel") == [
        create_model_request(CONFIG.serving, MODEL, model_name="gputrain-run1", model_data_url=model_uri, tags=tags)]
    assert _args(result, "CreateEndpointConfig") == [create_endpoint_config_request(
        CONFIG.serving, MODEL, endpoint="gputrain-endpoint", config_name="gputrain-run1", model_name="gputrain-run1", tags=tags)]
    [update] = _args(result, "UpdateEndpoint")
    assert update == update_endpoint_request(CONFIG.serving, endpoint="gputrain-endpoint", config_name="gputrain-run1",
                                             alarm_names=rollback_alarm_names("gputrain"))
    assert [a["AlarmName"] for a in update["DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]] == [
        "gputrain-endpoint-5xx", "gputrain-endpoint-latency"]
    assert result["output"] == {
        "processing_job": "gputrain-run1-process",
        "processed_uri": out,
        "tuning_job": None,
        "training_job": "gputrain-run1-train",
        "model_uri": model_uri,
        "endpoint_config": "gputrain-run1",
    }
    [notice] = _args(result, "NotifySuccess")
    assert notice["TopicArn"] == TOPIC and "gputrain pipeline run1 succeeded" in notice["Message"]


PROCESS_OPTIONS = [
    ProcessingOptions(job_name="gputrain-a1"),
    ProcessingOptions(job_name="gputrain-b2", instance_type="ml.g6e.12xlarge",
                      input_uri="s3://datasets/raw/images/", arguments=["--format", "image-dir", "--image-size", "64x64"]),
    ProcessingOptions(job_name="gputrain-c3", instance_type="ml.p3.2xlarge", arguments=[]),
    ProcessingOptions(job_name="gputrain-d4", code_uri="s3://artifacts/code/d4/sourcedir.tar.gz", entry_point="prep.py",
                      arguments=["--rows", "10"], instance_count=2),
    ProcessingOptions(job_name="gputrain-e5", code_uri="s3://artifacts/code/e5/sourcedir.tar.gz", entry_point="src/prep.sh"),
    ProcessingOptions(job_name="gputrain-f6", arguments=["--validation-fraction=0.2"], code_uri="", entry_point=""),
]


@pytest.mark.parametrize("options", PROCESS_OPTIONS, ids=lambda o: o.job_name)
def test_the_processing_request_is_the_direct_launchs(options):
    result = _run({"process": options.state_machine_input()})
    assert result["end"] == "Succeed", result
    _check_against_the_service_model(result)
    [request] = _args(result, "ProcessData")
    assert request == create_processing_job_request(PROCESSING, resolve_processing(PROCESSING, options))
    assert [t["state"] for t in result["tasks"]] == ["CheckOutputPrefix", "ProcessData", "NotifySuccess"]
    assert result["output"]["training_job"] is None and result["output"]["endpoint_config"] is None


def test_defaults_and_config_arguments():
    config = _config(**{"processing.arguments": ["--shards", "4"]})
    processing = ProcessingTemplate.from_config(config, _resources("processing"))
    definition = pipeline_definition(project_name="gputrain", processing=processing, training=TRAINING, tuning=config.tuning,
                                     serving=config.serving, model_resources=MODEL, topic_arn=TOPIC, partition="aws")
    result = _run({"process": {}}, name="0d6c5e6a", definition=definition)
    [request] = _args(result, "ProcessData")
    assert request["ProcessingJobName"] == "gputrain-0d6c5e6a-process"
    assert request["AppSpecification"]["ContainerArguments"] == ["--shards", "4"]
    assert request["ProcessingInputs"][0]["S3Input"]["S3DataDistributionType"] == "FullyReplicated"
    assert request["NetworkConfig"]["EnableInterContainerTrafficEncryption"] is False
    assert request == create_processing_job_request(processing, resolve_processing(processing, ProcessingOptions(job_name="gputrain-0d6c5e6a-process")))
    # A user's script gets only its own arguments, not the built-in transform's.
    script = {"code_uri": "s3://artifacts/code/x/sourcedir.tar.gz", "entry_point": "prep.py"}
    [request] = _args(_run({"process": script}, definition=definition), "ProcessData")
    assert "ContainerArguments" not in request["AppSpecification"]
    assert request["Environment"]["SAGEMAKER_PROGRAM"] == "prep.py"


def test_a_user_processing_script_feeds_only_the_train_channel_and_given_channels_win():
    script = {"code_uri": "s3://artifacts/code/x/sourcedir.tar.gz", "entry_point": "prep.py"}
    result = _run({"process": script, "train": {"hyperparameters": {"epochs": 2}}})
    [train] = _args(result, "TrainModel")
    assert [(c["ChannelName"], c["DataSource"]["S3DataSource"]["S3Uri"]) for c in train["InputDataConfig"]] == [
        ("train", "s3://datasets/processed/gputrain-run1-process/train/")]
    assert train["HyperParameters"]["epochs"] == "2"
    given = {"train": "s3://datasets/train/set-b/", "test": "s3://datasets/processed/old-run/validation/"}
    result = _run({"process": {}, "train": {"channels": given}})
    [train] = _args(result, "TrainModel")
    assert {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in train["InputDataConfig"]} == given
    assert train == create_training_job_request(TRAINING, resolve_launch(TRAINING, LaunchOptions(job_name="gputrain-run1-train", channels=given)))


@pytest.mark.parametrize(
    "train",
    [
        {"job_name": "gputrain-t1"},
        {"instance_type": "ml.g5.12xlarge", "instance_count": 2, "use_spot": False},
        {"code_uri": "s3://artifacts/code/t3/sourcedir.tar.gz", "entry_point": "train.py", "legacy_keras": True},
        {"channels": {"train": "s3://datasets/processed/x/train/"}},
        # A batch the 4 replicas split; a script's own batch_size, which it parses itself.
        {"instance_type": "ml.g5.12xlarge", "hyperparameters": {"batch_size": "384"}},
        {"instance_type": "ml.g5.12xlarge", "hyperparameters": {"batch_size": "391"},
         "code_uri": "s3://artifacts/code/t3/sourcedir.tar.gz", "entry_point": "train.py"},
    ],
    ids=["name", "multi", "script", "channels", "batch", "script batch"],
)
def test_the_training_request_is_the_training_workflows(train):
    result = _run({"train": train, "promote": True})
    assert result["end"] == "Succeed", result
    _check_against_the_service_model(result)
    options = LaunchOptions(**{"job_name": "gputrain-run1-train", **train})
    [request] = _args(result, "TrainModel")
    assert request == create_training_job_request(TRAINING, resolve_launch(TRAINING, options))
    [model] = _args(result, "CreateModel")
    assert model["PrimaryContainer"]["ModelDataUrl"] == "s3://artifacts/training-jobs/gputrain-run1-train/output/model.tar.gz"


def test_promote_alone_serves_the_given_model_and_a_given_model_wins_over_training():
    uri = "s3://artifacts/training-jobs/gputrain-old-7/output/model.tar.gz"
    result = _run({"promote": {"model_uri": uri}})
    assert result["end"] == "Succeed", result
    assert [t["state"] for t in result["tasks"]][:3] == ["CheckEndpoint", "CheckPromotionRecord", "CreateModel"]
    assert _args(result, "CreateModel")[0]["PrimaryContainer"]["ModelDataUrl"] == uri
    assert result["output"] == {"processing_job": None, "processed_uri": None, "tuning_job": None, "training_job": None,
                                "model_uri": uri, "endpoint_config": "gputrain-run1"}
    result = _run({"train": {}, "promote": {"model_uri": uri}})
    assert _args(result, "CreateModel")[0]["PrimaryContainer"]["ModelDataUrl"] == uri


# --------------------------------------------------------------------------------------------
# Failures: named, with a reason, notified
# --------------------------------------------------------------------------------------------


def _failed(result: dict[str, Any], error: str) -> str:
    assert result["end"] == "Fail", result
    assert result["error"] == error, result
    [notice] = _args(result, "NotifyFailure")
    assert notice["TopicArn"] == TOPIC
    assert f"failed: {error}: " in notice["Message"]
    return result["cause"]


INVALID = [
    ("not an object", "the input must be an object"),
    ({}, "at least one of process, train, promote"),
    ({"proces": {}}, "no other keys"),
    ({"process": "yes"}, "process must be an object"),
    ({"train": [1]}, "train must be an object"),
    ({"promote": "yes"}, "promote must be true or"),
    ({"promote": True}, "promote without train needs promote.model_uri"),
    ({"promote": {"model_uri": "s3://other/training-jobs/j/output/model.tar.gz"}}, "promote.model_uri"),
    ({"promote": {"model_uri": "s3://artifacts/training-jobs/j/output/other.tar.gz"}}, "promote.model_uri"),
    # The model role reads only the project's jobs' models (ReadModelArtifact), so a model_uri of
    # another job would only fail later, at the endpoint.
    ({"promote": {"model_uri": "s3://artifacts/training-jobs/other-7/output/model.tar.gz"}}, "promote.model_uri"),
    ({"promote": {"model_uri": "s3://artifacts/training-jobs/gputrain/output/model.tar.gz"}}, "promote.model_uri"),
    ({"promote": {"model_uri": "s3://artifacts/training-jobs/j/output/model.tar.gz", "x": 1}}, "promote must be true or"),
    ({"process": {"job_name": "other-x"}}, "process.job_name other-x"),
    ({"process": {"instance_type": "ml.p4d.24xlarge"}}, "process.instance_type ml.p4d.24xlarge must be a GPU type SageMaker Processing offers"),
    ({"process": {"instance_count": 0}}, "process.instance_count 0"),
    ({"process": {"instance_count": 101}}, "process.instance_count 101"),
    ({"process": {"instance_count": 2}}, "the built-in transform runs on one instance"),
    ({"process": {"input_uri": "s3://datasets/processed/x/"}}, "process.input_uri"),
    ({"process": {"input_uri": "s3://datasets/raw/../processed/"}}, "process.input_uri"),
    ({"process": {"arguments": "--shards 4"}}, "process.arguments must be a list"),
    ({"process": {"arguments": ["x" * 257]}}, "process.arguments must be a list"),
    ({"process": {"code_uri": "s3://artifacts/code/x/sourcedir.tar.gz"}}, "process.code_uri"),
    ({"process": {"code_uri": "s3://datasets/code/x.tar.gz", "entry_point": "prep.py"}}, "process.code_uri"),
    ({"train": {"instance_count": 0}}, "train.instance_count 0"),
    ({"train": {"channels": {"train": "s3://datasets/raw/x/"}}}, "train.channels train must be named"),
    ({"train": {"channels": {"train": "s3://elsewhere/processed/x/"}}}, "train.channels train"),
    ({"train": {"channels": "s3://datasets/processed/x/"}}, "train.channels must be an object"),
    ({"process": {"instance_count": 0}, "train": {"use_spot": "no"}}, "process.instance_count 0"),
]


@pytest.mark.parametrize(("execution_input", "reason"), INVALID, ids=lambda v: str(v)[:50])
def test_invalid_input_fails_before_anything_runs(execution_input, reason):
    result = _run(execution_input)
    cause = _failed(result, "InvalidPipelineInput")
    assert cause.startswith("Invalid pipeline input: ") and reason in cause, cause
    assert [t["state"] for t in result["tasks"]] == ["NotifyFailure"]


def test_every_broken_rule_is_named_at_once():
    cause = _failed(_run({"process": {"instance_count": 0}, "train": {"use_spot": "no"}}), "InvalidPipelineInput")
    assert "process.instance_count 0" in cause and "train.use_spot no" in cause


@pytest.mark.parametrize(("execution_input", "reason"), [c for c in INVALID if isinstance(c[0], dict) and "process" in c[0]
                                                         and isinstance(c[0]["process"], dict) and "train" not in c[0]],
                         ids=lambda v: str(v)[:50])
def test_the_direct_launch_refuses_the_same_processing_options(execution_input, reason):
    options = execution_input["process"]
    with pytest.raises(LaunchError):
        resolve_processing(PROCESSING, ProcessingOptions(**{"job_name": "gputrain-x-process", **options}))


def test_the_direct_launch_refuses_the_same_channels():
    for channels in ({"train": "s3://datasets/raw/x/"}, {"train": "s3://elsewhere/processed/x/"}, {"code": "s3://datasets/train/"}):
        code = {"code_uri": "s3://artifacts/code/x/sourcedir.tar.gz", "entry_point": "t.py"} if "code" in channels else {}
        with pytest.raises(LaunchError):
            resolve_launch(TRAINING, LaunchOptions(job_name="gputrain-x", channels=channels, **code))


@pytest.mark.parametrize(
    "train",
    [
        {"instance_type": "ml.g5.12xlarge", "hyperparameters": {"batch_size": "391"}},
        {"instance_type": "ml.g5.xlarge", "instance_count": 2, "hyperparameters": {"batch_size": 391}},
    ],
    ids=["4 GPUs", "2 instances"],
)
def test_a_batch_the_replicas_do_not_split_is_refused_before_training_in_the_direct_launchs_words(train):
    """The built-in trainer would refuse it when its container starts, on a billed GPU instance."""
    with pytest.raises(LaunchError) as info:
        resolve_launch(TRAINING, LaunchOptions(job_name="gputrain-run1-train", **train))
    reason = str(info.value).removeprefix("Invalid launch options: ")
    assert "is the global batch and must be divisible by the" in reason
    result = _run({"process": {}, "train": train, "promote": True})
    assert _failed(result, "InvalidPipelineInput") == f"Invalid pipeline input: train.{reason}"
    assert [t["state"] for t in result["tasks"]] == ["NotifyFailure"]


def test_names_longer_than_sagemaker_allows_are_refused_up_front():
    name = "e" * 60
    cause = _failed(_run({"process": {}, "train": {}, "promote": True}, name=name), "InvalidPipelineInput")
    assert "process.job_name" in cause and "train.job_name" in cause and "model and endpoint config would be named" in cause


def test_a_missing_endpoint_fails_in_seconds():
    missing = {"error": "SageMaker.SageMakerException", "cause": "Could not find endpoint gputrain-endpoint. (Service: SageMaker; Status Code: 400; Error Code: ValidationException)"}
    result = _run({"process": {}, "train": {}, "promote": True}, CheckEndpoint=[missing])
    cause = _failed(result, "EndpointNotDeployed")
    assert "deploy it once with python -m scripts.promote <job>" in cause and "Could not find endpoint" in cause
    assert [t["state"] for t in result["tasks"]] == ["CheckEndpoint", "NotifyFailure"]
    denied = {"error": "SageMaker.AccessDeniedException", "cause": "not authorized"}
    assert "could not describe endpoint" in _failed(_run({"train": {}, "promote": True}, CheckEndpoint=[denied]), "PromotionFailed")


def test_an_output_prefix_that_holds_data_is_refused():
    result = _run({"process": {}, "train": {}}, CheckOutputPrefix=[{"result": {"KeyCount": 1}}])
    cause = _failed(result, "OutputPrefixNotEmpty")
    assert "s3://datasets/processed/gputrain-run1-process/ already holds objects" in cause
    assert "ProcessData" not in result["path"]


def test_a_failed_processing_job_names_its_reason_and_nothing_after_it_runs():
    described = {"ProcessingJobName": "gputrain-run1-process", "ProcessingJobStatus": "Failed",
                 "FailureReason": "AlgorithmError: unreadable image raw/cat/3.png", "ExitMessage": "unreadable image raw/cat/3.png"}
    result = _run({"process": {}, "train": {}}, ProcessData=[{"error": "States.TaskFailed", "cause": json.dumps(described)}])
    cause = _failed(result, "ProcessingJobFailed")
    assert cause == "AlgorithmError: unreadable image raw/cat/3.png (unreadable image raw/cat/3.png)"
    assert "TrainModel" not in result["path"]
    refused = {"error": "SageMaker.ResourceLimitExceededException", "cause": "quota ml.g5.xlarge for processing job usage"}
    cause = _failed(_run({"process": {}}, ProcessData=[refused]), "ProcessingJobFailed")
    assert cause == "SageMaker.ResourceLimitExceededException: quota ml.g5.xlarge for processing job usage"
    stopped = {"ProcessingJobName": "p", "ProcessingJobStatus": "Stopped"}
    assert _failed(_run({"process": {}}, ProcessData=[{"error": "States.TaskFailed", "cause": json.dumps(stopped)}]),
                   "ProcessingJobFailed") == "the job ended Stopped"


def test_a_failed_training_job_names_its_reason():
    described = {"TrainingJobName": "gputrain-run1-train", "TrainingJobStatus": "Failed", "FailureReason": "AlgorithmError: expected 1 GPU, found 0"}
    result = _run({"train": {}, "promote": True}, TrainModel=[{"error": "States.TaskFailed", "cause": json.dumps(described)}])
    assert _failed(result, "TrainingJobFailed") == "AlgorithmError: expected 1 GPU, found 0"
    assert "CreateModel" not in result["path"]


def test_a_rolled_back_or_failed_deployment_fails_the_promotion():
    rolled_back = [{"result": {"EndpointStatus": "Updating", "EndpointConfigName": OLD_CONFIG}},
                   {"result": {"EndpointStatus": "RollingBack", "EndpointConfigName": OLD_CONFIG}},
                   {"result": {"EndpointStatus": "InService", "EndpointConfigName": OLD_CONFIG, "FailureReason": "alarm gputrain-endpoint-5xx"}}]
    result = _run({"train": {}, "promote": True}, DescribeEndpoint=rolled_back)
    cause = _failed(result, "PromotionFailed")
    assert cause.startswith(f"endpoint gputrain-endpoint rolled back to {OLD_CONFIG}") and "alarm gputrain-endpoint-5xx" in cause
    assert [t["state"] for t in result["tasks"]].count("DescribeEndpoint") == 3
    failed = [{"result": {"EndpointStatus": "Failed", "EndpointConfigName": "gputrain-run1", "FailureReason": "health check"}}]
    assert _failed(_run({"train": {}, "promote": True}, DescribeEndpoint=failed), "PromotionFailed") == "endpoint gputrain-endpoint is Failed: health check"
    refused = {"error": "SageMaker.ResourceLimitExceededException", "cause": "endpoint instance quota"}
    assert _failed(_run({"train": {}, "promote": True}, UpdateEndpoint=[refused]), "PromotionFailed") == (
        "SageMaker.ResourceLimitExceededException: endpoint instance quota")


# --------------------------------------------------------------------------------------------
# The promotion record: what scripts.promote writes, after the endpoint serves the new model
# --------------------------------------------------------------------------------------------


def _written(result: dict[str, Any]) -> dict[str, Any]:
    [put] = _args(result, "RecordPromotion")
    assert {k: v for k, v in put.items() if k != "Value"} == {
        "Name": RECORD, "Type": "String", "Overwrite": True,
        "Description": "gputrain: the model the endpoint serves and the previously approved ones (scripts.promote, the pipeline)"}
    assert _args(result, "TagPromotionRecord") == [
        {"ResourceType": "Parameter", "ResourceId": RECORD, "Tags": [{"Key": "Project", "Value": "gputrain"}]}]
    return json.loads(put["Value"])


SIX_PREVIOUS = [{"job": f"gputrain-p{i}", "model_data_url": f"s3://artifacts/training-jobs/gputrain-p{i}/output/model.tar.gz"}
                for i in range(6)]
METRICS = {name: 0.123456789 for name in ("train:epoch", "train:loss", "train:accuracy", "train:examples_per_sec",
                                           "train:step_time_ms", "train:input_wait_pct", "train:gpu_utilization",
                                           "train:gpu_memory_mib", "validation:loss", "validation:accuracy")}


def _long(i: int) -> dict[str, Any]:
    """A model of a long history: ten metrics, a long artifacts bucket, an execution's ARN."""
    job = f"gputrain-20261127-1908{i:02d}-f353-train"
    return {"job": job, "model_data_url": f"s3://gputrain-data-artifactsbucket88671897-ziehc3ef897d/training-jobs/{job}/output/model.tar.gz",
            "metrics": METRICS, "promoted_by": f"arn:aws:states:us-east-1:123456789012:execution:gputrain-pipeline:run-{i}",
            "promoted_at": "2026-11-27T19:08:10+00:00"}


RECORDS = [
    None,
    {"live": None, "previous": [], "rolled_back": []},
    OLD_RECORD,
    {**OLD_RECORD, "rolled_back": [{"job": "gputrain-bad", "model_data_url": "s3://artifacts/training-jobs/gputrain-bad/output/model.tar.gz"}]},
    {"live": {"job": "gputrain-run1-train", "model_data_url": "s3://artifacts/training-jobs/gputrain-run1-train/output/model.tar.gz"},
     "previous": SIX_PREVIOUS},
    {"live": SIX_PREVIOUS[0], "previous": [SIX_PREVIOUS[1], {"job": "gputrain-run1-train", "model_data_url": "s3://x/y"}, *SIX_PREVIOUS[2:]],
     "rolled_back": SIX_PREVIOUS},
    # Past SSM's 4 KB with every metric: the older models' metrics go first, then the oldest models.
    {"live": _long(0), "previous": [_long(i) for i in range(1, 6)], "rolled_back": [_long(i) for i in range(6, 11)]},
    {"live": _long(0), "previous": [_long(i) for i in range(1, 6)], "rolled_back": [_long(i) for i in range(6, 11)],
     "extra": "x" * 2000},
]


@pytest.mark.parametrize("before", RECORDS, ids=["none", "empty", "live", "rolled-back", "same-job-live", "same-job-previous",
                                                  "over-4-kb", "over-4-kb-extra-key"])
def test_a_promotion_records_the_promoted_job_live_as_scripts_promote_does(before):
    """The record the pipeline writes is the one scripts.promote's PromotionRecord.promoted makes
    of the record read just before the write (the read at the start only checks it)."""
    from scripts.promote import Promotion, PromotionRecord

    result = _run({"process": {}, "train": {}, "promote": True}, CheckPromotionRecord=_record(None), ReadPromotionRecord=_record(before))
    assert result["end"] == "Succeed", result
    _check_against_the_service_model(result)
    assert _args(result, "DescribePromotedJob") == [{"TrainingJobName": "gputrain-run1-train"}]
    written = _written(result)
    live = written["live"]
    assert live["promoted_by"] == "arn:aws:states:us-east-1:123456789012:execution:machine:run1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", live["promoted_at"]), live
    new = Promotion(job="gputrain-run1-train", model_data_url="s3://artifacts/training-jobs/gputrain-run1-train/output/model.tar.gz",
                    metrics={"validation:accuracy": 0.95, "validation:loss": 0.12}, promoted_by=live["promoted_by"],
                    promoted_at=live["promoted_at"])
    old = PromotionRecord.from_json(json.dumps(before), "before") if before is not None else PromotionRecord()
    # Read back as scripts.promote --show and the app read it (earlier entries as they were written).
    assert sorted(written) == ["live", "previous", "rolled_back"]
    [put] = _args(result, "RecordPromotion")
    assert len(put["Value"].encode()) <= 4096, "SSM's limit for a standard parameter"
    assert PromotionRecord.from_json(json.dumps(written), RECORD) == PromotionRecord.from_json(old.promoted(new).to_json(), "expected")


def test_a_given_model_is_recorded_under_its_job_and_a_tuned_one_under_the_best_trial():
    uri = "s3://artifacts/training-jobs/gputrain-old-9/output/model.tar.gz"
    for execution_input in ({"promote": {"model_uri": uri}}, {"train": {}, "promote": {"model_uri": uri}}):
        result = _run(execution_input)
        assert _args(result, "DescribePromotedJob") == [{"TrainingJobName": "gputrain-old-9"}]
        written = _written(result)
        assert (written["live"]["job"], written["live"]["model_data_url"]) == ("gputrain-old-9", uri)
        assert [p["job"] for p in written["previous"]] == ["gputrain-old-7", "gputrain-old-3"]
    tuning = {"ranges": RANGES, "max_jobs": 2}
    result = _run({"process": {}, "train": {"tuning": tuning}, "promote": True}, TuneModel=_tuned())
    assert (_written(result)["live"]["job"], _written(result)["live"]["model_data_url"]) == (BEST, BEST_MODEL)
    # A job the role cannot describe (or one without metrics) is recorded without metrics.
    denied = [{"error": "SageMaker.AccessDeniedException", "cause": "not authorized"}]
    result = _run({"promote": {"model_uri": uri}}, DescribePromotedJob=denied)
    assert result["end"] == "Succeed", result
    assert _written(result)["live"]["metrics"] == {}
    result = _run({"promote": {"model_uri": uri}}, DescribePromotedJob=[{"result": {"TrainingJobStatus": "Completed"}}])
    assert _written(result)["live"]["metrics"] == {}


@pytest.mark.parametrize(("record", "reason"), [
    ("{not json", "could not read the promotion record /gputrain/serving/promotion"),
    ('["a"]', "is not a promotion record"),
    ('{"live": {"job": 7}}', "is not a promotion record"),
    ('{"live": null, "previous": "gputrain-a"}', "is not a promotion record"),
])
def test_an_unreadable_promotion_record_fails_the_promotion_before_anything_runs(record, reason):
    result = _run({"process": {}, "train": {}, "promote": True}, CheckPromotionRecord=_record(record))
    cause = _failed(result, "PromotionFailed")
    assert reason in cause and "fix or delete the parameter" in cause, cause
    assert [t["state"] for t in result["tasks"]] == ["CheckEndpoint", "CheckPromotionRecord", "NotifyFailure"]
    denied = [{"error": "Ssm.AccessDeniedException", "cause": "not authorized to perform ssm:GetParameters"}]
    cause = _failed(_run({"train": {}, "promote": True}, CheckPromotionRecord=denied), "PromotionFailed")
    assert "Ssm.AccessDeniedException: not authorized" in cause


def test_a_record_that_cannot_be_written_fails_the_promotion_and_says_what_the_endpoint_serves():
    denied = [{"error": "Ssm.AccessDeniedException", "cause": "not authorized to perform ssm:PutParameter"}]
    for changes in ({"RecordPromotion": denied}, {"ReadPromotionRecord": _record("{broken")}, {"TagPromotionRecord": denied}):
        result = _run({"train": {}, "promote": True}, definition=TRANSFORM_DEFINITION, **changes)
        cause = _failed(result, "PromotionFailed")
        assert cause.startswith("endpoint gputrain-endpoint serves gputrain-run1 (the model of gputrain-run1-train) but the promotion"
                                " record /gputrain/serving/promotion was not updated ("), cause
        assert cause.endswith("record it with python -m scripts.promote gputrain-run1-train, or the next cdk deploy serves the model"
                              " the record names"), cause
        assert "TransformData" not in result["path"]


def test_the_record_is_kept_only_where_the_pipeline_promotes():
    definition, *_ = _build(**{"serving.scale_to_zero": True})
    assert not {"CheckPromotionRecord", "RecordPromotion"} & set(definition["States"])
    assert "promotion_record" not in json.dumps(definition)


def test_a_lost_notification_does_not_change_the_outcome():
    lost = [{"error": "SNS.KMSAccessDeniedException", "cause": "key"}]
    assert _run({"process": {}}, NotifySuccess=lost)["end"] == "Succeed"
    result = _run({"process": {}}, CheckOutputPrefix=[{"result": {"KeyCount": 3}}], NotifyFailure=lost)
    assert (result["end"], result["error"]) == ("Fail", "OutputPrefixNotEmpty")


def test_the_subject_stays_under_snss_100_characters_for_the_longest_execution_name():
    """SNS refuses a Subject of 100 characters or more, and the state's Catch would swallow that refusal."""
    name = "n" * 80  # Step Functions' longest execution name
    process = {"process": {"job_name": "gputrain-p1"}}  # the default job name would be too long
    succeeded = _run(process, name=name)
    failed = _run(process, name=name, CheckOutputPrefix=[{"result": {"KeyCount": 3}}])
    assert (succeeded["end"], failed["error"]) == ("Succeed", "OutputPrefixNotEmpty")
    for result, state in ((succeeded, "NotifySuccess"), (failed, "NotifyFailure")):
        [notice] = _args(result, state)
        assert len(notice["Subject"]) < 100, notice["Subject"]
        assert notice["Subject"].startswith("gputrain pipeline ") and name in notice["Message"]


def test_scale_to_zero_endpoints_are_not_promoted_by_the_pipeline():
    definition, *_ = _build(**{"serving.scale_to_zero": True})
    assert not {"CreateModel", "UpdateEndpoint", "CheckEndpoint"} & set(definition["States"])
    cause = _failed(_run({"train": {}, "promote": True}, definition=definition), "InvalidPipelineInput")
    assert "scripts.promote" in cause
    result = _run({"process": {}, "train": {}}, definition=definition)
    assert result["end"] == "Succeed" and set(result["output"]) == set(OUTPUT_KEYS)


def test_bucket_names_are_measured_when_the_machine_runs_not_at_synth():
    """At synth a bucket name is a CDK token whose length is not the deployed name's: no check may
    bake a prefix's length in. Built with placeholders of another length, deployed with real names."""
    placeholders = {"datasets": "TOKEN-DATASETS-BUCKET-0123456789", "artifacts": "TOKEN-ARTIFACTS-BUCKET-0123456789"}
    config = _config()

    def resources(role: str) -> JobResources:
        return JobResources(f"arn:aws:iam::{ACCOUNT}:role/{role}", IMAGE, placeholders["datasets"], placeholders["artifacts"],
                            KEY, ("subnet-a", "subnet-b"), ("sg-1",))

    model = ModelResources(f"arn:aws:iam::{ACCOUNT}:role/model", IMAGE, placeholders["artifacts"], KEY, ("subnet-a",), ("sg-model",))
    built = json.dumps(pipeline_definition(
        project_name=config.project_name,
        processing=ProcessingTemplate.from_config(config, resources("processing")),
        training=JobTemplate.from_config(config, resources("job")),
        tuning=config.tuning,
        serving=config.serving,
        model_resources=model,
        topic_arn=TOPIC,
        partition="aws",
    ))
    for real, placeholder in placeholders.items():
        built = built.replace(placeholder, real)
    deployed = json.loads(built)
    code = {"code_uri": "s3://artifacts/code/x/sourcedir.tar.gz", "entry_point": "prep.py"}
    for execution_input in (
        {"process": {"input_uri": "s3://datasets/raw/run-1/"}, "train": {}, "promote": True},
        {"process": code, "train": {"channels": {"train": "s3://datasets/processed/old/train/"}, **code}},
    ):
        result = _run(execution_input, definition=deployed)
        assert result["end"] == "Succeed", result


# --------------------------------------------------------------------------------------------
# A tuning step instead of one training job (train.tuning)
# --------------------------------------------------------------------------------------------

RANGES = {"learning_rate": {"type": "continuous", "min": 0.001, "max": 0.1, "scaling": "Logarithmic"},
          "optimizer": {"type": "categorical", "values": ["adam", "sgd"]}}
BEST = "gputrain-run1-002-0a1b2c3d"
BEST_MODEL = f"s3://artifacts/training-jobs/{BEST}/output/model.tar.gz"


def _tuned(name: str = "gputrain-run1", best: str = BEST) -> list[dict[str, Any]]:
    """The .sync task's result: DescribeHyperParameterTuningJob of a completed tuning job."""
    return [{"result": {"HyperParameterTuningJobName": name, "HyperParameterTuningJobArn": f"arn:aws:sagemaker:::hyper-parameter-tuning-job/{name}",
                        "HyperParameterTuningJobStatus": "Completed", "TrainingJobStatusCounters": {"Completed": 2},
                        "BestTrainingJob": {"TrainingJobName": best, "TunedHyperParameters": {"learning_rate": "0.01", "optimizer": "adam"},
                                            "FinalHyperParameterTuningJobObjectiveMetric": {"MetricName": "validation:loss", "Value": 0.2}}}}]


def test_a_tuning_step_tunes_the_training_request_on_the_processed_shards_and_promotes_the_best_trial():
    tuning = {"ranges": RANGES, "max_jobs": 4, "max_parallel_jobs": 2}
    result = _run({"process": {}, "train": {"hyperparameters": {"epochs": 3}, "tuning": tuning}, "promote": True}, TuneModel=_tuned())
    assert result["end"] == "Succeed", result
    _check_against_the_service_model(result)
    order = [t["state"] for t in result["tasks"]]
    assert order[:5] == ["CheckEndpoint", "CheckPromotionRecord", "CheckOutputPrefix", "ProcessData", "TuneModel"]
    assert "TrainModel" not in result["path"]
    # The training workflow's own tuning request (the direct launch's), every trial on the processed shards.
    out = "s3://datasets/processed/gputrain-run1-process/"
    channels = {"train": out + "train/", "validation": out + "validation/"}
    options = TuningOptions(parse_ranges(RANGES), LaunchOptions(job_name="gputrain-run1", hyperparameters={"epochs": 3}, channels=channels),
                            max_jobs=4, max_parallel_jobs=2)
    [request] = _args(result, "TuneModel")
    assert request == create_tuning_job_request(TRAINING, resolve_tuning(TRAINING, CONFIG.tuning, options))
    assert [(c["ChannelName"], c["DataSource"]["S3DataSource"]["S3Uri"]) for c in request["TrainingJobDefinition"]["InputDataConfig"]] == [
        ("train", out + "train/"), ("validation", out + "validation/")]
    # The best trial is the run's training job; its model is promoted as a single job's would be.
    assert _args(result, "CreateModel") == [
        create_model_request(CONFIG.serving, MODEL, model_name="gputrain-run1", model_data_url=BEST_MODEL, tags=dict(TRAINING.tags))]
    assert result["output"] == {"processing_job": "gputrain-run1-process", "processed_uri": out, "tuning_job": "gputrain-run1",
                                "training_job": BEST, "model_uri": BEST_MODEL, "endpoint_config": "gputrain-run1"}


def test_a_tuning_steps_best_model_is_the_transforms_and_a_given_name_names_the_tuning_job():
    tuning = {"ranges": RANGES, "max_jobs": 2}
    channels = {"train": "s3://datasets/processed/old/train/", "validation": "s3://datasets/processed/old/validation/"}
    result = _run({"train": {"job_name": "gputrain-t7", "channels": channels, "tuning": tuning}}, definition=TRANSFORM_DEFINITION,
                  TuneModel=_tuned("gputrain-t7", "gputrain-t7-001-99aa"))
    assert result["end"] == "Succeed", result
    [request] = _args(result, "TuneModel")
    assert request["HyperParameterTuningJobName"] == "gputrain-t7"
    assert request["HyperParameterTuningJobConfig"]["ResourceLimits"] == {"MaxNumberOfTrainingJobs": 2, "MaxParallelTrainingJobs": 2}
    model = "s3://artifacts/training-jobs/gputrain-t7-001-99aa/output/model.tar.gz"
    [transform_model] = _args(result, "CreateTransformModel")
    assert transform_model["PrimaryContainer"]["ModelDataUrl"] == model
    assert result["output"]["tuning_job"] == "gputrain-t7" and result["output"]["training_job"] == "gputrain-t7-001-99aa"
    assert result["output"]["model_uri"] == model and result["output"]["transform_job"] == "gputrain-run1-transform"


TUNE_CHANNELS = {"channels": {"train": "s3://datasets/processed/x/train/", "validation": "s3://datasets/processed/x/validation/"}}
INVALID_TUNING = [
    ({"tuning": "yes"}, "train.tuning must be an object of ranges, max_jobs and max_parallel_jobs"),
    ({"tuning": {"ranges": {}}}, "train.tuning.ranges must be an object of 1-"),
    ({"tuning": {"ranges": {"learning_rate": {"type": "continuous", "min": 1, "max": 0}}}}, "are not ranges SageMaker takes"),
    ({"tuning": {"ranges": {"_tuning_objective_metric": {"type": "categorical", "values": ["a"]}}}}, "are not for a launch to tune"),
    ({"tuning": {"ranges": {"learnig_rate": {"type": "continuous", "min": 0.1, "max": 1}}}}, "are unknown to the built-in trainer"),
    ({"tuning": {"ranges": RANGES, "max_jobs": 9}}, "train.tuning.max_jobs 9 must be a whole number from 1 to 8"),
    ({"tuning": {"ranges": RANGES, "max_jobs": 2, "max_parallel_jobs": 3}}, "train.tuning.max_parallel_jobs 3"),
    ({"tuning": {"ranges": RANGES}, "job_name": "gputrain-" + "x" * 30}, "names the tuning job: at most 32 characters"),
    ({"tuning": {"ranges": RANGES}, "keep_alive_seconds": 60}, "a tuning job's trials keep no warm pool"),
    ({"tuning": {"ranges": RANGES}, "channels": {"train": "s3://datasets/processed/x/train/"}}, "is measured on the 'validation' input channel"),
    ({"tuning": {"ranges": RANGES}, "use_spot": "no"}, "train.use_spot no"),
]


@pytest.mark.parametrize(("train", "reason"), INVALID_TUNING, ids=lambda v: str(v)[:50])
def test_invalid_tuning_fails_before_anything_runs(train, reason):
    result = _run({"train": {**TUNE_CHANNELS, **train}, "promote": True})
    cause = _failed(result, "InvalidPipelineInput")
    assert cause.startswith("Invalid pipeline input: ") and reason in cause, cause
    assert [t["state"] for t in result["tasks"]] == ["NotifyFailure"]


def test_the_direct_tuning_launch_refuses_the_same_tuning_options():
    for train, _ in INVALID_TUNING:
        tuning = train["tuning"]
        if not isinstance(tuning, dict) or not tuning["ranges"] or "max_jobs" in tuning or "use_spot" in train:
            continue  # the shape and the caps are the command line's to refuse (scripts.launch), the spot flag is a bool there
        given = {**TUNE_CHANNELS, **{k: v for k, v in train.items() if k != "tuning"}}
        options = LaunchOptions(**{"job_name": "gputrain-t1", **given})
        with pytest.raises(LaunchError):
            resolve_tuning(TRAINING, CONFIG.tuning, TuningOptions(parse_ranges(tuning["ranges"]), options))


def test_a_failed_tuning_job_names_its_reason_and_nothing_after_it_runs():
    described = {"HyperParameterTuningJobName": "gputrain-run1", "HyperParameterTuningJobStatus": "Failed",
                 "FailureReason": "No training job succeeded after 5 attempts."}
    train = {**TUNE_CHANNELS, "tuning": {"ranges": RANGES}}
    result = _run({"train": train, "promote": True}, TuneModel=[{"error": "States.TaskFailed", "cause": json.dumps(described)}])
    assert _failed(result, "TuningJobFailed") == "No training job succeeded after 5 attempts."
    assert "CreateModel" not in result["path"]
    stopped = {"HyperParameterTuningJobName": "gputrain-run1", "HyperParameterTuningJobStatus": "Stopped"}
    result = _run({"train": train}, TuneModel=[{"error": "States.TaskFailed", "cause": json.dumps(stopped)}])
    assert _failed(result, "TuningJobFailed") == "the job ended Stopped"
    refused = {"error": "SageMaker.ResourceLimitExceededException", "cause": "quota ml.g5.xlarge for training job usage"}
    assert _failed(_run({"train": train}, TuneModel=[refused]), "TuningJobFailed") == (
        "SageMaker.ResourceLimitExceededException: quota ml.g5.xlarge for training job usage")


# --------------------------------------------------------------------------------------------
# The batch transform at the end (transform.enabled)
# --------------------------------------------------------------------------------------------


def test_the_transform_step_exists_only_when_enabled():
    transform_states = {"TransformRequested", "CreateTransformModel", "TransformData", "TransformJobFailed", "TransformModelFailed"}
    assert not transform_states & set(DEFINITION["States"])
    assert transform_states <= set(TRANSFORM_DEFINITION["States"])
    # Training without promotion, and promotion, both go on to it.
    assert TRANSFORM_DEFINITION["States"]["PromoteRequested"]["Default"] == "TransformRequested"
    assert TRANSFORM_DEFINITION["States"]["EndpointUpdated"]["Choices"][0]["Next"] == "DescribePromotedJob"
    assert TRANSFORM_DEFINITION["States"]["TagPromotionRecord"]["Next"] == "TransformRequested"
    assert DEFINITION["States"]["PromoteRequested"]["Default"] == "NotifySuccess"
    # transform.max_runtime_seconds: Step Functions stops the job at the task's timeout.
    assert TRANSFORM_DEFINITION["States"]["TransformData"]["TimeoutSeconds"] == 86400


def _transform_template(config) -> TransformTemplate:
    return TransformTemplate.from_config(config, datasets_bucket="datasets", model=MODEL)


def test_train_promote_transform_scores_with_the_promoted_model():
    result = _run({"train": {}, "promote": True}, definition=TRANSFORM_DEFINITION)
    assert result["end"] == "Succeed", result
    _check_against_the_service_model(result)
    order = [t["state"] for t in result["tasks"]]
    assert order[-3:] == ["TagPromotionRecord", "TransformData", "NotifySuccess"] and "CreateTransformModel" not in order
    [request] = _args(result, "TransformData")
    template = _transform_template(TRANSFORM_CONFIG)
    assert request == create_transform_job_request(template, job_name="gputrain-run1-transform", model_name="gputrain-run1")
    assert request["TransformInput"] == {
        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://datasets/score/"}},
        "ContentType": "text/csv", "CompressionType": "None", "SplitType": "Line"}
    assert request["TransformOutput"] == {"S3OutputPath": "s3://artifacts/transform-outputs/gputrain-run1-transform/",
                                          "AssembleWith": "Line", "KmsKeyId": KEY}
    # ml.g5.xlarge has local NVMe: SageMaker rejects a volume key there.
    assert request["TransformResources"] == {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1}
    assert (request["BatchStrategy"], request["MaxPayloadInMB"]) == ("MultiRecord", 6)
    assert {"Key": "Project", "Value": "gputrain"} in request["Tags"]
    assert result["output"]["transform_job"] == "gputrain-run1-transform"
    assert result["output"]["transform_uri"] == "s3://artifacts/transform-outputs/gputrain-run1-transform/"
    assert set(result["output"]) == {*OUTPUT_KEYS, *TRANSFORM_OUTPUT_KEYS}


def test_train_alone_creates_the_transforms_model_on_its_own_type():
    result = _run({"train": {}}, definition=TRANSFORM_EBS)
    assert result["end"] == "Succeed", result
    _check_against_the_service_model(result)
    assert [t["state"] for t in result["tasks"]] == ["TrainModel", "CreateTransformModel", "TransformData", "NotifySuccess"]
    model_uri = "s3://artifacts/training-jobs/gputrain-run1-train/output/model.tar.gz"
    [model] = _args(result, "CreateTransformModel")
    model_config = transform_model_config(TRANSFORM_EBS_CONFIG.serving, TRANSFORM_EBS_CONFIG.transform)
    assert model == create_model_request(model_config, MODEL, model_name="gputrain-run1-transform", model_data_url=model_uri,
                                         tags=dict(TRAINING.tags))
    assert model["PrimaryContainer"]["Environment"]["SERVING_INSTANCE_TYPE"] == "ml.p3.2xlarge"
    assert model["EnableNetworkIsolation"] is True
    [request] = _args(result, "TransformData")
    assert request == create_transform_job_request(_transform_template(TRANSFORM_EBS_CONFIG), job_name="gputrain-run1-transform",
                                                   model_name="gputrain-run1-transform")
    assert request["TransformResources"] == {"InstanceType": "ml.p3.2xlarge", "InstanceCount": 1, "VolumeKmsKeyId": KEY}
    assert (request["TransformInput"]["SplitType"], request["BatchStrategy"]) == ("None", "SingleRecord")
    # A promoting run on another type than the endpoint's: a model of its own too.
    result = _run({"train": {}, "promote": True}, definition=TRANSFORM_EBS)
    assert [t["state"] for t in result["tasks"]][-3:] == ["CreateTransformModel", "TransformData", "NotifySuccess"]
    assert _args(result, "TransformData")[0]["ModelName"] == "gputrain-run1-transform"


def test_the_transform_is_skipped_on_request_and_without_a_model():
    for execution_input in ({"train": {}, "transform": False}, {"process": {}}, {"process": {}, "transform": False}):
        result = _run(execution_input, definition=TRANSFORM_DEFINITION)
        assert result["end"] == "Succeed", result
        assert "TransformData" not in result["path"]
        assert result["output"]["transform_job"] is None and result["output"]["transform_uri"] is None
    uri = "s3://artifacts/training-jobs/gputrain-old-7/output/model.tar.gz"
    result = _run({"promote": {"model_uri": uri}}, definition=TRANSFORM_DEFINITION)
    assert _args(result, "TransformData")[0]["ModelName"] == "gputrain-run1"
    assert _args(result, "CreateModel")[0]["PrimaryContainer"]["ModelDataUrl"] == uri


@pytest.mark.parametrize(
    ("execution_input", "reason", "name"),
    [
        ({"train": {}, "transform": "yes"}, "transform must be true or false", "run1"),
        ({"process": {}, "transform": True}, "transform needs a model: train, or promote.model_uri", "run1"),
        ({"train": {}}, "the transform job would be named gputrain-" + "e" * 47 + "-transform", "e" * 47),
    ],
    ids=["not-boolean", "no-model", "long-name"],
)
def test_invalid_transform_input_fails_before_anything_runs(execution_input, reason, name):
    result = _run(execution_input, name=name, definition=TRANSFORM_DEFINITION)
    cause = _failed(result, "InvalidPipelineInput")
    assert reason in cause, cause
    assert [t["state"] for t in result["tasks"]] == ["NotifyFailure"]
    # A pipeline without the step refuses the key as any other unknown one.
    assert "no other keys" in _failed(_run({"train": {}, "transform": False}), "InvalidPipelineInput")


def test_a_failed_transform_names_its_reason():
    described = {"TransformJobName": "gputrain-run1-transform", "TransformJobStatus": "Failed",
                 "FailureReason": "ClientError: score/a.csv record 3: the model answered 400"}
    result = _run({"train": {}}, definition=TRANSFORM_DEFINITION, TransformData=[{"error": "States.TaskFailed", "cause": json.dumps(described)}])
    assert _failed(result, "TransformJobFailed") == "ClientError: score/a.csv record 3: the model answered 400"
    timed_out = {"error": "States.Timeout", "cause": "the task timed out"}
    assert _failed(_run({"train": {}}, definition=TRANSFORM_DEFINITION, TransformData=[timed_out]), "TransformJobFailed") == (
        "States.Timeout: the task timed out")
    refused = {"error": "SageMaker.ResourceLimitExceededException", "cause": "model quota"}
    result = _run({"train": {}}, definition=TRANSFORM_DEFINITION, CreateTransformModel=[refused])
    assert _failed(result, "TransformJobFailed") == "could not create the transform's model: SageMaker.ResourceLimitExceededException: model quota"
    assert "TransformData" not in result["path"]


def test_scale_to_zero_pipelines_transform_with_a_model_of_their_own():
    definition, *_ = _build(**{"transform.enabled": True, "serving.scale_to_zero": True})
    assert not {"CreateEndpointConfig", "UpdateEndpoint", "CheckEndpoint"} & set(definition["States"])
    result = _run({"train": {}}, definition=definition)
    assert result["end"] == "Succeed", result
    assert [t["state"] for t in result["tasks"]] == ["TrainModel", "CreateTransformModel", "TransformData", "NotifySuccess"]
