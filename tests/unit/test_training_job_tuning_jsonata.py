"""The training workflow's Tune branch and ``launch --tune --direct`` send the same tuning request.

The Tune branch's JSONata (the training launch's variables, then the tuning launch's, the two rule
lists with the checks and refusals that read them, and the CreateHyperParameterTuningJob request) is
evaluated with the reference JSONata implementation, as ``test_training_job_jsonata`` does for one
training job, and compared with what :func:`resolve_tuning` and :func:`create_tuning_job_request`
build in Python for the execution input ``scripts.launch --tune`` starts (:func:`tuning_execution_input`).
Refused launches take the branch's failure state with one line naming what to fix, and the Python
path refuses them too.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from stacks.components.request_expressions import no_problems
from stacks.components.training_job_spec import JobTemplate, LaunchError, LaunchOptions, launch_rules, state_machine_assignments
from stacks.components.training_job_workflow import LAUNCH_PROBLEMS, TUNING_PROBLEMS
from stacks.components.tuning_job_spec import (
    TUNING_TITLE,
    TuningOptions,
    create_tuning_job_request,
    parse_ranges,
    resolve_tuning,
    state_machine_tuning_values,
    tuning_execution_input,
    tuning_rules,
    tuning_state_machine_assignments,
)
from stacks.config import PlatformConfig, load_config
from tests.synth import project_context
from tests.unit.test_training_job_jsonata import ASSIGN, EVALUATE, NODE_ENV, RESOURCES

# As test_training_job_jsonata's evaluator, along a tuning launch's states: ResolveLaunchOptions,
# ResolveTuningOptions, FindLaunchProblems, CheckLaunchOptions (else InvalidLaunchOptions),
# FindTuningProblems, CheckTuningLaunch (else InvalidTuningLaunch), then Tune's request.
EVALUATOR = EVALUATE + ASSIGN + r"""
(async () => {
  const doc = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const results = [];
  for (const c of doc.cases) {
    const states = { input: c.input, context: { Execution: { Name: c.execution_name } } };
    const resolved = await assign(doc.tuning_assign, await assign(doc.assign, { states }));
    let vars = await assign(doc.launch_find, resolved);
    const launch_ok = await ev(doc.launch_check, vars);
    if (launch_ok) vars = await assign(doc.tuning_find, vars);
    const ok = launch_ok && await ev(doc.tuning_check, vars);
    results.push({
      ok,
      problem: ok ? null : await ev(launch_ok ? doc.tuning_problem : doc.launch_problem, vars),
      request: ok ? await ev(doc.request, vars) : null,
    });
  }
  process.stdout.write(JSON.stringify(results));
})().catch((e) => { console.error(e); process.exit(1); });
"""

RANGES = {
    "learning_rate": {"type": "continuous", "min": 0.0001, "max": 0.1, "scaling": "Logarithmic"},
    "batch_size": {"type": "integer", "min": 64, "max": 512},
    "optimizer": {"type": "categorical", "values": ["adam", "sgd"]},
}


def _config(**tuning: Any) -> PlatformConfig:
    settings = {"objective_metric": "train:loss", **tuning}
    return load_config({**project_context(), **{f"gpu_training.tuning.{k}": json.dumps(v) if not isinstance(v, str) else v for k, v in settings.items()}})


def _evaluate(config: PlatformConfig, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    template = JobTemplate.from_config(config, RESOURCES)
    rules, checks = launch_rules(template), tuning_rules(template, config.tuning)
    doc = {
        "assign": state_machine_assignments(template),
        "tuning_assign": tuning_state_machine_assignments(template, config.tuning),
        "launch_find": {LAUNCH_PROBLEMS: rules.problems()},
        "launch_check": no_problems(LAUNCH_PROBLEMS),
        "launch_problem": rules.refusal(LAUNCH_PROBLEMS),
        "tuning_find": {TUNING_PROBLEMS: checks.problems()},
        "tuning_check": no_problems(TUNING_PROBLEMS),
        "tuning_problem": checks.refusal(TUNING_PROBLEMS),
        "request": create_tuning_job_request(template, state_machine_tuning_values(config.tuning)),
        "cases": [{"execution_name": "e", **c} for c in cases],
    }
    result = subprocess.run(
        ["node", "-e", EVALUATOR], input=json.dumps(doc), capture_output=True, text=True, env=NODE_ENV, timeout=60, check=True
    )
    return json.loads(result.stdout)


def _direct(config: PlatformConfig, options: TuningOptions) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the execution input scripts.launch --tune starts, the request --tune --direct sends)."""
    template = JobTemplate.from_config(config, RESOURCES)
    values = resolve_tuning(template, config.tuning, options)
    return tuning_execution_input(options, values), create_tuning_job_request(template, values)


