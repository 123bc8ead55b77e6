"""The tuning job: the config's ``tuning`` section, the request builder's ranges, caps and refusals, and its price."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from botocore.session import get_session
from botocore.validate import validate_parameters

from scripts.cost import job_price, tuning_price
from stacks.components.training_job_spec import (
    CHECKPOINT_PREFIX,
    JobResources,
    JobTemplate,
    LaunchError,
    LaunchOptions,
    create_training_job_request,
)
from stacks.components.tuning_job_spec import (
    CHECKPOINT_PER_JOB_ENV,
    DEFINITION_DROPS,
    TuningOptions,
    create_tuning_job_request,
    default_tuning_job_name,
    parse_ranges,
    resolve_tuning,
)
from stacks.config import ConfigError, TuningConfig, load_config

RESOURCES = JobResources(
    role_arn="arn:aws:iam::123456789012:role/job",
    image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/gputrain-training:1",
    datasets_bucket="datasets",
    artifacts_bucket="artifacts",
    key_arn="arn:aws:kms:us-east-1:123456789012:key/1",
    subnet_ids=("subnet-1", "subnet-2"),
    security_group_ids=("sg-1",),
)
NAME = "gputrain-tune-1"
RANGES = {
    "learning_rate": {"type": "continuous", "min": 0.0001, "max": 0.1, "scaling": "Logarithmic"},
    "batch_size": {"type": "integer", "min": 64, "max": 512},
    "optimizer": {"type": "categorical", "values": ["adam", "sgd"]},
}


def _config(**tuning):
    return load_config({"gpu_training": {"tuning": {"objective_metric": "train:loss", **tuning}}})


def _resolve(ranges=None, config=None, **options):
    config = config or _config()
    template = JobTemplate.from_config(config, RESOURCES)
    training = options.pop("training", LaunchOptions(job_name=NAME))
    values = resolve_tuning(template, config.tuning, TuningOptions(parse_ranges(ranges or RANGES), training, **options))
    return template, values


def _request(**kwargs):
    template, values = _resolve(**kwargs)
    return create_tuning_job_request(template, values)


# --- config --------------------------------------------------------------------------------


def test_the_tuning_section_has_documented_defaults():
    assert load_config({}).tuning == TuningConfig(8, 2, "Bayesian", "Off", "validation:loss", "Minimize")


@pytest.mark.parametrize(
    "tuning, message",
    [
        ({"max_jobs": 0}, "gpu_training.tuning.max_jobs = 0: must be between 1 and 500"),
        ({"max_parallel_jobs": 9}, "gpu_training.tuning.max_parallel_jobs = 9: must be between 1 and 8"),
        ({"strategy": "bayesian"}, "gpu_training.tuning.strategy = \"bayesian\": not one of SageMaker's values"),
        ({"early_stopping": "On"}, "use one of Off, Auto"),
        ({"objective_type": "Min"}, "use one of Maximize, Minimize"),
        ({"strategy": "Hyperband", "early_stopping": "Auto"}, "Hyperband stops trials itself"),
        ({"objective_metric": "val:loss"}, "use validation:loss (one of train:epoch"),
    ],
)
def test_bad_tuning_settings_are_refused_in_one_line_naming_the_setting(tuning, message):
    with pytest.raises(ConfigError) as err:
        load_config({"gpu_training": {"tuning": tuning}})
    assert message in str(err.value) and "\n" not in str(err.value)


# --- the request ---------------------------------------------------------------------------


def test_the_definition_is_the_platforms_training_request():
    template, values = _resolve()
    request = create_tuning_job_request(template, values)
    validate_parameters(request, get_session().get_service_model("sagemaker").operation_model("CreateHyperParameterTuningJob").input_shape)
    training = create_training_job_request(template, values.training)
    definition = request["TrainingJobDefinition"]
    for key, value in training.items():
        if key not in (*DEFINITION_DROPS, "AlgorithmSpecification", "Environment"):
            assert definition[key] == value, key
    assert definition["EnableNetworkIsolation"] is True and definition["EnableManagedSpotTraining"] is True
    assert definition["VpcConfig"] == {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1", "subnet-2"]}
    assert definition["OutputDataConfig"]["KmsKeyId"] == RESOURCES.key_arn
    assert definition["Environment"] == {"EXPECTED_GPU_COUNT": "1", CHECKPOINT_PER_JOB_ENV: "true"}
    # One prefix per tuning job; the image keeps each trial's checkpoints under the trial's name there.
    assert definition["CheckpointConfig"]["S3Uri"] == f"s3://artifacts/{CHECKPOINT_PREFIX}{NAME}/"
    assert "EnableSageMakerMetricsTimeSeries" not in definition["AlgorithmSpecification"]
    assert definition["AlgorithmSpecification"]["MetricDefinitions"] == training["AlgorithmSpecification"]["MetricDefinitions"]
    # The tuned hyperparameters are not static (SageMaker refuses one that is both).
    assert definition["StaticHyperParameters"] == {"model": "mlp", "epochs": "5"}
    assert request["Tags"] == training["Tags"]


def test_the_ranges_and_the_config_become_the_tuning_config():
    config = _request(max_jobs=4)["HyperParameterTuningJobConfig"]
    assert config == {
        "Strategy": "Bayesian",
        "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "train:loss"},
        "ResourceLimits": {"MaxParallelTrainingJobs": 2, "MaxNumberOfTrainingJobs": 4},
        "ParameterRanges": {
            "ContinuousParameterRanges": [{"Name": "learning_rate", "MinValue": "0.0001", "MaxValue": "0.1", "ScalingType": "Logarithmic"}],
            "IntegerParameterRanges": [{"Name": "batch_size", "MinValue": "64", "MaxValue": "512", "ScalingType": "Auto"}],
            "CategoricalParameterRanges": [{"Name": "optimizer", "Values": ["adam", "sgd"]}],
        },
        "TrainingJobEarlyStoppingType": "Off",
    }


def test_parallel_trials_default_to_the_cap_within_the_trials():
    assert _request(max_jobs=1)["HyperParameterTuningJobConfig"]["ResourceLimits"] == {
        "MaxParallelTrainingJobs": 1, "MaxNumberOfTrainingJobs": 1,
    }


def test_a_grid_runs_every_combination_and_takes_no_job_count():
    ranges = {"optimizer": {"type": "categorical", "values": ["adam", "sgd"]}, "epochs": {"type": "categorical", "values": [1, 2, 3]}}
    template, values = _resolve(ranges, config=_config(strategy="Grid"))
    assert values.max_jobs == 6
    assert create_tuning_job_request(template, values)["HyperParameterTuningJobConfig"]["ResourceLimits"] == {"MaxParallelTrainingJobs": 2}


def test_a_users_script_passes_its_own_hyperparameters_through():
    code = "s3://artifacts/code/gputrain-tune-1/sourcedir.tar.gz"
    training = LaunchOptions(job_name=NAME, code_uri=code, entry_point="train.py")
    request = _request(ranges={"lr": {"type": "continuous", "min": 0.1, "max": 0.2}}, training=training)
    static = request["TrainingJobDefinition"]["StaticHyperParameters"]
    assert static["sagemaker_program"] == "train.py" and "lr" not in static


def test_the_default_name_fits_sagemakers_32_characters():
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    template = JobTemplate.from_config(load_config({}), RESOURCES)
    assert default_tuning_job_name(template, "ab12", now) == "gputrain-260102-030405-ab12"
    long = JobTemplate.from_config(load_config({"gpu_training": {"project_name": "a" * 20}}), RESOURCES)
    assert len(default_tuning_job_name(long, "ab12", now)) <= 32


# --- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ranges, message",
    [
        ([], "must be a JSON object of hyperparameter -> range"),
        ({"dropout": {"min": 0, "max": 0.5}}, "range dropout needs a \"type\""),
        ({"dropout": {"type": "continuous", "min": 0, "max": 0.5, "step": 1}}, "range dropout: step not known"),
        ({"dropout": {"type": "continuous", "min": 0.5, "max": 0.5}}, "range dropout: min 0.5 must be below max 0.5"),
        ({"epochs": {"type": "integer", "min": 1.5, "max": 3}}, "range epochs: \"min\" must be a whole number"),
        ({"learning_rate": {"type": "continuous", "min": 0, "max": 0.1, "scaling": "Logarithmic"}}, "Logarithmic scaling needs min above 0"),
        ({"epochs": {"type": "integer", "min": 1, "max": 3, "scaling": "ReverseLogarithmic"}}, "range epochs: scaling"),
        ({"optimizer": {"type": "categorical", "values": []}}, "range optimizer: \"values\" must be a list of 1-30 values"),
        ({"optimizer": {"type": "categorical", "values": ["adam", "adam"]}}, "repeats a value"),
    ],
)
def test_malformed_ranges_are_refused_naming_the_range(ranges, message):
    with pytest.raises(LaunchError) as err:
        parse_ranges(ranges)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "ranges, message",
    [
        ({"learning_rate": {"type": "continuous", "min": -1, "max": 0.1}}, "range learning_rate: its min is refused by the built-in trainer"),
        ({"batch_size": {"type": "integer", "min": 0, "max": 64}}, "range batch_size: its min is refused by the built-in trainer"),
        ({"model": {"type": "categorical", "values": ["mlp", "transformer"]}}, "range model: its value 'transformer' is refused"),
        ({"lr": {"type": "continuous", "min": 0.1, "max": 0.2}}, "unknown hyperparameter 'lr'"),
        ({"epochs": {"type": "continuous", "min": 1, "max": 5}}, "range epochs: epochs takes whole numbers"),
        ({"sagemaker_program": {"type": "categorical", "values": ["x.py"]}}, "range sagemaker_program: its value 'x.py' is refused by the platform"),
        ({"_tuning_objective_metric": {"type": "categorical", "values": ["a"]}}, "names starting with _ are SageMaker's"),
    ],
)
def test_every_bound_is_checked_with_the_images_rules(ranges, message):
    with pytest.raises(LaunchError) as err:
        _resolve(ranges)
    assert str(err.value).startswith("Invalid tuning launch: ") and message in str(err.value) and "\n" not in str(err.value)


FOUR_GPUS = load_config({"gpu_training": {"tuning": {"objective_metric": "train:loss"},
                                         "training_job": {"allowed_instance_types": ["ml.g5.12xlarge"]}}})


def test_a_value_the_batch_split_refuses_is_refused():
    """Four GPUs: a listed global batch that does not split over the replicas fails when the trial starts."""
    training = LaunchOptions(job_name=NAME, instance_type="ml.g5.12xlarge")
    with pytest.raises(LaunchError) as err:
        _resolve({"batch_size": {"type": "categorical", "values": [256, 390, "+1_024"]}}, config=FOUR_GPUS, training=training)
    assert str(err.value) == (
        "Invalid tuning launch: tuning.ranges batch_size lists 390, which the built-in trainer refuses: batch_size is the global"
        " batch and must be divisible by the job's 4 replicas (instances x GPUs: 1 x 4 on ml.g5.12xlarge); list multiples of 4."
    )


@pytest.mark.parametrize(
    "instance_type, instance_count, replicas",
    [("ml.g5.12xlarge", 1, 4), ("ml.g5.xlarge", 2, 2)],
    ids=["4-gpus", "2-instances"],
)
def test_an_integer_batch_size_range_over_several_replicas_is_refused_as_a_whole(instance_type, instance_count, replicas):
    """Both ends split, but SageMaker draws every whole number between them (391...), and those trials fail
    after their instance was billed: the range is refused, naming both fixes."""
    config = load_config({"gpu_training": {"tuning": {"objective_metric": "train:loss"},
                                           "training_job": {"allowed_instance_types": ["ml.g5.xlarge", "ml.g5.12xlarge"]}}})
    training = LaunchOptions(job_name=NAME, instance_type=instance_type, instance_count=instance_count)
    with pytest.raises(LaunchError) as err:
        _resolve({"batch_size": {"type": "integer", "min": 64, "max": 512}}, config=config, training=training)
    gpus = replicas // instance_count
    assert str(err.value) == (
        "Invalid tuning launch: range batch_size: SageMaker draws every whole number from 64 to 512, and the built-in trainer"
        f" refuses a batch_size that is not a multiple of the job's {replicas} replicas (instances x GPUs: {instance_count} x {gpus}"
        f" on {instance_type}): list multiples of {replicas} as a categorical range (\"type\": \"categorical\", \"values\": [...])."
    )


@pytest.mark.parametrize(
    "ranges, configured",
    [
        ({"batch_size": {"type": "categorical", "values": [64, 128, 256, 512]}}, {"model": "mlp", "batch_size": "256"}),
        # Per GPU, every whole number splits (it is refused beside a configured global batch_size).
        ({"batch_size_per_gpu": {"type": "integer", "min": 16, "max": 129}}, {"model": "mlp"}),
    ],
    ids=["multiples-listed", "per-gpu-range"],
)
def test_four_gpus_take_listed_multiples_or_a_per_gpu_range(ranges, configured):
    config = load_config({"gpu_training": {"tuning": {"objective_metric": "train:loss"}, "training_job": {
        "allowed_instance_types": ["ml.g5.12xlarge"], "hyperparameters": configured}}})
    template, values = _resolve(ranges, config=config, training=LaunchOptions(job_name=NAME, instance_type="ml.g5.12xlarge"))
    assert [r.name for r in values.ranges] == list(ranges)


def test_one_replica_or_a_users_script_takes_an_integer_batch_size_range():
    """One GPU splits every batch; a user's script parses its own arguments."""
    _resolve({"batch_size": {"type": "integer", "min": 64, "max": 512}})
    script = LaunchOptions(job_name=NAME, instance_type="ml.g5.12xlarge", code_uri="s3://artifacts/code/t/sourcedir.tar.gz",
                           entry_point="train.py")
    _resolve({"batch_size": {"type": "integer", "min": 64, "max": 512}}, config=FOUR_GPUS, training=script)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"max_jobs": 9}, "--max-jobs 9 must be from 1 to 8, the cap tuning.max_jobs sets"),
        ({"max_parallel_jobs": 3}, "--max-parallel-jobs 3 must be from 1 to 2"),
        ({"max_jobs": 1, "max_parallel_jobs": 2}, "--max-parallel-jobs 2 is more than the 1 trials"),
        ({"training": LaunchOptions(job_name="gputrain-a-name-longer-than-32-chars")}, "at most 32 characters"),
        ({"training": LaunchOptions(job_name="other-1")}, "must be gputrain-<letters, digits, hyphens>"),
        ({"training": LaunchOptions(job_name=NAME, keep_alive_seconds=60)}, "keep no warm pool"),
        ({"training": LaunchOptions(job_name=NAME, instance_count=0)}, "instance_count 0 must be a whole number"),
    ],
)
def test_caps_names_and_training_options_are_refused_in_one_line(options, message):
    with pytest.raises(LaunchError) as err:
        _resolve(**options)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_grid_takes_categorical_ranges_only_and_no_more_combinations_than_the_cap():
    with pytest.raises(LaunchError, match="Grid strategy takes categorical ranges only"):
        _resolve(config=_config(strategy="Grid"))
    many = {"optimizer": {"type": "categorical", "values": ["adam", "sgd"]}, "epochs": {"type": "categorical", "values": list(range(1, 6))}}
    with pytest.raises(LaunchError, match="the grid has 10 combinations, more than tuning.max_jobs = 8"):
        _resolve(many, config=_config(strategy="Grid"))


