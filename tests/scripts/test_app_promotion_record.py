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
    # Settings under the root; promote's markers (keys holding ":") as given.
    context.update({k if ":" in k else f"gpu_training.{k}": v for k, v in overrides.items()})
    return context


def _record(live: str | None, previous: tuple[str, ...] = (), *, live_key: str | None = None) -> str:
    def entry(job: str, key: str | None = None) -> dict:
        return {"job": job, "model_data_url": f"s3://artifacts/{key or f'training-jobs/{job}/output/model.tar.gz'}", "metrics": {}}

    return json.dumps({"live": entry(live, live_key) if live else None, "previous": [entry(j) for j in previous], "rolled_back": []})


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
    source = app.promoted_source(load_config(context), context, REGION)
    if source is None:
        return None
    setting, value = source
    assert setting == "training_job_name", source
    return value


def test_the_live_model_of_the_record_is_served(ssm, capsys):
    _put(ssm, _record(f"{PROJECT}-second", (f"{PROJECT}-first",)))
    assert _job(_context()) == f"{PROJECT}-second"
    assert f"serves {PROJECT}-second, the live model of the promotion record {RECORD}" in capsys.readouterr().err


def test_a_live_model_promoted_from_another_key_is_served_from_that_key(ssm):
    """scripts.promote JOB --artifact-key KEY records KEY as the job's model: the app serves KEY."""
    _put(ssm, _record(f"{PROJECT}-moved", live_key="models/moved/model.tar.gz"))
    context = _context()
    assert app.promoted_source(load_config(context), context, REGION) == ("model_artifact_key", "models/moved/model.tar.gz")


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


def test_a_synth_for_another_account_never_reads_the_credentials_record(ssm, monkeypatch):
    """scripts.architecture synthesizes for the offline account with an example job: with credentials for a
    real account, that account's record is not the one to hold the example against."""
    _put(ssm, _record(f"{PROJECT}-second"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # reading would fail loudly
    context = {**_context(**{"serving.enabled": "true", "serving.training_job_name": "example-job"}), "account": "210987654321"}
    assert app.promoted_source(load_config(context), context, REGION) is None


@pytest.mark.parametrize(
    "override",
    [
        {"serving.enabled": "false"},  # the operator turns serving off for this command
        # scripts.promote's deploy: the model it records once the endpoint serves it
        {"serving.enabled": "true", "serving.training_job_name": f"{PROJECT}-other", "promote:deploy": "true"},
        {"serving.enabled": "true", "serving.model_artifact_key": "models/x/model.tar.gz", "promote:deploy": "true"},
        # scripts.teardown's destroy: which model the serving stack would deploy no longer matters
        {"serving.enabled": "true", "serving.training_job_name": f"{PROJECT}-other", "teardown:destroy": "true"},
        # the configured model is the live one
        {"serving.enabled": "true", "serving.training_job_name": f"{PROJECT}-second"},
        {"serving.enabled": "true", "serving.model_artifact_key": f"training-jobs/{PROJECT}-second/output/model.tar.gz"},
    ],
)
def test_the_command_line_choice_wins_over_the_record(ssm, override):
    _put(ssm, _record(f"{PROJECT}-second"))
    assert _job(_context(**override)) is None


@pytest.mark.parametrize(
    ("override", "setting", "fix"),
    [
        ({"serving.training_job_name": f"{PROJECT}-other"}, f"serving.training_job_name={PROJECT}-other",
         f"serve it with python -m scripts.promote {PROJECT}-other, or clear serving.training_job_name"),
        ({"serving.enabled": "true", "serving.model_artifact_key": "models/x/model.tar.gz"},
         "serving.model_artifact_key=models/x/model.tar.gz",
         "serve it with python -m scripts.promote JOB --artifact-key models/x/model.tar.gz (JOB: the training job whose "
         "model it is), or clear serving.model_artifact_key"),
        ({"serving.model_artifact_key": f"training-jobs/{PROJECT}-third/output/model.tar.gz"},
         f"serving.model_artifact_key=training-jobs/{PROJECT}-third/output/model.tar.gz",
         f"serve it with python -m scripts.promote {PROJECT}-third, or clear serving.model_artifact_key"),
    ],
)
def test_a_model_set_by_hand_that_is_not_the_live_one_is_refused_in_one_line(ssm, override, setting, fix):
    """Before: the app served the setting and ignored the record without a word: the endpoint moved to a
    model the record did not name, and the next plain deploy (reading the record) silently moved it back."""
    _put(ssm, _record(f"{PROJECT}-second"))
    with pytest.raises(app.PromotionRecordError) as err:
        _job(_context(**override))
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{setting} is not the live model of the promotion record {RECORD} ({PROJECT}-second, ")
    assert fix in message and message.endswith("(to tear down meanwhile: python -m scripts.teardown --destroy)")


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