VALID = [
    TuningOptions(parse_ranges(RANGES), LaunchOptions(job_name="gputrain-tune-1")),
    # Two replicas: batch_size as listed multiples of 2 (an integer range is refused, see below).
    TuningOptions(parse_ranges({**RANGES, "batch_size": {"type": "categorical", "values": [64, "128", 512]}}),
                  LaunchOptions(job_name="gputrain-tune-2", instance_count=2, use_spot=False,
                                hyperparameters={"epochs": 2, "batch_size": 128}), max_jobs=4, max_parallel_jobs=1),
    TuningOptions(parse_ranges({"lr": {"type": "continuous", "min": "0.01", "max": "0.5", "scaling": "ReverseLogarithmic"},
                                "layers": {"type": "categorical", "values": [1, 2, True]}}),
                  LaunchOptions(job_name="gputrain-tune-3", code_uri="s3://artifacts/code/t3/sourcedir.tar.gz", entry_point="train.py",
                                hyperparameters={"epocs": "x"})),
]


def test_the_tune_branch_sends_the_direct_tuning_request():
    config = _config()
    pairs = [_direct(config, options) for options in VALID]
    results = _evaluate(config, [{"input": execution_input} for execution_input, _ in pairs])
    for (execution_input, request), result in zip(pairs, results):
        assert result["ok"] is True, (execution_input, result["problem"])
        assert result["request"] == request
    first = results[0]["request"]
    assert first["HyperParameterTuningJobConfig"]["ParameterRanges"] == {
        "ContinuousParameterRanges": [{"Name": "learning_rate", "MinValue": "0.0001", "MaxValue": "0.1", "ScalingType": "Logarithmic"}],
        "IntegerParameterRanges": [{"Name": "batch_size", "MinValue": "64", "MaxValue": "512", "ScalingType": "Auto"}],
        "CategoricalParameterRanges": [{"Name": "optimizer", "Values": ["adam", "sgd"]}],
    }
    # The tuned names are not static; a given static value stays, and the trials keep no warm pool.
    assert "batch_size" not in results[1]["request"]["TrainingJobDefinition"]["StaticHyperParameters"]
    assert results[1]["request"]["TrainingJobDefinition"]["StaticHyperParameters"]["epochs"] == "2"
    assert "KeepAlivePeriodInSeconds" not in first["TrainingJobDefinition"]["ResourceConfig"]


def test_an_execution_with_only_ranges_gets_the_deployed_caps_and_a_tuning_job_name():
    config = _config(max_jobs=6, max_parallel_jobs=3)
    [result] = _evaluate(config, [{"input": {"tuning": {"ranges": RANGES}}, "execution_name": "0d6c5e6a-1b2c-4d5e-8f90-a1b2c3d4e5f6"}])
    assert result["ok"] is True, result["problem"]
    request = result["request"]
    assert request["HyperParameterTuningJobName"] == "gputrain-0d6c5e6a1b2c4d5e8f90a1b"
    assert request["HyperParameterTuningJobConfig"]["ResourceLimits"] == {"MaxNumberOfTrainingJobs": 6, "MaxParallelTrainingJobs": 3}
    _, direct = _direct(config, TuningOptions(parse_ranges(RANGES), LaunchOptions(job_name=request["HyperParameterTuningJobName"])))
    assert request == direct


