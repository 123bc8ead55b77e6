"""The workflow and ``launch --direct`` send the same CreateTrainingJob request.

The state machine's JSONata (launch-option defaults, the broken rules' reasons, the check and the
refusal that read them, the request) is evaluated with the reference JSONata implementation (the npm
package ``jsonata``, the language Step Functions implements, 2.0.x) and compared with the request
:func:`resolve_launch` builds in Python, for several launches; invalid options must take the
``InvalidLaunchOptions`` branch.

Needs Node and the ``jsonata`` package, both installed by ``scripts/bootstrap.sh`` (package.json
pins jsonata 2.0.6); ``JSONATA_NODE_PATH`` can point at another ``node_modules`` folder. Without
them the test fails rather than skips, so a broken setup cannot hide a drift.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from stacks.components.request_expressions import no_problems
from stacks.components.training_job_spec import (
    STATE_MACHINE_VALUES,
    JobResources,
    JobTemplate,
    LaunchError,
    LaunchOptions,
    create_training_job_request,
    launch_rules,
    resolve_launch,
    state_machine_assignments,
)
from stacks.components.training_job_workflow import LAUNCH_PROBLEMS
from stacks.config import load_config
from tests.synth import ROOT, project_context

NODE_PATHS = [p for p in (os.environ.get("JSONATA_NODE_PATH"), str(ROOT / "node_modules")) if p]

# Evaluates JSONata-mode fields the way Step Functions does: "{% expr %}" strings anywhere in a
# JSON value, with $states.input / $states.context and the assigned variables bound.
EVALUATE = r"""
const jsonata = require("jsonata");
async function ev(value, bindings) {
  if (typeof value === "string" && value.startsWith("{%") && value.endsWith("%}"))
    return await jsonata(value.slice(2, -2)).evaluate({}, bindings);
  if (Array.isArray(value)) { const out = []; for (const v of value) out.push(await ev(v, bindings)); return out; }
  if (value && typeof value === "object") { const out = {}; for (const [k, v] of Object.entries(value)) out[k] = await ev(v, bindings); return out; }
  return value;
}
"""
"""``ev(value, bindings)``: a JSON value with its ``{% expr %}`` strings evaluated, as Step Functions does."""


ASSIGN = r"""
async function assign(block, vars) {
  // Step Functions keeps a variable as JSON: what a later state reads is the value's JSON.
  return { ...vars, ...JSON.parse(JSON.stringify(await ev(block, vars))) };
}
"""
"""``assign(block, vars)``: the variables after a state's ``Assign`` (evaluated with ``vars``)."""

# The workflow's states in order: ResolveLaunchOptions, FindLaunchProblems, CheckLaunchOptions, then
# InvalidLaunchOptions's cause or CreateTrainingJob's request.
EVALUATOR = EVALUATE + ASSIGN + r"""
(async () => {
  const doc = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const results = [];
  for (const c of doc.cases) {
    const states = { input: c.input, context: { Execution: { Name: c.execution_name } } };
    const vars = await assign(doc.find, await assign(doc.assign, { states }));
    const ok = await ev(doc.check, vars);
    results.push({ ok, problem: ok ? null : await ev(doc.problem, vars), request: ok ? await ev(doc.request, vars) : null });
  }
  process.stdout.write(JSON.stringify(results));
})().catch((e) => { console.error(e); process.exit(1); });
"""


def _node_env() -> dict[str, str] | None:
    if shutil.which("node") is None:
        return None
    for path in NODE_PATHS:
        if (Path(path) / "jsonata" / "package.json").exists():
            return {**os.environ, "NODE_PATH": path}
    return None


NODE_ENV = _node_env()
if NODE_ENV is None:
    pytest.fail("needs node and the npm package jsonata: run `bash scripts/bootstrap.sh`", pytrace=False)

