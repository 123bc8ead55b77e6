"""One table of launch rules, two renderings: they agree on a generated set of launches.

Each request's launch rules are written once, as a table of :class:`~stacks.components.launch_rules.Rule`
(:func:`training_launch_rules`, :func:`processing_rules`): :func:`resolve_launch` evaluates the
table in Python (``scripts.launch --direct``, the emulator, the SDK config) and :func:`launch_rules`
renders it to the JSONata the deployed workflow evaluates. This test proves the two renderings
mean the same: a generated set of launches (every field's valid values, each invalid value alone,
and seeded random mixes of both) is run through both, with the reference JSONata implementation.
For every launch both accept or both refuse; when both accept they send the same
CreateTrainingJob request; when they refuse, the Python error is the workflow's refusal word for
word, and a launch with one invalid field is refused by that field's rules. The pipeline's
processing options (:func:`resolve_processing` against :func:`processing_launch_rules`) are held
together the same way. A rule whose JSONata does not mean what its Python means (the last test
breaks one on purpose) fails the comparison.

Needs Node and the npm package ``jsonata`` (as ``test_training_job_jsonata``).
"""

from __future__ import annotations

import json
import random
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest

from stacks.components.launch_rules import Compare, problems, refusal
from stacks.components.pipeline_definition import PIPELINE_PROBLEMS
from stacks.components.processing_job_spec import (
    STATE_MACHINE_PROCESSING_VALUES,
    ProcessingOptions,
    ProcessingTemplate,
    create_processing_job_request,
    processing_launch_rules,
    processing_state_machine_assignments,
    resolve_processing,
)
from stacks.components.request_expressions import no_problems
from stacks.components.training_job_spec import (
    LAUNCH_TITLE,
    JobTemplate,
    LaunchError,
    LaunchOptions,
    create_training_job_request,
    launch_variables,
    resolve_launch,
    training_launch_rules,
)
from stacks.config import load_config
from tests.synth import project_context
from tests.unit.test_training_job_jsonata import EVALUATOR, NODE_ENV, RESOURCES, _evaluate

ABSENT = object()
"""The field is left out of the launch (the deployment's default applies)."""

CODE = "s3://artifacts/code/run/sourcedir.tar.gz"


@dataclass(frozen=True)
class Field:
    """One launch option: values both paths must accept, and values both must refuse."""

    name: str
    valid: tuple[Any, ...]
    invalid: tuple[Any, ...]


FIELDS = (
    Field("job_name", (ABSENT, "gputrain-a1", "gputrain-run-2--b"),
          ("other-x", "gputrain-", "gputrain-a_b", "gputrain--a", "gputrain-" + "a" * 55, "gputrain-a\n", 7)),
    Field("instance_type", (ABSENT, "ml.g5.xlarge", "ml.g5.12xlarge"), ("ml.p4d.24xlarge", "ml.m5.large", "g5.xlarge")),
    Field("instance_count", (ABSENT, 1, 2, 64), (0, 65, -1, 1.5, True, "2")),
    Field("use_spot", (ABSENT, True, False), ("yes", 1)),
    # Valid for the built-in trainer and for a script alike; the invalid ones are tried on the built-in trainer.
    # A batch of 391 is valid on the default one replica, refused in mixes with more (the image's batch split).
    Field("hyperparameters", (ABSENT, {}, {"epochs": 3, "learning_rate": 0.1, "xla": True, "model": "cnn", "image_shape": "28x28x1"},
                              {"learning_rate": 1e-5, "dropout": 0.5, "optimizer": " SGD "}, {"batch_size": "391"}),
          ({"nested": {"a": 1}}, {"notes": "x" * 2501}, {"k" * 257: "1"}, {f"h{i}": i for i in range(98)},
           {"epocs": 3}, {"epochs": "three"}, {"model": "vgg"}, {"xla": "maybe"}, {"train_channel": "a/b"},
           {"sagemaker_program": "evil.py", "sagemaker_submit_directory": "/opt/ml/input/data/train/evil.tar.gz"})),
    Field("legacy_keras", (ABSENT, True, False), ("yes", 0)),
    # A positive keep-alive is valid only on demand, which one deployment's default is not: see the spot case below.
    Field("keep_alive_seconds", (ABSENT, 0), (-1, 3601, 1.5, "60", True)),
    # launch --resume-from: another job's checkpoint location.
    Field("checkpoint_name", (ABSENT, "gputrain-earlier-1"), ("other-x", "gputrain-a/b", "gputrain-", 7)),
    Field("channels", (ABSENT, {}, {"train": "s3://datasets/processed/p/train/"}, {"extra": "s3://datasets/train/more/"}),
          ({"train": "s3://other/train/"}, {"train": "s3://datasets/raw/x/"}, {"train": "s3://datasets/train/../raw/"},
           {"bad name": "s3://datasets/train/"}, {f"c{i}": "s3://datasets/train/" for i in range(20)})),
)
SOURCES = {
    "built-in": {},
    "script": {"code_uri": CODE, "entry_point": "train.py"},
    "script in a folder": {"code_uri": CODE, "entry_point": "src/run.sh"},
}
BAD_SOURCES = {
    "code without entry point": ({"code_uri": CODE}, "code_uri"),
    "entry point without code": ({"entry_point": "train.py"}, "code_uri"),
    "code in another bucket": ({"code_uri": "s3://other/code/run/sourcedir.tar.gz", "entry_point": "train.py"}, "code_uri"),
    "code outside code/": ({"code_uri": "s3://artifacts/training-jobs/x/sourcedir.tar.gz", "entry_point": "train.py"}, "code_uri"),
    "not a tarball": ({"code_uri": "s3://artifacts/code/run/sourcedir.zip", "entry_point": "train.py"}, "code_uri"),
    "entry point leaves the folder": ({"code_uri": CODE, "entry_point": "../train.py"}, "entry_point"),
    "entry point not a script": ({"code_uri": CODE, "entry_point": "train.txt"}, "entry_point"),
    "code not a string": ({"code_uri": 5, "entry_point": "train.py"}, "code_uri"),
}


