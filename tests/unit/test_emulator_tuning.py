"""The emulator's tuner, the parts that need no emulator: ranges, sampling, each trial's request,
the best trial and how the tuning job ends (scripts.emulator.tuning)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from scripts.emulator.tuning import (
    ParameterRange,
    Trial,
    TuningRefused,
    best_of,
    parameter_ranges,
    record_end,
    record_progress,
    sample,
    trial_name,
    trial_request,
)

CONFIG = {
    "ParameterRanges": {
        "ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.001", "MaxValue": "0.1", "ScalingType": "Logarithmic"}],
        "IntegerParameterRanges": [{"Name": "epochs", "MinValue": "1", "MaxValue": "3", "ScalingType": "Auto"}],
        "CategoricalParameterRanges": [{"Name": "opt", "Values": ["sgd", "adam"]}],
    }
}
MINIMIZE = {"Type": "Minimize", "MetricName": "loss"}


def test_random_samples_stay_in_their_ranges_and_are_strings() -> None:
    ranges = parameter_ranges(CONFIG)
    assert [(r.name, r.kind, r.scaling) for r in ranges] == [
        ("lr", "Continuous", "Logarithmic"), ("epochs", "Integer", "Auto"), ("opt", "Categorical", "Auto"),
    ]
    trials = sample(ranges, "Random", 50, seed=1)
    assert len(trials) == 50
    for tuned in trials:
        assert 0.001 <= float(tuned["lr"]) <= 0.1
        assert tuned["epochs"] in {"1", "2", "3"} and tuned["opt"] in {"sgd", "adam"}
    # Log scaling: about half the draws below the geometric middle (0.01), not 10% as uniform would give.
    below = sum(float(t["lr"]) < math.sqrt(0.001 * 0.1) for t in trials)
    assert 15 <= below <= 35
    assert sample(ranges, "Random", 5, seed=7) == sample(ranges, "Random", 5, seed=7)  # RandomSeed repeats


def test_reverse_logarithmic_draws_crowd_near_one() -> None:
    """Log-uniform in 1 - x, as SageMaker draws it: over 0.9-0.999 the decade 0.99-0.999 gets about half
    the draws (1 - x below 0.01, its geometric middle); log-uniform in x would give it about 9%."""
    config = {"ParameterRanges": {"ContinuousParameterRanges": [
        {"Name": "momentum", "MinValue": "0.9", "MaxValue": "0.999", "ScalingType": "ReverseLogarithmic"},
    ]}}
    ranges = parameter_ranges(config)
    assert ranges[0].scaling == "ReverseLogarithmic"
    draws = [float(t["momentum"]) for t in sample(ranges, "Random", 400, seed=3)]
    assert all(0.9 <= d <= 0.999 for d in draws)
    near_one = sum(d > 0.99 for d in draws) / len(draws)
    assert 0.42 <= near_one <= 0.58, near_one
    # Closer in: 1 - x below 0.002 is log(2)/log(100), about 15% of the draws.
    assert sum(d > 0.998 for d in draws) / len(draws) == pytest.approx(math.log(2) / math.log(100), abs=0.05)


def test_grid_walks_every_combination_of_categorical_values_in_order() -> None:
    ranges = [ParameterRange("opt", "Categorical", values=("sgd", "adam")), ParameterRange("epochs", "Categorical", values=("1", "2"))]
    assert sample(ranges, "Grid", 0, None) == [
        {"opt": "sgd", "epochs": "1"}, {"opt": "sgd", "epochs": "2"}, {"opt": "adam", "epochs": "1"}, {"opt": "adam", "epochs": "2"},
    ]
    assert len(sample(ranges, "Grid", 3, None)) == 3


@pytest.mark.parametrize(
    "other", [ParameterRange("epochs", "Integer", 1, 2), ParameterRange("lr", "Continuous", 0.01, 0.1)], ids=lambda r: r.kind
)
def test_grid_refuses_a_range_that_is_not_categorical_as_sagemaker_does(other: ParameterRange) -> None:
    """SageMaker's Grid takes categorical ranges only: a job that played here would fail on AWS."""
    ranges = [ParameterRange("opt", "Categorical", values=("sgd", "adam")), other]
    with pytest.raises(TuningRefused) as err:
        sample(ranges, "Grid", 0, None)
    message = str(err.value)
    assert message.startswith("ClientError: the Grid strategy takes categorical ranges only")
    assert f"{other.name} ({other.kind}) must be CategoricalParameterRanges" in message and "\n" not in message


def test_a_trial_is_the_definition_with_static_and_tuned_hyperparameters() -> None:
    definition = {
        "StaticHyperParameters": {"sagemaker_program": '"train.py"', "epochs": "1"},
        "AlgorithmSpecification": {"TrainingImage": "img:1", "TrainingInputMode": "File", "MetricDefinitions": [{"Name": "loss", "Regex": "l=(.*)"}]},
        "RoleArn": "arn:aws:iam::1:role/r",
        "OutputDataConfig": {"S3OutputPath": "s3://b/o", "KmsKeyId": "k"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "EnableNetworkIsolation": True,
        "VpcConfig": {},
    }
    request = trial_request(definition, "tune-001-abc", {"epochs": "3"})
    assert request["HyperParameters"] == {"sagemaker_program": '"train.py"', "epochs": "3"}
    assert request["AlgorithmSpecification"]["MetricDefinitions"] == [{"Name": "loss", "Regex": "l=(.*)"}]
    assert request["EnableNetworkIsolation"] is True and request["OutputDataConfig"]["KmsKeyId"] == "k"
    assert "VpcConfig" not in request  # an empty one is not sent
    name = trial_name("tune-x", 7)
    assert name.startswith("tune-x-007-") and len(name) == len("tune-x-007-") + 8


def _trial(name: str, status: str, objective: float | None, reason: str = "") -> Trial:
    job = {"TrainingJobArn": f"arn:{name}", "CreationTime": 0, "TrainingJobStatus": status, "FailureReason": reason}
    return Trial(name, {"epochs": "1"}, job, objective)


def test_the_best_trial_is_the_completed_one_with_the_best_objective() -> None:
    trials = [_trial("a", "Completed", 0.5), _trial("b", "Completed", 0.2), _trial("c", "Failed", None, "boom")]
    assert best_of(trials, MINIMIZE).name == "b"  # type: ignore[union-attr]
    assert best_of(trials, {**MINIMIZE, "Type": "Maximize"}).name == "a"  # type: ignore[union-attr]
    job = SimpleNamespace()
    record_progress(job, trials, "tune", MINIMIZE)
    assert job.training_job_status_counters["Completed"] == 2 and job.training_job_status_counters["NonRetryableError"] == 1
    assert job.objective_status_counters == {"Succeeded": 2, "Pending": 0, "Failed": 1}
    assert job.best_training_job["TrainingJobName"] == "b"
    assert job.local_trials[2]["FailureReason"] == "boom" and "FinalHyperParameterTuningJobObjectiveMetric" not in job.local_trials[2]
    assert record_end(job, trials) == "Completed" and job.failure_reason == ""


def test_a_tuner_with_no_successful_trial_fails_in_one_line() -> None:
    trials: list[Any] = [_trial("a", "Failed", None, "AlgorithmError: exit 2\nusage: ..."), _trial("b", "Completed", None)]
    job = SimpleNamespace()
    record_progress(job, trials, "tune", MINIMIZE)
    assert record_end(job, trials) == "Failed"
    assert job.failure_reason == (
        "No training job succeeded with an objective value (2 trial(s)): a: AlgorithmError: exit 2 usage: ...; b: no objective metric in its log"
    )