RESOURCES = JobResources("arn:role", "img:tag", "datasets", "artifacts", "arn:key", ("subnet-a", "subnet-b"), ("sg-1",))
VALID = [
    LaunchOptions(job_name="gputrain-a1"),
    LaunchOptions(job_name="gputrain-b2", instance_type="ml.p3.2xlarge", instance_count=2, use_spot=False,
                  hyperparameters={"epochs": 3, "learning_rate": 0.1, "xla": True, "model": "cnn", "image_shape": "28x28x1"}),
    LaunchOptions(job_name="gputrain-c3", instance_type="ml.g5.12xlarge", instance_count=4),
    # Script mode: the code channel, the SDK's hyperparameters, legacy Keras, and MWMS with 2 hosts.
    LaunchOptions(job_name="gputrain-d4", code_uri="s3://artifacts/code/gputrain-d4/sourcedir.tar.gz",
                  entry_point="train.py", hyperparameters={"epochs": 2}),
    LaunchOptions(job_name="gputrain-e5", instance_count=2, code_uri="s3://artifacts/code/e5/sourcedir.tar.gz",
                  entry_point="src/train.py", legacy_keras=True),
    LaunchOptions(job_name="gputrain-f6", legacy_keras=False),
    # Channels: a pipeline run's shards (processing.output_prefix), merged over the configured ones.
    LaunchOptions(job_name="gputrain-g7", channels={"train": "s3://datasets/processed/p/train/",
                                                    "validation": "s3://datasets/processed/p/validation/"}),
    LaunchOptions(job_name="gputrain-h8", channels={"extra": "s3://datasets/train/more/"},
                  code_uri="s3://artifacts/code/h8/sourcedir.tar.gz", entry_point="train.py"),
]
INVALID = [{"job_name": "other-x"}, {"instance_type": "ml.m5.large"}, {"instance_count": 0}, {"instance_count": 1.5},
           {"use_spot": "yes"}, {"job_name": 5},
           {"code_uri": "s3://artifacts/code/x/sourcedir.tar.gz"},
           {"entry_point": "train.py"},
           {"code_uri": "s3://other-bucket/code/x/sourcedir.tar.gz", "entry_point": "train.py"},
           {"code_uri": "s3://artifacts/training-jobs/x/sourcedir.tar.gz", "entry_point": "train.py"},
           {"code_uri": "s3://artifacts/code/x/sourcedir.zip", "entry_point": "train.py"},
           # The code channel puts it at /opt/ml/input/data/code/train.tar.gz, not the sourcedir.tar.gz the job unpacks.
           {"code_uri": "s3://artifacts/code/x/train.tar.gz", "entry_point": "train.py"},
           {"code_uri": "s3://artifacts/code/x/sourcedir.tar.gz", "entry_point": "../etc/train.py"},
           {"code_uri": "s3://artifacts/code/x/sourcedir.tar.gz", "entry_point": "train.txt"},
           {"legacy_keras": "yes"},
           {"channels": "s3://datasets/train/"},
           {"channels": {"train": "s3://datasets/raw/x/"}},
           {"channels": {"train": "s3://other/train/"}},
           {"channels": {"train": "s3://datasets/train/../raw/"}},
           {"channels": {"bad name": "s3://datasets/train/"}},
           {"channels": {"code": "s3://datasets/train/"}, "code_uri": "s3://artifacts/code/x/sourcedir.tar.gz",
            "entry_point": "train.py"},
           {"channels": {f"c{i}": "s3://datasets/train/" for i in range(20)}}]
# (execution input, what the failure's reason must name): each one broke ResolveLaunchOptions with
# a JSONata error, or passed the check and failed at SageMaker, before the limits were checked.
INVALID_WITH_REASON = [
    ({"hyperparameters": ["epochs", 3]}, "hyperparameters must be an object of names to values, not array"),
    ({"hyperparameters": "epochs=3"}, "hyperparameters must be an object of names to values, not string"),
    ({"hyperparameters": None}, "hyperparameters must be an object of names to values, not null"),
    ({"hyperparameters": {f"h{i}": i for i in range(98)}}, "hyperparameters has 101 entries as sent (the config's and --hp together, and with a script the platform's sagemaker_* ones), SageMaker accepts at most 100"),
    ({"hyperparameters": {"notes": "x" * 2501}}, "hyperparameters notes must be strings, numbers or booleans of at most 2500 characters"),
    ({"hyperparameters": {"nested": {"a": 1}, "ok": 1}}, "hyperparameters nested must be strings"),
    ({"instance_type": "ml.g4dn.metal"}, "instance_type ml.g4dn.metal must be a SageMaker training GPU type"),
    ({"instance_count": 0, "use_spot": "yes"}, "instance_count 0 must be a whole number from 1 to 64 (scripts.launch --instance-count); use_spot yes must be true or false"),
]


