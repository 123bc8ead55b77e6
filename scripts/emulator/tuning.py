"""A local runner that plays SageMaker automatic model tuning for tuning jobs created on the emulator.

moto accepts CreateHyperParameterTuningJob and reports it Completed at once, with a made-up best
training job (see ``gaps._jobs_without_a_runner_fail``). While a local runner watches
(``LocalSageMaker``), a new tuning job stays InProgress and this module does what SageMaker's
tuner does, in the same order:

1. reads the job (DescribeHyperParameterTuningJob) and refuses, with one line, what it cannot play
   (several TrainingJobDefinitions, warm start, the ``Hyperband`` strategy,
   ``TuningJobCompletionCriteria``);
2. samples ``MaxNumberOfTrainingJobs`` hyperparameter sets from the ``ParameterRanges``:
   ``Random`` draws each range (Continuous and Integer uniformly, log-uniformly for
   ``Logarithmic`` scaling, and for ``ReverseLogarithmic`` log-uniformly in 1 - x, so values crowd
   near 1 as on SageMaker; Categorical uniformly); ``Grid`` walks every combination of the
   categorical values, in order, and, as SageMaker does, refuses any other range; ``Bayesian`` is
   sampled as Random here, and the runner says so in one line;
3. starts each trial as a CreateTrainingJob of the job's TrainingJobDefinition with the static and
   the sampled hyperparameters, named as SageMaker names them (``<tuning job>-NNN-<hex>``): every
   trial is a real platform training job, run by the same local runner with the same guarantees
   (the GPU check, the failure file, network isolation, KMS). ``MaxParallelTrainingJobs`` is
   honoured as an upper bound: the local runner trains one job at a time, so trials run one after
   another, and the runner says so;
4. reads each trial's objective from its FinalMetricDataList (parsed from its log with the
   definition's MetricDefinitions, as SageMaker reads them) and keeps the counters,
   ``BestTrainingJob`` and the trial summaries that DescribeHyperParameterTuningJob and
   ListTrainingJobsForHyperParameterTuningJob return;
5. ends Completed when at least one trial completed with an objective value, else Failed with
   one line naming the trials' failures: a failed trial is a failed trial, not a failed tuner.

Early stopping (``TrainingJobEarlyStoppingType`` Auto) stops no trial here: every trial runs to its
end, as with ``Off``; the runner says so.

Emulator only: on AWS, SageMaker's tuner does all of this itself.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping

FINISHED = ("Completed", "Failed", "Stopped")


class TuningRefused(Exception):
    """The tuning job fails before any trial; the message is its whole FailureReason."""


@dataclass(frozen=True)
class ParameterRange:
    """One tuned hyperparameter.

    Attributes:
        name: The hyperparameter.
        kind: ``Continuous``, ``Integer`` or ``Categorical``.
        low: Lower bound (Continuous, Integer).
        high: Upper bound (Continuous, Integer).
        scaling: The range's ``ScalingType``: ``Auto`` and ``Linear`` draw uniformly (SageMaker's
            Auto chooses for itself; uniform is the plain reading), ``Logarithmic`` log-uniformly in
            x, ``ReverseLogarithmic`` log-uniformly in 1 - x (Continuous only, within [0, 1)).
        values: The categorical values.
    """

    name: str
    kind: str
    low: float = 0.0
    high: float = 0.0
    scaling: str = "Auto"
    values: tuple[str, ...] = ()

    def draw(self, rng: random.Random) -> str:
        """One value, formatted as SageMaker passes tuned hyperparameters (strings)."""
        if self.kind == "Categorical":
            return rng.choice(self.values)
        if self.scaling == "Logarithmic" and self.low > 0:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        elif self.scaling == "ReverseLogarithmic" and 0 <= self.low < self.high < 1:
            # Log-uniform in 1 - x: as many draws in 0.9-0.99 as in 0.99-0.999, for momentum-like values near 1.
            value = 1 - math.exp(rng.uniform(math.log(1 - self.high), math.log(1 - self.low)))
        else:
            value = rng.uniform(self.low, self.high)
        if self.kind == "Integer":
            return str(min(int(self.high), max(int(self.low), round(value))))
        return repr(value)


def parameter_ranges(config: Mapping[str, Any]) -> list[ParameterRange]:
    """The ``ParameterRanges`` of a HyperParameterTuningJobConfig."""
    ranges = config.get("ParameterRanges") or {}
    found = [
        ParameterRange(r["Name"], kind, float(r["MinValue"]), float(r["MaxValue"]), r.get("ScalingType") or "Auto")
        for kind, key in (("Continuous", "ContinuousParameterRanges"), ("Integer", "IntegerParameterRanges"))
        for r in ranges.get(key) or []
    ]
    found += [ParameterRange(r["Name"], "Categorical", values=tuple(r["Values"])) for r in ranges.get("CategoricalParameterRanges") or []]
    return found


def sample(ranges: list[ParameterRange], strategy: str, max_jobs: int, seed: int | None) -> list[dict[str, str]]:
    """The trials' tuned hyperparameters: a Grid's combinations in order, else random draws.

    Raises:
        TuningRefused: a Grid with a Continuous or Integer range, which SageMaker refuses when the
            tuning job is created ("Only categorical parameters are supported when using the grid
            search strategy"): playing one here would let a job pass locally that fails on AWS.
    """
    if strategy == "Grid":
        other = [f"{r.name} ({r.kind})" for r in ranges if r.kind != "Categorical"]
        if other:
            raise TuningRefused(
                f"ClientError: the Grid strategy takes categorical ranges only, as on SageMaker; {', '.join(other)}"
                " must be CategoricalParameterRanges listing their values, or use another Strategy."
            )
        grid = [dict(zip((r.name for r in ranges), combination)) for combination in itertools.product(*(r.values for r in ranges))]
        return grid[:max_jobs] if max_jobs else grid
    rng = random.Random(seed)
    return [{r.name: r.draw(rng) for r in ranges} for _ in range(max_jobs)]


def trial_request(definition: Mapping[str, Any], name: str, tuned: Mapping[str, str]) -> dict[str, Any]:
    """The CreateTrainingJob request of one trial: the definition, its static hyperparameters and ``tuned``."""
    spec = definition["AlgorithmSpecification"]
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "HyperParameters": {**(definition.get("StaticHyperParameters") or {}), **tuned},
        "AlgorithmSpecification": {
            key: spec[key] for key in ("TrainingImage", "AlgorithmName", "TrainingInputMode", "MetricDefinitions") if spec.get(key)
        },
    }
    for key in (
        "RoleArn", "InputDataConfig", "OutputDataConfig", "ResourceConfig", "StoppingCondition", "VpcConfig", "EnableNetworkIsolation",
        "EnableInterContainerTrafficEncryption", "EnableManagedSpotTraining", "CheckpointConfig", "RetryStrategy", "Environment",
    ):
        if definition.get(key) not in (None, {}, []):
            request[key] = definition[key]
    return request


def trial_name(tuning_job: str, number: int) -> str:
    """SageMaker's trial names: ``<tuning job>-NNN-<8 hex>`` (the tuning job name is at most 32 characters)."""
    return f"{tuning_job}-{number:03d}-{uuid.uuid4().hex[:8]}"


def objective_of(job: Mapping[str, Any], metric: str) -> float | None:
    """The trial's final value of the objective metric, if its log had one."""
    for item in job.get("FinalMetricDataList") or []:
        if item.get("MetricName") == metric:
            return float(item["Value"])
    return None


@dataclass
class Trial:
    """One training job the tuner started, as ListTrainingJobsForHyperParameterTuningJob shows it."""

    name: str
    tuned: dict[str, str]
    job: dict[str, Any]
    objective: float | None

    def summary(self, tuning_job: str, objective: Mapping[str, Any]) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "TrainingJobName": self.name,
            "TrainingJobArn": self.job["TrainingJobArn"],
            "TuningJobName": tuning_job,
            "CreationTime": self.job["CreationTime"],
            "TrainingStartTime": self.job.get("TrainingStartTime") or self.job["CreationTime"],
            "TrainingEndTime": self.job.get("TrainingEndTime") or self.job.get("LastModifiedTime"),
            "TrainingJobStatus": self.job["TrainingJobStatus"],
            "TunedHyperParameters": self.tuned,
            "ObjectiveStatus": "Succeeded" if self.objective is not None else "Failed",
        }
        if self.job.get("FailureReason"):
            summary["FailureReason"] = self.job["FailureReason"]
        if self.objective is not None:
            summary["FinalHyperParameterTuningJobObjectiveMetric"] = {
                "Type": objective["Type"], "MetricName": objective["MetricName"], "Value": self.objective,
            }
        return summary


