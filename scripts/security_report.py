"""One command for the platform's security checks over the synthesized templates, with counts.

    python -m scripts.security_report                 # the configuration cdk.json defines
    python -m scripts.security_report --variants      # plus the variants the gate tests use
    python -m scripts.security_report -c cluster.node_count=4 -v

For each configuration it synthesizes the app offline (the committed lookups, no credentials)
with cdk-nag's AwsSolutions and NIST 800-53 rev 5 packs, then runs:

- the IAM check (``scripts.iam_check``): every statement of every policy against AWS's
  authorization data (actions, per-resource-type condition keys, operator types);
- cfn-lint over every template;
- cdk-nag: findings left unacknowledged (synth fails on them) and acknowledged ones.

Exit status 0 when there are no IAM findings, no cfn-lint errors and no unacknowledged cdk-nag
findings; 1 otherwise (each problem is printed); 3 on an invalid configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from scripts.common import (
    CONFIG_EXIT,
    EXIT_FAILED,
    EXIT_OK,
    OperatorError,
    add_common_arguments,
    help_epilog,
    print_table,
    project_context,
    run,
    virtualenv_path,
)
from scripts.iam_check import check_templates

CFN_LINT = Path(sys.executable).parent / "cfn-lint"
OFFLINE_ACCOUNT, OFFLINE_REGION = "123456789012", "us-east-1"

VARIANTS: dict[str, dict[str, Any]] = {
    "multinode-efa": {
        "cluster.instance_type": "p4d.24xlarge",
        "cluster.node_count": 2,
        "training_job.instance_type": "ml.g5.12xlarge",
        "training_job.instance_count": 2,
    },
    "sandbox": {"delete_data_on_destroy": True},
    "nat-egress": {"network.nat_gateways": 1},
    "on-demand-ebs-only": {
        "training_job.use_spot": False,
        "training_job.checkpointing": False,
        "training_job.instance_type": "ml.p3.2xlarge",
        "training_job.gpu_idle_alarm.stop_job": True,
        # The pipeline's batch transform on an EBS-only type: the volume key condition.
        "transform.enabled": True,
        "transform.instance_type": "ml.p3.2xlarge",
    },
    "serving-nvme": {"serving.enabled": True, "serving.training_job_name": "gputrain-job-1"},
    "serving-scale-to-zero": {
        "serving.enabled": True,
        "serving.training_job_name": "gputrain-job-1",
        "serving.scale_to_zero": True,
        "serving.data_capture": True,
        # No promotion there: the transform's model statements of their own.
        "transform.enabled": True,
    },
    "serving-ebs-capture-canary": {
        "serving.enabled": True,
        "serving.model_artifact_key": "models/candidate/model.tar.gz",
        "serving.instance_type": "ml.p3.2xlarge",
        "serving.data_capture": True,
        "serving.min_instances": 2,
        "serving.initial_instance_count": 2,
        "serving.max_instances": 4,
        "serving.rollout": "canary",
        "serving.scale_in_schedule": "cron(0 20 ? * MON-FRI *)",
        "serving.scale_out_schedule": "cron(0 6 ? * MON-FRI *)",
    },
}
"""Configurations whose templates differ in ways the checks care about (EFA, deletion
machinery, NAT egress, on-demand jobs without checkpoints)."""

NOT_EXPRESSIBLE: tuple[str, ...] = (
    "S3 endpoint, EcrImageLayers: s3:GetObject on ECR's layer bucket has no account condition: ECR presigns "
    "layer URLs with an account of its own (undocumented), so aws:PrincipalAccount cannot name it; the bucket "
    "is AWS-owned and its objects are read through those URLs only",
    "iam:PassRole to SageMaker: iam:AssociatedResourceArn only as ArnLikeIfExists: SageMaker does not document "
    "setting it, so a request without it is not refused by it (iam:PassedToService and the named roles still are)",
    "sagemaker:CreateModel: no sagemaker:VolumeKmsKey in its request context (a model has no volume); the "
    "pipeline pins the volume key on CreateEndpointConfig instead, on EBS-only types (NVMe types take none)",
    "execution roles' kms:Encrypt and kms:DescribeKey on the platform key: no kms:ViaService, because SageMaker "
    "requires kms:Encrypt of the role for an output KmsKeyId without naming the calling service; neither returns "
    "plaintext (kms:Decrypt and kms:GenerateDataKey are limited to S3 and SageMaker)",
)
"""What the policies cannot express, each with why: printed under every report."""


@dataclass
class ConfigReport:
    """The checks' results for one configuration."""

    name: str
    templates: int = 0
    iam_statements: int = 0
    iam_findings: list[str] = field(default_factory=list)
    lint_errors: list[str] = field(default_factory=list)
    lint_warnings: list[str] = field(default_factory=list)
    nag_findings: list[str] = field(default_factory=list)
    nag_acknowledged: int = 0

    @property
    def clean(self) -> bool:
        return not (self.iam_findings or self.lint_errors or self.nag_findings)

    def problems(self) -> list[str]:
        return [
            *(f"{self.name}: iam: {f}" for f in self.iam_findings),
            *(f"{self.name}: cfn-lint: {e}" for e in self.lint_errors),
            *(f"{self.name}: cdk-nag: {f}" for f in self.nag_findings),
        ]