def test_an_execution_name_that_is_no_job_name_still_names_the_tuning_job_and_its_checkpoints():
    """The training launch's default names (``<project>-<execution name>``) need not be valid job names for a tuning
    launch, which names its job from the execution's letters and digits: its checkpoint location too."""
    [result] = _evaluate(_config(), [{"input": {"tuning": {"ranges": RANGES}}, "execution_name": "my_tune_run"}])
    assert result["ok"] is True, result["problem"]
    request = result["request"]
    assert request["HyperParameterTuningJobName"] == "gputrain-mytunerun"
    assert request["TrainingJobDefinition"]["CheckpointConfig"]["S3Uri"].endswith("/checkpoints/gputrain-mytunerun/")


LR = {"type": "continuous", "min": 0.001, "max": 0.1}
REFUSED = [
    # (execution input's tuning, or the whole input with "input"; what the one line names)
    ({"tuning": ["lr"]}, 'tuning must be an object of ranges, max_jobs and max_parallel_jobs (scripts.launch --tune RANGES.json), not ["lr"]'),
    ({"tuning": {"ranges": RANGES, "trials": 3}}, "tuning must be an object of ranges, max_jobs and max_parallel_jobs"),
    ({"tuning": {"ranges": {}}}, "tuning.ranges must be an object of 1-30 hyperparameter -> range"),
    ({"tuning": {"ranges": {"learning_rate": {"type": "continuous", "min": 0.1, "max": 0.01}}}},
     "tuning.ranges learning_rate are not ranges SageMaker takes"),
    ({"tuning": {"ranges": {"learning_rate": {"type": "continuous", "min": "a", "max": 0.01}}}}, "tuning.ranges learning_rate are not ranges"),
    ({"tuning": {"ranges": {"batch_size": {"type": "integer", "min": 1.5, "max": 8}}}}, "tuning.ranges batch_size are not ranges"),
    ({"tuning": {"ranges": {"learning_rate": {"type": "continuous", "min": 0, "max": 0.1, "scaling": "Logarithmic"}}}},
     "tuning.ranges learning_rate are not ranges"),
    ({"tuning": {"ranges": {"optimizer": {"type": "categorical", "values": ["adam", "adam"]}}}}, "tuning.ranges optimizer are not ranges"),
    ({"tuning": {"ranges": {"optimizer": {"type": "categorical", "values": []}}}}, "tuning.ranges optimizer are not ranges"),
    ({"tuning": {"ranges": {"optimizer": {"type": "uniform", "values": ["adam"]}}}}, "tuning.ranges optimizer are not ranges"),
    ({"tuning": {"ranges": {"sagemaker_program": {"type": "categorical", "values": ["evil.py"]}}}},
     "tuning.ranges sagemaker_program are not for a launch to tune"),
    ({"tuning": {"ranges": {"_tuning_objective_metric": {"type": "categorical", "values": ["x"]}}}},
     "tuning.ranges _tuning_objective_metric are not for a launch to tune"),
    ({"tuning": {"ranges": {"learning_rat": LR}}}, "tuning.ranges learning_rat are unknown to the built-in trainer"),
    ({"tuning": {"ranges": {"optimizer": {"type": "categorical", "values": ["adam", "rmsprop"]}}}},
     "tuning.ranges optimizer have bounds or values the built-in trainer cannot read"),
    ({"tuning": {"ranges": {"epochs": {"type": "continuous", "min": 1, "max": 5}}}},
     'tuning.ranges epochs take whole numbers, and a continuous range passes fractions: make them "type": "integer"'),
    ({"tuning": {"ranges": {"learning_rate": LR}, "max_jobs": 9}}, "tuning.max_jobs 9 must be a whole number from 1 to 8"),
    ({"tuning": {"ranges": {"learning_rate": LR}, "max_jobs": 2, "max_parallel_jobs": 3}},
     "tuning.max_parallel_jobs 3 must be a whole number from 1 to 2"),
    ({"tuning": {"ranges": {"learning_rate": LR}, "max_jobs": 4, "max_parallel_jobs": "2"}}, "tuning.max_parallel_jobs 2 must be"),
    ({"job_name": "gputrain-a-tuning-job-name-over-32", "tuning": {"ranges": {"learning_rate": LR}}},
     "job_name gputrain-a-tuning-job-name-over-32 names the tuning job: at most 32 characters"),
    ({"keep_alive_seconds": 60, "use_spot": False, "tuning": {"ranges": {"learning_rate": LR}}},
     "keep_alive_seconds 60: a tuning job's trials keep no warm pool"),
]


