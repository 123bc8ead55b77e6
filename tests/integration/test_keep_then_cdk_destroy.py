"""``scripts/run-local.sh --keep``, then the README's plain ``npx cdk destroy --all``, then
``python -m scripts.teardown_audit``: the audit exits 0, nothing the main job deployed is left (#39).

The main job serves through ``python -m scripts.promote JOB``, which deploys ``<project>-serving``
and writes the promotion record; the app the CLI synthesizes for the destroy reads the record and
has the serving stack. Run after ``--pipeline``, the harder of the two flows: its first execution's
job is served through ``scripts.promote`` as the one-job flow serves its job, and its second
execution's promote step leaves the endpoint on a config CloudFormation does not know. (The one-job
flow's own lifecycle, one more fresh emulator and main job, added ~90 s to CI and nothing this one
does not cover.) The phases are :func:`scripts.emulator.cli.run_phases`, the ones the command line
runs before ``--keep`` waits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from scripts.emulator.cli import parse_args, run_phases
from scripts.emulator.lifecycle import Lifecycle

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning"),
]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kept_then_destroyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``run-local.sh --keep --pipeline``'s phases, then ``npx cdk destroy --all`` and ``python -m
    scripts.teardown_audit`` as a user runs them in another shell (the emulator's exports)."""
    work_dir = tmp_path_factory.mktemp("keep-pipeline")
    run = Lifecycle(parse_args(["--keep", "--pipeline", "--work-dir", str(work_dir)]))
    try:
        run_phases(run)
        project = run.config().project_name
        record = json.loads(run.client("ssm").get_parameter(Name=f"/{project}/serving/promotion")["Parameter"]["Value"])
        endpoint_config = run.client("sagemaker").describe_endpoint(EndpointName=run.endpoint_name)["EndpointConfigName"]
        destroy_output = run.cdk_destroy_all()
        cloudformation = run.client("cloudformation")
        stacks = [s["StackName"] for s in cloudformation.list_stacks()["StackSummaries"] if s["StackStatus"] != "DELETE_COMPLETE"]
        endpoints = [e["EndpointName"] for e in run.client("sagemaker").list_endpoints()["Endpoints"]]
        audit = subprocess.run(
            [sys.executable, "-m", "scripts.teardown_audit"], cwd=ROOT, env=run.env, capture_output=True, text=True, check=False
        )
        yield {
            "run": run, "project": project, "record": record, "endpoint_config": endpoint_config,
            "destroy_output": destroy_output, "stacks": stacks, "endpoints": endpoints, "audit": audit,
        }  # fmt: skip
    finally:
        run.close()


def test_the_main_job_served_through_scripts_promote_and_recorded_it(kept_then_destroyed: dict[str, Any]) -> None:
    run, record = kept_then_destroyed["run"], kept_then_destroyed["record"]
    assert run.serving_deploy_check.missing == []
    assert len(run.pipeline_runs) == 2
    # scripts.promote served the first run's job; the second run's promotion moved the endpoint off
    # CloudFormation's config and recorded its own job live, the first one previous.
    assert kept_then_destroyed["endpoint_config"] == run.pipeline_runs[-1].output["endpoint_config"]
    assert record["live"]["job"] == run.pipeline_runs[-1].output["training_job"]
    assert [p["job"] for p in record["previous"]][:1] == [run.pipeline_runs[0].output["training_job"]]


def test_plain_cdk_destroy_all_leaves_no_stack_and_no_endpoint(kept_then_destroyed: dict[str, Any]) -> None:
    project = kept_then_destroyed["project"]
    assert f"{project}-serving" in kept_then_destroyed["destroy_output"]
    assert not [s for s in kept_then_destroyed["stacks"] if s.startswith(f"{project}-")]
    assert not [e for e in kept_then_destroyed["endpoints"] if e.startswith(f"{project}-")]


def test_the_teardown_audit_exits_0(kept_then_destroyed: dict[str, Any]) -> None:
    audit = kept_then_destroyed["audit"]
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-2000:]
    assert "=> OK: 0 error(s)" in audit.stdout
