"""app.py refuses, in one line, an app that leaves out a compute stack the account has (#39).

The app's set of stacks depends on settings (``cluster.enabled``, ``training_job.enabled``,
``serving.enabled`` and the promotion record) that a later command may not repeat; the CLI does not
tell the app whether it deploys or destroys, so with the CLI's credentials every command is refused
while a deployed ``<project>-cluster|training|serving`` is not in the app: ``cdk destroy --all``
would leave it running. On moto.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import boto3
import pytest

import app
from stacks.config import load_config
from stacks.platform import Platform
from tests.scripts.conftest import REGION

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "appleftout"
TEMPLATE = json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}})


def _config(**overrides: str) -> Any:
    context = dict(json.loads((ROOT / "cdk.json").read_text(encoding="utf-8"))["context"])
    context["gpu_training.project_name"] = PROJECT
    context.update({f"gpu_training.{k}": v for k, v in overrides.items()})
    return load_config(context)


def _platform(*units: str) -> Platform:
    """The app's stacks, as far as the check looks at them: their names."""
    stack = {unit: SimpleNamespace(stack_name=f"{PROJECT}-{unit}") if unit in units else None for unit in ("cluster", "training", "serving")}
    return Platform(data_plane=None, gpu_cluster=stack["cluster"], training_job=stack["training"], serving=stack["serving"])  # type: ignore[arg-type]


@pytest.fixture
def cloudformation(aws, monkeypatch) -> Iterator[Any]:
    monkeypatch.setenv("CDK_DEFAULT_ACCOUNT", "123456789012")
    client = boto3.client("cloudformation", region_name=REGION)
    yield client
    for unit in ("cluster", "training", "serving"):
        client.delete_stack(StackName=f"{PROJECT}-{unit}")


def test_every_unit_in_the_app_asks_nothing(cloudformation, monkeypatch, capsys):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # a call would fail with a warning
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    app.check_no_deployed_stack_left_out(_config(), _platform("cluster", "training", "serving"), REGION)
    assert capsys.readouterr().err == ""


def test_a_unit_left_out_that_is_not_deployed_is_fine(cloudformation):
    app.check_no_deployed_stack_left_out(_config(), _platform("cluster", "training"), REGION)
    cloudformation.create_stack(StackName=f"{PROJECT}-serving", TemplateBody=TEMPLATE)
    cloudformation.delete_stack(StackName=f"{PROJECT}-serving")
    app.check_no_deployed_stack_left_out(_config(), _platform("cluster", "training"), REGION)


def test_a_deployed_serving_stack_the_app_leaves_out_is_one_line_naming_it_and_the_fix(cloudformation):
    """A serving stack deployed with -c serving.enabled=true by hand (no promotion record)."""
    cloudformation.create_stack(StackName=f"{PROJECT}-serving", TemplateBody=TEMPLATE)
    with pytest.raises(app.LeftOutStackError) as err:
        app.check_no_deployed_stack_left_out(_config(), _platform("cluster", "training"), REGION)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{PROJECT}-serving is deployed but not in this app")
    assert "cdk destroy --all would leave it running" in message and "python -m scripts.promote JOB" in message


def test_a_cluster_turned_off_after_its_deploy_is_refused_with_the_setting_that_brings_it_back(cloudformation):
    cloudformation.create_stack(StackName=f"{PROJECT}-cluster", TemplateBody=TEMPLATE)
    cloudformation.create_stack(StackName=f"{PROJECT}-training", TemplateBody=TEMPLATE)
    with pytest.raises(app.LeftOutStackError) as err:
        app.check_no_deployed_stack_left_out(_config(**{"cluster.enabled": "false"}), _platform("training"), REGION)
    message = str(err.value)
    assert "\n" not in message and f"{PROJECT}-training" not in message
    assert f"{PROJECT}-cluster is deployed but not in this app (cluster.enabled is false)" in message
    assert "-c gpu_training.cluster.enabled=true" in message


def test_offline_synth_never_asks(cloudformation, monkeypatch, capsys):
    cloudformation.create_stack(StackName=f"{PROJECT}-serving", TemplateBody=TEMPLATE)
    monkeypatch.delenv("CDK_DEFAULT_ACCOUNT")
    app.check_no_deployed_stack_left_out(_config(), _platform("cluster", "training"), REGION)
    assert capsys.readouterr().err == ""


def test_a_check_that_cannot_be_made_is_one_warning_line(cloudformation, monkeypatch, capsys):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_CONNECT_TIMEOUT", "1")
    app.check_no_deployed_stack_left_out(_config(), _platform("cluster", "training"), REGION)
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"warning: cannot check whether {PROJECT}-serving is deployed")


@pytest.mark.slow
def test_app_refuses_to_synthesize_without_a_deployed_stack(cloudformation, tmp_path):
    """``python app.py`` as the CDK CLI runs it with credentials, ``-c cluster.enabled=false`` while
    the cluster stack is deployed: exit 2, one error line, no assembly."""
    cloudformation.create_stack(StackName=f"{PROJECT}-cluster", TemplateBody=TEMPLATE)
    context = dict(json.loads((ROOT / "cdk.json").read_text(encoding="utf-8"))["context"])
    context.update(json.loads((ROOT / "cdk.context.json").read_text(encoding="utf-8")))
    context.update({"gpu_training.project_name": PROJECT, "gpu_training.cluster.enabled": "false"})
    env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps(context),
        "CDK_OUTDIR": str(tmp_path / "out"),
        "CDK_DEFAULT_REGION": REGION,
        "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
    }
    done = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: {PROJECT}-cluster is deployed but not in this app")
    assert not (tmp_path / "out" / "manifest.json").exists()