def test_a_validation_objective_needs_the_validation_channel():
    config = load_config({})
    with pytest.raises(LaunchError, match="validation:loss is measured on the 'validation' input channel"):
        _resolve(config=config)
    with_channel = load_config({"gpu_training": {"training_job": {"channels": {"train": "train/", "validation": "validation/"}}}})
    assert _resolve(config=with_channel)[1].settings.objective_metric == "validation:loss"


# --- price ---------------------------------------------------------------------------------


def test_a_tuning_job_costs_at_most_max_jobs_times_one_training_job():
    one = job_price("training job", "j", "ml.g5.12xlarge", 2, spot=False, volume_gb=100, max_runtime_seconds=7200)
    tuning = tuning_price("t", "ml.g5.12xlarge", 2, max_jobs=5, spot=False, volume_gb=100, max_runtime_seconds=7200)
    assert tuning.most_usd == pytest.approx(5 * one.most_usd)
    assert tuning.most_usd == pytest.approx(5 * 2 * one.on_demand_usd_per_hour / 2 * 2)
    assert tuning.line().startswith("price: tuning job t: up to 5 trials of 2 x ml.g5.12xlarge, each, on-demand $")
    assert f"at most ${tuning.most_usd:,.2f} over 5 trials' 2 h maximum runtime" in tuning.line()


def test_a_tuned_batch_size_is_not_checked_at_its_configured_value():
    """The configured batch_size (256) does not split over 3 replicas, but a tuned one replaces it in
    every trial: the direct launch takes listed multiples of 3, as the workflow does (it sifts the tuned
    names out of the static hyperparameters before its rules)."""
    config = load_config({"gpu_training": {"tuning": {"objective_metric": "train:loss"}, "training_job": {
        "allowed_instance_types": ["ml.g5.xlarge"], "hyperparameters": {"model": "mlp", "batch_size": "256"}}}})
    training = LaunchOptions(job_name=NAME, instance_type="ml.g5.xlarge", instance_count=3)
    _, values = _resolve({"batch_size": {"type": "categorical", "values": [192, 384]}}, config=config, training=training)
    assert "batch_size" not in values.training.hyperparameters
    with pytest.raises(LaunchError, match="'batch_size' 256 is the global batch and must be divisible by the 3 replicas"):
        _resolve({"learning_rate": {"type": "continuous", "min": 0.001, "max": 0.1}}, config=config, training=training)