def best_of(trials: list[Trial], objective: Mapping[str, Any]) -> Trial | None:
    """The completed trial with the best objective (the first of equals)."""
    scored = [t for t in trials if t.objective is not None and t.job["TrainingJobStatus"] == "Completed"]
    if not scored:
        return None
    pick = min if objective["Type"] == "Minimize" else max
    return pick(scored, key=lambda t: t.objective)  # type: ignore[arg-type, return-value]


def run_tuning_job(
    name: str,
    *,
    sagemaker: Any,
    backend_job: Any,
    on_event: Callable[[str], None],
    poll_seconds: float = 0.5,
    stop_requested: Callable[[], bool] = lambda: False,
) -> list[Trial]:
    """Play one tuning job: sample, start the trials one after another, record progress on
    ``backend_job`` (moto's) after each; returns the trials. The caller records the end."""
    job = sagemaker.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
    if job.get("TrainingJobDefinitions"):
        raise TuningRefused("ClientError: several TrainingJobDefinitions are not played by the emulator's tuner; nothing ran.")
    if job.get("WarmStartConfig"):
        raise TuningRefused("ClientError: WarmStartConfig is not played by the emulator's tuner; nothing ran.")
    config, definition = job["HyperParameterTuningJobConfig"], job["TrainingJobDefinition"]
    strategy = config.get("Strategy") or "Bayesian"
    if strategy not in ("Bayesian", "Random", "Grid"):
        # Hyperband stops and resumes trials by its own schedule: sampled as Random it would run another search.
        raise TuningRefused(
            f"ClientError: HyperParameterTuningJobConfig.Strategy {strategy} is not played by the emulator's tuner "
            "(Random, Grid and Bayesian, sampled as Random, are); nothing ran."
        )
    if config.get("TuningJobCompletionCriteria"):
        raise TuningRefused(
            "ClientError: HyperParameterTuningJobConfig.TuningJobCompletionCriteria "
            f"{json.dumps(config['TuningJobCompletionCriteria'], sort_keys=True, default=str)} is not played by the emulator's tuner "
            "(every trial up to ResourceLimits runs); nothing ran."
        )
    limits, objective = config["ResourceLimits"], config["HyperParameterTuningJobObjective"]
    tuned_sets = sample(parameter_ranges(config), strategy, int(limits.get("MaxNumberOfTrainingJobs") or 0), config.get("RandomSeed"))
    if strategy == "Bayesian":
        on_event(f"tuning job {name}: strategy {strategy} is sampled as Random on the emulator")
    on_event(
        f"tuning job {name}: {len(tuned_sets)} trial(s); MaxParallelTrainingJobs {limits.get('MaxParallelTrainingJobs', 1)} "
        "runs one after another here (the local runner trains one job at a time)"
        + ("; early stopping Auto stops no trial here" if config.get("TrainingJobEarlyStoppingType") == "Auto" else "")
    )
    trials: list[Trial] = []
    for number, tuned in enumerate(tuned_sets, start=1):
        if stop_requested():
            break
        trial = trial_name(name, number)
        sagemaker.create_training_job(**trial_request(definition, trial, tuned))
        described = _wait(sagemaker, trial, poll_seconds)
        trials.append(Trial(trial, tuned, described, objective_of(described, objective["MetricName"])))
        record_progress(backend_job, trials, name, objective)
        on_event(f"tuning job {name}: trial {trial} {described['TrainingJobStatus']}, {objective['MetricName']} = {trials[-1].objective}")
    return trials


