"""The one CreateHyperParameterTuningJob request: the platform's training job, tuned over ranges.

Pure Python (no CDK import), like :mod:`stacks.components.training_job_spec`, whose request it
wraps: the tuning job's ``TrainingJobDefinition`` is :func:`create_training_job_request`'s output
for the same launch (image, role, VPC, network isolation, KMS, spot with checkpoints, the GPU
check's ``EXPECTED_GPU_COUNT``, metric definitions, stopping condition), less what a definition
does not take (the job's name and tags, which the tuner sets for each trial, and the metrics time
series flag), with the launch's hyperparameters as ``StaticHyperParameters``. So every training
job a tuner starts is a platform training job; SageMaker names each ``<tuning job>-NNN-<hex>``,
inside the ``<project>-*`` names the job role's logs and the teardown rely on.

The ranges come from a JSON object (``scripts.launch --tune RANGES.json``), one entry per tuned
hyperparameter::

    {
      "learning_rate": {"type": "continuous", "min": 0.0001, "max": 0.1, "scaling": "Logarithmic"},
      "batch_size": {"type": "integer", "min": 64, "max": 512},
      "model": {"type": "categorical", "values": ["mlp", "cnn"]}
    }

:func:`resolve_tuning` checks them before anything is created: the shape SageMaker accepts, and
each bound and each categorical value with the image's own hyperparameter rules
(:func:`stacks.components.hyperparameter_rules.problems`, over the static hyperparameters with
that value: a value the built-in trainer would refuse when the trial's container starts is
refused here, naming the range). A user's script parses its own arguments: its ranges are checked
for shape only, and for the names only the platform may set (``sagemaker_*``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Mapping, Optional, Sequence

from stacks.components import hyperparameter_rules
from stacks.components.launch_rules import refusal
from stacks.components.training_job_spec import (
    JobTemplate,
    LaunchError,
    LaunchOptions,
    LaunchValues,
    create_training_job_request,
    hyperparameter_string,
    resolve_launch,
)
from stacks.config import TuningConfig
from stacks.sagemaker_limits import tuning_job_limits

TUNING_TITLE = "Invalid tuning launch"
"""Start of a refused tuning launch's message."""

RANGE_KINDS = {
    "continuous": "ContinuousParameterRanges",
    "integer": "IntegerParameterRanges",
    "categorical": "CategoricalParameterRanges",
}
"""A range's ``type`` in RANGES.json -> its list in SageMaker's ``ParameterRanges``."""

DEFINITION_DROPS = ("TrainingJobName", "Tags", "HyperParameters")
CHECKPOINT_PER_JOB_ENV = "CHECKPOINT_PER_JOB"
"""Tells the image to keep its checkpoints in a subdirectory named after the trial (``TRAINING_JOB_NAME``):
one ``CheckpointConfig`` serves every trial of a tuning job, so each trial's prefix is
``checkpoints/<tuning job>/<trial>/`` and no trial resumes from another's checkpoints."""
"""Members of the training request a ``TrainingJobDefinition`` does not take (the tuner names and tags
each trial; the hyperparameters become ``StaticHyperParameters``)."""

_RANGE_KEYS = {"continuous": {"type", "min", "max", "scaling"}, "integer": {"type", "min", "max", "scaling"}, "categorical": {"type", "values"}}
_NUMBER = re.compile(r"^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$")


@dataclass(frozen=True)
class ParameterRange:
    """One tuned hyperparameter.

    Attributes:
        name: The hyperparameter.
        kind: ``continuous``, ``integer`` or ``categorical``.
        min_value: Lower bound, as SageMaker receives it (a string); continuous and integer.
        max_value: Upper bound, likewise.
        scaling: ``Auto``, ``Linear``, ``Logarithmic`` or ``ReverseLogarithmic`` (continuous only).
        values: The categorical values, as strings.
    """

    name: str
    kind: str
    min_value: str = ""
    max_value: str = ""
    scaling: str = "Auto"
    values: tuple[str, ...] = ()

    def bounds(self) -> tuple[tuple[str, str], ...]:
        """``(what, value)`` of every value the trainer may receive at an end of the range: each bound, or each value."""
        if self.kind == "categorical":
            return tuple((f"value {value!r}", value) for value in self.values)
        return (("min", self.min_value), ("max", self.max_value))

    def sagemaker(self) -> dict[str, Any]:
        """The range as an entry of SageMaker's ``ParameterRanges`` list of its kind."""
        if self.kind == "categorical":
            return {"Name": self.name, "Values": list(self.values)}
        return {"Name": self.name, "MinValue": self.min_value, "MaxValue": self.max_value, "ScalingType": self.scaling}