def _evaluate(template: JobTemplate, cases: list[dict]) -> list[dict]:
    rules = launch_rules(template)
    doc = {
        "assign": state_machine_assignments(template),
        "find": {LAUNCH_PROBLEMS: rules.problems()},
        "check": no_problems(LAUNCH_PROBLEMS),
        "problem": rules.refusal(LAUNCH_PROBLEMS),
        "request": create_training_job_request(template, STATE_MACHINE_VALUES),
        "cases": cases,
    }
    result = subprocess.run(
        ["node", "-e", EVALUATOR], input=json.dumps(doc), capture_output=True, text=True, env=NODE_ENV, timeout=60, check=True
    )
    return json.loads(result.stdout)


def test_workflow_and_direct_launch_build_the_same_request():
    context = {**project_context(), "gpu_training.training_job.allowed_instance_types": '["ml.p3.2xlarge", "ml.g5.12xlarge"]'}
    template = JobTemplate.from_config(load_config(context), RESOURCES)
    cases = [{"input": o.state_machine_input(), "execution_name": "e"} for o in VALID]
    cases.append({"input": {}, "execution_name": "0d6c5e6a"})
    results = _evaluate(template, cases)
    for options, result in zip(VALID, results):
        assert result["ok"] is True
        assert result["request"] == create_training_job_request(template, resolve_launch(template, options))
    default = results[-1]["request"]
    assert default["TrainingJobName"] == "gputrain-0d6c5e6a"
    assert default == create_training_job_request(template, resolve_launch(template, LaunchOptions(job_name="gputrain-0d6c5e6a")))


def test_a_type_outside_the_allowed_types_takes_the_failure_branch_naming_them():
    template = JobTemplate.from_config(load_config(project_context()), RESOURCES)
    (result,) = _evaluate(template, [{"input": {"instance_type": "ml.p4d.24xlarge"}, "execution_name": "e"}])
    assert result["ok"] is False
    assert result["problem"].startswith("Invalid launch options: instance_type ml.p4d.24xlarge must be a SageMaker training GPU type")
    assert "that this deployment allows (training_job.allowed_instance_types: ml.g5.12xlarge, ml.g5.xlarge)" in result["problem"]
    with pytest.raises(LaunchError) as info:
        resolve_launch(template, LaunchOptions(job_name="gputrain-e", instance_type="ml.p4d.24xlarge"))
    assert str(info.value) == result["problem"]


def test_invalid_options_take_the_failure_branch():
    template = JobTemplate.from_config(load_config(project_context()), RESOURCES)
    results = _evaluate(template, [{"input": bad, "execution_name": "e"} for bad in INVALID])
    for bad, result in zip(INVALID, results):
        assert result["ok"] is False, bad
        assert result["problem"].startswith("Invalid launch options: ")
        # The Python path refuses the same options.
        options = LaunchOptions(job_name=bad.get("job_name", "gputrain-x1") if isinstance(bad.get("job_name", ""), str) else None,
                                instance_type=bad.get("instance_type"), instance_count=bad.get("instance_count"),
                                code_uri=bad.get("code_uri"), entry_point=bad.get("entry_point"),
                                legacy_keras=bad.get("legacy_keras"), channels=bad.get("channels", {}))
        if "use_spot" not in bad and not isinstance(bad.get("job_name", ""), int):
            with pytest.raises(LaunchError):
                resolve_launch(template, options)