@pytest.mark.parametrize(("execution_input", "reason"), REFUSED, ids=lambda v: str(v)[:50])
def test_each_refusal_is_one_line_naming_the_fix(execution_input, reason):
    [result] = _evaluate(_config(), [{"input": {"job_name": "gputrain-t1", **execution_input}}])
    assert result["ok"] is False
    assert result["problem"].startswith(f"{TUNING_TITLE}: ") and "\n" not in result["problem"]
    assert reason in result["problem"], result["problem"]


def test_the_training_options_are_checked_as_for_one_job():
    [result] = _evaluate(_config(), [{"input": {"job_name": "gputrain-t1", "instance_count": 0, "tuning": {"ranges": RANGES}}}])
    assert result["ok"] is False
    assert result["problem"].startswith("Invalid launch options: instance_count 0 must be a whole number")


def test_a_scripts_ranges_are_checked_for_shape_and_platform_names_only():
    script = {"code_uri": "s3://artifacts/code/x/sourcedir.tar.gz", "entry_point": "train.py"}
    ok, refused = _evaluate(_config(), [
        {"input": {"job_name": "gputrain-t1", **script, "tuning": {"ranges": {"lr": LR, "depth": {"type": "continuous", "min": 1, "max": 9}}}}},
        {"input": {"job_name": "gputrain-t1", **script, "tuning": {"ranges": {"sagemaker_program": {"type": "categorical", "values": ["x.py"]}}}}},
    ])
    assert ok["ok"] is True, ok["problem"]
    assert "sagemaker_program are not for a launch to tune" in refused["problem"]


def test_a_validation_objective_needs_the_validation_channel():
    config = _config(objective_metric="validation:loss")
    channels = JobTemplate.from_config(config, RESOURCES).channels
    [result] = _evaluate(config, [{"input": {"job_name": "gputrain-t1", "tuning": {"ranges": {"learning_rate": LR}},
                                             "hyperparameters": {"validation_channel": "holdout"}}}])
    assert "holdout" not in channels
    assert result["ok"] is False and "is measured on the 'holdout' input channel, which this job does not have: add the channel (training_job.channels.holdout, or --channel holdout=PREFIX at the launch), or tune train:loss" in result["problem"]


def test_a_grid_takes_categorical_ranges_within_the_cap():
    config = _config(strategy="Grid", max_jobs=4, max_parallel_jobs=2)
    grid = {"optimizer": {"type": "categorical", "values": ["adam", "sgd"]}, "model": {"type": "categorical", "values": ["mlp", "cnn"]}}
    ok, mixed, big = _evaluate(config, [
        {"input": {"job_name": "gputrain-g1", "tuning": {"ranges": grid}}},
        {"input": {"job_name": "gputrain-g2", "tuning": {"ranges": {**grid, "learning_rate": LR}}}},
        {"input": {"job_name": "gputrain-g3", "tuning": {"ranges": {**grid, "epochs": {"type": "categorical", "values": [1, 2]}}}}},
    ])
    assert ok["ok"] is True and "MaxNumberOfTrainingJobs" not in ok["request"]["HyperParameterTuningJobConfig"]["ResourceLimits"]
    assert "tuning.ranges learning_rate are not categorical, and the Grid strategy takes categorical ranges only" in mixed["problem"]
    assert "the grid has 8 combinations, more than tuning.max_jobs = 4" in big["problem"]