def parse_ranges(raw: Any, source: str = "RANGES.json") -> tuple[ParameterRange, ...]:
    """The ranges of a RANGES.json object (see the module docstring), checked for shape.

    Raises:
        LaunchError: one line naming the range (or the file) and the fix.
    """
    if not isinstance(raw, Mapping) or not raw:
        raise LaunchError(
            f"{source} must be a JSON object of hyperparameter -> range, e.g. "
            '{"learning_rate": {"type": "continuous", "min": 0.0001, "max": 0.1}}'
        )
    limits = tuning_job_limits()
    if len(raw) > limits.max_ranges:
        raise LaunchError(f"{source} has {len(raw)} ranges; SageMaker tunes at most {limits.max_ranges} hyperparameters: drop some")
    return tuple(_parse_range(str(name), spec, source) for name, spec in raw.items())


def _parse_range(name: str, spec: Any, source: str) -> ParameterRange:
    where = f"{source}: range {name}"
    kind = spec.get("type") if isinstance(spec, Mapping) else None
    if kind not in RANGE_KINDS:
        raise LaunchError(f"{where} needs a \"type\": continuous, integer or categorical (got {json.dumps(kind)})")
    unknown = sorted(set(spec) - _RANGE_KEYS[kind])
    if unknown:
        raise LaunchError(f"{where}: {', '.join(unknown)} not known for a {kind} range; it takes {', '.join(sorted(_RANGE_KEYS[kind]))}")
    limits = tuning_job_limits()
    if kind == "categorical":
        values = spec.get("values")
        if not isinstance(values, list) or not 1 <= len(values) <= limits.max_categorical_values:
            raise LaunchError(f"{where}: \"values\" must be a list of 1-{limits.max_categorical_values} values")
        strings = tuple(_value_string(value, where) for value in values)
        if len(set(strings)) != len(strings):
            raise LaunchError(f"{where}: \"values\" repeats a value; list each once")
        return ParameterRange(name, kind, values=strings)
    low, high = (_bound(spec, key, kind, where) for key in ("min", "max"))
    if not float(low) < float(high):
        raise LaunchError(f"{where}: min {low} must be below max {high} (a fixed value is a static hyperparameter: --hp {name}={low})")
    scaling = spec.get("scaling", "Auto")
    allowed = limits.scaling_types if kind == "continuous" else tuple(s for s in limits.scaling_types if s != "ReverseLogarithmic")
    if scaling not in allowed:
        raise LaunchError(f"{where}: scaling {json.dumps(scaling)} is not one of {', '.join(allowed)}")
    if scaling == "Logarithmic" and float(low) <= 0:
        raise LaunchError(f"{where}: Logarithmic scaling needs min above 0 (got {low}); use Linear or raise min")
    if scaling == "ReverseLogarithmic" and not (0 <= float(low) and float(high) < 1):
        raise LaunchError(f"{where}: ReverseLogarithmic scaling needs 0 <= min and max < 1 (got {low}-{high}); use Linear")
    return ParameterRange(name, kind, low, high, scaling)


def _value_string(value: Any, where: str) -> str:
    """A JSON scalar as the string SageMaker passes (numbers and booleans as the workflow writes them)."""
    if not isinstance(value, (str, int, float, bool)) or (isinstance(value, float) and not math.isfinite(value)):
        raise LaunchError(f"{where}: {json.dumps(value)} is not a string, number or boolean")
    text = hyperparameter_string(value)
    problem = tuning_job_limits().parameter_value.problem(text)
    if problem:
        raise LaunchError(f"{where}: the value {text!r} {problem}")
    return str(text)


def _bound(spec: Mapping[str, Any], key: str, kind: str, where: str) -> str:
    value = spec.get(key)
    text = _value_string(value, where) if value is not None and not isinstance(value, bool) else ""
    if not _NUMBER.match(text) or (kind == "integer" and not float(text).is_integer()):
        expected = "a whole number" if kind == "integer" else "a number"
        raise LaunchError(f"{where}: \"{key}\" must be {expected} (got {json.dumps(value)})")
    return str(int(float(text))) if kind == "integer" else text


@dataclass(frozen=True)
class TuningOptions:
    """What one tuning launch asks for; ``None`` keeps the config's ``tuning`` setting.

    Attributes:
        ranges: The tuned hyperparameters (:func:`parse_ranges`).
        training: The trials' training options (instance type and count, spot, static
            hyperparameters, a script's code), as for one training job; its ``job_name`` names
            the tuning job (at most 32 characters, ``<project>-...``).
        max_jobs: Trials, at most ``tuning.max_jobs``.
        max_parallel_jobs: Trials at once, at most ``tuning.max_parallel_jobs`` and ``max_jobs``.
    """

    ranges: tuple[ParameterRange, ...]
    training: LaunchOptions = field(default_factory=LaunchOptions)
    max_jobs: Optional[int] = None
    max_parallel_jobs: Optional[int] = None