def test_a_warm_pool_is_kept_on_demand_and_refused_with_spot():
    template = JobTemplate.from_config(load_config(project_context()), RESOURCES)
    on_demand = {"job_name": "gputrain-w1", "use_spot": False, "keep_alive_seconds": 600}
    spot = {"job_name": "gputrain-w2", "use_spot": True, "keep_alive_seconds": 600}
    kept, refused, none = _evaluate(template, [{"input": on_demand, "execution_name": "e1"}, {"input": spot, "execution_name": "e2"},
                                               {"input": {"job_name": "gputrain-w3"}, "execution_name": "e3"}])
    assert kept["ok"] and kept["request"]["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 600
    assert kept["request"] == create_training_job_request(template, resolve_launch(template, LaunchOptions(**on_demand)))
    assert not refused["ok"] and "keep_alive_seconds 600 needs an on-demand job: SageMaker keeps no warm pool for managed spot" in refused["problem"]
    with pytest.raises(LaunchError, match="keep_alive_seconds 600 needs an on-demand job"):
        resolve_launch(template, LaunchOptions(**spot))
    assert none["ok"] and "KeepAlivePeriodInSeconds" not in none["request"]["ResourceConfig"]


EVIL = {"sagemaker_program": "evil.py", "sagemaker_submit_directory": "/opt/ml/input/data/train/evil.tar.gz"}


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        # Issue #42: code from a dataset channel instead of s3://<artifacts>/code/, for a built-in job and a script's.
        ({"hyperparameters": EVIL}, "hyperparameters sagemaker_program, sagemaker_submit_directory are the platform's"),
        ({"hyperparameters": EVIL, "code_uri": "s3://artifacts/code/x/sourcedir.tar.gz", "entry_point": "train.py"},
         "hyperparameters sagemaker_program, sagemaker_submit_directory are the platform's"),
        ({"hyperparameters": {"sagemaker_multi_worker_mirrored_strategy_enabled": "false"}}, "are the platform's"),
        # Issue #41: what the image's own parser would refuse once a GPU instance had started.
        ({"hyperparameters": {"epocs": 3}}, "hyperparameters epocs are unknown to the built-in trainer"),
        ({"hyperparameters": {"batch_size": "abc", "model": "MLP"}}, "hyperparameters batch_size have values the built-in trainer cannot read"),
    ],
)
def test_the_workflow_refuses_platform_keys_and_what_the_image_would_refuse(given, reason):
    template = JobTemplate.from_config(load_config(project_context()), RESOURCES)
    [result] = _evaluate(template, [{"input": {"job_name": "gputrain-x1", **given}, "execution_name": "e"}])
    assert result["ok"] is False and reason in result["problem"], result
    with pytest.raises(LaunchError, match="are the platform's|Invalid hyperparameters: "):
        resolve_launch(template, LaunchOptions(job_name="gputrain-x1", **given))


def test_a_scripts_own_hyperparameters_pass_the_workflow_unchecked():
    template = JobTemplate.from_config(load_config(project_context()), RESOURCES)
    script = {"code_uri": "s3://artifacts/code/x/sourcedir.tar.gz", "entry_point": "train.py", "hyperparameters": {"epocs": "x", "lr": 1}}
    [result] = _evaluate(template, [{"input": {"job_name": "gputrain-x1", **script}, "execution_name": "e"}])
    assert result["ok"] is True, result
    assert result["request"]["HyperParameters"] == {
        "epocs": "x", "lr": "1", "sagemaker_program": "train.py", "sagemaker_submit_directory": "/opt/ml/input/data/code/sourcedir.tar.gz"}


