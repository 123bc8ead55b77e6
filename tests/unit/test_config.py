"""One test per validation rule: the message names the setting, the value and the fix."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stacks.config import ConfigError, load_config
from tests.synth import ROOT, project_context


def load(**overrides):
    context = project_context()
    for key, value in overrides.items():
        context["gpu_training." + key.replace("__", ".")] = json.dumps(value)
    return load_config(context)


def error_of(**overrides) -> str:
    with pytest.raises(ConfigError) as info:
        load(**overrides)
    message = str(info.value)
    assert "\n" not in message, "errors are one line"
    return message


def test_defaults_from_cdk_json_are_valid_and_fill_gpu_counts_from_the_table():
    cfg = load()
    assert cfg.cluster.instance_type == "g5.xlarge"
    assert cfg.cluster.gpus_per_node == 1
    assert cfg.training_job.gpus_per_instance == 1
    assert cfg.delete_data_on_destroy is False


def test_dotted_override_parses_json_values():
    cfg = load(cluster__instance_type="g5.12xlarge", cluster__node_count=2, training_job__use_spot=False)
    assert (cfg.cluster.instance_type, cfg.cluster.node_count, cfg.cluster.gpus_per_node) == ("g5.12xlarge", 2, 4)
    assert cfg.training_job.use_spot is False


def test_override_as_plain_string_is_kept_as_string():
    context = project_context()
    context["gpu_training.cluster.instance_type"] = "p4d.24xlarge"  # as `-c key=value` passes it
    assert load_config(context).cluster.gpus_per_node == 8


def test_config_is_frozen():
    cfg = load()
    with pytest.raises(AttributeError):
        cfg.cluster.node_count = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.training_job.hyperparameters["epochs"] = "9"  # type: ignore[index]


def test_unknown_key_suggests_the_closest_known_key():
    msg = error_of(cluster__instance_typ="g5.xlarge")
    assert msg.startswith("gpu_training.cluster.instance_typ = ")
    assert "unknown setting" in msg and "did you mean gpu_training.cluster.instance_type?" in msg


def test_unknown_top_level_key_lists_known_settings_when_nothing_is_close():
    msg = error_of(zzz=1)
    assert "gpu_training.zzz" in msg and "known settings:" in msg and "training_job" in msg


def test_non_gpu_ec2_type_is_refused():
    msg = error_of(cluster__instance_type="m5.large")
    assert 'gpu_training.cluster.instance_type = "m5.large": not a known NVIDIA GPU instance type' in msg
    assert "g5.xlarge" in msg


def test_non_gpu_sagemaker_type_is_refused():
    msg = error_of(training_job__instance_type="ml.m5.large")
    assert 'gpu_training.training_job.instance_type = "ml.m5.large": not a known NVIDIA GPU instance type' in msg


def test_sagemaker_type_needs_ml_prefix():
    msg = error_of(training_job__instance_type="g5.xlarge")
    assert "start with 'ml.'" in msg and "use ml.g5.xlarge" in msg


def test_ec2_type_must_not_have_ml_prefix():
    msg = error_of(cluster__instance_type="ml.g5.xlarge")
    assert "use g5.xlarge" in msg


def test_declared_gpu_count_must_match_the_table():
    msg = error_of(cluster__instance_type="g5.12xlarge", cluster__expected_gpus_per_node=8)
    assert "gpu_training.cluster.expected_gpus_per_node = 8" in msg and "g5.12xlarge has 4 GPU(s)" in msg
    assert "set it to 4" in msg


def test_declared_sagemaker_gpu_count_must_match_the_table():
    msg = error_of(training_job__instance_type="ml.p4d.24xlarge", training_job__expected_gpus_per_instance=4)
    assert "ml.p4d.24xlarge has 8 GPU(s)" in msg


@pytest.mark.parametrize("key", ["cluster__node_count", "training_job__instance_count"])
def test_counts_below_one_are_refused(key):
    msg = error_of(**{key: 0})
    assert key.replace("__", ".") in msg and "must be between 1 and 64" in msg


@pytest.mark.parametrize(
    "name, problem",
    [
        ("My_Bucket", "not a valid S3 bucket name"),
        ("ab", "not a valid S3 bucket name"),
        ("a..b", "adjacent dots"),
        ("192.168.1.10", "IP address"),
        ("xn--bucket", "reserves this prefix"),
        ("data-s3alias", "reserves this prefix or suffix"),
    ],
)
def test_bucket_names_follow_s3_rules(name, problem):
    msg = error_of(data__datasets_bucket_name=name)
    assert f'gpu_training.data.datasets_bucket_name = "{name}"' in msg and problem in msg
    assert "lowercase letters" in msg


def test_bucket_names_must_differ():
    msg = error_of(data__datasets_bucket_name="team-data-1", data__artifacts_bucket_name="team-data-1")
    assert "same name as the datasets bucket" in msg


@pytest.mark.parametrize("tag", ["latest", "LATEST", ""])
def test_latest_or_empty_image_tag_is_refused(tag):
    msg = error_of(image__tag=tag)
    assert "gpu_training.image.tag" in msg and "set an explicit, versioned tag" in msg


def test_repository_name_must_be_lowercase():
    msg = error_of(image__repository_name="GpuTrain")
    assert "not a valid ECR repository name" in msg


def test_spot_without_checkpointing_is_refused():
    msg = error_of(training_job__use_spot=True, training_job__checkpointing=False)
    assert "gpu_training.training_job.use_spot = true" in msg and "checkpointing to true" in msg


def test_max_wait_below_max_runtime_is_refused():
    msg = error_of(training_job__max_runtime_seconds=7200, training_job__max_wait_seconds=3600)
    assert "gpu_training.training_job.max_wait_seconds = 3600" in msg and "at least max_runtime_seconds (7200)" in msg


def test_on_demand_job_does_not_need_max_wait():
    cfg = load(training_job__use_spot=False, training_job__checkpointing=False, training_job__max_wait_seconds=1)
    assert cfg.training_job.use_spot is False


def test_wrong_type_names_the_expected_type():
    msg = error_of(cluster__node_count="two")
    assert 'gpu_training.cluster.node_count = "two": expected a whole number' in msg


def test_bool_is_not_a_number():
    msg = error_of(cluster__node_count=True)
    assert "expected a whole number" in msg


def test_input_mode_is_file_or_fastfile():
    msg = error_of(training_job__input_mode="Pipe")
    assert "use File or FastFile" in msg


def test_channel_prefix_must_be_relative():
    msg = error_of(training_job__channels={"train": "s3://elsewhere/train/"})
    assert "gpu_training.training_job.channels.train" in msg and "relative prefix" in msg


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"processing__output_prefix": "*/"}, "gpu_training.processing.output_prefix"),
        ({"processing__input_prefix": "raw?/"}, "gpu_training.processing.input_prefix"),
        ({"processing__input_prefix": "raw/../"}, "gpu_training.processing.input_prefix"),
        ({"training_job__channels": {"train": "*"}}, "gpu_training.training_job.channels.train"),
        ({"training_job__channels": {"train": "raw/*/"}}, "gpu_training.training_job.channels.train"),
        ({"training_job__channels": {"train": "data/../raw/"}}, "gpu_training.training_job.channels.train"),
        (
            {"serving__enabled": True, "serving__model_artifact_key": "models/*/model.tar.gz"},
            "gpu_training.serving.model_artifact_key",
        ),
    ],
)
def test_wildcards_and_parent_segments_are_refused_in_every_key_prefix(overrides, field):
    """A prefix becomes an IAM resource as given: ``*/`` would grant every key of the bucket."""
    msg = error_of(**overrides)
    assert msg.startswith(field + " = ")
    assert "wildcard" in msg or ".." in msg


def test_project_name_rules():
    msg = error_of(project_name="GPU_Train")
    assert "gpu_training.project_name" in msg and "lowercase" in msg


def test_vpc_cidr_must_be_a_network():
    assert "/16 to /24" in error_of(network__vpc_cidr="10.0.0.0/8")
    assert "host bits are set; use 10.40.0.0/16" in error_of(network__vpc_cidr="10.40.1.0/16")
    assert "not an IPv4 CIDR" in error_of(network__vpc_cidr="ten")


def test_a_vpc_block_too_small_for_its_zones_subnets_is_refused_naming_the_size_that_fits():
    """Two zones need 2 x (/20 + /23): a /19 would fail deep in the CDK's subnet allocation; the config says so first."""
    assert error_of(network__vpc_cidr="10.40.0.0/19") == (
        "gpu_training.network.vpc_cidr = \"10.40.0.0/19\": too small for the subnets of 2 zone(s) (a /20 for SageMaker "
        "and a /23 for the GPU nodes per zone); use a /18 or larger"
    )
    assert "a /24 public, a /20 for SageMaker" in error_of(network__vpc_cidr="10.40.0.0/19", network__nat_gateways=1)
    load(network__vpc_cidr="10.40.0.0/18")  # fits: 10.40.0.0/20, 10.40.16.0/20, 10.40.32.0/23, 10.40.34.0/23


