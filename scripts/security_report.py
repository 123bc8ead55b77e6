"""One command for the platform's security checks over the synthesized templates, with counts.

    python -m scripts.security_report                 # the configuration cdk.json defines
    python -m scripts.security_report --variants      # plus the variants the gate tests use
    python -m scripts.security_report -c cluster.node_count=4 -v

For each configuration it synthesizes the app offline (the committed lookups, no credentials)
with cdk-nag's AwsSolutions and NIST 800-53 rev 5 packs, then runs:

- the IAM check (``scripts.iam_check``): every statement of every policy against AWS's
  authorization data (actions, per-resource-type condition keys, operator types);
- cfn-lint over every template, with the rule set its gate (tests/gates/test_cfn_lint.py) imports
  from here: errors and warnings in every region of :data:`REGIONS`, less what :data:`ALLOWED` names;
- cdk-nag: findings left unacknowledged (synth fails on them) and acknowledged ones.

Exit status 0 when there are no IAM findings, no cfn-lint findings and no unacknowledged cdk-nag
findings; 1 otherwise (each problem is printed); 3 on an invalid configuration.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import cfnlint.api

from scripts.common import (
    CONFIG_EXIT,
    EXIT_FAILED,
    EXIT_OK,
    ROOT,
    OperatorError,
    add_common_arguments,
    help_epilog,
    print_table,
    project_context,
    run,
    virtualenv_path,
)
from scripts.iam_check import check_templates

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


# cfn-lint's one rule set: the gate's (tests/gates/test_cfn_lint.py imports it) and the report's.

REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-northeast-1"]
"""Where a GPU training platform is likely deployed: the default configuration must lint clean in each."""

SEVERITIES = "EW"
"""The first letters of the cfn-lint rule ids that count: errors and warnings (informational ones do not)."""


@functools.lru_cache(maxsize=1)
def committed_zones() -> frozenset[str]:
    """The availability zones the committed lookups (cdk.context.json) hold."""
    context = json.loads((ROOT / "cdk.context.json").read_text())
    return frozenset(zone for key, zones in context.items() if key.startswith("availability-zones:") for zone in zones)


@dataclass(frozen=True)
class Allowed:
    """A cfn-lint finding that is not a problem, for the resources ``applies`` accepts."""

    rule: str
    applies: Callable[[str, dict[str, Any]], bool]  # (logical id, resource) -> allowed
    reason: str


ALLOWED: tuple[Allowed, ...] = (
    Allowed(
        "W3005",
        lambda logical_id, resource: resource["Type"] == "AWS::Lambda::Function"
        and logical_id.startswith("Custom")
        and "CustomResourceProviderHandler" in logical_id,
        "CDK's own custom-resource providers (CustomResourceProvider: the default security group's "
        "restriction, the sandbox's auto-delete) write DependsOn on their role beside a GetAtt of it: "
        "redundant, harmless, and not ours to change",
    ),
    Allowed(
        "W3005",
        lambda logical_id, resource: resource["Type"] == "AWS::StepFunctions::StateMachine",
        "sfn.StateMachine adds DependsOn on its role, which its RoleArn GetAtt already orders; the "
        "dependency that matters, on the role's managed policy (log delivery is checked at creation), "
        "is ours (training_job_workflow.py) and cfn-lint does not flag it",
    ),
    Allowed(
        "W3010",
        lambda logical_id, resource: resource["Type"] == "AWS::EC2::Subnet"
        and str(resource["Properties"].get("AvailabilityZone", "")) in committed_zones(),
        "a stack with an explicit environment gets its zones from the committed lookup (cdk.context.json) "
        "so that the GPU nodes' zone is chosen, and pinned, at synth; a deploy to another region "
        "synthesizes that region's zones. A zone no committed lookup holds is not allowed",
    ),
)
"""The allow-list: each finding the gate and the report accept, with why."""

_LONG_LIST = re.compile(r"\[[^\[\]]{200,}\]")


def finding_line(template: str, match: cfnlint.api.Match) -> str:
    """One line: template, resource (and where in it), rule id, message (a long allowed-values list elided)."""
    path = [str(p) for p in match.path or []]
    where = f"{path[1]} ({'/'.join(path[2:])})" if len(path) > 2 and path[0] == "Resources" else "/".join(path) or "-"
    message = _LONG_LIST.sub("[...]", " ".join(match.message.split()))
    return f"{template}: {where}: {match.rule.id}: {message}"


def is_allowed(template: Mapping[str, Any], match: cfnlint.api.Match) -> bool:
    """Whether an entry of :data:`ALLOWED` covers ``match`` in ``template`` (parsed)."""
    path = match.path or []
    if len(path) < 2 or path[0] != "Resources":
        return False
    resource = template["Resources"].get(path[1], {})
    return any(a.rule == match.rule.id and a.applies(str(path[1]), resource) for a in ALLOWED)


Templates = Mapping[str, tuple[str, Mapping[str, Any]]]
"""``{name: (text, parsed)}``: what cfn-lint reads, and what the allow-list looks resources up in."""


def lint(templates: Templates, regions: Sequence[str] = REGIONS) -> tuple[list[str], list[str]]:
    """(findings, allowed): the errors and warnings of ``{name: (text, parsed)}`` in ``regions``, one line each."""
    findings: list[str] = []
    allowed: list[str] = []
    for name, (text, parsed) in templates.items():
        for match in cfnlint.api.lint(text, config=cfnlint.api.ManualArgs(regions=list(regions))):
            if match.rule.id[:1] in SEVERITIES:
                (allowed if is_allowed(parsed, match) else findings).append(finding_line(name, match))
    return findings, allowed


def lint_findings(templates: Templates, regions: Sequence[str] = REGIONS) -> list[str]:
    """Every error and warning, less the allowed ones, of ``{name: (text, parsed)}`` in ``regions``."""
    return lint(templates, regions)[0]


@dataclass
class ConfigReport:
    """The checks' results for one configuration."""

    name: str
    templates: int = 0
    iam_statements: int = 0
    iam_findings: list[str] = field(default_factory=list)
    lint_findings: list[str] = field(default_factory=list)
    lint_allowed: list[str] = field(default_factory=list)
    nag_findings: list[str] = field(default_factory=list)
    nag_acknowledged: int = 0

    @property
    def clean(self) -> bool:
        return not (self.iam_findings or self.lint_findings or self.nag_findings)

    def problems(self) -> list[str]:
        return [
            *(f"{self.name}: iam: {f}" for f in self.iam_findings),
            *(f"{self.name}: cfn-lint: {f}" for f in self.lint_findings),
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
    """(findings, allowed) of :func:`lint` over the template ``files``, each named by its file name."""
    texts = {f.name: f.read_text() for f in files}
    return lint({name: (text, json.loads(text)) for name, text in texts.items()})


def check_configuration(name: str, context: Mapping[str, Any], workdir: Path) -> ConfigReport:
    """Synthesize one configuration and run every check over it."""
    (report,) = check_configurations({name: context}, workdir)
    return report


def check_configurations(configurations: Mapping[str, Mapping[str, Any]], workdir: Path) -> list[ConfigReport]:
    """Synthesize each configuration (in ``workdir/<name>``) and run every check over it."""
    reports = []
    for name, context in configurations.items():
        report = ConfigReport(name)
        templates, report.nag_findings, report.nag_acknowledged = _synthesize(context, workdir / name)
        report.templates = len(templates)
        report.iam_statements, findings = check_templates(templates)
        report.iam_findings = [str(f) for f in findings]
        report.lint_findings, report.lint_allowed = _cfn_lint(sorted((workdir / name).glob("*.template.json")))
        reports.append(report)
    return reports


def print_report(reports: Sequence[ConfigReport], *, verbose: bool = False, out: Any = None) -> int:
    """Print the problems (and, with ``verbose``, the allowed cfn-lint findings), then the counts; the exit status."""
    out = out or sys.stdout
    for report in reports:
        for problem in report.problems():
            print(problem, file=out)
        if verbose:
            for allowed in report.lint_allowed:
                print(f"{report.name}: cfn-lint allowed: {allowed}", file=out)
    headers = ["configuration", "templates", "IAM statements", "IAM findings", "cfn-lint findings",
               "cfn-lint allowed", "cdk-nag findings", "cdk-nag acknowledged"]
    rows = [
        [r.name, str(r.templates), str(r.iam_statements), str(len(r.iam_findings)), str(len(r.lint_findings)),
         str(len(r.lint_allowed)), str(len(r.nag_findings)), str(r.nag_acknowledged)]
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
                ("-c gpu_training.cluster.node_count=4 -v", "a changed configuration, with cfn-lint's allowed findings"),
            ],
            credentials="none: it synthesizes offline (cdk.json and the committed lookups) and calls no AWS API.",
            done="no IAM finding, no cfn-lint finding, no unacknowledged cdk-nag finding",
            failed="any of those (each is printed, then the counts)",
            cannot_proceed=CONFIG_EXIT,
        ),
    )
    parser.add_argument("--variants", action="store_true", help="also check the variants the gate tests use")
    # -c, --region and --profile as every operator tool takes them; the report synthesizes offline and
    # reads no account, so only -c changes what it checks.
    add_common_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="also print cfn-lint's allowed findings")
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