def _synthesize(context: Mapping[str, Any], outdir: Path) -> tuple[dict[str, dict[str, Any]], list[str], int]:
    """(templates by stack name, unacknowledged cdk-nag findings, acknowledged count)."""
    os.environ["PATH"] = virtualenv_path()  # before jsii starts Node
    from aws_cdk import App, Environment

    from stacks.components.policy import add_policy_packs
    from stacks.config import ConfigError, load_config
    from stacks.platform import build_platform

    try:
        config = load_config(context)
    except ConfigError as err:
        raise OperatorError(f"invalid configuration: {err}") from None
    app = App(context=dict(context), outdir=str(outdir))
    platform = build_platform(app, config, Environment(account=OFFLINE_ACCOUNT, region=OFFLINE_REGION))
    add_policy_packs(app)
    try:
        app.synth()
    except RuntimeError as err:
        if "ValidationFailed" not in str(err):
            raise
    findings = []
    report_file = outdir / "validation-report.json"
    if report_file.exists():
        for plugin in json.loads(report_file.read_text())["pluginReports"]:
            for violation in plugin.get("violations", []):
                for construct in violation.get("violatingConstructs", []):
                    findings.append(f"{violation['ruleName']} {construct['constructPath']}")
    acknowledged = sum(
        len(entry.data)
        for construct in app.node.find_all()
        for entry in construct.node.metadata
        if entry.type == "aws:cdk:acknowledged-rules"
    )
    stacks = [s for s in (platform.data_plane, platform.gpu_cluster, platform.training_job, platform.serving) if s is not None]
    templates = {}
    for stack in stacks:
        path = outdir / stack.template_file
        if path.exists():
            templates[stack.stack_name] = json.loads(path.read_text())
    if not templates:
        raise OperatorError("synthesis wrote no templates; run `npx cdk synth` to see why")
    return templates, findings, acknowledged


def _cfn_lint(files: Sequence[Path]) -> tuple[list[str], list[str]]:
    """(errors, warnings) of cfn-lint over ``files``."""
    result = subprocess.run(
        [str(CFN_LINT), "--format", "parseable", "--", *map(str, files)], capture_output=True, text=True, timeout=600
    )
    errors, warnings = [], []
    for line in result.stdout.splitlines():
        parts = line.split(":")
        rule = parts[5] if len(parts) > 5 else ""
        (errors if rule.startswith("E") else warnings if rule.startswith("W") else []).append(line)
    if result.returncode & 1 and not errors:  # cfn-lint itself failed
        errors.append(result.stderr.strip() or "cfn-lint failed")
    return errors, warnings