def _wait(sagemaker: Any, name: str, poll_seconds: float) -> dict[str, Any]:
    while True:
        described: dict[str, Any] = sagemaker.describe_training_job(TrainingJobName=name)
        if described["TrainingJobStatus"] in FINISHED:
            return described
        time.sleep(poll_seconds)


def record_progress(backend_job: Any, trials: list[Trial], name: str, objective: Mapping[str, Any]) -> None:
    """Counters, trial summaries and the best job so far, on moto's tuning job."""
    from moto.core.utils import utcnow

    statuses = [t.job["TrainingJobStatus"] for t in trials]
    backend_job.training_job_status_counters = {
        "Completed": statuses.count("Completed"), "InProgress": 0, "RetryableError": 0,
        "NonRetryableError": statuses.count("Failed"), "Stopped": statuses.count("Stopped"),
    }
    succeeded = sum(t.objective is not None for t in trials)
    backend_job.objective_status_counters = {"Succeeded": succeeded, "Pending": 0, "Failed": len(trials) - succeeded}
    backend_job.local_trials = [t.summary(name, objective) for t in trials]
    best = best_of(trials, objective)
    backend_job.best_training_job = best.summary(name, objective) if best else None
    backend_job.OverallBestTrainingJob = backend_job.best_training_job
    backend_job.last_modified_time = utcnow()


def record_end(backend_job: Any, trials: list[Trial], refused: str | None = None, stopped: bool = False) -> str:
    """Completed with a best job, Stopped, or Failed with one line; returns the status."""
    from moto.core.utils import utcnow

    if refused:
        status, reason = "Failed", refused
    elif stopped:
        status, reason = "Stopped", ""
    elif backend_job.best_training_job:
        status, reason = "Completed", ""
    else:
        failures = "; ".join(f"{t.name}: {t.job.get('FailureReason') or 'no objective metric in its log'}" for t in trials)
        status, reason = "Failed", f"No training job succeeded with an objective value ({len(trials)} trial(s)): {failures}"
    backend_job.hyper_parameter_tuning_job_status = status
    backend_job.failure_reason = " ".join(reason.split())[:1024]
    backend_job.hyper_parameter_tuning_end_time = backend_job.last_modified_time = utcnow()
    backend_job.tuning_job_completion_details = {}
    backend_job.consumed_resources = {}
    return status
