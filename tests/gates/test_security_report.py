"""The one-command security report: IAM check, cfn-lint (the gate's rule set) and cdk-nag over the templates."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from scripts import security_report
from scripts.common import run
from scripts.security_report import VARIANTS, ConfigReport, check_configuration, print_report
from tests.gates.test_policy_gates import GATED_CONFIGS

KNOWN_BAD_STATEMENT = {
    "Sid": "NetworkInterfacesInTrainingVpc",
    "Effect": "Allow",
    "Action": ["ec2:CreateNetworkInterface"],
    "Resource": "*",
    "Condition": {"ArnEquals": {"ec2:Vpc": "arn:aws:ec2:us-east-1:123456789012:vpc/vpc-0abc"}},
}


@pytest.mark.slow
def test_the_report_runs_every_check_and_the_platform_is_clean(capsys):
    assert security_report.main([]) == 0
    out = capsys.readouterr().out
    header, row = [line.split() for line in out.splitlines() if line.startswith(("configuration", "default"))]
    counts = dict(zip(["configuration", "templates", "iam_statements", "iam_findings", "lint_findings",
                       "lint_allowed", "nag_findings", "nag_acknowledged"], row))
    assert counts["templates"] == "3"
    assert int(counts["iam_statements"]) > 40
    assert counts["iam_findings"] == counts["lint_findings"] == counts["nag_findings"] == "0"
    assert int(counts["nag_acknowledged"]) > 10
    assert "security report: clean (1 configuration(s))" in out


def test_each_check_is_wired_into_the_counts(tmp_path, monkeypatch):
    """A bad policy, a template cfn-lint rejects (an error, a warning) and an unacknowledged finding each count."""
    template = {
        "Parameters": {"Unused": {"Type": "String"}},  # W2001: a warning, not allowed
        "Resources": {
            "Policy": {
                "Type": "AWS::IAM::ManagedPolicy",
                "Properties": {"PolicyDocument": {"Version": "2012-10-17", "Statement": [KNOWN_BAD_STATEMENT]}},
            },
            "Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"NoSuchProperty": True}},
        }
    }

    def fake_synthesize(context, outdir: Path):
        outdir.mkdir(parents=True)
        (outdir / "Bad.template.json").write_text(json.dumps(template))
        return {"bad": template}, ["AwsSolutions-S1 Bad/Bucket"], 0

    monkeypatch.setattr(security_report, "_synthesize", fake_synthesize)
    report = check_configuration("bad", {}, tmp_path)
    assert len(report.iam_findings) == 1 and "ec2:Vpc" in report.iam_findings[0]
    assert any("E3002" in f for f in report.lint_findings), report.lint_findings
    assert any("W2001" in f for f in report.lint_findings), report.lint_findings
    assert report.nag_findings == ["AwsSolutions-S1 Bad/Bucket"]
    out = io.StringIO()
    assert print_report([report], out=out) == 1
    assert "bad: iam: " in out.getvalue() and "PROBLEMS FOUND" in out.getvalue()


def test_each_configurations_cfn_lint_findings_are_its_own(tmp_path, monkeypatch):
    """cfn-lint runs over each configuration's templates; a template it rejects fails only its own configuration."""
    bucket = {"Type": "AWS::S3::Bucket", "Properties": {}}
    templates = {"good": {"Resources": {"Bucket": bucket}},
                 "good-too": {"Resources": {"Bucket": bucket}},
                 "bad": {"Resources": {"Bucket": {**bucket, "Properties": {"NoSuchProperty": True}}}}}  # fmt: skip

    def fake_synthesize(context, outdir: Path):
        outdir.mkdir(parents=True)
        (outdir / "Stack.template.json").write_text(json.dumps(templates[outdir.name]))
        return {"stack": templates[outdir.name]}, [], 0

    runs = []
    real_lint = security_report._cfn_lint
    monkeypatch.setattr(security_report, "_synthesize", fake_synthesize)
    monkeypatch.setattr(security_report, "_cfn_lint", lambda files: runs.append(files) or real_lint(files))
    reports = {r.name: r for r in security_report.check_configurations(dict.fromkeys(templates, {}), tmp_path)}
    assert [[f.parent.name for f in files] for files in runs] == [["good"], ["good-too"], ["bad"]]
    assert reports["good"].clean and reports["good-too"].clean
    assert reports["bad"].lint_findings == [
        "Stack.template.json: Bucket (Properties/NoSuchProperty): E3002: "
        "Additional properties are not allowed ('NoSuchProperty' was unexpected)"
    ]


