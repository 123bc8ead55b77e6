"""Bad input gets one clear line and a non-zero exit, from every entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import launch, list_jobs, preflight, stop, teardown, watch
from scripts.common import run

ROOT = Path(__file__).resolve().parents[2]


def test_missing_credentials_as_a_real_command(aws, tmp_path):
    """``python -m scripts.list_jobs`` with no credentials anywhere: one line, exit 3."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_REGION="us-east-1",
        AWS_ENDPOINT_URL=os.environ["AWS_ENDPOINT_URL"],
        AWS_CONFIG_FILE=str(tmp_path / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    result = subprocess.run(
        [sys.executable, "-m", "scripts.list_jobs"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 3
    assert result.stderr.startswith("error: no AWS credentials found") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("module", [launch, list_jobs, stop, teardown, watch, preflight])
def test_every_script_documents_how_to_run_it(module):
    assert f"python -m scripts.{module.__name__.rsplit('.', 1)[1]}" in (module.__doc__ or "")


def test_unknown_stack(aws, capsys):
    assert run(launch.main, ["-c", "project_name=nosuchproject"]) == 3
    assert capsys.readouterr().err == (
        "error: stack nosuchproject-training not found in us-east-1: deploy it first (npx cdk deploy), "
        "or check --region/-c project_name\n"
    )


def test_stack_without_the_outputs(aws, capsys):
    assert run(launch.main, ["-c", "project_name=partial", "--direct"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: stack partial-") and "has no output" in err and err.count("\n") == 1


def test_invalid_configuration_override(aws, capsys):
    assert run(list_jobs.main, ["-c", "training_job.instance_type=ml.m5.large"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: invalid configuration: gpu_training.training_job.instance_type") and err.count("\n") == 1


def test_no_region(aws, monkeypatch, capsys):
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert run(list_jobs.main, []) == 3
    assert capsys.readouterr().err.startswith("error: no AWS region")


def test_unknown_profile(aws, capsys):
    assert run(list_jobs.main, ["--profile", "nope"]) == 3
    assert "check --profile" in capsys.readouterr().err


def test_usage_errors_exit_2(aws, capsys):
    with pytest.raises(SystemExit) as exc:
        run(launch.main, ["--instance-count", "two"])
    assert exc.value.code == 2
