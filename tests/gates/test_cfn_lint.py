"""cfn-lint over every stack template, in every region the platform is likely deployed in.

The emulator (moto) accepts what CloudFormation refuses: a resource type a region does not have,
an instance type a region does not offer, a property value out of range. cfn-lint's registry data
knows these per region. Every error fails, and every warning but the allow-listed ones. The rule
set (``REGIONS``, the severities, ``ALLOWED`` with its reasons, ``lint``) is the security report's
(``scripts.security_report``), so the report catches what this gate catches.

The templates are the snapshot configurations' (tests/snapshot/test_templates.py) and the security
report's variants (``scripts.security_report.VARIANTS``: serving, transform, NAT, EFA...), synthesized
once per session (``cached_synth``) for the test environment's region; each is linted against
every region of ``REGIONS``: what a region lacks (a resource type, an instance type) shows up
there, since the template a deploy to that region synthesizes differs only in region-derived values.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from scripts.security_report import ALLOWED, REGIONS, VARIANTS, lint_findings
from tests.snapshot.test_templates import CONFIGS as SNAPSHOT_CONFIGS
from tests.synth import cached_synth

CONFIGS: dict[str, dict[str, Any]] = {**SNAPSHOT_CONFIGS, **VARIANTS}
"""The snapshot configurations and the security report's variants: each exercises different resources."""


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
    another region (no committed lookup holds it), is still a finding."""
    model = {"Type": "AWS::SageMaker::Model", "Properties": {}}
    subnet_elsewhere = {"Type": "AWS::EC2::Subnet", "Properties": {"AvailabilityZone": "eu-west-1a"}}
    for rule, logical_id, resource in (("W3005", "EndpointModel", model), ("W3010", "Subnet", subnet_elsewhere)):
        assert not any(a.rule == rule and a.applies(logical_id, resource) for a in ALLOWED)