@dataclass(frozen=True)
class TuningValues:
    """A checked tuning launch: what :func:`create_tuning_job_request` sends.

    Attributes:
        job_name: The tuning job's name.
        training: The trials' checked training values (static hyperparameters: the tuned ones left out).
        ranges: The tuned hyperparameters.
        max_jobs: The most trials (a Grid: its combinations).
        max_parallel_jobs: Trials at once.
        settings: The config's ``tuning`` section (strategy, early stopping, objective).
    """

    job_name: str
    training: LaunchValues
    ranges: tuple[ParameterRange, ...]
    max_jobs: int
    max_parallel_jobs: int
    settings: TuningConfig


def default_tuning_job_name(template: JobTemplate, suffix: str = "", now: Optional[datetime] = None) -> str:
    """``<project>-<yymmdd-HHMMSS>[-suffix]``, shortened to fit SageMaker's 32 characters."""
    stamp = now or datetime.now(timezone.utc)
    max_length = tuning_job_limits().job_name.max_length
    for pattern in ("%y%m%d-%H%M%S", "%m%d%H%M%S"):
        name = f"{template.job_name_prefix}{stamp.strftime(pattern)}"
        if suffix and len(name) + 1 + len(suffix) <= max_length:
            return f"{name}-{suffix}"
        if len(name) <= max_length:
            return name
    return name


def resolve_tuning(template: JobTemplate, settings: TuningConfig, options: TuningOptions) -> TuningValues:
    """Check a tuning launch before anything is created (the training options as for one job, then the
    ranges, the caps and the objective).

    Raises:
        LaunchError: the training options' refusal (:func:`resolve_launch`'s), or one line naming the
            range, cap or setting and the fix.
    """
    if options.training.keep_alive_seconds:
        raise LaunchError(f"{TUNING_TITLE}: a tuning job's trials keep no warm pool: drop --keep-alive")
    name = options.training.job_name or default_tuning_job_name(template)
    name_rule = tuning_job_limits().job_name
    if not name.startswith(template.job_name_prefix) or name_rule.problem(name):
        raise LaunchError(
            f"{TUNING_TITLE}: tuning job name {name!r} must be {template.job_name_prefix}<letters, digits, hyphens>,"
            f" at most {name_rule.max_length} characters (scripts.launch --tune ... --name)"
        )
    tuned = {r.name for r in options.ranges}
    given = {k: v for k, v in options.training.hyperparameters.items() if k not in tuned}
    training = resolve_launch(template, replace(options.training, job_name=name, hyperparameters=given, keep_alive_seconds=0))
    static = {k: v for k, v in dict(training.hyperparameters).items() if k not in tuned}  # type: ignore[call-overload]
    training = replace(training, hyperparameters=static)
    reasons = [problem for r in options.ranges for problem in range_problems(r, training, static)]
    reasons += _objective_problems(settings, training, static)
    if reasons:
        raise LaunchError(refusal(TUNING_TITLE, reasons))
    max_jobs, parallel = _caps(settings, options)
    if settings.strategy == "Grid":
        max_jobs = _grid_size(options.ranges, settings)
        parallel = min(parallel, max_jobs)
    return TuningValues(name, training, options.ranges, max_jobs, parallel, settings)


def range_problems(r: ParameterRange, training: LaunchValues, static: Mapping[str, str]) -> list[str]:
    """Why the image would refuse a trial at an end of ``r`` (each bound, each categorical value), one
    sentence each naming the range; empty when none. A user's script is checked for ``sagemaker_*`` only."""
    where = f"range {r.name}"
    if r.name.startswith("_"):
        return [f"{where}: names starting with _ are SageMaker's (_tuning_objective_metric...): tune another hyperparameter"]
    user_script = bool(training.has_code)
    facts = dict(count=int(training.instance_count), gpus=int(training.expected_gpu_count))  # type: ignore[call-overload]
    for what, value in r.bounds():
        found = hyperparameter_rules.problems(
            {**static, r.name: value}, user_script=user_script, instance_count=facts["count"], gpus_per_instance=facts["gpus"]
        )
        if found:
            who = "platform" if user_script or r.name.startswith(hyperparameter_rules.PLATFORM_PREFIX) else "built-in trainer"
            return [f"{where}: its {what} is refused by the {who}: {found[0]}"]
    if r.kind == "continuous" and not user_script and not re.fullmatch(hyperparameter_rules.image_rules().value_pattern(r.name), "0.5"):
        return [f"{where}: {r.name} takes whole numbers, and a continuous range passes fractions: make it \"type\": \"integer\""]
    return []