@pytest.mark.parametrize(
    ("endpoints", "index", "problem"),
    [
        (["logs", "sts", "logs"], 2, "the same endpoint as 'logs' (both make the construct LogsEndpoint); list each service once"),
        (["ecr.api", "ecr-api"], 1, "the same endpoint as 'ecr.api' (both make the construct EcrApiEndpoint)"),
        (["not a service"], 0, "not an AWS interface endpoint service name; write the part after com.amazonaws.<region>."),
        (["ECR.api"], 0, "not an AWS interface endpoint service name"),
        (["com.amazonaws.us-east-1.logs."], 0, "not an AWS interface endpoint service name"),
    ],
)
def test_interface_endpoints_are_service_names_listed_once(endpoints, index, problem):
    msg = error_of(network__interface_endpoints=endpoints)
    assert msg.startswith(f"gpu_training.network.interface_endpoints[{index}] = ") and problem in msg


def test_interface_endpoints_take_any_service_name_once():
    endpoints = ["ecr.api", "ecr.dkr", "sagemaker.runtime", "bedrock-runtime", "s3"]
    assert load(network__interface_endpoints=endpoints).network.interface_endpoints == tuple(endpoints)


def test_nat_gateways_cannot_exceed_azs():
    msg = error_of(network__nat_gateways=3)
    assert "gpu_training.network.nat_gateways = 3" in msg


