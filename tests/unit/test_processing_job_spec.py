"""The processing config section and the CreateProcessingJob request of a direct launch (pure Python).

The pipeline's copy of the same request is evaluated against this one in
test_pipeline_definition.py.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from botocore.session import get_session
from botocore.validate import validate_parameters

from stacks.components import processing_job_spec as spec
from stacks.components.processing_job_spec import (
    ProcessingOptions,
    ProcessingTemplate,
    create_processing_job_request,
    processing_output_uri,
    resolve_processing,
)
from stacks.components.request_expressions import Jsonata
from stacks.components.training_job_spec import JobResources, LaunchError
from stacks.config import ConfigError, load_config
from stacks.sagemaker_limits import processing_job_limits, training_job_limits
from tests.synth import project_context

RESOURCES = JobResources(
    role_arn="arn:aws:iam::123456789012:role/processing",
    image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/gputrain-training:tf2.21.0-gpu-1",
    datasets_bucket="datasets-bucket",
    artifacts_bucket="artifacts-bucket",
    key_arn="arn:aws:kms:us-east-1:123456789012:key/k",
    subnet_ids=("subnet-a", "subnet-b"),
    security_group_ids=("sg-1",),
)
INPUT_SHAPE = get_session().get_service_model("sagemaker").operation_model("CreateProcessingJob").input_shape


def load(**overrides):
    context = project_context()
    for key, value in overrides.items():
        context["gpu_training." + key.replace("__", ".")] = json.dumps(value)
    return load_config(context)


def error_of(**overrides) -> str:
    with pytest.raises(ConfigError) as info:
        load(**overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


def template(**overrides) -> ProcessingTemplate:
    return ProcessingTemplate.from_config(load(**overrides), RESOURCES)


def request(tmpl: ProcessingTemplate | None = None, **options) -> dict:
    tmpl = tmpl or template()
    built = create_processing_job_request(tmpl, resolve_processing(tmpl, ProcessingOptions(**options)))
    validate_parameters(built, INPUT_SHAPE)
    return built


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


def test_cdk_json_defaults():
    pr = load().processing
    assert (pr.enabled, pr.instance_type, pr.instance_count, pr.volume_size_gb, pr.max_runtime_seconds) == (
        True, "ml.g5.xlarge", 1, 100, 86400)
    assert (pr.input_prefix, pr.output_prefix, pr.arguments) == ("raw/", "processed/", ())


def test_processing_limits_come_from_botocores_model():
    limits = processing_job_limits()
    assert "ml.g5.xlarge" in limits.processing_instance_types
    # Processing and training offer different GPU types: p4d trains but does not process.
    assert "ml.p4d.24xlarge" in training_job_limits().training_instance_types
    assert "ml.p4d.24xlarge" not in limits.processing_instance_types
    assert (limits.max_container_arguments, limits.container_argument.max_length, limits.max_environment) == (100, 256, 100)
    assert (limits.max_inputs, limits.max_outputs, limits.job_name.max_length, limits.max_instance_count) == (10, 10, 63, 100)


@pytest.mark.parametrize(
    ("overrides", "setting", "problem"),
    [
        ({"processing__instance_type": "ml.p4d.24xlarge"}, "processing.instance_type", "SageMaker Processing does not offer"),
        ({"processing__instance_type": "ml.m5.xlarge"}, "processing.instance_type", "not a known NVIDIA GPU"),
        ({"processing__instance_type": "g5.xlarge"}, "processing.instance_type", "start with 'ml.'"),
        ({"processing__instance_count": 0}, "processing.instance_count", "between 1 and 100"),
        ({"processing__instance_count": 101}, "processing.instance_count", "between 1 and 100"),
        ({"processing__instance_count": 2}, "processing.instance_count", "the built-in transform runs on one instance, and every"
         " run without a script of its own uses it; set it to 1; a processing script of your own takes more at launch"
         " (scripts.launch --process-source-dir DIR --process-entry-point prep.py --process-instance-count N)"),
        ({"processing__volume_size_gb": 20000}, "processing.volume_size_gb", "between 1 and 16384"),
        ({"processing__max_runtime_seconds": 777601}, "processing.max_runtime_seconds", "between 1 and 777600"),
        ({"processing__input_prefix": "/raw/"}, "processing.input_prefix", "ending in /"),
        ({"processing__output_prefix": "processed"}, "processing.output_prefix", "ending in /"),
        ({"processing__output_prefix": "a/../b/"}, "processing.output_prefix", "'..' segment"),
        ({"processing__output_prefix": "raw/"}, "processing.output_prefix", "overlaps input_prefix"),
        ({"processing__output_prefix": "raw/out/"}, "processing.output_prefix", "overlaps input_prefix"),
        ({"processing__input_prefix": "processed/raw/"}, "processing.output_prefix", "overlaps input_prefix"),
        ({"processing__output_prefix": "train/shards/"}, "processing.output_prefix", "inside training channel train"),
        ({"processing__arguments": ["a"] * 101}, "processing.arguments", "at most 100 container arguments"),
        ({"processing__arguments": ["x" * 257]}, "processing.arguments[0]", "must be 0-256 characters"),
        ({"processing__arguments": "--shards 4"}, "processing.arguments", "expected a list of strings"),
        ({"processing__enabeld": False}, "processing.enabeld", "did you mean gpu_training.processing.enabled"),
    ],
)
def test_every_processing_setting_is_checked_with_one_line(overrides, setting, problem):
    message = error_of(**overrides)
    assert message.startswith(f"gpu_training.{setting} = ")
    assert problem in message


def test_disabled_processing_still_validates_but_keeps_training_prefixes():
    cfg = load(processing__enabled=False)
    assert cfg.processing.enabled is False


# --------------------------------------------------------------------------------------------
# The direct launch's request
# --------------------------------------------------------------------------------------------


def test_default_request_field_by_field():
    now = datetime(2026, 11, 22, 20, 0, 5, tzinfo=timezone.utc)
    tmpl = template()
    built = create_processing_job_request(tmpl, resolve_processing(tmpl, ProcessingOptions(), now=now))
    validate_parameters(built, INPUT_SHAPE)
    job = "gputrain-20261122-200005-process"
    assert built == {
        "ProcessingJobName": job,
        # ml.g5.xlarge has local NVMe: no volume key (SageMaker rejects one).
        "ProcessingResources": {"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.g5.xlarge", "VolumeSizeInGB": 100}},
        "AppSpecification": {"ImageUri": RESOURCES.image_uri, "ContainerEntrypoint": ["python3", "-m", "trainer", "process"]},
        "Environment": {"EXPECTED_GPU_COUNT": "1"},
        "ProcessingInputs": [
            {
                "InputName": "raw",
                "S3Input": {
                    "S3Uri": "s3://datasets-bucket/raw/",
                    "LocalPath": "/opt/ml/processing/input/raw",
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                    "S3DataDistributionType": "FullyReplicated",
                },
            }
        ],
        "ProcessingOutputConfig": {
            "Outputs": [
                {
                    "OutputName": name,
                    "S3Output": {
                        "S3Uri": f"s3://datasets-bucket/processed/{job}/{name}/",
                        "LocalPath": f"/opt/ml/processing/output/{name}",
                        "S3UploadMode": "EndOfJob",
                    },
                }
                for name in ("train", "validation")
            ],
            "KmsKeyId": RESOURCES.key_arn,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
        "NetworkConfig": {
            "EnableNetworkIsolation": True,
            "EnableInterContainerTrafficEncryption": False,
            "VpcConfig": {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-a", "subnet-b"]},
        },
        "RoleArn": RESOURCES.role_arn,
        "Tags": [{"Key": "Project", "Value": "gputrain"}, {"Key": "CostCenter", "Value": "ml-platform"}],
    }
    assert processing_output_uri(tmpl, job) == f"s3://datasets-bucket/processed/{job}/"


def test_ebs_types_get_the_volume_key_and_the_gpu_count_comes_from_the_table():
    tmpl = template(processing__allowed_instance_types=["ml.p3.8xlarge", "ml.g6e.48xlarge"])
    built = request(tmpl, job_name="gputrain-p", instance_type="ml.p3.8xlarge")
    assert built["ProcessingResources"]["ClusterConfig"]["VolumeKmsKeyId"] == RESOURCES.key_arn
    assert built["Environment"]["EXPECTED_GPU_COUNT"] == "4"
    assert request(tmpl, job_name="gputrain-p", instance_type="ml.g6e.48xlarge")["Environment"]["EXPECTED_GPU_COUNT"] == "8"


def test_a_type_the_deployment_does_not_allow_is_refused_naming_the_setting():
    with pytest.raises(LaunchError) as info:
        request(job_name="gputrain-p", instance_type="ml.p3.8xlarge")
    assert "processing.allowed_instance_types: ml.g5.xlarge" in str(info.value)


def test_several_instances_shard_the_input_and_encrypt_between_them():
    built = request(job_name="gputrain-p", instance_count=4, code_uri="s3://artifacts-bucket/code/p/sourcedir.tar.gz",
                    entry_point="prep.py")
    assert built["ProcessingInputs"][0]["S3Input"]["S3DataDistributionType"] == "ShardedByS3Key"
    assert built["NetworkConfig"]["EnableInterContainerTrafficEncryption"] is True


def test_script_mode_adds_the_code_input_and_the_launcher_environment():
    built = request(job_name="gputrain-p", code_uri="s3://artifacts-bucket/code/p/sourcedir.tar.gz", entry_point="prep.py",
                    arguments=["--rows", "5"])
    assert built["ProcessingInputs"][1] == {
        "InputName": "code",
        "S3Input": {
            "S3Uri": "s3://artifacts-bucket/code/p/sourcedir.tar.gz",
            "LocalPath": "/opt/ml/processing/input/code",
            "S3DataType": "S3Prefix",
            "S3InputMode": "File",
            "S3DataDistributionType": "FullyReplicated",
        },
    }
    assert built["Environment"] == {
        "EXPECTED_GPU_COUNT": "1",
        "SAGEMAKER_PROGRAM": "prep.py",
        "SAGEMAKER_SUBMIT_DIRECTORY": "/opt/ml/processing/input/code/sourcedir.tar.gz",
    }
    assert built["AppSpecification"]["ContainerArguments"] == ["--rows", "5"]


def test_config_arguments_are_the_built_in_transforms_only():
    tmpl = template(processing__arguments=["--shards", "8"])
    assert request(tmpl, job_name="gputrain-p")["AppSpecification"]["ContainerArguments"] == ["--shards", "8"]
    script = request(tmpl, job_name="gputrain-p", code_uri="s3://artifacts-bucket/code/p/sourcedir.tar.gz", entry_point="prep.py")
    assert "ContainerArguments" not in script["AppSpecification"]  # the API refuses an empty list
    assert "ContainerArguments" not in request(tmpl, job_name="gputrain-p", arguments=[])["AppSpecification"]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"job_name": "other-job"}, "process.job_name other-job must be gputrain-<letters, digits, hyphens>"),
        ({"job_name": "gputrain-" + "x" * 60}, "at most 63 characters"),
        ({"instance_type": "ml.p4d.24xlarge"}, "process.instance_type ml.p4d.24xlarge must be a GPU type SageMaker Processing offers"),
        ({"instance_type": "ml.c5.xlarge"}, "process.instance_type ml.c5.xlarge must be a GPU type SageMaker Processing offers"),
        ({"instance_count": 0}, "process.instance_count 0 must be a whole number from 1 to 100"),
        ({"instance_count": True}, "process.instance_count true must be a whole number from 1 to 100"),
        ({"instance_count": 2}, "process.instance_count 2: the built-in transform runs on one instance"),
        ({"input_uri": "s3://datasets-bucket/processed/x/"}, "process.input_uri s3://datasets-bucket/processed/x/ must lie under s3://datasets-bucket/raw/"),
        ({"input_uri": "s3://other/raw/"}, "must lie under s3://datasets-bucket/raw/"),
        ({"arguments": "--shards 4"}, 'process.arguments must be a list of at most 100 strings of at most 256 characters, e.g. ["--shards", "4"] (scripts.launch --process-arg), not --shards 4'),
        ({"arguments": ["a"] * 101}, "process.arguments must be a list of at most 100 strings"),
        ({"code_uri": "s3://artifacts-bucket/code/x.tar.gz"}, "a script needs both its code and its entry point, as strings (scripts.launch --process-source-dir"),
        ({"code_uri": "s3://artifacts-bucket/training-jobs/x.tar.gz", "entry_point": "p.py"}, "process.code_uri s3://artifacts-bucket/training-jobs/x.tar.gz must be a sourcedir.tar.gz under s3://artifacts-bucket/code/"),
        # SageMaker would put it at /opt/ml/processing/input/code/prep.tar.gz, not the sourcedir.tar.gz the job unpacks.
        ({"code_uri": "s3://artifacts-bucket/code/r/prep.tar.gz", "entry_point": "p.py"}, "process.code_uri s3://artifacts-bucket/code/r/prep.tar.gz must be a sourcedir.tar.gz under s3://artifacts-bucket/code/ (the only code the processing role may read, under the name the job unpacks)"),
        ({"code_uri": "s3://artifacts-bucket/code/x.tar.gz", "entry_point": "../p.py"}, "process.entry_point ../p.py must be a .py or .sh file's path"),
    ],
)
def test_bad_options_are_refused_with_one_line(options, problem):
    with pytest.raises(LaunchError) as info:
        resolve_processing(template(), ProcessingOptions(**{"job_name": "gputrain-ok", **options}))
    assert problem in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith("Invalid processing options: ")


def test_the_state_machine_values_render_as_jsonata():
    built = create_processing_job_request(template(), spec.STATE_MACHINE_PROCESSING_VALUES)
    assert built["ProcessingJobName"] == "{% $process_job_name %}"
    assert built["ProcessingResources"]["ClusterConfig"].startswith("{% ($lookup($process_instance_facts, $process_instance_type).local_nvme) ?")
    assert built["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"] == (
        '{% ("s3://datasets-bucket/processed/" & ($process_job_name) & "/") & "train/" %}')
    assert processing_output_uri(template(), Jsonata("$j")) == Jsonata('"s3://datasets-bucket/processed/" & ($j) & "/"')


def test_the_instance_table_is_the_processing_offer():
    table = spec.processing_instance_facts_table()
    assert set(table) == {t for t in processing_job_limits().processing_instance_types if t in {f"ml.{n}" for n in _gpu_names()}}
    assert table["ml.g5.12xlarge"] == {"expected_gpu_count": "4", "local_nvme": True}


def _gpu_names() -> set[str]:
    from stacks.gpu_instances import gpu_instance_types

    return set(gpu_instance_types())


def test_the_largest_request_stays_within_the_request_limits():
    """Script mode with every list at its longest: inputs, outputs and environment are far below
    what botocore's model allows (so no option can push them over)."""
    limits = processing_job_limits()
    built = request(job_name="gputrain-p", code_uri="s3://artifacts-bucket/code/p/sourcedir.tar.gz", entry_point="prep.py",
                    arguments=["a" * limits.container_argument.max_length] * limits.max_container_arguments, instance_count=2)
    assert len(built["ProcessingInputs"]) <= limits.max_inputs
    assert len(built["ProcessingOutputConfig"]["Outputs"]) <= limits.max_outputs
    assert len(built["Environment"]) <= limits.max_environment
    assert len(built["Tags"]) <= limits.max_tags
