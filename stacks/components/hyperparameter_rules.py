"""One check of a job's hyperparameters before it costs anything: the image's own rules, wherever a job starts.

The built-in trainer refuses bad hyperparameters when its container starts
(``trainer.contract.hyperparameters``), which on AWS is after a GPU instance has started and billed.
This module brings the same module's rules to every place that starts a job earlier: the config
(``cdk synth`` refuses bad ``training_job.hyperparameters``), :func:`resolve_launch`
(``scripts.launch`` in every mode, dry run included, and the emulator's launcher) and, as far as
JSONata can say it, the launch workflows (:func:`workflow_rules`, in the one launch-rules table).

What each place checks:

- everywhere: no hyperparameter named ``sagemaker_*``. The platform sets those (``sagemaker_program``,
  ``sagemaker_submit_directory``...) from the checked ``code_uri``/``entry_point``; one given as a
  hyperparameter would run code from wherever it points.
- a built-in job (no ``code_uri``), in Python (:func:`problems`): the image's parser (unknown names
  with the closest known one, types, ranges, the checks across keys) and the global batch split over
  the job's replicas (instances x GPUs).
- a built-in job, in the workflow (:func:`workflow_rules`): the names, each value's shape (a whole
  number, a number, one of the choices...) and the batch split over the replicas
  (:func:`batch_split_rule`, in the image's words). Ranges and the checks across keys are caught only
  by the Python path (``scripts.launch``) or, on AWS, when the container starts; a tuning launch's
  ranges on :data:`REPLICA_MULTIPLES` are checked against the replicas in both.
- a user's script: nothing more; the script parses its own arguments.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping

from stacks.components.launch_rules import (
    KEY,
    BadKeys,
    DigitsOf,
    Expr,
    IfElse,
    InTable,
    Joined,
    Lit,
    Lookup,
    Matches,
    Not,
    Reason,
    Rule,
    Var,
    WholeNumber,
    all_of,
    any_of,
    count,
    eq,
    le,
    number_of,
    remainder,
    starts_with,
    string_of,
    times,
    type_of,
)

TRAINING_IMAGE = Path(__file__).resolve().parent.parent.parent / "training_image"
PLATFORM_PREFIX = "sagemaker_"
"""Hyperparameters the platform sets and a launch may not."""
CODE_FLAGS = "scripts.launch --source-dir DIR --entry-point train.py"
REPLICA_MULTIPLES = ("batch_size",)
"""Built-in hyperparameters the trainer refuses unless they are a multiple of the job's replicas
(instances x GPUs per instance: ``batch_problem`` of the image's rules); the only ones it checks
against the instance. A tuned range over one must list multiples: SageMaker draws every whole number
between an integer range's bounds, and most of those would fail when the trial's container starts.
(``batch_size_per_gpu`` scales with the replicas instead, and is refused beside a configured
``batch_size``.)"""
BATCH_SETTERS = frozenset({*REPLICA_MULTIPLES, "batch_size_per_gpu"})
"""The hyperparameters that set a job's global batch: where a tuning launch tunes one, every trial's
batch comes from its range, and the static hyperparameters' (or the image's default) is never run."""
BATCH_TUNED = "batch_tuned"
"""The launch variable that says a tuning launch's ranges hold one of :data:`BATCH_SETTERS`."""


@functools.cache
def image_rules() -> ModuleType:
    """``trainer.contract.hyperparameters`` from ``training_image/`` (standard library only: no TensorFlow)."""
    if str(TRAINING_IMAGE) not in sys.path:
        sys.path.append(str(TRAINING_IMAGE))
    from trainer.contract import hyperparameters

    return hyperparameters


def platform_keys(hyperparameters: Mapping[str, Any]) -> list[str]:
    """The names in ``hyperparameters`` that only the platform may set, sorted."""
    return sorted(key for key in hyperparameters if key.startswith(PLATFORM_PREFIX))


def platform_key_problem(keys: list[str]) -> str:
    """The refusal of :func:`platform_keys` (the workflow's reason says the same)."""
    return (
        f"hyperparameters {', '.join(keys)} are the platform's ({PLATFORM_PREFIX}*, set from the checked code_uri and"
        f" entry_point): drop them, and choose a script with {CODE_FLAGS}"
    )


