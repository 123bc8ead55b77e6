"""A Route 53 Resolver DNS Firewall on the training VPC: AWS service names only.

Interface and gateway endpoints keep traffic to AWS inside the VPC, but the VPC resolver
(``.2`` of the VPC range) still answers every name, recursively, through AWS's resolvers: a
process on a node (or a model without network isolation) can tunnel data out in the names it
asks for (``<secret>.attacker.example``) with no route to the internet at all. The firewall
answers names under AWS's service domains (and the VPC's own ``*.internal`` hostnames, plus any
the operator adds) and gives ``NXDOMAIN`` for the rest.
"""

from __future__ import annotations

from typing import Sequence

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_route53resolver as resolver
from constructs import Construct

AWS_SERVICE_DOMAINS = (
    "amazonaws.com",
    "*.amazonaws.com",
    "*.amazonaws.com.cn",
    "*.api.aws",
    "*.on.aws",
    # Instance hostnames inside the VPC (ip-10-40-0-5.ec2.internal, *.compute.internal).
    "*.internal",
)
"""Names the resolver answers: AWS service endpoints (every partition the app targets) and the
VPC's own hostnames."""

ALLOW_PRIORITY, BLOCK_PRIORITY = 100, 200
ASSOCIATION_PRIORITY = 101
"""Rule group associations take 101-9899 (100 and 9900 are reserved)."""


class DnsFirewall(Construct):
    """Allow AWS service domains (and ``extra_domains``), block every other name with NXDOMAIN.

    Attributes:
        rule_group: The firewall rule group (allow list first, then block ``*``).
        association: Its association with the VPC. Mutation protection stays off: with it on,
            Route 53 Resolver refuses to disassociate ("RSLVR-02307 ... under mutation
            protection"), so ``cdk destroy`` of the data stack would fail and leave the VPC and its
            endpoints billing; who may change the association is IAM's to decide.
    """

    def __init__(self, scope: Construct, construct_id: str, *, vpc: ec2.IVpc, extra_domains: Sequence[str] = ()) -> None:
        """Create the domain lists, the rule group and its association with ``vpc``."""
        super().__init__(scope, construct_id)
        allowed = resolver.CfnFirewallDomainList(
            self, "AllowedDomains", domains=[*AWS_SERVICE_DOMAINS, *extra_domains]
        )
        everything = resolver.CfnFirewallDomainList(self, "AllDomains", domains=["*"])
        self.rule_group = resolver.CfnFirewallRuleGroup(
            self,
            "RuleGroup",
            firewall_rules=[
                resolver.CfnFirewallRuleGroup.FirewallRuleProperty(
                    action="ALLOW", firewall_domain_list_id=allowed.attr_id, priority=ALLOW_PRIORITY
                ),
                resolver.CfnFirewallRuleGroup.FirewallRuleProperty(
                    action="BLOCK", block_response="NXDOMAIN", firewall_domain_list_id=everything.attr_id, priority=BLOCK_PRIORITY
                ),
            ],
        )
        self.association = resolver.CfnFirewallRuleGroupAssociation(
            self,
            "Association",
            firewall_rule_group_id=self.rule_group.attr_id,
            priority=ASSOCIATION_PRIORITY,
            vpc_id=vpc.vpc_id,
            mutation_protection="DISABLED",  # see the class docstring: ENABLED would block cdk destroy
        )