@pytest.mark.parametrize(
    "ranges",
    [
        {"learning_rate": {"type": "continuous", "min": 0.1, "max": 0.01}},
        {"optimizer": {"type": "categorical", "values": ["adam", "rmsprop"]}},
        {"epochs": {"type": "continuous", "min": 1, "max": 5}},
        {"learning_rat": LR},
    ],
    ids=lambda v: next(iter(v)),
)
def test_what_the_workflow_refuses_the_direct_launch_refuses(ranges):
    config = _config()
    template = JobTemplate.from_config(config, RESOURCES)
    [result] = _evaluate(config, [{"input": {"job_name": "gputrain-t1", "tuning": {"ranges": ranges}}}])
    assert result["ok"] is False
    with pytest.raises(LaunchError):
        resolve_tuning(template, config.tuning, TuningOptions(parse_ranges(ranges), LaunchOptions(job_name="gputrain-t1")))


def test_a_grid_refuses_fewer_max_jobs_than_its_combinations():
    """SageMaker's Grid runs every combination and takes no job count: a smaller max_jobs would be ignored."""
    config = _config(strategy="Grid", max_jobs=8, max_parallel_jobs=2)
    template = JobTemplate.from_config(config, RESOURCES)
    grid = {"optimizer": {"type": "categorical", "values": ["adam", "sgd"]}, "hidden_units": {"type": "categorical", "values": ["64", "128", "256"]}}
    fewer, default, same, more = _evaluate(config, [
        {"input": {"job_name": "gputrain-g1", "tuning": {"ranges": grid, "max_jobs": 4}}},
        {"input": {"job_name": "gputrain-g2", "tuning": {"ranges": grid}}},
        {"input": {"job_name": "gputrain-g3", "tuning": {"ranges": grid, "max_jobs": 6}}},
        {"input": {"job_name": "gputrain-g4", "tuning": {"ranges": grid, "max_jobs": 8}}},
    ])
    reason = ("tuning.max_jobs 4 is fewer than the grid's combinations: Grid runs every combination (6): list fewer values"
              " or drop --max-jobs (the execution input's tuning.max_jobs)")
    assert fewer["ok"] is False and fewer["problem"] == f"{TUNING_TITLE}: {reason}."
    assert default["ok"] and same["ok"] and more["ok"], (default["problem"], same["problem"], more["problem"])
    with pytest.raises(LaunchError) as info:
        resolve_tuning(template, config.tuning, TuningOptions(parse_ranges(grid), LaunchOptions(job_name="gputrain-g1"), max_jobs=4))
    assert str(info.value) == fewer["problem"]
    for max_jobs, result in ((None, default), (6, same)):
        options = TuningOptions(parse_ranges(grid), LaunchOptions(job_name=result["request"]["HyperParameterTuningJobName"]), max_jobs=max_jobs)
        execution_input, request = _direct(config, options)
        assert execution_input["tuning"]["max_jobs"] == 6 and request == result["request"]


INTEGER_BATCH = {"batch_size": {"type": "integer", "min": 64, "max": 512}}


@pytest.mark.parametrize(
    ("launch", "ranges", "reason"),
    [
        ({"instance_type": "ml.g5.12xlarge"}, INTEGER_BATCH, "4 replicas (instances x GPUs: 1 x 4 on ml.g5.12xlarge)"),
        ({"instance_count": 2}, INTEGER_BATCH, "2 replicas (instances x GPUs: 2 x 1 on ml.g5.xlarge)"),
    ],
    ids=["integer-4-gpus", "integer-2-instances"],
)
def test_a_batch_size_range_that_does_not_split_over_the_replicas_is_refused_on_both_paths(launch, ranges, reason):
    """SageMaker draws every whole number of an integer range (391...), and the built-in trainer refuses a
    global batch that the replicas do not share, after the trial's GPU instance was billed."""
    config = _config()
    [result] = _evaluate(config, [{"input": {"job_name": "gputrain-t1", **launch, "tuning": {"ranges": ranges}}}])
    assert result["ok"] is False and "\n" not in result["problem"]
    replicas = reason.split()[0]
    assert result["problem"] == (
        f"{TUNING_TITLE}: tuning.ranges batch_size would give trials a batch_size that is not a multiple of the job's {reason},"
        " which the built-in trainer refuses (an integer range draws every whole number between its bounds): list multiples of"
        f' {replicas} as a categorical range ("type": "categorical", "values": [...]).'
    )
    template = JobTemplate.from_config(config, RESOURCES)
    with pytest.raises(LaunchError, match=f"range batch_size: .*{replicas} replicas"):
        resolve_tuning(template, config.tuning, TuningOptions(parse_ranges(ranges), LaunchOptions(job_name="gputrain-t1", **launch)))