def test_script_mode_request_carries_the_code_channel_and_the_sdk_hyperparameters():
    template = JobTemplate.from_config(load_config(project_context()), RESOURCES)
    request = create_training_job_request(template, resolve_launch(template, VALID[4]))
    code = [c for c in request["InputDataConfig"] if c["ChannelName"] == "code"]
    assert code == [{"ChannelName": "code", "InputMode": "File", "DataSource": {"S3DataSource": {
        "S3DataType": "S3Prefix", "S3Uri": "s3://artifacts/code/e5/sourcedir.tar.gz", "S3DataDistributionType": "FullyReplicated"}}}]
    hps = request["HyperParameters"]
    assert hps["sagemaker_program"] == "src/train.py"
    assert hps["sagemaker_submit_directory"] == "/opt/ml/input/data/code/sourcedir.tar.gz"
    assert hps["sagemaker_multi_worker_mirrored_strategy_enabled"] == "true"
    assert request["Environment"]["TF_USE_LEGACY_KERAS"] == "1"
    # The deployment's hyperparameters are the built-in trainer's: a script receives only its own.
    assert set(hps) == {"sagemaker_program", "sagemaker_submit_directory", "sagemaker_multi_worker_mirrored_strategy_enabled"}
    assert create_training_job_request(template, resolve_launch(template, VALID[3]))["HyperParameters"]["epochs"] == "2"
    built_in = create_training_job_request(template, resolve_launch(template, VALID[0]))
    assert [c["ChannelName"] for c in built_in["InputDataConfig"]] == list(template.channels)
    assert not any(k.startswith("sagemaker_") for k in built_in["HyperParameters"])
    assert "TF_USE_LEGACY_KERAS" not in built_in["Environment"]



@pytest.mark.parametrize(("execution_input", "reason"), INVALID_WITH_REASON, ids=lambda v: str(v)[:40])
def test_invalid_options_fail_with_a_reason_not_a_jsonata_error(execution_input, reason):
    template = JobTemplate.from_config(load_config(project_context()), RESOURCES)
    [result] = _evaluate(template, [{"input": execution_input, "execution_name": "e"}])
    assert result["ok"] is False
    assert reason in result["problem"], result["problem"]


def test_the_limits_are_the_direct_launchs_limits():
    """What the workflow refuses for SageMaker's limits, ``resolve_launch`` refuses too."""
    template = JobTemplate.from_config(load_config(project_context()), RESOURCES)
    for execution_input, _ in INVALID_WITH_REASON[3:7]:
        with pytest.raises(LaunchError):
            resolve_launch(template, LaunchOptions(job_name="gputrain-x", **execution_input))


def test_spot_needs_a_runtime_within_the_wait_in_the_workflow_the_direct_launch_and_tuning():
    """An on-demand deployment whose runtime is over the spot wait: a launch's use_spot would send
    MaxWaitTimeInSeconds < MaxRuntimeInSeconds, which CreateTrainingJob rejects."""
    from stacks.components.tuning_job_spec import TuningOptions, parse_ranges, resolve_tuning

    config = load_config({**project_context(), "gpu_training.training_job.use_spot": "false",
                          "gpu_training.training_job.max_runtime_seconds": "200000"})
    template = JobTemplate.from_config(config, RESOURCES)
    refused, on_demand = _evaluate(template, [{"input": {"job_name": "gputrain-s1", "use_spot": True}, "execution_name": "e"},
                                              {"input": {"job_name": "gputrain-s2"}, "execution_name": "e"}])
    reason = ("use_spot true needs training_job.max_runtime_seconds (200000) no more than training_job.max_wait_seconds (172800),"
              " which SageMaker requires of managed spot: launch on demand (scripts.launch --on-demand), or deploy with"
              " training_job.max_wait_seconds=200000 or a lower max_runtime_seconds")
    assert refused["ok"] is False and refused["problem"] == f"Invalid launch options: {reason}."
    with pytest.raises(LaunchError) as info:
        resolve_launch(template, LaunchOptions(job_name="gputrain-s1", use_spot=True))
    assert str(info.value) == refused["problem"]
    with pytest.raises(LaunchError, match="use_spot true needs training_job.max_runtime_seconds"):
        resolve_tuning(template, config.tuning, TuningOptions(parse_ranges({"epochs": {"type": "integer", "min": 1, "max": 3}}),
                                                              LaunchOptions(job_name="gputrain-t1", use_spot=True)))
    assert on_demand["ok"] is True and "MaxWaitTimeInSeconds" not in on_demand["request"]["StoppingCondition"]
    assert on_demand["request"] == create_training_job_request(template, resolve_launch(template, LaunchOptions(job_name="gputrain-s2")))


