"""app.py reads the promotion record (``/<project>/serving/promotion``, scripts.promote) at synth.

With the CLI's credentials (``CDK_DEFAULT_ACCOUNT`` set) and a live model in the record, the app
has the serving stack serving that model, so ``cdk deploy --all`` keeps it and ``cdk destroy
--all`` removes its endpoint. Offline synth (no credentials) never reads it. On moto.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

import app
from stacks.config import load_config
from tests.scripts.conftest import REGION

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "apprecord"
RECORD = f"/{PROJECT}/serving/promotion"


def _context(**overrides: str) -> dict:
    context = dict(json.loads((ROOT / "cdk.json").read_text(encoding="utf-8"))["context"])
    context.update(json.loads((ROOT / "cdk.context.json").read_text(encoding="utf-8")))  # cached lookups, as the CLI merges them
    context["gpu_training.project_name"] = PROJECT
    context.update({f"gpu_training.{k}": v for k, v in overrides.items()})
    return context


def _record(live: str | None, previous: tuple[str, ...] = ()) -> str:
    def entry(job: str) -> dict:
        return {"job": job, "model_data_url": f"s3://artifacts/training-jobs/{job}/output/model.tar.gz", "metrics": {}}

    return json.dumps({"live": entry(live) if live else None, "previous": [entry(j) for j in previous], "rolled_back": []})


@pytest.fixture
def ssm(aws, monkeypatch):
    monkeypatch.setenv("CDK_DEFAULT_ACCOUNT", "123456789012")
    client = boto3.client("ssm", region_name=REGION)
    yield client
    try:
        client.delete_parameter(Name=RECORD)
    except client.exceptions.ParameterNotFound:
        pass


def _put(ssm, value: str) -> None:
    ssm.put_parameter(Name=RECORD, Value=value, Type="String", Overwrite=True)


def _job(context: dict) -> str | None:
    return app.promoted_job(load_config(context), context, REGION)


def test_the_live_model_of_the_record_is_served(ssm, capsys):
    _put(ssm, _record(f"{PROJECT}-second", (f"{PROJECT}-first",)))
    assert _job(_context()) == f"{PROJECT}-second"
    assert f"serves {PROJECT}-second, the live model of the promotion record {RECORD}" in capsys.readouterr().err


def test_no_record_or_no_live_model_leaves_the_app_as_configured(ssm):
    assert _job(_context()) is None
    _put(ssm, _record(None, (f"{PROJECT}-first",)))
    assert _job(_context()) is None


def test_offline_synth_never_reads_the_record(ssm, monkeypatch):
    _put(ssm, _record(f"{PROJECT}-second"))
    monkeypatch.delenv("CDK_DEFAULT_ACCOUNT")
    # An unreachable endpoint: reading would fail loudly.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert _job(_context()) is None


@pytest.mark.parametrize(
    "override",
    [
        {"serving.enabled": "false"},  # the operator turns serving off for this command
        {"serving.enabled": "true", "serving.training_job_name": f"{PROJECT}-other"},  # scripts.promote's deploy
        {"serving.enabled": "true", "serving.model_artifact_key": "models/x/model.tar.gz"},
    ],
)
def test_the_command_line_choice_wins_over_the_record(ssm, override):
    _put(ssm, _record(f"{PROJECT}-second"))
    assert _job(_context(**override)) is None


def test_a_corrupt_record_is_one_line_naming_it(ssm):
    _put(ssm, "{not json")
    with pytest.raises(app.PromotionRecordError) as err:
        _job(_context())
    message = str(err.value)
    assert "\n" not in message and RECORD in message and "serving.enabled=false" in message


def test_an_unreadable_record_is_one_line_naming_it_and_the_fix(ssm, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_CONNECT_TIMEOUT", "1")
    with pytest.raises(app.PromotionRecordError) as err:
        _job(_context())
    message = str(err.value)
    assert "\n" not in message and f"cannot read the promotion record {RECORD}" in message
    assert "ssm:GetParameter" in message and "serving.enabled=false" in message


@pytest.mark.slow
def test_app_synthesizes_the_serving_stack_of_the_promoted_model(ssm, tmp_path):
    """``python app.py`` as the CDK CLI runs it with credentials: the serving stack is in the
    assembly, its model the record's live job's artifact; a corrupt record stops synth in one line."""
    _put(ssm, _record(f"{PROJECT}-second"))
    env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps(_context()),
        "CDK_OUTDIR": str(tmp_path / "out"),
        "CDK_DEFAULT_REGION": REGION,
        "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
    }
    done = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    template = json.loads((tmp_path / "out" / f"{PROJECT}-serving.template.json").read_text())
    models = [r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Model"]
    assert models and f"training-jobs/{PROJECT}-second/output/model.tar.gz" in json.dumps(models)

    _put(ssm, "[]")
    done = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env={**env, "CDK_OUTDIR": str(tmp_path / "bad")},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"error: the promotion record {RECORD}" in done.stderr.strip().splitlines()[-1]
