"""Policy gates: cdk-nag (AwsSolutions + NIST 800-53 R5) over every configuration (cfn-lint: test_cfn_lint.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk import App, aws_s3 as s3

from scripts.security_report import VARIANTS
from stacks.components.policy import acknowledge, add_policy_packs
from stacks.config import load_config
from stacks.platform import build_platform
from tests.synth import ROOT, TEST_ENV, cached_synth, project_context

# Configurations whose templates must be clean: each exercises different resources (the same
# variants the security report checks with --variants).
GATED_CONFIGS = {"default": {}, **VARIANTS}


@pytest.fixture(scope="module")
def gate_root(tmp_path_factory):
    return tmp_path_factory.mktemp("gates")


def _failing_plugins(report: dict) -> list[str]:
    return [p["pluginName"] for p in report["pluginReports"] if p["conclusion"] != "success"]


@pytest.mark.parametrize("name", list(GATED_CONFIGS))
def test_policy_packs_pass_with_every_finding_acknowledged(gate_root, name):
    """Synthesis with both packs raises on any unacknowledged finding (see the test below that
    proves it does); a clean pack leaves no entry in the report, so success is: synth returned
    and no plugin failed."""
    synthesized = cached_synth(gate_root, GATED_CONFIGS[name])
    report = synthesized.validation_report()
    assert report is not None
    assert _failing_plugins(report) == []


def test_gate_fails_synth_on_a_non_compliant_resource(tmp_path):
    """The gate is real: an unencrypted, unlogged bucket stops synthesis."""
    context = project_context()
    app = App(context=context, outdir=str(tmp_path))
    platform = build_platform(app, load_config(context), TEST_ENV)
    s3.Bucket(platform.data_plane, "CarelessBucket")
    add_policy_packs(app)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    assert {"AwsSolutions", "NIST.800.53.R5"} <= set(_failing_plugins(report))
    flagged = {
        v["ruleName"]
        for plugin in report["pluginReports"]
        for v in plugin["violations"]
        if any("CarelessBucket" in c["constructPath"] for c in v["violatingConstructs"])
    }
    assert {"AwsSolutions-S1", "AwsSolutions-S10", "NIST.800.53.R5-S3BucketLoggingEnabled"} <= flagged


def test_acknowledgment_without_a_real_reason_is_refused():
    app = App()
    with pytest.raises(ValueError, match="needs a real reason"):
        acknowledge(app, "ok", "AwsSolutions-S1")


@pytest.mark.slow
def test_cdk_cli_synth_passes_every_gate(tmp_path):
    """What the README's main command runs: the real CDK CLI, both packs, exit 0."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for var in ("CDK_DEFAULT_ACCOUNT", "CDK_DEFAULT_REGION", "AWS_PROFILE"):
        env.pop(var, None)
    result = subprocess.run(
        [str(ROOT / "node_modules" / ".bin" / "cdk"), "synth", "--quiet", "--output", str(tmp_path / "cdk.out")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "cdk.out" / "validation-report.json").read_text())
    assert _failing_plugins(report) == []


@pytest.mark.slow
def test_cdk_cli_synth_with_a_non_gpu_type_fails_with_one_clear_line(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        [str(ROOT / "node_modules" / ".bin" / "cdk"), "synth", "--quiet", "-c", "gpu_training.cluster.instance_type=m5.large",
         "--output", str(tmp_path / "cdk.out")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert 'error: invalid configuration: gpu_training.cluster.instance_type = "m5.large": not a known NVIDIA GPU instance type' in result.stderr