@pytest.mark.parametrize(
    ("user_count", "instance_count", "sent"),
    [(98, 1, 100), (99, 1, 101), (98, 2, 101), (97, 2, 100)],
)
def test_the_hyperparameter_limit_counts_the_platforms_script_mode_entries(user_count, instance_count, sent):
    """A script's launch gets sagemaker_program and sagemaker_submit_directory, and on several instances
    sagemaker_multi_worker_mirrored_strategy_enabled: SageMaker counts them against its 100."""
    template = JobTemplate.from_config(load_config(project_context()), RESOURCES)
    launch = {"job_name": "gputrain-x1", "code_uri": "s3://artifacts/code/x/sourcedir.tar.gz", "entry_point": "train.py",
              "instance_count": instance_count, "hyperparameters": {f"h{i}": "1" for i in range(user_count)}}
    [result] = _evaluate(template, [{"input": launch, "execution_name": "e"}])
    if sent <= 100:
        assert result["ok"] is True, result["problem"]
        assert len(result["request"]["HyperParameters"]) == sent
        assert result["request"] == create_training_job_request(template, resolve_launch(template, LaunchOptions(**launch)))
        return
    assert result["ok"] is False
    assert f"hyperparameters has {sent} entries as sent" in result["problem"]
    with pytest.raises(LaunchError) as info:
        resolve_launch(template, LaunchOptions(**launch))
    assert str(info.value) == result["problem"]


CODE = {"code_uri": "s3://artifacts/code/x/sourcedir.tar.gz", "entry_point": "train.py"}
SPLIT = "is the global batch and must be divisible by the"


@pytest.mark.parametrize(
    ("launch", "refused"),
    [
        ({"instance_type": "ml.g5.12xlarge", "hyperparameters": {"batch_size": "391"}},
         f"hyperparameter 'batch_size' 391 {SPLIT} 4 replicas of this job (1 worker(s)); use a multiple of 4"),
        ({"instance_type": "ml.g5.xlarge", "instance_count": 2, "hyperparameters": {"batch_size": 391}},
         f"hyperparameter 'batch_size' 391 {SPLIT} 2 replicas of this job (2 worker(s)); use a multiple of 2"),
        # As the image reads it (quotes, + and _ allowed); the configured batch_size (256) on 3 replicas.
        ({"instance_type": "ml.g5.12xlarge", "hyperparameters": {"batch_size": ' "+3_91" '}},
         f"hyperparameter 'batch_size' 391 {SPLIT} 4 replicas of this job (1 worker(s)); use a multiple of 4"),
        ({"instance_type": "ml.g5.xlarge", "instance_count": 3},
         f"hyperparameter 'batch_size' 256 {SPLIT} 3 replicas of this job (3 worker(s)); use a multiple of 3"),
        # After the table's other reasons, as the direct launch gives the image's check.
        ({"instance_type": "ml.g5.12xlarge", "hyperparameters": {"batch_size": "391"}, "legacy_keras": "yes"},
         f"legacy_keras yes must be true or false; hyperparameter 'batch_size' 391 {SPLIT} 4 replicas of this job"
         " (1 worker(s)); use a multiple of 4"),
        ({"instance_type": "ml.g5.12xlarge", "hyperparameters": {"batch_size": "384"}}, None),
        # One replica; a user's script parses its own batch_size.
        ({"instance_type": "ml.g5.xlarge", "hyperparameters": {"batch_size": "391"}}, None),
        ({"instance_type": "ml.g5.12xlarge", "hyperparameters": {"batch_size": "391"}, **CODE}, None),
        ({"instance_type": "ml.g5.12xlarge", "instance_count": 2, "hyperparameters": {"batch_size": "391"}, **CODE}, None),
        # An invalid type or count is its own rule's to refuse: the split says nothing.
        ({"instance_type": "ml.p4d.24xlarge", "instance_count": 2, "hyperparameters": {"batch_size": "391"}},
         "instance_type ml.p4d.24xlarge must be a SageMaker training GPU type"),
        ({"instance_type": "ml.g5.12xlarge", "instance_count": 65, "hyperparameters": {"batch_size": "391"}},
         "instance_count 65 must be a whole number from 1 to 64 (scripts.launch --instance-count)"),
        ({"instance_type": "ml.g5.12xlarge", "instance_count": "2", "hyperparameters": {"batch_size": "391"}},
         "instance_count 2 must be a whole number from 1 to 64 (scripts.launch --instance-count)"),
    ],
    ids=lambda v: str(v)[:60],
)
def test_a_batch_the_replicas_do_not_split_is_refused_before_an_instance_starts_in_the_direct_launchs_words(launch, refused):
    """The built-in trainer refuses a global batch its replicas (instances x GPUs) do not divide when its
    container starts, on a billed GPU instance: the workflow refuses it up front, as ``launch --direct``
    does and in the same words (the image's), and leaves a user's script, one replica and an invalid
    instance type or count (their own rules') alone."""
    template = JobTemplate.from_config(load_config(project_context()), RESOURCES)
    problem = _workflow_then_direct(template, launch, refused is not None)
    if refused is not None:
        assert problem.startswith(f"Invalid launch options: {refused}"), problem
        assert problem.count(SPLIT) == refused.count(SPLIT), problem