def replica_multiple_fix(replicas: Any) -> tuple[Any, ...]:
    """The fix for a range over one of :data:`REPLICA_MULTIPLES` on ``replicas`` replicas (a number
    here, an expression in the workflow's rule), in parts: the words both paths give."""
    return ("list multiples of ", replicas, " as a categorical range (\"type\": \"categorical\", \"values\": [...])")


@dataclass(frozen=True)
class Replicas:
    """A job's replicas over the workflow's variables: ``$instance_count`` times the GPUs of
    ``$instance_type`` in ``$instance_facts`` (the table the GPU check's ``EXPECTED_GPU_COUNT`` comes from).

    Attributes:
        instances: ``$instance_count``, the workers.
        instance_type: ``$instance_type``.
        gpus: GPUs per instance.
        total: ``instances`` x ``gpus``.
        known: The type is in the table and the count a whole number no greater than a job's most:
            only then do ``gpus`` and ``total`` mean anything. Elsewhere their own rules refuse the
            launch, and a rule over the replicas holds (the pipeline evaluates every rule at once).
    """

    instances: Expr
    instance_type: Expr
    gpus: Expr
    total: Expr
    known: Expr


def workflow_replicas(max_instances: int) -> Replicas:
    """:class:`Replicas` of a job of at most ``max_instances`` instances."""
    instances, instance_type, facts = Var("instance_count"), Var("instance_type"), Var("instance_facts")
    gpus = number_of(Lookup(Lookup(facts, instance_type), Lit("expected_gpu_count")))
    known = all_of(
        WholeNumber(instances), le(instances, max_instances), eq(type_of(instance_type), "string"), InTable(facts, instance_type)
    )
    return Replicas(instances, instance_type, gpus, times(instances, gpus), known)


def splits_over(name: str, value: Expr, replicas: Expr) -> Expr:
    """``value`` of ``name`` (one of :data:`REPLICA_MULTIPLES`) is a multiple of ``replicas`` as the image
    reads it, or does not read as ``name``'s values do (the value pattern's rule refuses it)."""
    reads = Matches(string_of(value), image_rules().value_pattern(name))
    return any_of(Not(reads), eq(remainder(number_of(DigitsOf(value)), replicas), 0))


def batch_split_rule(hyperparameters: Expr, builtin: Expr, replicas: Replicas, batch_tuned: Expr) -> Rule:
    """The batch split of :func:`problems` as a workflow rule: a built-in job's (``builtin``) global
    batch, the launch's or the deployment's ``batch_size`` or else the image's default, is a multiple
    of its replicas. Holds on one replica, where the instance type or count is not
    :attr:`Replicas.known` and where the value does not read (other rules refuse those), so that a
    launch is refused once, in the image's words (:func:`batch_split_reason`); and without a
    ``batch_size`` where ``batch_size_per_gpu`` sets the batch (it grows with the replicas) or
    ``batch_tuned`` (a tuning launch's ranges set every trial's batch, which their own rule checks).
    Marked ``full_check_covers``: the Python path's :func:`problems` says the same."""
    (name,) = REPLICA_MULTIPLES  # the image's batch_problem checks this one
    given = InTable(hyperparameters, Lit(name))
    default = str(getattr(image_rules().TrainingConfig(), name))
    value = IfElse(given, Lookup(hyperparameters, Lit(name)), Lit(default))
    per_replica = InTable(hyperparameters, Lit("batch_size_per_gpu"))
    return Rule(
        "hyperparameters",
        any_of(
            Not(eq(type_of(hyperparameters), "object")), Not(builtin), all_of(Not(given), any_of(per_replica, eq(batch_tuned, True))),
            Not(replicas.known), le(replicas.total, 1), splits_over(name, value, replicas.total),
        ),
        batch_split_reason(number_of(DigitsOf(value)), replicas.total, replicas.instances),
        full_check_covers=True,
    )


def batch_split_reason(batch: Expr, replicas: Expr, workers: Expr) -> Reason:
    """The image's own refusal (``batch_problem``, as :func:`problems` gives it) with its three numbers
    as expressions: the words are the image's, not a copy."""
    rules = image_rules()
    marks = {"987654321": batch, "7919": replicas, "7907": workers}  # 7919 does not divide 987654321
    text = rules.batch_problem(rules.TrainingConfig(batch_size=987654321), replicas=7919, workers=7907)
    assert text is not None
    parts = re.split(f"({'|'.join(marks)})", text.removesuffix("."))
    return tuple(marks.get(part, part) for part in parts if part)