@pytest.mark.parametrize(
    ("values", "listed"),
    [([256, 390], "390"), ([256, "390", "+1_026", 1024], "390, +1_026")],
    ids=["listed-390-4-gpus", "listed-two-4-gpus"],
)
def test_listed_batch_sizes_the_replicas_do_not_split_are_named_alike_on_both_paths(values, listed):
    """A categorical range draws only what it lists: the refusal names the values the four GPUs do not
    split (in any spelling the image reads), word for word the same on both paths."""
    config = _config()
    launch, ranges = {"instance_type": "ml.g5.12xlarge"}, {"batch_size": {"type": "categorical", "values": values}}
    [result] = _evaluate(config, [{"input": {"job_name": "gputrain-t1", **launch, "tuning": {"ranges": ranges}}}])
    assert result["problem"] == (
        f"{TUNING_TITLE}: tuning.ranges batch_size lists {listed}, which the built-in trainer refuses: batch_size is the global"
        " batch and must be divisible by the job's 4 replicas (instances x GPUs: 1 x 4 on ml.g5.12xlarge); list multiples of 4."
    )
    template = JobTemplate.from_config(config, RESOURCES)
    with pytest.raises(LaunchError) as info:
        resolve_tuning(template, config.tuning, TuningOptions(parse_ranges(ranges), LaunchOptions(job_name="gputrain-t1", **launch)))
    assert str(info.value) == result["problem"]


@pytest.mark.parametrize(
    ("launch", "ranges"),
    [
        ({"instance_type": "ml.g5.12xlarge"}, {"batch_size": {"type": "categorical", "values": [64, "128", "+1_024"]}}),
        ({}, INTEGER_BATCH),
        ({"instance_type": "ml.g5.12xlarge", "code_uri": "s3://artifacts/code/t/sourcedir.tar.gz", "entry_point": "train.py"}, INTEGER_BATCH),
    ],
    ids=["listed-multiples-4-gpus", "integer-1-gpu", "script-4-gpus"],
)
def test_a_batch_size_range_the_replicas_share_is_sent_as_the_direct_launch_sends_it(launch, ranges):
    config = _config()
    execution_input, request = _direct(config, TuningOptions(parse_ranges(ranges), LaunchOptions(job_name="gputrain-t1", **launch)))
    [result] = _evaluate(config, [{"input": execution_input}])
    assert result["ok"] is True, result["problem"]
    assert result["request"] == request


