"""The CreateTrainingJob request as ``scripts.launch --direct`` builds it (pure Python).

The state machine's copy of the same request is tested in test_training_job_stack.py and, where
Node's jsonata package is available, evaluated against this one in test_training_job_jsonata.py.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest
from botocore.session import get_session
from botocore.validate import validate_parameters

from stacks.components import buckets
from stacks.components.training_job_spec import (
    CHECKPOINT_PREFIX,
    STATE_MACHINE_VALUES,
    Jsonata,
    JobResources,
    JobTemplate,
    LaunchError,
    LaunchOptions,
    create_training_job_request,
    default_job_name,
    instance_facts,
    load_metric_definitions,
    resolve_launch,
    to_jsonata,
    when,
)
from stacks.config import load_config
from tests.synth import project_context

RESOURCES = JobResources(
    role_arn="arn:aws:iam::123456789012:role/job",
    image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/gputrain-training:tf2.21.0-gpu-1",
    datasets_bucket="datasets-bucket",
    artifacts_bucket="artifacts-bucket",
    key_arn="arn:aws:kms:us-east-1:123456789012:key/k",
    subnet_ids=("subnet-a", "subnet-b"),
    security_group_ids=("sg-1",),
)
LOG_LINE = (
    "[metrics] epoch=3 loss=0.4123 accuracy=0.871 examples_per_sec=10234.1 step_time_ms=3.21 "
    "input_wait=12.5% gpu_util=87.0% gpu_mem_mib=20480 val_loss=0.5 val_accuracy=0.8"
)
INPUT_SHAPE = get_session().get_service_model("sagemaker").operation_model("CreateTrainingJob").input_shape


def template(**overrides) -> JobTemplate:
    context = project_context()
    for key, value in overrides.items():
        context[f"gpu_training.training_job.{key}"] = value
    return JobTemplate.from_config(load_config(context), RESOURCES)


def request(tmpl: JobTemplate | None = None, **options) -> dict:
    tmpl = tmpl or template()
    options.setdefault("job_name", "gputrain-test-1")
    return create_training_job_request(tmpl, resolve_launch(tmpl, LaunchOptions(**options)))


def test_default_request_is_valid_for_the_api_model_and_complete():
    req = request()
    validate_parameters(req, INPUT_SHAPE)
    assert req["TrainingJobName"] == "gputrain-test-1"
    assert req["ResourceConfig"] == {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100}
    assert req["EnableManagedSpotTraining"] is True
    assert req["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400, "MaxWaitTimeInSeconds": 172800}
    assert req["CheckpointConfig"] == {"S3Uri": "s3://artifacts-bucket/checkpoints/gputrain-test-1/", "LocalPath": "/opt/ml/checkpoints"}
    assert req["RetryStrategy"] == {"MaximumRetryAttempts": 2}
    assert req["EnableNetworkIsolation"] is True
    assert req["EnableInterContainerTrafficEncryption"] is False
    assert req["VpcConfig"] == {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-a", "subnet-b"]}
    assert req["OutputDataConfig"] == {"S3OutputPath": "s3://artifacts-bucket/training-jobs/", "KmsKeyId": RESOURCES.key_arn}
    assert req["Environment"] == {"EXPECTED_GPU_COUNT": "1"}
    assert req["HyperParameters"] == {"model": "mlp", "epochs": "5", "batch_size": "256"}
    assert req["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://datasets-bucket/train/"
    assert {"Key": "Project", "Value": "gputrain"} in req["Tags"]


@pytest.mark.parametrize(
    "instance_type, gpus, volume_key",
    [("ml.g5.xlarge", "1", False), ("ml.g5.12xlarge", "4", False), ("ml.p3.2xlarge", "1", True), ("ml.p3.16xlarge", "8", True)],
)
def test_volume_key_only_for_ebs_only_types_and_gpu_count_from_the_table(instance_type, gpus, volume_key):
    req = request(template(allowed_instance_types=json.dumps([instance_type])), instance_type=instance_type)
    validate_parameters(req, INPUT_SHAPE)
    assert ("VolumeKmsKeyId" in req["ResourceConfig"]) is volume_key
    assert req["Environment"]["EXPECTED_GPU_COUNT"] == gpus
    assert instance_facts(instance_type).local_nvme is not volume_key


def test_a_type_the_deployment_does_not_allow_is_refused_naming_the_setting():
    with pytest.raises(LaunchError) as info:
        request(instance_type="ml.p4d.24xlarge")
    assert "training_job.allowed_instance_types: ml.g5.12xlarge, ml.g5.xlarge" in str(info.value)


def test_on_demand_drops_max_wait_and_multi_instance_encrypts_traffic():
    req = request(use_spot=False, instance_count=4, hyperparameters={"epochs": 9, "xla": True, "learning_rate": 0.5})
    validate_parameters(req, INPUT_SHAPE)
    assert req["EnableManagedSpotTraining"] is False
    assert req["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400}
    assert req["EnableInterContainerTrafficEncryption"] is True
    assert req["HyperParameters"] == {"model": "mlp", "epochs": "9", "batch_size": "256", "xla": "true", "learning_rate": "0.5"}


def test_fast_file_channels_and_no_checkpoints_when_off():
    tmpl = template(input_mode="FastFile", channels='{"train": "a/", "eval": "b/"}', use_spot="false", checkpointing="false")
    req = request(tmpl)
    validate_parameters(req, INPUT_SHAPE)
    assert "CheckpointConfig" not in req
    assert req["AlgorithmSpecification"]["TrainingInputMode"] == "FastFile"
    assert [(c["ChannelName"], c["InputMode"]) for c in req["InputDataConfig"]] == [("train", "FastFile"), ("eval", "FastFile")]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"instance_type": "ml.m5.xlarge"}, "instance_type ml.m5.xlarge must be a SageMaker training GPU type from the table"),
        ({"instance_type": "g5.xlarge"}, "instance_type g5.xlarge must be a SageMaker training GPU type from the table (ml. + a row"),
        ({"instance_count": 0}, "instance_count 0 must be a whole number from 1 to 64 (scripts.launch --instance-count)"),
        ({"instance_count": 65}, "instance_count 65 must be a whole number from 1 to 64"),
        ({"job_name": "other-1"}, "job_name other-1 must be gputrain-<letters, digits, hyphens>"),
        ({"job_name": "gputrain-has_underscore"}, "job_name gputrain-has_underscore must be gputrain-<letters"),
        ({"job_name": "gputrain-" + "x" * 60}, "at most 63 characters, as the workflow's role may only create gputrain-* jobs (scripts.launch --name)"),
        ({"hyperparameters": {"layers": [1, 2]}}, "hyperparameters layers must be strings, numbers or booleans"),
        # SageMaker's limits, from botocore's model: each passed here and failed at the service.
        ({"instance_type": "ml.g4dn.metal"}, "instance_type ml.g4dn.metal must be a SageMaker training GPU type"),
        ({"hyperparameters": {f"h{i}": i for i in range(98)}}, "hyperparameters has 101 entries as sent (the config's and --hp together, and with a script the platform's sagemaker_* ones), SageMaker accepts at most 100"),
        ({"hyperparameters": {"notes": "x" * 2501}}, "hyperparameters notes must be strings, numbers or booleans of at most 2500 characters"),
        ({"hyperparameters": {"n" * 257: "1"}}, f"hyperparameters {'n' * 257} must be strings, numbers or booleans of at most 2500 characters, with names of at most 256"),
    ],
)
def test_bad_options_are_refused_with_one_line(options, message):
    with pytest.raises(LaunchError, match=re.escape(message)) as info:
        request(**options)
    assert str(info.value).startswith("Invalid launch options: ") and "\n" not in str(info.value)


def test_spot_needs_checkpointing():
    tmpl = template(use_spot="false", checkpointing="false")
    with pytest.raises(LaunchError, match=re.escape("use_spot true must be false: this deployment has checkpointing off")) as info:
        request(tmpl, use_spot=True)
    assert "--on-demand" in str(info.value) and "training_job.checkpointing=true" in str(info.value)


def test_generated_job_names_carry_the_project_prefix():
    name = default_job_name(template(), datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), "ab12")
    assert name == "gputrain-20260102-030405-ab12"
    assert resolve_launch(template(), LaunchOptions()).job_name.startswith("gputrain-")


def test_state_machine_input_carries_only_overrides_as_strings():
    options = LaunchOptions(job_name="gputrain-x", instance_count=2, hyperparameters={"epochs": 3})
    assert options.state_machine_input() == {"job_name": "gputrain-x", "instance_count": 2, "hyperparameters": {"epochs": "3"}}
    assert LaunchOptions().state_machine_input() == {}


def test_checkpoint_prefix_is_the_buckets_lifecycle_prefix():
    assert CHECKPOINT_PREFIX == buckets.CHECKPOINT_PREFIX


def test_metric_definitions_match_the_container_log_line():
    values = {}
    for definition in load_metric_definitions():
        match = re.search(definition["Regex"], LOG_LINE)
        assert match, definition
        values[definition["Name"]] = match.group(1)
    assert values == {"train:epoch": "3", "train:loss": "0.4123", "train:accuracy": "0.871",
                      "train:examples_per_sec": "10234.1", "train:step_time_ms": "3.21",
                      "train:input_wait_pct": "12.5", "train:gpu_utilization": "87.0", "train:gpu_memory_mib": "20480",
                      "validation:loss": "0.5", "validation:accuracy": "0.8"}  # fmt: skip


def test_jsonata_rendering_of_run_time_choices():
    assert when(True, {"a": 1}, {"b": 2}) == {"a": 1}
    chosen = when(Jsonata("$x"), {"a": Jsonata("$y")}, {"b": "s"})
    assert to_jsonata(chosen) == '(($x) ? {"a": ($y)} : {"b": "s"})'
    symbolic = create_training_job_request(template(), STATE_MACHINE_VALUES)
    assert symbolic["TrainingJobName"] == "{% $job_name %}"
    assert symbolic["EnableNetworkIsolation"] is True


def test_channels_and_tags_beyond_sagemakers_limits_are_refused_at_launch():
    import dataclasses
    from types import MappingProxyType

    tmpl = template()
    many_channels = dataclasses.replace(tmpl, channels=MappingProxyType({f"c{i}": f"c{i}/" for i in range(21)}))
    with pytest.raises(LaunchError, match=re.escape("21 input channels; SageMaker accepts at most 20")):
        request(many_channels)
    bad_tag = dataclasses.replace(tmpl, tags=MappingProxyType({"Project": "gputrain", "Team": "a,b"}))
    with pytest.raises(LaunchError, match=re.escape("tag 'Team': the value must match SageMaker's pattern")):
        request(bad_tag)


def test_the_state_machines_instance_table_holds_only_types_sagemaker_trains_on():
    from stacks.components.training_job_spec import instance_facts_table

    table = instance_facts_table()
    assert "ml.g4dn.metal" not in table and "ml.g4dn.12xlarge" in table and "ml.p5.48xlarge" in table