def test_hyperparameters_are_stringified_like_sagemaker_does():
    cfg = load(training_job__hyperparameters={"epochs": 3, "xla": True})
    assert dict(cfg.training_job.hyperparameters) == {"model": "mlp", "epochs": "3", "batch_size": "256", "xla": "true"}


def test_an_object_override_of_the_hyperparameters_merges_and_null_removes_one():
    # -c 'gpu_training.training_job.hyperparameters={"epochs":"3"}' used to replace the whole map.
    context = {**project_context(), "gpu_training.training_job.hyperparameters": '{"epochs": "3", "batch_size": null}'}
    assert dict(load_config(context).training_job.hyperparameters) == {"model": "mlp", "epochs": "3"}
    context = {**project_context(), "gpu_training.training_job.hyperparameters.epochs": "7"}
    assert dict(load_config(context).training_job.hyperparameters) == {"model": "mlp", "epochs": "7", "batch_size": "256"}


@pytest.mark.parametrize(
    ("hyperparameters", "expected"),
    [
        ({"epocs": "3"}, "unknown hyperparameter 'epocs' (did you mean 'epochs'?"),
        ({"epochs": "-3"}, "hyperparameter 'epochs' must be >= 1, got -3"),
        ({"batch_size": "abc"}, "hyperparameter 'batch_size' must be an integer, got 'abc'"),
        ({"sagemaker_program": "evil.py"}, "hyperparameters sagemaker_program are the platform's"),
    ],
)
def test_synth_refuses_hyperparameters_the_image_would_refuse(hyperparameters, expected) -> None:
    msg = error_of(training_job__hyperparameters=hyperparameters)
    assert msg.startswith("gpu_training.training_job.hyperparameters = ") and expected in msg, msg


def test_synth_refuses_a_global_batch_the_jobs_gpus_cannot_share() -> None:
    # ml.g5.12xlarge has 4 GPUs: two of them train on 8 replicas, and 250 does not split.
    msg = error_of(training_job__instance_type="ml.g5.12xlarge", training_job__instance_count=2, training_job__hyperparameters={"batch_size": 250})
    assert "must be divisible by the 8 replicas of this job (2 worker(s)); use a multiple of 8" in msg


