"""Policy packs and acknowledgments.

Every acknowledgment goes through :func:`acknowledge` so that it names the finding and carries
a reason, next to the construct it concerns.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, App, Validations
from cdk_nag import AwsSolutionsChecks, NIST80053R5Checks
from constructs import IConstruct


def add_policy_packs(app: App) -> None:
    """Run AWS Solutions and NIST 800-53 rev 5 on the whole app; a finding fails synth."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    Validations.of(app).add_plugins(NIST80053R5Checks(app))


def acknowledge(construct: IConstruct, reason: str, *rule_ids: str) -> None:
    """Acknowledge findings on ``construct`` with one reason a security reviewer would accept.

    Args:
        construct: The construct the findings are about (they apply to it and its children).
        reason: Why the finding is acceptable here; must be a real sentence.
        rule_ids: Rule ids, with a finding id where the rule reports several
            (``AwsSolutions-IAM5[Resource::*]``).
    """
    if len(reason) < 20:
        raise ValueError(f"acknowledgment of {rule_ids} needs a real reason, got {reason!r}")
    Validations.of(construct).acknowledge(*(Acknowledgment(id=rule_id, reason=reason) for rule_id in rule_ids))
