"""Bad input gets one clear line and a non-zero exit, from every entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import cost, launch, list_jobs, preflight, stop, teardown, teardown_audit, watch
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


@pytest.mark.parametrize("module", [launch, list_jobs, stop, teardown, watch, preflight, teardown_audit, cost])
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


def _bare_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No credentials anywhere (environment, files, instance metadata)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        **extra,
    )
    return env


def test_teardown_audit_without_credentials_prints_one_line_and_exits_3(aws, tmp_path):
    env = _bare_env(tmp_path, AWS_REGION="us-east-1", AWS_ENDPOINT_URL=os.environ["AWS_ENDPOINT_URL"])
    result = subprocess.run(
        [sys.executable, "-m", "scripts.teardown_audit"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stdout) == (3, "")
    assert result.stderr.startswith("error: no AWS credentials found") and result.stderr.count("\n") == 1


def test_teardown_audit_without_network_prints_one_line_and_exits_3(tmp_path):
    # A port nothing listens on: the connection is refused at once (no retries against AWS).
    env = _bare_env(
        tmp_path, AWS_REGION="us-east-1", AWS_ENDPOINT_URL="http://127.0.0.1:9", AWS_ACCESS_KEY_ID="x",
        AWS_SECRET_ACCESS_KEY="x", AWS_MAX_ATTEMPTS="1",
    )
    result = subprocess.run(
        [sys.executable, "-m", "scripts.teardown_audit"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 3
    assert result.stderr.startswith("error: cannot reach AWS at http://127.0.0.1:9") and result.stderr.count("\n") == 1


def test_teardown_audit_takes_region_profile_and_context(aws, capsys):
    from scripts import teardown_audit

    assert run(teardown_audit.main, ["--region", "us-east-1", "-c", "project_name=otherproject"]) == 0
    assert capsys.readouterr().out.startswith("teardown audit: resources tagged Project=otherproject in us-east-1")
    assert run(teardown_audit.main, ["--profile", "nope"]) == 3
    assert "check --profile" in capsys.readouterr().err


def test_teardown_audit_without_a_region_says_how_to_set_one(aws, monkeypatch, capsys):
    from scripts import teardown_audit

    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert run(teardown_audit.main, []) == 3
    assert capsys.readouterr().err.startswith("error: no AWS region")