def check_configuration(name: str, context: Mapping[str, Any], workdir: Path) -> ConfigReport:
    """Synthesize one configuration and run every check over it."""
    (report,) = check_configurations({name: context}, workdir)
    return report


def check_configurations(configurations: Mapping[str, Mapping[str, Any]], workdir: Path) -> list[ConfigReport]:
    """Synthesize each configuration (in ``workdir/<name>``) and run every check over it.

    cfn-lint runs once over every configuration's templates (its start-up, ~1.5 s, is most of what
    it costs per configuration); each report keeps the lines about its own files.
    """
    reports = []
    for name, context in configurations.items():
        report = ConfigReport(name)
        templates, report.nag_findings, report.nag_acknowledged = _synthesize(context, workdir / name)
        report.templates = len(templates)
        report.iam_statements, findings = check_templates(templates)
        report.iam_findings = [str(f) for f in findings]
        reports.append(report)
    errors, warnings = _cfn_lint([f for r in reports for f in sorted((workdir / r.name).glob("*.template.json"))])
    for report in reports:
        prefix = f"{workdir / report.name}{os.sep}"
        # A line that names no template (cfn-lint itself failed) concerns every configuration.
        report.lint_errors = [e for e in errors if e.startswith(prefix) or not e.startswith(f"{workdir}{os.sep}")]
        report.lint_warnings = [w for w in warnings if w.startswith(prefix)]
    return reports


def print_report(reports: Sequence[ConfigReport], *, verbose: bool = False, out: Any = None) -> int:
    """Print the problems (and, with ``verbose``, cfn-lint warnings), then the counts; the exit status."""
    out = out or sys.stdout
    for report in reports:
        for problem in report.problems():
            print(problem, file=out)
        if verbose:
            for warning in report.lint_warnings:
                print(f"{report.name}: cfn-lint warning: {warning}", file=out)
    headers = ["configuration", "templates", "IAM statements", "IAM findings", "cfn-lint errors",
               "cfn-lint warnings", "cdk-nag findings", "cdk-nag acknowledged"]
    rows = [
        [r.name, str(r.templates), str(r.iam_statements), str(len(r.iam_findings)), str(len(r.lint_errors)),
         str(len(r.lint_warnings)), str(len(r.nag_findings)), str(r.nag_acknowledged)]
        for r in reports
    ]
    print_table(rows, headers, out=out)
    print("not expressible in the policies (accepted):", file=out)
    for limit in NOT_EXPRESSIBLE:
        print(f"  - {limit}", file=out)
    clean = all(r.clean for r in reports)
    print(f"security report: {'clean' if clean else 'PROBLEMS FOUND'} ({len(reports)} configuration(s))", file=out)
    return EXIT_OK if clean else EXIT_FAILED


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.security_report",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.security_report",
            [
                ("", "the configuration in cdk.json"),
                ("--variants", "plus the gate tests' variants (EFA, sandbox, NAT, on-demand, serving)"),
                ("-c gpu_training.cluster.node_count=4 -v", "a changed configuration, with cfn-lint's warnings"),
            ],
            credentials="none: it synthesizes offline (cdk.json and the committed lookups) and calls no AWS API.",
            done="no IAM finding, no cfn-lint error, no unacknowledged cdk-nag finding",
            failed="any of those (each is printed, then the counts)",
            cannot_proceed=CONFIG_EXIT,
        ),
    )
    parser.add_argument("--variants", action="store_true", help="also check the variants the gate tests use")
    # -c, --region and --profile as every operator tool takes them; the report synthesizes offline and
    # reads no account, so only -c changes what it checks.
    add_common_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="also print cfn-lint warnings")
    args = parser.parse_args(argv)
    base = project_context(args.context)
    configurations = {"default": base}
    if args.variants:
        for name, overrides in VARIANTS.items():
            configurations[name] = {**base, **{f"gpu_training.{k}": json.dumps(v) for k, v in overrides.items()}}
    with tempfile.TemporaryDirectory(prefix="security-report-") as workdir:
        reports = check_configurations(configurations, Path(workdir))
    return print_report(reports, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(run(main))