@pytest.mark.parametrize("key", ["training_job.instance_count", "gpu_training.training_job.instance_count"])
def test_a_setting_without_its_prefix_is_applied_as_with_it(key) -> None:
    assert load_config({**project_context(), key: "2"}).training_job.instance_count == 2


@pytest.mark.parametrize(
    ("key", "right"),
    [
        ("gpu_trainng.cluster.node_count", "gpu_training.cluster.node_count"),
        ("GPU_TRAINING.cluster.node_count", "gpu_training.cluster.node_count"),
        ("gpu-training.cluster.node_count", "gpu_training.cluster.node_count"),
        ("trainng_job.instance_count", "gpu_training.training_job.instance_count"),
        ("clustr.node_count", "gpu_training.cluster.node_count"),
    ],
)
def test_a_misspelled_root_or_section_is_refused_with_the_right_key(key, right) -> None:
    with pytest.raises(ConfigError, match=rf"^{key} = \"2\": not a setting .*; did you mean {right}\?$"):
        load_config({**project_context(), key: "2"})


@pytest.mark.parametrize(
    ("key", "right"),
    [
        ("use_spot", "gpu_training.training_job.use_spot"),
        ("Use-Spot", "gpu_training.training_job.use_spot"),
        ("hyperparameters.epochs", "gpu_training.training_job.hyperparameters.epochs"),
        ("stop_job", "gpu_training.training_job.gpu_idle_alarm.stop_job"),
        (
            "instance_count",
            "gpu_training.training_job.instance_count, gpu_training.processing.instance_count or gpu_training.transform.instance_count",
        ),
    ],
)
def test_a_setting_without_its_section_is_refused_with_the_full_keys(key, right) -> None:
    with pytest.raises(ConfigError) as info:
        load_config({**project_context(), key: "false"})
    message = str(info.value)
    assert message.startswith(f'{key} = "false": not a setting') and message.endswith(f"; did you mean {right}?")
    assert "\n" not in message


def test_context_the_platform_does_not_own_is_left_alone() -> None:
    context = {**project_context(), "account": "111122223333", "region": "eu-west-1", "@aws-cdk/core:newStyleStackSynthesis": True}
    assert load_config(context).training_job.instance_count == 1
    # CDK's own keys that end in a setting's name: feature flags, lookups, the CLI's aws:cdk:* keys.
    cdk_keys = {"@aws-cdk/aws-ec2:enabled": True, "aws:cdk:enabled": True, "x/enabled": 1, "lookup:tag": "v"}
    assert load_config({**context, **cdk_keys}).training_job.instance_count == 1


def test_one_setting_given_with_and_without_its_prefix_must_agree() -> None:
    context = {**project_context(), "training_job.instance_count": "2", "gpu_training.training_job.instance_count": "3"}
    with pytest.raises(ConfigError, match="given twice, as .* with different values; pass it once"):
        load_config(context)
    assert load_config({**context, "gpu_training.training_job.instance_count": "2"}).training_job.instance_count == 2


def test_a_json_value_that_does_not_parse_is_refused_with_its_position() -> None:
    value = '{"ami_id": "ami-0123456789abcdef0", "nvidia_driver_branch": 580,}'
    with pytest.raises(ConfigError) as info:
        load_config({**project_context(), "gpu_training.cluster.pinned_dlami": value})
    message = str(info.value)
    # The value as typed (no escaped quotes), what did not parse and where.
    assert message.startswith(f"gpu_training.cluster.pinned_dlami = {value}: does not parse as JSON: ")
    assert f"at line 1 column {len(value)} (character {len(value) - 1}" in message and "single quotes" in message
    # A value that does not open as JSON stays a plain string.
    assert load_config({**project_context(), "gpu_training.cluster.instance_type": "g5.12xlarge"}).cluster.gpus_per_node == 4


