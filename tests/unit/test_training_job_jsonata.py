"""The workflow and ``launch --direct`` send the same CreateTrainingJob request.

The state machine's JSONata (launch-option defaults, the option check, the request) is evaluated
with the reference JSONata implementation (the npm package ``jsonata``, the language Step Functions
implements, 2.0.x) and compared with the request :func:`resolve_launch` builds in Python, for
several launches; invalid options must take the ``InvalidLaunchOptions`` branch.

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

from stacks.components.training_job_spec import (
    STATE_MACHINE_VALUES,
    JobResources,
    JobTemplate,
    LaunchError,
    LaunchOptions,
    create_training_job_request,
    resolve_launch,
    state_machine_assignments,
    state_machine_launch_check,
    state_machine_launch_problem,
)
from stacks.config import load_config
from tests.synth import ROOT, project_context

NODE_PATHS = [p for p in (os.environ.get("JSONATA_NODE_PATH"), str(ROOT / "node_modules")) if p]

# Evaluates JSONata-mode fields the way Step Functions does: "{% expr %}" strings anywhere in a
# JSON value, with $states.input / $states.context and the assigned variables bound.
EVALUATOR = r"""
const jsonata = require("jsonata");
async function ev(value, bindings) {
  if (typeof value === "string" && value.startsWith("{%") && value.endsWith("%}"))
    return await jsonata(value.slice(2, -2)).evaluate({}, bindings);
  if (Array.isArray(value)) { const out = []; for (const v of value) out.push(await ev(v, bindings)); return out; }
  if (value && typeof value === "object") { const out = {}; for (const [k, v] of Object.entries(value)) out[k] = await ev(v, bindings); return out; }
  return value;
}
(async () => {
  const doc = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const results = [];
  for (const c of doc.cases) {
    const states = { input: c.input, context: { Execution: { Name: c.execution_name } } };
    const vars = { ...(await ev(doc.assign, { states })), states };
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
                  hyperparameters={"epochs": 3, "lr": 0.1, "flag": True, "model": "cnn"}),
    LaunchOptions(job_name="gputrain-c3", instance_type="ml.g5.12xlarge", instance_count=4),
]
INVALID = [{"job_name": "other-x"}, {"instance_type": "ml.m5.large"}, {"instance_count": 0}, {"instance_count": 1.5},
           {"use_spot": "yes"}, {"job_name": 5}]
# (execution input, what the failure's reason must name): each one broke ResolveLaunchOptions with
# a JSONata error, or passed the check and failed at SageMaker, before the limits were checked.
INVALID_WITH_REASON = [
    ({"hyperparameters": ["epochs", 3]}, "hyperparameters must be an object of names to values, not array"),
    ({"hyperparameters": "epochs=3"}, "hyperparameters must be an object of names to values, not string"),
    ({"hyperparameters": None}, "hyperparameters must be an object of names to values, not null"),
    ({"hyperparameters": {f"h{i}": i for i in range(98)}}, "hyperparameters has 101 entries with the defaults; SageMaker accepts at most 100"),
    ({"hyperparameters": {"notes": "x" * 2501}}, "hyperparameters notes must be strings, numbers or booleans of at most 2500 characters"),
    ({"hyperparameters": {"nested": {"a": 1}, "ok": 1}}, "hyperparameters nested must be strings"),
    ({"instance_type": "ml.g4dn.metal"}, "instance_type ml.g4dn.metal must be a SageMaker training GPU type"),
    ({"instance_count": 0, "use_spot": "yes"}, "instance_count 0 must be a whole number from 1 to 64; use_spot yes must be a boolean"),
]


def _evaluate(template: JobTemplate, cases: list[dict]) -> list[dict]:
    doc = {
        "assign": state_machine_assignments(template),
        "check": state_machine_launch_check(template),
        "problem": state_machine_launch_problem(template),
        "request": create_training_job_request(template, STATE_MACHINE_VALUES),
        "cases": cases,
    }
    result = subprocess.run(
        ["node", "-e", EVALUATOR], input=json.dumps(doc), capture_output=True, text=True, env=NODE_ENV, timeout=60, check=True
    )
    return json.loads(result.stdout)


def test_workflow_and_direct_launch_build_the_same_request():
    template = JobTemplate.from_config(load_config(project_context()), RESOURCES)
    cases = [{"input": o.state_machine_input(), "execution_name": "e"} for o in VALID]
    cases.append({"input": {}, "execution_name": "0d6c5e6a"})
    results = _evaluate(template, cases)
    for options, result in zip(VALID, results):
        assert result["ok"] is True
        assert result["request"] == create_training_job_request(template, resolve_launch(template, options))
    default = results[-1]["request"]
    assert default["TrainingJobName"] == "gputrain-0d6c5e6a"
    assert default == create_training_job_request(template, resolve_launch(template, LaunchOptions(job_name="gputrain-0d6c5e6a")))


def test_invalid_options_take_the_failure_branch():
    template = JobTemplate.from_config(load_config(project_context()), RESOURCES)
    results = _evaluate(template, [{"input": bad, "execution_name": "e"} for bad in INVALID])
    for bad, result in zip(INVALID, results):
        assert result["ok"] is False, bad
        assert result["problem"].startswith("Invalid launch options: ")


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