def _objective_problems(settings: TuningConfig, training: LaunchValues, static: Mapping[str, str]) -> list[str]:
    """The built-in trainer writes ``validation:*`` metrics only with its validation channel: without one
    every trial would end with no objective value, and the tuner would fail after paying for all of them."""
    if training.has_code or not settings.objective_metric.startswith("validation:"):
        return []
    channel = static.get("validation_channel", "validation")
    if channel in (training.channels or {}):
        return []
    return [
        f"tuning.objective_metric {settings.objective_metric} is measured on the {channel!r} input channel, which this job"
        f" does not have: add the channel (training_job.channels.{channel}), or tune train:loss"
        " (-c tuning.objective_metric=train:loss)"
    ]


def _caps(settings: TuningConfig, options: TuningOptions) -> tuple[int, int]:
    """``(max jobs, max parallel jobs)``: the options within the config's caps."""
    for flag, value, cap, setting in (
        ("--max-jobs", options.max_jobs, settings.max_jobs, "max_jobs"),
        ("--max-parallel-jobs", options.max_parallel_jobs, settings.max_parallel_jobs, "max_parallel_jobs"),
    ):
        if value is not None and not (isinstance(value, int) and 1 <= value <= cap):
            raise LaunchError(
                f"{TUNING_TITLE}: {flag} {value} must be from 1 to {cap}, the cap tuning.{setting} sets"
                f" (raise it with -c tuning.{setting}=N where the spend is meant)"
            )
    max_jobs = options.max_jobs or settings.max_jobs
    if options.max_parallel_jobs is not None and options.max_parallel_jobs > max_jobs:
        raise LaunchError(f"{TUNING_TITLE}: --max-parallel-jobs {options.max_parallel_jobs} is more than the {max_jobs} trials (--max-jobs)")
    return max_jobs, min(options.max_parallel_jobs or settings.max_parallel_jobs, max_jobs)


def _grid_size(ranges: Sequence[ParameterRange], settings: TuningConfig) -> int:
    """A Grid's trials: every combination of its categorical values (SageMaker's Grid takes no other range)."""
    other = [r.name for r in ranges if r.kind != "categorical"]
    if other:
        raise LaunchError(
            f"{TUNING_TITLE}: the Grid strategy takes categorical ranges only ({', '.join(other)} are not):"
            " list their values, or choose another tuning.strategy"
        )
    size = math.prod(len(r.values) for r in ranges)
    if size > settings.max_jobs:
        raise LaunchError(
            f"{TUNING_TITLE}: the grid has {size} combinations, more than tuning.max_jobs = {settings.max_jobs}:"
            " list fewer values, or raise tuning.max_jobs"
        )
    return size


def create_tuning_job_request(template: JobTemplate, tuning: TuningValues) -> dict[str, Any]:
    """The CreateHyperParameterTuningJob request (boto3 keyword arguments)."""
    training = create_training_job_request(template, tuning.training)
    definition = {key: value for key, value in training.items() if key not in DEFINITION_DROPS}
    definition["AlgorithmSpecification"] = {
        key: value for key, value in training["AlgorithmSpecification"].items() if key != "EnableSageMakerMetricsTimeSeries"
    }
    definition["StaticHyperParameters"] = training["HyperParameters"]
    if "CheckpointConfig" in definition:
        definition["Environment"] = {**definition["Environment"], CHECKPOINT_PER_JOB_ENV: "true"}
    ranges: dict[str, list[dict[str, Any]]] = {}
    for r in tuning.ranges:
        ranges.setdefault(RANGE_KINDS[r.kind], []).append(r.sagemaker())
    settings = tuning.settings
    limits: dict[str, int] = {"MaxParallelTrainingJobs": tuning.max_parallel_jobs}
    if settings.strategy != "Grid":
        # A Grid runs every combination; SageMaker takes no job count with it.
        limits["MaxNumberOfTrainingJobs"] = tuning.max_jobs
    return {
        "HyperParameterTuningJobName": tuning.job_name,
        "HyperParameterTuningJobConfig": {
            "Strategy": settings.strategy,
            "HyperParameterTuningJobObjective": {"Type": settings.objective_type, "MetricName": settings.objective_metric},
            "ResourceLimits": limits,
            "ParameterRanges": ranges,
            "TrainingJobEarlyStoppingType": settings.early_stopping,
        },
        "TrainingJobDefinition": definition,
        # SageMaker adds the tuning job's tags to every training job it starts.
        "Tags": training["Tags"],
    }