def test_cdk_synth_with_a_non_gpu_type_exits_nonzero_with_one_clear_line():
    """The app itself (what `cdk synth` runs) refuses before building anything, no traceback."""
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": str(ROOT / ".venv" / "bin") + ":/usr/bin:/bin",
            "CDK_CONTEXT_JSON": json.dumps({**project_context(), "gpu_training.cluster.instance_type": "m5.large"}),
            "CDK_OUTDIR": "/nonexistent-never-written",
        },
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        'error: invalid configuration: gpu_training.cluster.instance_type = "m5.large": not a known NVIDIA GPU '
        "instance type; use an NVIDIA GPU type from training_image/trainer/gpu_instances.json "
        "(e.g. g5.xlarge, g5.12xlarge, g6e.xlarge, p4d.24xlarge, p5.48xlarge)"
    ]


def test_cluster_user_script_needs_code_and_entry_point():
    config = load(**{"cluster.code_key": "code/run-1/sourcedir.tar.gz", "cluster.entry_point": "src/train.py"})
    assert (config.cluster.code_key, config.cluster.entry_point, config.cluster.legacy_keras) == (
        "code/run-1/sourcedir.tar.gz", "src/train.py", False)
    assert "cluster.entry_point = null: a user script needs both" in error_of(**{"cluster.code_key": "code/a/sourcedir.tar.gz"})
    assert "cluster.code_key = null: a user script needs both" in error_of(**{"cluster.entry_point": "train.py"})


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("cluster.code_key", "training-jobs/x/sourcedir.tar.gz", "not a .tar.gz key under code/"),
        ("cluster.code_key", "code/../secrets/sourcedir.tar.gz", "not a .tar.gz key under code/"),
        ("cluster.code_key", "code/x/sourcedir.zip", "not a .tar.gz key under code/"),
        ("cluster.entry_point", "../train.py", "not a .py or .sh path"),
        ("cluster.entry_point", "train.ipynb", "not a .py or .sh path"),
        ("cluster.entry_point", "it's.py", "not a .py or .sh path"),
    ],
)
def test_cluster_user_script_settings_are_checked(key, value, problem):
    settings = {"cluster.code_key": "code/run/sourcedir.tar.gz", "cluster.entry_point": "train.py", key: value}
    assert problem in error_of(**settings)


# --- SageMaker's limits, from botocore's service model ----------------------------------------


def test_sagemaker_limits_come_from_botocores_model():
    from stacks.sagemaker_limits import training_job_limits

    limits = training_job_limits()
    assert "botocore" in limits.source
    assert "ml.g5.xlarge" in limits.training_instance_types and "ml.g4dn.metal" not in limits.training_instance_types
    assert (limits.max_hyperparameters, limits.hyperparameter_value.max_length, limits.max_channels) == (100, 2500, 20)


def test_the_model_read_as_json_is_the_one_botocores_loader_reads():
    # sagemaker_limits reads the file itself (botocore's loader costs every synth its HTTP stack's
    # imports): the same newest API version, and the same shapes, as botocore would use.
    import botocore.loaders
    import botocore.model

    from stacks.sagemaker_limits import processing_job_limits, sagemaker_service_model

    ours = sagemaker_service_model()
    builtin = botocore.loaders.Loader(
        extra_search_paths=[botocore.loaders.Loader.BUILTIN_DATA_PATH], include_default_search_paths=False
    )  # the botocore installed, not a model a user put in ~/.aws/models
    botocores = botocore.model.ServiceModel(builtin.load_service_model("sagemaker", "service-2"))
    assert ours.api_version == botocores.api_version
    assert ours.shapes == botocores._shape_resolver._shape_map
    assert ours.shape("CreateTrainingJobRequest", "Tags", "member", "Key") == botocores.shape_for("TagKey").metadata | {
        "type": "string"
    }
    cluster = botocores.shape_for("CreateProcessingJobRequest").members["ProcessingResources"].members["ClusterConfig"]
    assert processing_job_limits().processing_instance_types == frozenset(cluster.members["InstanceType"].enum)


def test_gpu_type_sagemaker_does_not_train_on_is_refused():
    msg = error_of(training_job__instance_type="ml.g4dn.metal")
    assert msg.startswith('gpu_training.training_job.instance_type = "ml.g4dn.metal": SageMaker training does not offer')
    assert "use a training type such as ml.g4dn." in msg


def test_more_than_100_hyperparameters_is_refused():
    # An object override merges into cdk.json's three (model, epochs, batch_size).
    msg = error_of(training_job__hyperparameters={f"h{i}": "1" for i in range(98)})
    assert msg.startswith('gpu_training.training_job.hyperparameters = "101 entries": SageMaker accepts at most 100')