def problems(hyperparameters: Mapping[str, Any], *, user_script: bool, instance_count: int, gpus_per_instance: int) -> list[str]:
    """What the image would refuse of these hyperparameters, each problem one sentence; empty when none.

    Args:
        hyperparameters: Every hyperparameter the job gets (the configured defaults merged with the launch's).
        user_script: The job runs a user's script (``code_uri``), which parses its own arguments.
        instance_count: Hosts of the job.
        gpus_per_instance: GPUs of each host; the built-in trainer runs one replica per GPU.
    """
    found: list[str] = []
    keys = platform_keys(hyperparameters)
    if keys:
        found.append(platform_key_problem(keys))
    if user_script:
        return found
    rules = image_rules()
    from trainer.contract.errors import ConfigError as ImageConfigError

    builtin = {key: value for key, value in hyperparameters.items() if key not in keys}
    try:
        config = rules.parse_hyperparameters(builtin)
    except ImageConfigError as err:
        return [*found, str(err).removesuffix(".")]
    replicas = max(1, instance_count * gpus_per_instance)
    batch = rules.batch_problem(config.resolved_for(replicas=replicas, uses_gpus=True), replicas=replicas, workers=instance_count)
    return [*found, batch.removesuffix(".")] if batch else found


def workflow_rules(hyperparameters: Expr, builtin: Expr) -> tuple[Rule, ...]:
    """The rules of :func:`problems` that JSONata can express, over the workflow's ``$hyperparameters``;
    ``builtin`` holds for a job without a user's script. Each is marked ``full_check_covers``: the
    Python path runs :func:`problems`, which refuses all they refuse and says more (the closest name)."""
    rules = image_rules()
    is_object = eq(type_of(hyperparameters), "object")
    value = Lookup(hyperparameters, KEY)
    platform = BadKeys(hyperparameters, Not(starts_with(KEY, PLATFORM_PREFIX)))
    known = Lit({name: True for name in rules.known_hyperparameters()})
    # The image tolerates what SageMaker and its SDK inject (model_dir, _tuning_objective_metric).
    injected = any_of(eq(KEY, "model_dir"), starts_with(KEY, "_"), starts_with(KEY, PLATFORM_PREFIX))
    unknown = BadKeys(hyperparameters, any_of(InTable(known, KEY), injected))
    by_pattern: dict[str, list[str]] = {}
    for name in rules.known_hyperparameters():
        by_pattern.setdefault(rules.value_pattern(name), []).append(name)
    shaped = any_of(
        Not(InTable(known, KEY)),
        Not(eq(type_of(value), "string")),
        *(all_of(InTable(Lit(dict.fromkeys(names, True)), KEY), Matches(value, pattern)) for pattern, names in by_pattern.items()),
    )
    misshapen = BadKeys(hyperparameters, shaped)
    return (
        Rule(
            "hyperparameters",
            any_of(Not(is_object), eq(count(platform), 0)),
            (
                "hyperparameters ", Joined(platform), f" are the platform's ({PLATFORM_PREFIX}*, set from the checked code_uri"
                f" and entry_point): drop them, and choose a script with {CODE_FLAGS}",
            ),
            full_check_covers=True,
        ),
        Rule(
            "hyperparameters",
            any_of(Not(is_object), Not(builtin), eq(count(unknown), 0)),
            (
                "hyperparameters ", Joined(unknown), " are unknown to the built-in trainer (scripts.launch --dry-run names"
                " the closest known one; docs/image.md lists them all), or run a script of your own with"
                f" {CODE_FLAGS}",
            ),
            full_check_covers=True,
        ),
        Rule(
            "hyperparameters",
            any_of(Not(is_object), Not(builtin), eq(count(misshapen), 0)),
            (
                "hyperparameters ", Joined(misshapen), " have values the built-in trainer cannot read (a whole number, a"
                " number, true/false or one of its choices; scripts.launch --dry-run says which)",
            ),
            full_check_covers=True,
        ),
    )
