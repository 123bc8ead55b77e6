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
from typing import Any, Mapping, Optional, Sequence, Union

from stacks.components import hyperparameter_rules
from stacks.components.launch_rules import (
    ITEM,
    KEY,
    ArrayOf,
    BadItems,
    BadKeys,
    Expr,
    IfElse,
    InTable,
    Joined,
    Lit,
    Lookup,
    Matches,
    Not,
    Rule,
    Var,
    WholeNumber,
    all_of,
    any_of,
    count,
    eq,
    ge,
    gt,
    jsonata_string,
    key_count,
    le,
    length,
    lt,
    number_of,
    problems,
    refusal,
    render_rules,
    starts_with,
    string_of,
    type_of,
)
from stacks.components.request_expressions import Jsonata, LaunchRules, merge, render, to_jsonata
from stacks.components.training_job_spec import (
    STATE_MACHINE_VALUES,
    JobTemplate,
    LaunchError,
    LaunchOptions,
    LaunchValues,
    hyperparameter_string,
    resolve_launch,
    training_job_request_values,
)
from stacks.config import MAX_INSTANCE_COUNT, TuningConfig
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

    def as_json(self) -> dict[str, Any]:
        """The range as RANGES.json writes it (the workflow's ``tuning.ranges`` entry), its values SageMaker's strings."""
        if self.kind == "categorical":
            return {"type": self.kind, "values": list(self.values)}
        return {"type": self.kind, "min": self.min_value, "max": self.max_value, "scaling": self.scaling}

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

    All concrete (a direct launch), or the workflow's variables (:func:`state_machine_tuning_values`).
    """

    job_name: Union[str, Jsonata]
    training: LaunchValues
    ranges: Union[tuple[ParameterRange, ...], Jsonata]
    max_jobs: Union[int, Jsonata]
    max_parallel_jobs: Union[int, Jsonata]
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
    # resolve_launch leaves the tuned names out, the launch's and the configured ones alike.
    training = resolve_launch(template, replace(options.training, job_name=name, keep_alive_seconds=0), tuned=tuned)
    static: dict[str, str] = dict(training.hyperparameters)  # type: ignore[call-overload]
    reasons = [problem for r in options.ranges for problem in range_problems(r, training, static)]
    reasons += _objective_problems(settings, training, static)
    if reasons:
        raise LaunchError(refusal(TUNING_TITLE, reasons))
    max_jobs, parallel = _caps(settings, options)
    if settings.strategy == "Grid":
        size = _grid_size(options.ranges, settings)
        given = {"ranges": {r.name: r.as_json() for r in options.ranges}, "max_jobs": max_jobs}
        reasons = problems([_grid_max_jobs_rule(settings, Var("ranges"), Var("max_jobs"), Lit(False))], given)
        if reasons:
            raise LaunchError(refusal(TUNING_TITLE, reasons))
        max_jobs, parallel = size, min(parallel, size)
    return TuningValues(name, training, options.ranges, max_jobs, parallel, settings)


def range_problems(r: ParameterRange, training: LaunchValues, static: Mapping[str, str]) -> list[str]:
    """Why the image would refuse a trial at an end of ``r`` (each bound, each categorical value), or
    anywhere inside it, one sentence naming the range; empty when none. A user's script is checked for
    ``sagemaker_*`` only.

    Inside a range the image checks one thing against the instance: a hyperparameter of
    :data:`~stacks.components.hyperparameter_rules.REPLICA_MULTIPLES` must be a multiple of the job's
    replicas, which no integer or continuous range is throughout once there are two or more (SageMaker
    draws any value between the bounds). Such a range is refused as a whole, its bounds checked
    without the split so that the refusal names the range and not one lucky bound; a categorical one
    is refused naming the values the replicas do not split, in the workflow's words
    (:func:`_replica_multiple_rules`)."""
    where = f"range {r.name}"
    if r.name.startswith("_"):
        return [f"{where}: names starting with _ are SageMaker's (_tuning_objective_metric...): tune another hyperparameter"]
    user_script = bool(training.has_code)
    instances, gpus = int(training.instance_count), int(training.expected_gpu_count)  # type: ignore[call-overload]
    replicas = instances * gpus
    split = r.name in hyperparameter_rules.REPLICA_MULTIPLES and not user_script and replicas > 1
    spans_replicas = split and r.kind != "categorical"
    checked_on = (1, 1) if split else (instances, gpus)
    for what, value in r.bounds():
        found = hyperparameter_rules.problems(
            {**static, r.name: value}, user_script=user_script, instance_count=checked_on[0], gpus_per_instance=checked_on[1]
        )
        if found:
            who = "platform" if user_script or r.name.startswith(hyperparameter_rules.PLATFORM_PREFIX) else "built-in trainer"
            return [f"{where}: its {what} is refused by the {who}: {found[0]}"]
    if r.kind == "continuous" and not user_script and not re.fullmatch(hyperparameter_rules.image_rules().value_pattern(r.name), "0.5"):
        return [f"{where}: {r.name} takes whole numbers, and a continuous range passes fractions: make it \"type\": \"integer\""]
    if spans_replicas:
        return [
            f"{where}: SageMaker draws every whole number from {r.min_value} to {r.max_value}, and the built-in trainer refuses a"
            f" {r.name} that is not a multiple of the job's {replicas} replicas (instances x GPUs: {instances} x {gpus} on"
            f" {training.instance_type}): " + "".join(str(part) for part in hyperparameter_rules.replica_multiple_fix(replicas))
        ]
    listed = _not_multiples(r.name, Lit(list(r.values)), Lit(replicas)).evaluate({}) if split else []
    if listed:
        facts = (Lit(replicas), Lit(instances), Lit(gpus), Lit(training.instance_type))
        return [_Text(_listed_not_multiples(r.name, _JoinedStrings(Lit(listed)), *facts)).evaluate({})]
    return []


def _objective_problems(settings: TuningConfig, training: LaunchValues, static: Mapping[str, str]) -> list[str]:
    """The built-in trainer writes ``validation:*`` metrics only with its validation channel: without one
    every trial would end with no objective value, and the tuner would fail after paying for all of them."""
    if training.has_code or not settings.objective_metric.startswith("validation:"):
        return []
    channel = static.get("validation_channel", "validation")
    if channel in (training.channels or {}):
        return []
    return ["".join(_missing_validation_channel(settings, channel)) + "; with --direct, -c at the launch is enough)"]


def _missing_validation_channel(settings: TuningConfig, channel: Any) -> tuple[Any, ...]:
    """The refusal of a ``validation:*`` objective without its channel, in parts around ``channel`` (a
    name here, an expression in the workflow's rule), open at its end for the direct path's last words."""
    return (
        f"tuning.objective_metric {settings.objective_metric} is measured on the '", channel, "' input channel, which this job"
        " does not have: add the channel (training_job.channels.", channel, ", or --channel ", channel, "=PREFIX at the launch), or tune train:loss (deploy the training"
        " stack with -c gpu_training.tuning.objective_metric=train:loss: the workflow's objective is the deployed one",
    )


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
    """The CreateHyperParameterTuningJob request (boto3 keyword arguments / the workflow's Tune task's
    ``Arguments``, with :func:`state_machine_tuning_values`)."""
    training = training_job_request_values(template, tuning.training)
    definition = {key: value for key, value in training.items() if key not in DEFINITION_DROPS}
    definition["AlgorithmSpecification"] = {
        key: value for key, value in training["AlgorithmSpecification"].items() if key != "EnableSageMakerMetricsTimeSeries"
    }
    definition["StaticHyperParameters"] = training["HyperParameters"]
    if "CheckpointConfig" in definition:
        definition["Environment"] = merge(definition["Environment"], {CHECKPOINT_PER_JOB_ENV: "true"})
    settings = tuning.settings
    limits: dict[str, Any] = {"MaxParallelTrainingJobs": tuning.max_parallel_jobs}
    if settings.strategy != "Grid":
        # A Grid runs every combination; SageMaker takes no job count with it.
        limits["MaxNumberOfTrainingJobs"] = tuning.max_jobs
    return render({
        "HyperParameterTuningJobName": tuning.job_name,
        "HyperParameterTuningJobConfig": {
            "Strategy": settings.strategy,
            "HyperParameterTuningJobObjective": {"Type": settings.objective_type, "MetricName": settings.objective_metric},
            "ResourceLimits": limits,
            "ParameterRanges": parameter_ranges(tuning.ranges),
            "TrainingJobEarlyStoppingType": settings.early_stopping,
        },
        "TrainingJobDefinition": definition,
        # SageMaker adds the tuning job's tags to every training job it starts.
        "Tags": training["Tags"],
    })


def parameter_ranges(ranges: Union[Sequence[ParameterRange], Jsonata]) -> Any:
    """SageMaker's ``ParameterRanges`` (a list per kind, only the kinds used), now or from the workflow's
    ``$ranges`` (RANGES.json's shape; bounds and values made strings as :func:`parse_ranges` makes them)."""
    if not isinstance(ranges, Jsonata):
        grouped: dict[str, list[dict[str, Any]]] = {}
        for r in ranges:
            grouped.setdefault(RANGE_KINDS[r.kind], []).append(r.sagemaker())
        return grouped
    entry = {
        "categorical": "{'Name': $k, 'Values': [$map($lookup($v, 'values'), function($x) {$string($x)})]}",
        "bounded": (
            "{'Name': $k, 'MinValue': $string($lookup($v, 'min')), 'MaxValue': $string($lookup($v, 'max')),"
            " 'ScalingType': $exists($lookup($v, 'scaling')) ? $lookup($v, 'scaling') : 'Auto'}"
        ),
    }
    parts = []
    for kind, member in RANGE_KINDS.items():
        build = entry["categorical" if kind == "categorical" else "bounded"]
        picked = f"[$each({to_jsonata(ranges)}, function($v, $k) {{$lookup($v, 'type') = '{kind}' ? {build}}})]"
        parts.append(f"($r := {picked}; $count($r) > 0 ? {{'{member}': $r}} : {{}})")
    return Jsonata("$merge([" + ", ".join(parts) + "])")


# --------------------------------------------------------------------------------------------
# The workflow's Tune branch: its execution input, variables and checks
# --------------------------------------------------------------------------------------------

TUNING_INPUT = "tuning"
"""The execution input's member that makes the training workflow tune: ``{"ranges": RANGES.json's object,
"max_jobs": N, "max_parallel_jobs": N}`` (the caps optional)."""
_TUNING_KEYS = ("ranges", "max_jobs", "max_parallel_jobs")
TUNING_NAME_PATTERN = "^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,31}$"
"""SageMaker's HyperParameterTuningJobName (botocore's model: 32 characters)."""


TUNE_OUTPUT = (
    "{% {'HyperParameterTuningJobName': $states.result.HyperParameterTuningJobName,"
    " 'HyperParameterTuningJobArn': $states.result.HyperParameterTuningJobArn,"
    " 'HyperParameterTuningJobStatus': $states.result.HyperParameterTuningJobStatus,"
    " 'BestTrainingJob': $states.result.BestTrainingJob,"
    " 'TrainingJobStatusCounters': $states.result.TrainingJobStatusCounters} %}"
)
"""The Tune task's output: the tuning job, and its best training job (name, objective, tuned values) to promote."""
TUNING_FAILED_ERROR = "{% $states.input.Error = 'States.TaskFailed' ? 'TuningJobFailed' : $states.input.Error %}"
"""The error of the Tune task's failure state: ``TuningJobFailed`` for a tuning job that failed or was
stopped (the ``.sync`` task's States.TaskFailed), else the task's own (``SageMaker.ValidationException``...)."""
TUNING_FAILED_CAUSE = (
    "{% $states.input.Error = 'States.TaskFailed' and $substring($trim($states.input.Cause), 0, 1) = '{'"
    " ? ($d := $parse($states.input.Cause); $d.HyperParameterTuningJobName & ' ' & $d.HyperParameterTuningJobStatus"
    " & ': ' & ($exists($d.FailureReason) ? $d.FailureReason : 'no reason given'))"
    " : $states.input.Cause %}"
)
"""Its cause, one line: ``<tuning job> <status>: <SageMaker's FailureReason>`` (the ``.sync`` task's cause is
the job's description as JSON), or the task's own cause."""


def tuning_execution_input(options: TuningOptions, values: TuningValues) -> dict[str, Any]:
    """The training workflow's execution input for a checked tuning launch: the training overrides
    (named after the tuning job) and ``tuning``, with the caps :func:`resolve_tuning` settled on, so
    the workflow sends :func:`create_tuning_job_request`'s request for them."""
    tuned = {r.name for r in options.ranges}
    static = {k: v for k, v in options.training.hyperparameters.items() if k not in tuned}
    training = replace(options.training, job_name=str(values.job_name), hyperparameters=static, keep_alive_seconds=None)
    ranges = values.ranges if not isinstance(values.ranges, Jsonata) else ()
    return {
        **training.state_machine_input(),
        TUNING_INPUT: {
            "ranges": {r.name: r.as_json() for r in ranges},
            "max_jobs": values.max_jobs,
            "max_parallel_jobs": values.max_parallel_jobs,
        },
    }


def state_machine_tuning_values(settings: TuningConfig) -> TuningValues:
    """The tuning launch as the workflow's variables (:func:`tuning_state_machine_assignments` over the
    training launch's :data:`STATE_MACHINE_VALUES`); trials keep no warm pool."""
    return TuningValues(
        job_name=Jsonata("$job_name"),
        training=replace(STATE_MACHINE_VALUES, keep_alive_seconds=0, checkpoint_name=Jsonata("$job_name")),
        ranges=Jsonata("$ranges"),
        max_jobs=Jsonata("$max_jobs"),
        max_parallel_jobs=Jsonata("$max_parallel_jobs"),
        settings=settings,
    )


def tuning_state_machine_assignments(template: JobTemplate, settings: TuningConfig, source: str = "$states.input") -> dict[str, Any]:
    """``Assign`` of the Tune branch's first state, over the training launch's variables: ``tuning``,
    ``ranges`` (null when absent), ``max_jobs`` and ``max_parallel_jobs`` (the config's caps by default,
    the parallel one no more than ``max_jobs``), ``checkpoint_name`` (the tuning job's), ``keep_alive_seconds`` (0 unless given: trials keep no
    warm pool), ``hyperparameters`` without the tuned names (the static ones), ``batch_tuned`` (the ranges
    set the global batch: the launch rules' batch split leaves it to the ranges' rule), and without a given
    ``job_name`` the tuning job's own: ``<project>-`` and the execution name's letters and digits, cut
    to SageMaker's 32 characters."""
    tuning = f"{source}.{TUNING_INPUT}"
    given = f"$type({tuning}) = 'object'"

    def member(name: str, default: str) -> str:
        return f"({given} and $exists({tuning}.{name}) ? {tuning}.{name} : {default})"

    max_jobs = member("max_jobs", str(settings.max_jobs))
    parallel_cap = settings.max_parallel_jobs
    ranges = f"{tuning}.ranges"
    tuned = f"($type({ranges}) = 'object' ? $keys({ranges}) : [])"
    static = f"$merge([{{}}, $sift($hyperparameters, function($v, $k) {{$not($k in {tuned})}})])"
    name_length = tuning_job_limits().job_name.max_length
    default_name = (
        f"$substring({json.dumps(template.job_name_prefix)} & $replace($states.context.Execution.Name, /[^A-Za-z0-9]/, ''),"
        f" 0, {name_length})"
    )
    return {
        "tuning": "{% " + tuning + " %}",
        "ranges": "{% " + member("ranges", "null") + " %}",
        "max_jobs": "{% " + max_jobs + " %}",
        "max_parallel_jobs": "{% "
        + member("max_parallel_jobs", f"($m := {max_jobs}; $type($m) = 'number' and $m < {parallel_cap} ? $m : {parallel_cap})")
        + " %}",
        "job_name": f"{{% $exists({source}.job_name) ? $job_name : {default_name} %}}",
        # The tuning job's own location (each trial a folder in it), as its name: the training launch's default,
        # the execution's full name, need not be a valid job name here.
        "checkpoint_name": f"{{% $exists({source}.job_name) ? $job_name : {default_name} %}}",
        "keep_alive_seconds": f"{{% $exists({source}.keep_alive_seconds) ? {source}.keep_alive_seconds : 0 %}}",
        "hyperparameters": f"{{% $type($hyperparameters) = 'object' ? {static} : $hyperparameters %}}",
        hyperparameter_rules.BATCH_TUNED: (
            f"{{% $count($filter({tuned}, function($k) {{$k in {json.dumps(sorted(hyperparameter_rules.BATCH_SETTERS))}}})) > 0 %}}"
        ),
    }


@dataclass(frozen=True)
class _Distinct(Expr):
    """``$count($distinct(values as strings)) = $count(values)``: no value twice, as SageMaker receives them."""

    values: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        strings = [hyperparameter_string(v) for v in self.values.evaluate(env)]
        return len(set(strings)) == len(strings)

    def jsonata(self) -> str:
        values = self.values.jsonata()
        return f"($count($distinct($map({values}, function($x) {{$string($x)}}))) = $count({values}))"


@dataclass(frozen=True)
class _GridSize(Expr):
    """The product of the categorical ranges' value counts: a Grid's trials."""

    ranges: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return math.prod(len(r.get("values") or []) for r in self.ranges.evaluate(env).values())

    def jsonata(self) -> str:
        counts = f"[$each({self.ranges.jsonata()}, function($v) {{$count($lookup($v, 'values'))}})]"
        return f"$reduce({counts}, function($a, $b) {{$a * $b}}, 1)"


def _reads_as_number(value: Expr, *, whole: bool) -> Expr:
    """A number (whole for an integer range), or a string that reads as one."""
    pattern = "^[+-]?[0-9]+$" if whole else _NUMBER.pattern
    number = WholeNumber(value) if whole else eq(type_of(value), "number")
    return any_of(number, all_of(eq(type_of(value), "string"), Matches(value, pattern)))


def _as_number(value: Expr) -> Expr:
    return IfElse(eq(type_of(value), "number"), value, number_of(value))


def _range_is_well_formed(r: Expr) -> Expr:
    """The range ``r`` is one SageMaker takes, as :func:`parse_ranges` checks it (JSON types, bounds in
    order, scaling, 1-N distinct values of at most SageMaker's length)."""
    limits = tuning_job_limits()
    kind = Lookup(r, Lit("type"))

    def only_keys(kind_name: str) -> Expr:
        return eq(count(BadKeys(r, InTable(Lit(dict.fromkeys(sorted(_RANGE_KEYS[kind_name]), True)), KEY))), 0)

    def bounded(kind_name: str, scalings: Sequence[str]) -> Expr:
        low, high, scaling = Lookup(r, Lit("min")), Lookup(r, Lit("max")), Lookup(r, Lit("scaling"))
        whole = kind_name == "integer"
        return all_of(
            eq(kind, kind_name),
            only_keys(kind_name),
            _reads_as_number(low, whole=whole),
            _reads_as_number(high, whole=whole),
            lt(_as_number(low), _as_number(high)),
            any_of(Not(InTable(r, Lit("scaling"))), all_of(eq(type_of(scaling), "string"), InTable(Lit(dict.fromkeys(scalings, True)), scaling))),
            any_of(Not(eq(scaling, "Logarithmic")), gt(_as_number(low), 0)),
            any_of(Not(eq(scaling, "ReverseLogarithmic")), all_of(ge(_as_number(low), 0), lt(_as_number(high), 1))),
        )

    values = Lookup(r, Lit("values"))
    scalar = any_of(*(eq(type_of(ITEM), t) for t in ("string", "number", "boolean")))
    max_length = limits.parameter_value.max_length
    categorical = all_of(
        eq(kind, "categorical"),
        only_keys("categorical"),
        eq(type_of(values), "array"),
        ge(count(values), 1),
        le(count(values), limits.max_categorical_values),
        eq(count(BadItems(values, all_of(scalar, le(length(string_of(ITEM)), max_length)))), 0),
        _Distinct(values),
    )
    return all_of(
        eq(type_of(r), "object"),
        any_of(
            bounded("continuous", limits.scaling_types),
            bounded("integer", tuple(s for s in limits.scaling_types if s != "ReverseLogarithmic")),
            categorical,
        ),
    )


def tuning_launch_rules(template: JobTemplate, settings: TuningConfig) -> tuple[Rule, ...]:
    """The Tune branch's checks of a tuning launch, over :func:`tuning_state_machine_assignments`'s
    variables, after the training launch's own (:func:`training_job_spec.launch_rules`): as far as
    JSONata can say what :func:`resolve_tuning` refuses. The tuning input's shape, each range's shape,
    names (never ``_*`` or ``sagemaker_*``; the built-in trainer's unless the launch runs a script),
    each bound and categorical value with its hyperparameter's value pattern, a continuous range only on
    a hyperparameter that takes fractions, the caps of the config's ``tuning`` section, the tuning job's
    name, no warm pool, a Grid's ranges, the objective's validation channel, and a range over a
    hyperparameter the image splits over the replicas (:func:`_replica_multiple_rules`). What needs the
    image's parser (a bound's range, the checks across keys) only the Python path checks."""
    limits = tuning_job_limits()
    rules = hyperparameter_rules.image_rules()
    tuning, ranges = Var("tuning"), Var("ranges")
    max_jobs, parallel, job_name = Var("max_jobs"), Var("max_parallel_jobs"), Var("job_name")
    builtin = eq(Var("code_uri"), "")
    has_ranges = eq(type_of(ranges), "object")
    r = Lookup(ranges, KEY)
    kind = Lookup(r, Lit("type"))
    well_formed = _range_is_well_formed(r)
    known_names = rules.known_hyperparameters()
    known = Lit(dict.fromkeys(known_names, True))
    by_pattern: dict[str, list[str]] = {}
    for name in known_names:
        by_pattern.setdefault(rules.value_pattern(name), []).append(name)
    fractional = Lit({name: True for name in known_names if re.fullmatch(rules.value_pattern(name), "0.5")})
    value_reads = any_of(
        *(all_of(InTable(Lit(dict.fromkeys(names, True)), KEY), Matches(string_of(ITEM), pattern)) for pattern, names in by_pattern.items())
    )
    bounds = IfElse(eq(kind, "categorical"), Lookup(r, Lit("values")), ArrayOf((Lookup(r, Lit("min")), Lookup(r, Lit("max")))))
    platform = hyperparameter_rules.PLATFORM_PREFIX

    def bad_ranges(ok: Expr) -> Expr:
        return BadKeys(ranges, ok)

    malformed = bad_ranges(well_formed)
    reserved = bad_ranges(Not(any_of(starts_with(KEY, "_"), starts_with(KEY, platform))))
    unknown = bad_ranges(any_of(Not(builtin), InTable(known, KEY), starts_with(KEY, "_"), starts_with(KEY, platform)))
    unreadable = bad_ranges(any_of(Not(builtin), Not(InTable(known, KEY)), Not(well_formed), eq(count(BadItems(bounds, value_reads)), 0)))
    whole_only = bad_ranges(any_of(Not(builtin), Not(InTable(known, KEY)), Not(eq(kind, "continuous")), InTable(fractional, KEY)))
    on_ranges = Not(has_ranges)
    table = [
        Rule(
            "tuning",
            all_of(eq(type_of(tuning), "object"), eq(count(BadKeys(tuning, InTable(Lit(dict.fromkeys(_TUNING_KEYS, True)), KEY))), 0)),
            ("tuning must be an object of ranges, max_jobs and max_parallel_jobs (scripts.launch --tune RANGES.json), not ", string_of(tuning)),
        ),
        Rule(
            "tuning.ranges",
            all_of(has_ranges, ge(key_count(ranges), 1), le(key_count(ranges), limits.max_ranges)),
            (
                f"tuning.ranges must be an object of 1-{limits.max_ranges} hyperparameter -> range (RANGES.json's, e.g."
                ' {"learning_rate": {"type": "continuous", "min": 0.0001, "max": 0.1}})',
            ),
        ),
        Rule(
            "tuning.ranges",
            any_of(on_ranges, eq(count(malformed), 0)),
            (
                "tuning.ranges ", Joined(malformed), " are not ranges SageMaker takes: {type: continuous or integer, min < max"
                f" (numbers; whole for integer), scaling: {', '.join(limits.scaling_types)}}} or {{type: categorical, values:"
                f" 1-{limits.max_categorical_values} distinct strings, numbers or booleans}} (scripts.launch --tune --dry-run says which)",
            ),
        ),
        Rule(
            "tuning.ranges",
            any_of(on_ranges, eq(count(reserved), 0)),
            (
                "tuning.ranges ", Joined(reserved), f" are not for a launch to tune: names starting with _ are SageMaker's and"
                f" {platform}* the platform's (set from the checked code_uri and entry_point)",
            ),
        ),
        Rule(
            "tuning.ranges",
            any_of(on_ranges, eq(count(unknown), 0)),
            (
                "tuning.ranges ", Joined(unknown), " are unknown to the built-in trainer (docs/image.md lists them all),"
                f" or tune a script of your own with {hyperparameter_rules.CODE_FLAGS}",
            ),
        ),
        Rule(
            "tuning.ranges",
            any_of(on_ranges, eq(count(unreadable), 0)),
            (
                "tuning.ranges ", Joined(unreadable), " have bounds or values the built-in trainer cannot read (a whole number,"
                " a number, true/false or one of its choices; scripts.launch --tune --dry-run says which)",
            ),
        ),
        Rule(
            "tuning.ranges",
            any_of(on_ranges, eq(count(whole_only), 0)),
            (
                "tuning.ranges ", Joined(whole_only), " take whole numbers, and a continuous range passes fractions:"
                ' make them "type": "integer"',
            ),
        ),
        Rule(
            "tuning.max_jobs",
            all_of(WholeNumber(max_jobs), ge(max_jobs, 1), le(max_jobs, settings.max_jobs)),
            (
                "tuning.max_jobs ", max_jobs, f" must be a whole number from 1 to {settings.max_jobs}, the cap the deployment's"
                " tuning.max_jobs sets (scripts.launch --max-jobs)",
            ),
        ),
        Rule(
            "tuning.max_parallel_jobs",
            all_of(
                WholeNumber(parallel), ge(parallel, 1), le(parallel, settings.max_parallel_jobs),
                any_of(Not(WholeNumber(max_jobs)), le(parallel, max_jobs)),
            ),
            (
                "tuning.max_parallel_jobs ", parallel, f" must be a whole number from 1 to {settings.max_parallel_jobs} (the"
                " deployment's tuning.max_parallel_jobs) and no more than max_jobs (scripts.launch --max-parallel-jobs)",
            ),
        ),
        Rule(
            "job_name",
            all_of(eq(type_of(job_name), "string"), le(length(job_name), limits.job_name.max_length), Matches(job_name, TUNING_NAME_PATTERN)),
            (
                "job_name ", job_name, f" names the tuning job: at most {limits.job_name.max_length} characters, letters,"
                " digits and hyphens (scripts.launch --tune ... --name)",
            ),
        ),
        Rule(
            "keep_alive_seconds",
            eq(Var("keep_alive_seconds"), 0),
            ("keep_alive_seconds ", Var("keep_alive_seconds"), ": a tuning job's trials keep no warm pool: drop it (--keep-alive)"),
        ),
    ]
    table += _replica_multiple_rules(ranges, builtin, malformed)
    if settings.strategy == "Grid":
        table += _grid_rules(settings, ranges, malformed)
    if settings.objective_metric.startswith("validation:"):
        table.append(_validation_channel_rule(settings, builtin))
    return tuple(table)


def _replica_multiple_rules(ranges: Expr, builtin: Expr, malformed: Expr) -> list[Rule]:
    """A range over a hyperparameter the image splits over the job's replicas
    (:data:`~stacks.components.hyperparameter_rules.REPLICA_MULTIPLES`) lists multiples of them, as
    :func:`range_problems` refuses, over the replicas of
    :func:`~stacks.components.hyperparameter_rules.workflow_replicas` (as a plain launch's batch split).
    Holds where those are not yet known (their own rules refuse them; the pipeline evaluates every
    rule at once), where a range is ``malformed`` (the rule above names it) and where a value is
    unreadable (its own rule says so)."""
    job = hyperparameter_rules.workflow_replicas(MAX_INSTANCE_COUNT)
    instances, instance_type, gpus, replicas, known = job.instances, job.instance_type, job.gpus, job.total, job.known
    table: list[Rule] = []
    for name in hyperparameter_rules.REPLICA_MULTIPLES:
        r = Lookup(ranges, Lit(name))
        listed = eq(Lookup(r, Lit("type")), "categorical")
        not_multiples = _not_multiples(name, Lookup(r, Lit("values")), replicas)
        table.append(Rule(
            "tuning.ranges",
            any_of(
                Not(eq(type_of(ranges), "object")), Not(InTable(ranges, Lit(name))), Not(builtin), Not(known),
                le(replicas, 1), Not(eq(count(malformed), 0)), all_of(listed, eq(count(not_multiples), 0)),
            ),
            (
                IfElse(
                    listed,
                    _Text(_listed_not_multiples(name, _JoinedStrings(not_multiples), replicas, instances, gpus, instance_type)),
                    _Text((
                        f"tuning.ranges {name} would give trials a {name} that is not a multiple of the job's ", replicas,
                        " replicas (instances x GPUs: ", instances, " x ", gpus, " on ", instance_type, "), which the built-in"
                        " trainer refuses (an integer range draws every whole number between its bounds): ",
                        *hyperparameter_rules.replica_multiple_fix(replicas),
                    )),
                ),
            ),
        ))
    return table


def _not_multiples(name: str, values: Expr, replicas: Expr) -> Expr:
    """The categorical ``values`` of ``name`` that read as the image reads them and are not a multiple of
    ``replicas``, in order (an unreadable value is the value pattern's rule to refuse)."""
    return BadItems(values, hyperparameter_rules.splits_over(name, ITEM, replicas))


def _listed_not_multiples(name: str, values: Any, replicas: Any, instances: Any, gpus: Any, instance_type: Any) -> tuple[Any, ...]:
    """The refusal of a categorical range over one of
    :data:`~stacks.components.hyperparameter_rules.REPLICA_MULTIPLES` that lists ``values`` (written
    as one string) the job's replicas do not split, in parts: the words both paths give."""
    return (
        f"tuning.ranges {name} lists ", values, f", which the built-in trainer refuses: {name} is the global batch and must"
        " be divisible by the job's ", replicas, " replicas (instances x GPUs: ", instances, " x ", gpus, " on ",
        instance_type, "); list multiples of ", replicas,
    )


@dataclass(frozen=True)
class _Text(Expr):
    """Text and values (each written as JSONata's ``$string`` writes it) as one string, as a
    :class:`~stacks.components.launch_rules.Rule`'s reason joins them."""

    parts: tuple[Union[str, Expr], ...]

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return Rule("", Lit(True), self.parts).reason_text(env)

    def jsonata(self) -> str:
        return f"({Rule('', Lit(True), self.parts).reason_jsonata()})"


@dataclass(frozen=True)
class _JoinedStrings(Expr):
    """``$join($map(values, $string), ', ')``: values of any JSON type, as a reason names them."""

    values: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return ", ".join(jsonata_string(v) for v in self.values.evaluate(env))

    def jsonata(self) -> str:
        return f"$join($map({self.values.jsonata()}, function($x) {{$string($x)}}), ', ')"


def _grid_rules(settings: TuningConfig, ranges: Expr, malformed: Expr) -> list[Rule]:
    """A Grid takes categorical ranges only, and runs every combination: at most ``tuning.max_jobs``, and
    no fewer than a launch's ``max_jobs``."""
    not_categorical = BadKeys(ranges, eq(Lookup(Lookup(ranges, KEY), Lit("type")), "categorical"))
    on_ranges = Not(eq(type_of(ranges), "object"))
    not_a_grid = any_of(on_ranges, Not(eq(count(not_categorical), 0)), Not(eq(count(malformed), 0)))
    return [
        Rule(
            "tuning.ranges",
            any_of(on_ranges, eq(count(not_categorical), 0)),
            (
                "tuning.ranges ", Joined(not_categorical), " are not categorical, and the Grid strategy takes categorical"
                " ranges only: list their values, or deploy another tuning.strategy",
            ),
        ),
        Rule(
            "tuning.ranges",
            any_of(not_a_grid, le(_GridSize(ranges), settings.max_jobs)),
            (
                "tuning.ranges: the grid has ", _GridSize(ranges), f" combinations, more than tuning.max_jobs = {settings.max_jobs}:"
                " list fewer values",
            ),
        ),
        _grid_max_jobs_rule(settings, ranges, Var("max_jobs"), not_a_grid),
    ]


def _grid_max_jobs_rule(settings: TuningConfig, ranges: Expr, max_jobs: Expr, not_a_grid: Expr) -> Rule:
    """A launch's ``max_jobs`` is no fewer than the grid's combinations (SageMaker's Grid runs them all and
    takes no job count, so fewer would be ignored): evaluated by :func:`resolve_tuning` over checked ranges,
    and by the workflow unless ``not_a_grid`` (the ranges' own refusals). A grid over the cap is the rule
    before's to refuse."""
    size = _GridSize(ranges)
    return Rule(
        "tuning.max_jobs",
        any_of(not_a_grid, Not(WholeNumber(max_jobs)), gt(size, settings.max_jobs), ge(max_jobs, size)),
        (
            "tuning.max_jobs ", max_jobs, " is fewer than the grid's combinations: Grid runs every combination (", size,
            "): list fewer values or drop --max-jobs (the execution input's tuning.max_jobs)",
        ),
    )


def _validation_channel_rule(settings: TuningConfig, builtin: Expr) -> Rule:
    """The built-in trainer measures ``validation:*`` only on its validation channel (:func:`_objective_problems`)."""
    hyperparameters, channels = Var("hyperparameters"), Var("channels")
    channel = IfElse(InTable(hyperparameters, Lit("validation_channel")), Lookup(hyperparameters, Lit("validation_channel")), Lit("validation"))
    return Rule(
        "channels",
        any_of(
            Not(builtin), Not(eq(type_of(hyperparameters), "object")), Not(eq(type_of(channels), "object")),
            Not(eq(type_of(channel), "string")), InTable(channels, channel),
        ),
        (*_missing_validation_channel(settings, channel), ")"),
    )


def tuning_rules(template: JobTemplate, settings: TuningConfig) -> LaunchRules:
    """:func:`tuning_launch_rules` in JSONata, refused as :data:`TUNING_TITLE`."""
    return render_rules(tuning_launch_rules(template, settings), TUNING_TITLE)