def test_hyperparameter_value_over_2500_characters_is_refused_in_one_short_line():
    msg = error_of(training_job__hyperparameters={"notes": "x" * 2501})
    assert msg.startswith("gpu_training.training_job.hyperparameters.notes = ")
    assert "the value must be 0-2500 characters long (it has 2501)" in msg and len(msg) < 400


def test_more_than_20_channels_is_refused():
    msg = error_of(training_job__channels={f"c{i}": f"c{i}/" for i in range(20)})  # and cdk.json's train
    assert msg.startswith('gpu_training.training_job.channels = "21 channels": SageMaker accepts at most 20')


@pytest.mark.parametrize("value", ["a,b", "semi;colon", "x" * 257, "quote\"d"])
def test_tag_values_outside_aws_pattern_are_refused(value):
    msg = error_of(tags={"Team": value})
    assert msg.startswith("gpu_training.tags.Team = ") and "the tag value" in msg and "use letters, digits" in msg


@pytest.mark.parametrize("value", ["", "ml-platform", "Équipe données", "a:b/c=d+e-f@g.h_i", "x" * 256])
def test_tag_values_inside_aws_pattern_pass(value):
    assert load(tags={"Team": value}).tags["Team"] == value


def test_tag_keys_follow_the_pattern_and_aws_prefix_is_reserved():
    assert "the tag key" in error_of(tags={"Team!": "x"})
    assert "reserved by AWS" in error_of(tags={"aws:team": "x"})


@pytest.mark.parametrize(("key", "value"), [("Project", "project_name"), ("ManagedBy", "cdk")])
def test_the_platforms_own_tags_are_refused(key, value):
    msg = error_of(tags={key: "other"})
    assert msg.startswith(f'gpu_training.tags.{key} = "other": the platform sets this tag itself ({key}={value}')
    assert "teardown audit finds the project's resources by Project" in msg and msg.endswith("remove it from tags, or tag with another key")
    assert load(tags={"project": "other", "Owner": "ml"}).tags["Owner"] == "ml"


def test_more_tags_than_a_job_takes_is_refused():
    msg = error_of(tags={f"T{i}": "x" for i in range(49)})  # and cdk.json's CostCenter
    assert msg.startswith('gpu_training.tags = "50 tags": a training job takes at most 50 tags, Project included')


# --- DLAMI and GPU architecture ----------------------------------------------------------------


def test_p3_on_the_latest_dlami_is_refused_with_the_fix():
    msg = error_of(cluster__instance_type="p3.8xlarge")
    assert msg.startswith('gpu_training.cluster.instance_type = "p3.8xlarge": p3.8xlarge has NVIDIA V100 GPUs (compute capability 7.0)')
    assert "latest DLAMI (NVIDIA driver 595, CUDA 13) no longer supports" in msg
    assert 'gpu_training.cluster.pinned_dlami = {"ami_id": "ami-...", "nvidia_driver_branch": 580}' in msg


def test_p3_on_a_pinned_dlami_with_a_volta_driver_is_accepted():
    pinned = {"ami_id": "ami-0123456789abcdef0", "nvidia_driver_branch": 580}
    cfg = load(cluster__instance_type="p3.2xlarge", cluster__pinned_dlami=pinned)
    assert cfg.cluster.pinned_dlami.ami_id == "ami-0123456789abcdef0"


def test_p3_on_a_pinned_dlami_without_volta_support_is_refused():
    msg = error_of(cluster__instance_type="p3.2xlarge", cluster__pinned_dlami={"ami_id": "ami-01234567", "nvidia_driver_branch": 590})
    assert msg.startswith("gpu_training.cluster.pinned_dlami.nvidia_driver_branch = 590: ")
    assert "580 was the last to support them" in msg