def _workflow_then_direct(template: JobTemplate, launch: dict, refused: bool) -> str:
    """``launch`` (named gputrain-x1) through the workflow's JSONata and ``launch --direct``: both take it
    and send the same request, or (``refused``) both refuse it in the same words; those words."""
    launch = {"job_name": "gputrain-x1", **launch}
    [result] = _evaluate(template, [{"input": launch, "execution_name": "e"}])
    if not refused:
        assert result["ok"] is True, result["problem"]
        assert result["request"] == create_training_job_request(template, resolve_launch(template, LaunchOptions(**launch)))
        return ""
    assert result["ok"] is False
    with pytest.raises(LaunchError) as info:
        resolve_launch(template, LaunchOptions(**launch))
    assert str(info.value) == result["problem"]
    return result["problem"]


@pytest.mark.parametrize(
    ("launch", "refused"),
    [
        # Neither the deployment nor the launch sets batch_size: the image's default (256) is the batch.
        ({"instance_type": "ml.g5.xlarge", "instance_count": 3},
         f"hyperparameter 'batch_size' 256 {SPLIT} 3 replicas of this job (3 worker(s)); use a multiple of 3"),
        ({"instance_type": "ml.g5.12xlarge", "instance_count": 3, "hyperparameters": {"epochs": 2}},
         f"hyperparameter 'batch_size' 256 {SPLIT} 12 replicas of this job (3 worker(s)); use a multiple of 12"),
        ({"instance_type": "ml.g5.xlarge", "instance_count": 4}, None),
        # batch_size_per_gpu sets a batch that grows with the replicas; a script parses its own.
        ({"instance_type": "ml.g5.xlarge", "instance_count": 3, "hyperparameters": {"batch_size_per_gpu": 32}}, None),
        ({"instance_type": "ml.g5.xlarge", "instance_count": 3, **CODE}, None),
    ],
    ids=lambda v: str(v)[:60],
)
def test_without_a_batch_size_the_images_default_batch_is_the_one_split(launch, refused):
    """A deployment whose hyperparameters leave out ``batch_size`` trains at the image's default batch:
    the workflow checks that one against the replicas, as ``launch --direct`` does, rather than letting
    the container refuse it on billed GPU instances."""
    context = {**project_context(), "gpu_training.training_job.hyperparameters": '{"batch_size": null}'}
    template = JobTemplate.from_config(load_config(context), RESOURCES)
    assert "batch_size" not in template.default_hyperparameters
    problem = _workflow_then_direct(template, launch, refused is not None)
    if refused is not None:
        assert problem == f"Invalid launch options: {refused}.", problem