def _launch(choice: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    return {**{k: v for k, v in choice.items() if v is not ABSENT}, **source}


def generated_launches(seed: int = 24, mixes: int = 150) -> list[tuple[dict[str, Any], str | None]]:
    """``(execution input, the one invalid field or None)``: valid grids, each invalid value alone, random mixes."""
    baseline = {f.name: ABSENT for f in FIELDS}
    launches: list[tuple[dict[str, Any], str | None]] = []
    for field, value in ((f, v) for f in FIELDS for v in f.valid):
        for source in SOURCES.values():
            launches.append((_launch({**baseline, field.name: value}, source), None))
    for field, value in ((f, v) for f in FIELDS for v in f.invalid):
        launches.append((_launch({**baseline, field.name: value}, {}), field.name))
    for source, field in BAD_SOURCES.values():
        launches.append((_launch(baseline, source), field))
    rng = random.Random(seed)
    for _ in range(mixes):
        choice = {f.name: rng.choice(f.valid + f.invalid) if rng.random() < 0.3 else rng.choice(f.valid) for f in FIELDS}
        source = rng.choice([*SOURCES.values(), *(source for source, _ in BAD_SOURCES.values())])
        launches.append((_launch(choice, source), None))
    return launches


def _options(template: JobTemplate, launch: dict[str, Any], execution_name: str) -> LaunchOptions:
    return LaunchOptions(**{"job_name": f"{template.job_name_prefix}{execution_name}", **launch})


def _direct_verdict(template: JobTemplate, launch: dict[str, Any], execution_name: str) -> dict[str, Any] | str:
    """The request ``resolve_launch`` builds, or its refusal."""
    try:
        return create_training_job_request(template, resolve_launch(template, _options(template, launch, execution_name)))
    except LaunchError as error:
        return str(error)


def _python_verdict(template: JobTemplate, launch: dict[str, Any], execution_name: str) -> dict[str, Any] | str:
    """The whole table evaluated in Python (the rules a direct launch leaves to the image's fuller check
    included), else the request ``resolve_launch`` builds."""
    reasons = problems(training_launch_rules(template), launch_variables(template, _options(template, launch, execution_name)))
    return refusal(LAUNCH_TITLE, reasons) if reasons else _direct_verdict(template, launch, execution_name)


def _disagreements(template: Any, verdicts, python_verdict=_python_verdict, side: str = "workflow") -> list[str]:
    """Launches where Python's request or refusal (``python_verdict``) is not the ``side``'s, with both."""
    found = []
    for i, (launch, _, result) in enumerate(verdicts):
        expected = result["request"] if result["ok"] else result["problem"]
        python = python_verdict(template, launch, f"e{i}")
        if python != expected:
            found.append(f"{launch}:\n  {side}: {expected}\n  Python:   {python}")
    return found


DEPLOYMENTS = {
    "as configured": {},
    "checkpointing off, other allowed types": {
        "training_job.checkpointing": "false",
        "training_job.use_spot": "false",
        "training_job.allowed_instance_types": '["ml.g5.xlarge", "ml.g5.12xlarge", "ml.p3.2xlarge"]',
    },
    # A launch's spot would wait less than the job may run: the use_spot rule refuses it.
    "on demand, runtime over the spot wait": {
        "training_job.use_spot": "false",
        "training_job.max_runtime_seconds": "200000",
    },
}


@pytest.fixture(scope="module", params=list(DEPLOYMENTS))
def template(request) -> JobTemplate:
    overrides = {f"gpu_training.{k}": v for k, v in DEPLOYMENTS[request.param].items()}
    return JobTemplate.from_config(load_config({**project_context(), **overrides}), RESOURCES)


@pytest.fixture(scope="module")
def verdicts(template: JobTemplate) -> list[tuple[dict[str, Any], str | None, dict[str, Any]]]:
    launches = generated_launches()
    results = _evaluate(template, [{"input": launch, "execution_name": f"e{i}"} for i, (launch, _) in enumerate(launches)])
    return [(launch, field, result) for (launch, field), result in zip(launches, results)]


def test_the_generated_set_covers_both_outcomes_and_every_field(verdicts):
    outcomes = [result["ok"] for _, _, result in verdicts]
    assert len(verdicts) > 200 and outcomes.count(True) > 50 and outcomes.count(False) > 50
    assert {field for _, field, _ in verdicts} >= {f.name for f in FIELDS}
    # Mixes on several replicas refuse the batch split.
    split = [result["problem"] for _, _, result in verdicts if "is the global batch" in (result["problem"] or "")]
    assert len(split) >= 2, split


def test_python_and_the_workflow_send_the_same_request_or_the_same_refusal(template, verdicts):
    assert _disagreements(template, verdicts) == []


def test_a_direct_launch_refuses_all_the_workflow_refuses_in_its_words_or_the_images(template, verdicts):
    """``scripts.launch`` skips the hyperparameter rules the image's own parser covers and runs that parser:
    it refuses every launch the workflow refuses, word for word unless those rules were broken."""
    covered = [rule for rule in training_launch_rules(template) if rule.full_check_covers]
    checked = 0
    for i, (launch, _, result) in enumerate(verdicts):
        direct = _direct_verdict(template, launch, f"e{i}")
        if result["ok"]:
            assert direct == result["request"], launch
            continue
        assert isinstance(direct, str), (launch, result["problem"])
        values = launch_variables(template, _options(template, launch, f"e{i}"))
        if all(rule.condition.evaluate(values) for rule in covered):
            assert direct == result["problem"], launch
        else:
            checked += "Invalid hyperparameters: " in direct or "are the platform's" in direct
    assert checked >= 6


def test_refusals_list_every_broken_rule(template, verdicts):
    refused = [result["problem"] for _, _, result in verdicts if not result["ok"]]
    assert all(p.startswith("Invalid launch options: ") and p.endswith(".") for p in refused)
    assert any(p.count("; ") >= 2 for p in refused)


def test_a_rule_rendered_wrong_is_caught(template, monkeypatch):
    """The comparison can fail: render ``<=`` as ``<`` (instance_count 64 and full names then differ)."""
    original = Compare.jsonata
    monkeypatch.setattr(Compare, "jsonata", lambda self: original(self).replace(" <= ", " < "))
    launches = generated_launches(mixes=0)
    results = _evaluate(template, [{"input": launch, "execution_name": f"e{i}"} for i, (launch, _) in enumerate(launches)])
    verdicts = [(launch, field, result) for (launch, field), result in zip(launches, results)]
    assert any("'instance_count': 64" in line for line in _disagreements(template, verdicts))


def test_the_workflows_reason_names_the_invalid_field(verdicts):
    for launch, field, result in verdicts:
        if field is not None:
            assert result["ok"] is False, launch
            assert f"{field} " in result["problem"] or f"{field}:" in result["problem"], (launch, result["problem"])


def test_the_mixes_are_reproducible():
    assert generated_launches() == generated_launches()
    assert generated_launches(seed=1) != generated_launches(seed=2)


# --------------------------------------------------------------------------------------------
# The pipeline's processing options: resolve_processing and the processing rules
# --------------------------------------------------------------------------------------------

PROCESS_CODE = "s3://artifacts/code/prep/sourcedir.tar.gz"
PROCESS_FIELDS = (
    Field("job_name", (ABSENT, "gputrain-p1", "gputrain-prep-2--b"), ("other-x", "gputrain-", "gputrain-a_b", "gputrain-" + "a" * 60)),
    Field("instance_type", (ABSENT, "ml.g5.xlarge"), ("ml.m5.large", "g5.xlarge", "ml.p4d.24xlarge")),
    Field("instance_count", (ABSENT, 1, 2), (0, -1, 1.5, True, "1", 1000)),
    Field("input_uri", (ABSENT, "s3://datasets/raw/", "s3://datasets/raw/2026/day-1/"),
          ("s3://datasets/processed/x/", "s3://other/raw/", "s3://datasets/raw/../processed/", "s3://datasets/raw/" + "x" * 1100)),
    Field("arguments", (ABSENT, [], ["--shards", "4"]), ("--shards 4", [1, 2], ["x" * 300])),
)
PROCESS_SOURCES = {"built-in": {}, "script": {"code_uri": PROCESS_CODE, "entry_point": "prep.py"}}
PROCESS_BAD_SOURCES = {
    "code without entry point": ({"code_uri": PROCESS_CODE}, "code_uri"),
    "entry point without code": ({"entry_point": "prep.py"}, "code_uri"),
    "code outside code/": ({"code_uri": "s3://artifacts/raw/sourcedir.tar.gz", "entry_point": "prep.py"}, "code_uri"),
    "entry point leaves the folder": ({"code_uri": PROCESS_CODE, "entry_point": "../prep.py"}, "entry_point"),
}


def generated_processing_runs(seed: int = 22, mixes: int = 120) -> list[tuple[dict[str, Any], str | None]]:
    """As :func:`generated_launches`, for the pipeline's ``process`` options."""
    baseline = {f.name: ABSENT for f in PROCESS_FIELDS}
    runs: list[tuple[dict[str, Any], str | None]] = []
    for field, value in ((f, v) for f in PROCESS_FIELDS for v in f.valid):
        for source in PROCESS_SOURCES.values():
            runs.append((_launch({**baseline, field.name: value}, source), None))
    for field, value in ((f, v) for f in PROCESS_FIELDS for v in f.invalid):
        runs.append((_launch({**baseline, field.name: value}, {}), field.name))
    for source, field in PROCESS_BAD_SOURCES.values():
        runs.append((_launch(baseline, source), field))
    rng = random.Random(seed)
    for _ in range(mixes):
        choice = {f.name: rng.choice(f.valid + f.invalid) if rng.random() < 0.3 else rng.choice(f.valid) for f in PROCESS_FIELDS}
        sources = [*PROCESS_SOURCES.values(), *(source for source, _ in PROCESS_BAD_SOURCES.values())]
        runs.append((_launch(choice, rng.choice(sources)), None))
    return runs


@pytest.fixture(scope="module")
def processing_verdicts() -> tuple[ProcessingTemplate, list[tuple[dict[str, Any], str | None, dict[str, Any]]]]:
    config = load_config(project_context())
    template = ProcessingTemplate.from_config(config, RESOURCES)
    runs = generated_processing_runs()
    rules = processing_launch_rules(template)
    doc = {
        "assign": processing_state_machine_assignments(template, source="$states.input"),
        "find": {PIPELINE_PROBLEMS: rules.problems()},
        "check": no_problems(PIPELINE_PROBLEMS),
        "problem": rules.refusal(PIPELINE_PROBLEMS),
        "request": create_processing_job_request(template, STATE_MACHINE_PROCESSING_VALUES),
        "cases": [{"input": run, "execution_name": f"e{i}"} for i, (run, _) in enumerate(runs)],
    }
    result = subprocess.run(
        ["node", "-e", EVALUATOR], input=json.dumps(doc), capture_output=True, text=True, env=NODE_ENV, timeout=60, check=True
    )
    return template, [(run, field, verdict) for (run, field), verdict in zip(runs, json.loads(result.stdout))]


def _processing_verdict(template: ProcessingTemplate, run: dict[str, Any], execution_name: str) -> dict[str, Any] | str:
    options = ProcessingOptions(**{"job_name": f"{template.job_name_prefix}{execution_name}-process", **run})
    try:
        return create_processing_job_request(template, resolve_processing(template, options))
    except LaunchError as error:
        return str(error)


def test_python_and_the_pipeline_send_the_same_processing_request_or_the_same_refusal(processing_verdicts):
    template, verdicts = processing_verdicts
    outcomes = [verdict["ok"] for _, _, verdict in verdicts]
    assert outcomes.count(True) > 30 and outcomes.count(False) > 30
    assert _disagreements(template, verdicts, _processing_verdict, "pipeline") == []


def test_the_processing_reason_names_the_invalid_field(processing_verdicts):
    for run, field, verdict in processing_verdicts[1]:
        if field is not None:
            assert verdict["ok"] is False, run
            assert f"process.{field}" in verdict["problem"], (run, verdict["problem"])