@pytest.mark.parametrize(
    ("pinned", "start"),
    [
        ({"ami_id": "ami-xyz", "nvidia_driver_branch": 580}, 'gpu_training.cluster.pinned_dlami.ami_id = "ami-xyz": not an AMI id'),
        ({"ami_id": "ami-01234567"}, "gpu_training.cluster.pinned_dlami = "),
        ({"ami_id": "ami-01234567", "nvidia_driver_branch": 58}, "gpu_training.cluster.pinned_dlami.nvidia_driver_branch = 58"),
        ({"ami_id": "ami-01234567", "nvidia_driver_branch": 580, "region": "x"}, "gpu_training.cluster.pinned_dlami.region"),
    ],
)
def test_pinned_dlami_is_validated(pinned, start):
    assert error_of(cluster__pinned_dlami=pinned).startswith(start)


def test_newer_gpus_need_no_pin_and_a_disabled_cluster_is_not_checked():
    assert load(cluster__instance_type="g4dn.xlarge").cluster.pinned_dlami is None  # Turing, 7.5
    assert load(cluster__instance_type="p3.2xlarge", cluster__enabled=False).cluster.enabled is False


def test_allowed_instance_types_default_to_the_configured_type_and_always_include_it():
    cfg = load()
    assert cfg.training_job.allowed_instance_types == ("ml.g5.12xlarge", "ml.g5.xlarge")  # cdk.json
    assert cfg.processing.allowed_instance_types == ("ml.g5.xlarge",)  # the default: instance_type alone
    assert load(training_job__allowed_instance_types=[]).training_job.allowed_instance_types == ("ml.g5.xlarge",)
    cfg = load(training_job__allowed_instance_types=["ml.p3.2xlarge"])
    assert cfg.training_job.allowed_instance_types == ("ml.g5.xlarge", "ml.p3.2xlarge")


def test_allowed_instance_types_must_be_gpu_types_the_job_kind_offers():
    msg = error_of(training_job__allowed_instance_types=["ml.m5.xlarge"])
    assert msg.startswith("gpu_training.training_job.allowed_instance_types[0] = ")
    msg = error_of(processing__allowed_instance_types=["ml.g5.xlarge", "g5.2xlarge"])
    assert msg.startswith("gpu_training.processing.allowed_instance_types[1] = ")


def test_dns_firewall_defaults_on_where_something_has_a_network_and_domains_are_checked():
    assert load().network.dns_firewall is True  # the cluster's nodes
    assert load(cluster__enabled=False).network.dns_firewall is False
    assert load(network__dns_firewall=False).network.dns_firewall is False
    msg = error_of(network__dns_allowed_domains=["pypi.org", "https://evil.example/"])
    assert msg.startswith("gpu_training.network.dns_allowed_domains[1] = ")


def test_a_warm_pool_is_0_to_3600_seconds_and_never_with_spot() -> None:
    assert load(training_job__keep_alive_seconds=900, training_job__use_spot=False).training_job.keep_alive_seconds == 900
    assert "must be between 0 and 3600" in error_of(training_job__keep_alive_seconds=3601, training_job__use_spot=False)
    msg = error_of(training_job__keep_alive_seconds=600)  # use_spot is on by default
    assert msg.startswith("gpu_training.training_job.keep_alive_seconds = 600: SageMaker keeps no warm pool for managed spot jobs")


# --------------------------------------------------------------------------------------------
# transform: the batch transform at the end of the pipeline
# --------------------------------------------------------------------------------------------


def test_transform_is_off_by_default_and_its_defaults_are_valid():
    tr = load().transform
    assert tr.enabled is False
    assert (tr.input_prefix, tr.output_prefix, tr.instance_type, tr.gpus_per_instance) == ("score/", "transform-outputs/", "ml.g5.xlarge", 1)
    assert (tr.content_type, tr.split_type, tr.batch_strategy, tr.max_payload_mb) == ("text/csv", "Line", "MultiRecord", 6)
    cfg = load(transform__enabled=True, transform__instance_type="ml.g5.12xlarge", transform__split_type="None",
               transform__batch_strategy="SingleRecord", transform__max_payload_mb=100, transform__content_type="application/jsonlines")
    assert cfg.transform.gpus_per_instance == 4


def test_transform_limits_come_from_botocores_model():
    from stacks.sagemaker_limits import sagemaker_service_model, transform_job_limits

    limits = transform_job_limits()
    enum = sagemaker_service_model().shape("CreateTransformJobRequest", "TransformResources", "InstanceType")["enum"]
    assert limits.transform_instance_types == frozenset(enum) and "ml.g5.xlarge" in limits.transform_instance_types
    assert (limits.max_payload_mb, limits.job_name.max_length) == (100, 63)
    assert limits.batch_strategies == ("MultiRecord", "SingleRecord")