def test_a_serving_configuration_has_its_serving_template_checked(tmp_path, monkeypatch):
    """Every stack the app synthesizes is checked, the serving stack included."""
    from scripts.common import project_context

    checked: dict[str, list[str]] = {}

    def recording_check(templates):
        checked["stacks"] = sorted(templates)
        return 0, []

    monkeypatch.setattr(security_report, "check_templates", recording_check)
    monkeypatch.setattr(security_report, "_cfn_lint", lambda files: (checked.setdefault("lint", [f.name for f in files]) and [], []))
    context = {**project_context([]), **{f"gpu_training.{k}": json.dumps(v) for k, v in VARIANTS["serving-nvme"].items()}}
    report = check_configuration("serving", context, tmp_path)
    assert checked["stacks"] == ["gputrain-cluster", "gputrain-data", "gputrain-serving", "gputrain-training"]
    assert report.templates == 4
    assert "gputrain-serving.template.json" in checked["lint"]


def test_the_report_names_what_the_policies_cannot_express():
    """Each hardening the condition keys do not allow is printed under the counts, with why."""
    out = io.StringIO()
    assert print_report([ConfigReport("clean", templates=3)], out=out) == 0
    text = out.getvalue()
    assert "not expressible in the policies (accepted):" in text
    for limit in security_report.NOT_EXPRESSIBLE:
        assert f"  - {limit}" in text
    named = " ".join(security_report.NOT_EXPRESSIBLE)
    for what in ("EcrImageLayers", "iam:AssociatedResourceArn", "sagemaker:CreateModel", "kms:Encrypt"):
        assert what in named, what


def test_allowed_cfn_lint_findings_alone_do_not_fail_the_report():
    out = io.StringIO()
    assert print_report([ConfigReport("w", templates=3, lint_allowed=["x: y: W3005: z"])], out=out) == 0
    assert print_report([ConfigReport("w", templates=3, lint_findings=["x: y: W2001: z"])], out=out) == 1


def test_variants_are_the_gate_configurations():
    assert VARIANTS == {name: overrides for name, overrides in GATED_CONFIGS.items() if name != "default"}


def test_variants_brings_every_gate_configuration_to_the_checks(monkeypatch, capsys):
    """``--variants`` checks cdk.json's configuration and each gate variant with its settings. What each check
    finds in each variant is the gates' to assert (test_policy_gates: cdk-nag, test_cfn_lint, test_iam_authorization,
    on every configuration); the whole report runs for real on the default configuration above. (Before: the
    command ran as a process over every variant, the gates' synthesis again: 48 s of CI.)"""
    from stacks.config import load_config

    seen: dict[str, dict] = {}

    def recording(configurations, workdir):
        seen.update(configurations)
        return [ConfigReport(name, templates=3) for name in configurations]

    monkeypatch.setattr(security_report, "check_configurations", recording)
    assert security_report.main(["--variants"]) == 0
    assert list(seen) == ["default", *VARIANTS]
    for name, overrides in VARIANTS.items():
        assert {k: json.loads(seen[name][f"gpu_training.{k}"]) for k in overrides} == overrides, name
        load_config(seen[name])  # each loads, as the app loads it
    assert f"security report: clean ({len(VARIANTS) + 1} configuration(s))" in capsys.readouterr().out


def test_an_invalid_configuration_is_one_line_and_exit_3(capsys):
    assert run(security_report.main, ["-c", "cluster.instance_type=m5.large"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: invalid configuration: gpu_training.cluster.instance_type")