def test_the_batch_split_rule_waits_for_a_known_instance():
    """The pipeline evaluates the tuning rules beside the training launch's: an instance type or count
    that its own rule refuses leaves the batch split rule holding, and evaluating it raises no error."""
    config = _config()
    template = JobTemplate.from_config(config, RESOURCES)
    checks = tuning_rules(template, config.tuning)
    facts = state_machine_assignments(template)["instance_facts"]
    base = {"tuning": {"ranges": INTEGER_BATCH}, "ranges": INTEGER_BATCH, "max_jobs": 2, "max_parallel_jobs": 1, "job_name": "gputrain-t1",
            "keep_alive_seconds": 0, "code_uri": "", "hyperparameters": {"model": "mlp"}, "channels": {"train": "s3://d/t/"},
            "instance_facts": facts}
    cases = [{**base, "instance_type": "ml.m5.large", "instance_count": 2}, {**base, "instance_type": "ml.g5.12xlarge", "instance_count": "2"},
             {**base, "instance_type": "ml.g5.12xlarge", "instance_count": 1}]
    script = EVALUATE + r"""
(async () => {
  const doc = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const out = [];
  for (const vars of doc.cases) out.push(await ev(doc.find, vars));
  process.stdout.write(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"""
    doc = {"find": checks.problems(), "cases": cases}
    result = subprocess.run(["node", "-e", script], input=json.dumps(doc), capture_output=True, text=True, env=NODE_ENV, timeout=60, check=True)
    unknown_type, text_count, four_gpus = json.loads(result.stdout)
    split = "would give trials a batch_size that is not a multiple"
    assert not any(split in reason for reason in unknown_type + text_count)
    assert [reason for reason in four_gpus if split in reason]


def test_a_tuned_batch_size_replaces_the_configured_one_on_both_paths():
    """The configured batch_size 256 does not split over 3 instances, but no trial runs it: each gets a
    listed multiple of 3 from its range. Both paths take the launch and send the same request; tuning
    the learning rate alone on those 3 instances is refused on both, where the image would refuse 256
    when the first trial starts."""
    config = _config()
    ranges = {"batch_size": {"type": "categorical", "values": [192, 384]}}
    options = TuningOptions(parse_ranges(ranges), LaunchOptions(job_name="gputrain-t3", instance_count=3))
    execution_input, request = _direct(config, options)
    [result] = _evaluate(config, [{"input": execution_input}])
    assert result["ok"] is True, result["problem"]
    assert result["request"] == request
    assert "batch_size" not in request["TrainingJobDefinition"]["StaticHyperParameters"]
    refusal = "'batch_size' 256 is the global batch and must be divisible by the 3 replicas"
    with pytest.raises(LaunchError, match=refusal):
        _direct(config, TuningOptions(parse_ranges({"learning_rate": LR}), LaunchOptions(job_name="gputrain-t3", instance_count=3)))
    [untuned] = _evaluate(config, [{"input": {"job_name": "gputrain-t3", "instance_count": 3, "tuning": {"ranges": {"learning_rate": LR}}}}])
    assert untuned["ok"] is False and refusal in untuned["problem"]


def test_without_a_configured_batch_size_the_images_default_is_checked_unless_the_ranges_set_the_batch():
    """A deployment without ``batch_size`` trains at the image's default batch (256): tuning the learning
    rate alone on 3 instances is refused on both paths, as the first trial's container would refuse it;
    ranges over ``batch_size`` or ``batch_size_per_gpu`` set every trial's batch, and both paths take them."""
    context = {**project_context(), "gpu_training.tuning.objective_metric": "train:loss",
               "gpu_training.training_job.hyperparameters": '{"batch_size": null}'}
    config = load_config(context)
    assert "batch_size" not in config.training_job.hyperparameters
    refusal = "'batch_size' 256 is the global batch and must be divisible by the 3 replicas"
    with pytest.raises(LaunchError, match=refusal):
        _direct(config, TuningOptions(parse_ranges({"learning_rate": LR}), LaunchOptions(job_name="gputrain-t3", instance_count=3)))
    [untuned] = _evaluate(config, [{"input": {"job_name": "gputrain-t3", "instance_count": 3, "tuning": {"ranges": {"learning_rate": LR}}}}])
    assert untuned["ok"] is False and refusal in untuned["problem"]
    for ranges in ({"batch_size": {"type": "categorical", "values": [192, 384]}},
                   {"batch_size_per_gpu": {"type": "categorical", "values": [32, 64]}}):
        execution_input, request = _direct(config, TuningOptions(parse_ranges(ranges), LaunchOptions(job_name="gputrain-t3", instance_count=3)))
        [result] = _evaluate(config, [{"input": execution_input}])
        assert result["ok"] is True, result["problem"]
        assert result["request"] == request