@pytest.mark.parametrize(
    ("overrides", "start", "fix"),
    [
        ({"transform__instance_type": "g5.xlarge"}, 'gpu_training.transform.instance_type = "g5.xlarge": SageMaker instance types start with', "use ml.g5.xlarge"),
        ({"transform__instance_type": "ml.m5.xlarge"}, 'gpu_training.transform.instance_type = "ml.m5.xlarge": not a known NVIDIA GPU', "use an NVIDIA GPU type"),
        ({"transform__instance_type": "ml.p4d.24xlarge"}, 'gpu_training.transform.instance_type = "ml.p4d.24xlarge": SageMaker batch transform does not offer',
         "use a batch transform GPU type such as ml."),
        ({"transform__expected_gpus_per_instance": 2}, "gpu_training.transform.expected_gpus_per_instance = 2: ml.g5.xlarge has 1 GPU", "set it to 1"),
        ({"transform__input_prefix": "score"}, 'gpu_training.transform.input_prefix = "score": expected a key prefix inside the datasets bucket', "score/"),
        ({"transform__input_prefix": "*/"}, "gpu_training.transform.input_prefix", "write a literal prefix"),
        ({"transform__output_prefix": "s3://x/out/"}, 'gpu_training.transform.output_prefix = "s3://x/out/": expected a key prefix inside the artifacts bucket',
         "transform-outputs/"),
        ({"transform__output_prefix": "training-jobs/scores/"}, 'gpu_training.transform.output_prefix = "training-jobs/scores/": overlaps \'training-jobs/\'',
         "use a prefix of its own"),
        ({"transform__output_prefix": "code/"}, "gpu_training.transform.output_prefix = \"code/\": overlaps 'code/'", "transform-outputs/"),
        ({"transform__instance_count": 0}, "gpu_training.transform.instance_count = 0: must be between 1 and 100", "set it to"),
        ({"transform__content_type": "csv"}, 'gpu_training.transform.content_type = "csv": not a MIME type', "e.g. text/csv"),
        ({"transform__split_type": "RecordIO"}, 'gpu_training.transform.split_type = "RecordIO": unsupported split type', "use Line"),
        ({"transform__batch_strategy": "Multi"}, 'gpu_training.transform.batch_strategy = "Multi": unknown batch strategy', "MultiRecord or SingleRecord"),
        ({"transform__max_payload_mb": 101}, "gpu_training.transform.max_payload_mb = 101: must be between 1 and 100", "set it to"),
        ({"transform__max_payload_mb": 0}, "gpu_training.transform.max_payload_mb = 0: must be between 1 and 100", "set it to"),
        ({"transform__max_runtime_seconds": 0}, "gpu_training.transform.max_runtime_seconds = 0: must be between 1 and", "set it to"),
        ({"transform__enabled": True, "processing__enabled": False}, "gpu_training.transform.enabled = true: the transform is a step of the pipeline",
         "set gpu_training.processing.enabled to true"),
    ],
    ids=lambda v: str(v)[:40],
)
def test_transform_rules_name_the_setting_and_the_fix(overrides, start, fix):
    msg = error_of(**overrides)
    assert msg.startswith(start), msg
    assert fix in msg.split("; ", 1)[1], msg


def test_the_artifact_prefixes_a_transform_may_not_write_are_the_platforms_own():
    from stacks.components.buckets import CHECKPOINT_PREFIX, CLUSTER_CHECKPOINT_PREFIX, CLUSTER_OUTPUT_PREFIX
    from stacks.components.endpoint_spec import DATA_CAPTURE_PREFIX
    from stacks.components.training_job_spec import CODE_PREFIX, OUTPUT_PREFIX
    from stacks.config import ARTIFACT_PREFIXES

    assert set(ARTIFACT_PREFIXES) == {
        CHECKPOINT_PREFIX, CLUSTER_CHECKPOINT_PREFIX, CLUSTER_OUTPUT_PREFIX, DATA_CAPTURE_PREFIX, CODE_PREFIX, OUTPUT_PREFIX}
