"""cfn-lint over every stack template, in every region the platform is likely deployed in.

The emulator (moto) accepts what CloudFormation refuses: a resource type a region does not have,
an instance type a region does not offer, a property value out of range. cfn-lint's registry data
knows these per region. Every error fails, and every warning but the allow-listed ones below.

The templates are the snapshot configurations' (tests/snapshot/test_templates.py) and the security
report's variants (``scripts.security_report.VARIANTS``: serving, transform, NAT, EFA...), synthesized
once per session (``cached_synth``) for the test environment's region; each is linted against
every region of :data:`REGIONS`: what a region lacks (a resource type, an instance type) shows up
there, since the template a deploy to that region synthesizes differs only in region-derived values.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable

import cfnlint.api
import pytest

from scripts.security_report import VARIANTS
from tests.snapshot.test_templates import CONFIGS as SNAPSHOT_CONFIGS
from tests.synth import TEST_ENV, cached_synth

REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-northeast-1"]
"""Where a GPU training platform is likely deployed: the default configuration must lint clean in each."""

CONFIGS: dict[str, dict[str, Any]] = {**SNAPSHOT_CONFIGS, **VARIANTS}
"""The snapshot configurations and the security report's variants: each exercises different resources."""


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
        and str(resource["Properties"].get("AvailabilityZone", "")).startswith(TEST_ENV.region),
        "a stack with an explicit environment gets its zones from the committed lookup (cdk.context.json) "
        "so that the GPU nodes' zone is chosen, and pinned, at synth; a deploy to another region "
        "synthesizes that region's zones. A zone of another region than the stack's is not allowed",
    ),
)

_LONG_LIST = re.compile(r"\[[^\[\]]{200,}\]")


def finding_line(template: str, match: cfnlint.api.Match) -> str:
    """One line: template, resource (and where in it), rule id, message (a long allowed-values list elided)."""
    path = [str(p) for p in match.path or []]
    where = f"{path[1]} ({'/'.join(path[2:])})" if len(path) > 2 and path[0] == "Resources" else "/".join(path) or "-"
    message = _LONG_LIST.sub("[...]", " ".join(match.message.split()))
    return f"{template}: {where}: {match.rule.id}: {message}"


def is_allowed(template: dict[str, Any], match: cfnlint.api.Match) -> bool:
    path = match.path or []
    if len(path) < 2 or path[0] != "Resources":
        return False
    resource = template["Resources"].get(path[1], {})
    return any(a.rule == match.rule.id and a.applies(str(path[1]), resource) for a in ALLOWED)


def lint_findings(templates: dict[str, tuple[str, dict[str, Any]]], regions: list[str]) -> list[str]:
    """Every error and warning, less the allowed ones, of ``{name: (text, parsed)}`` in ``regions``."""
    lines = []
    for name, (text, parsed) in templates.items():
        for match in cfnlint.api.lint(text, config=cfnlint.api.ManualArgs(regions=regions)):
            if match.rule.id[:1] in "EW" and not is_allowed(parsed, match):
                lines.append(finding_line(name, match))
    return lines


@pytest.fixture(scope="module")
def lint_root(tmp_path_factory):
    return tmp_path_factory.mktemp("cfn-lint")


@pytest.mark.slow
@pytest.mark.parametrize("config_name", list(CONFIGS))
def test_templates_lint_clean_in_every_region(lint_root, config_name):
    synthesized = cached_synth(lint_root, CONFIGS[config_name])
    templates = {
        f"{sid}.template.json": (
            (synthesized.outdir / f"{sid}.template.json").read_text(), synthesized.template_json(sid)
        )
        for sid in synthesized.stack_ids
    }
    assert len(templates) == (4 if CONFIGS[config_name].get("serving.enabled") else 3)
    findings = lint_findings(templates, REGIONS)
    assert not findings, f"cfn-lint ({config_name}, {', '.join(REGIONS)}):\n" + "\n".join(findings)


def test_the_gate_sees_an_instance_type_a_region_does_not_offer():
    """The regions reach cfn-lint: g6.xlarge is not offered in eu-west-1 (cfn-lint 1.58.0's data)."""
    node = {"Type": "AWS::EC2::Instance", "Properties": {"InstanceType": "g6.xlarge", "ImageId": "ami-12345678"}}
    parsed = {"Resources": {"Node": node}}
    text = json.dumps(parsed)
    assert lint_findings({"t.json": (text, parsed)}, ["us-east-1"]) == []
    assert lint_findings({"t.json": (text, parsed)}, ["us-east-1", "eu-west-1"]) == [
        "t.json: Node (Properties/InstanceType): E3628: 'g6.xlarge' is not one of [...] in 'eu-west-1'"
    ]


def test_allowed_findings_are_narrow():
    """A redundant DependsOn elsewhere than CDK's providers and state machines, or a zone of
    another region, is still a finding."""
    model = {"Type": "AWS::SageMaker::Model", "Properties": {}}
    subnet_elsewhere = {"Type": "AWS::EC2::Subnet", "Properties": {"AvailabilityZone": "eu-west-1a"}}
    for rule, logical_id, resource in (("W3005", "EndpointModel", model), ("W3010", "Subnet", subnet_elsewhere)):
        assert not any(a.rule == rule and a.applies(logical_id, resource) for a in ALLOWED)
