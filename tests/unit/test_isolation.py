"""The isolated VPC is a data perimeter: endpoint policies, egress only to the endpoints,
confused-deputy conditions on service principals."""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import re
from typing import Any

import pytest

from stacks.components.network import AWS_OWNED_BUCKETS, ECR_LAYER_BUCKET, s3_prefix_list_name
from tests.synth import ROOT, Synth

ACCOUNT = "123456789012"
PREFIX_LIST = "pl-00000000"  # the committed lookup of the offline account (cdk.context.json)


def _resources(synthesized: Synth, stack_id: str, kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in synthesized.template_json(stack_id)["Resources"].items() if v["Type"] == kind}


def _endpoints(synthesized: Synth) -> dict[str, dict[str, Any]]:
    """Endpoint properties by service suffix (``s3``, ``ecr.api``...)."""
    found = {}
    for endpoint in _resources(synthesized, "gputrain-data", "AWS::EC2::VPCEndpoint").values():
        name = endpoint["Properties"]["ServiceName"]
        # Interface: "com.amazonaws.us-east-1.<service>"; gateway: a join over the region.
        name = name if isinstance(name, str) else "".join(p if isinstance(p, str) else "us-east-1" for p in name["Fn::Join"][1])
        found[name.removeprefix("com.amazonaws.us-east-1.")] = endpoint["Properties"]
    return found


def _by_sid(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["Sid"]: s for s in document["Statement"]}


def test_every_endpoint_limits_requests_to_this_accounts_principals_and_resources(default_app):
    endpoints = _endpoints(default_app)
    assert "s3" in endpoints and len(endpoints) == 11
    for service, endpoint in endpoints.items():
        statements = _by_sid(endpoint["PolicyDocument"])
        perimeter = statements["ThisAccountToThisAccount"]
        assert perimeter["Condition"] == {"StringEquals": {"aws:PrincipalAccount": ACCOUNT, "aws:ResourceAccount": ACCOUNT}}, service
        assert statements["AwsServicePrincipals"]["Condition"] == {"Bool": {"aws:PrincipalIsAWSService": "true"}}
        # Every statement is conditioned on this account, except ECR's image layers (presigned by
        # an account of ECR's: scripts.security_report names it).
        for sid, statement in statements.items():
            assert "Condition" in statement or (service, sid) == ("s3", "EcrImageLayers"), (service, sid)


def test_s3_endpoint_reaches_only_the_aws_owned_buckets_the_platform_needs(default_app):
    statements = _by_sid(_endpoints(default_app)["s3"]["PolicyDocument"])
    owned, layers = statements["AwsOwnedBuckets"], statements["EcrImageLayers"]
    assert owned["Action"] == layers["Action"] == "s3:GetObject"
    buckets = {r.removeprefix("arn:aws:s3:::").removesuffix("/*") for r in owned["Resource"]}
    assert {"amazoncloudwatch-agent-us-east-1", "aws-ssm-us-east-1", "al2023-repos-us-east-1-de612dc2"} <= buckets
    assert layers["Resource"] == "arn:aws:s3:::prod-us-east-1-starport-layer-bucket/*"
    assert len(buckets) + 1 == len(AWS_OWNED_BUCKETS) and ECR_LAYER_BUCKET in AWS_OWNED_BUCKETS


OTHER_ACCOUNT = "210987654321"


def _endpoint_allows(statements: dict[str, dict[str, Any]], obj: str, context: dict[str, str]) -> bool:
    """Whether an endpoint policy lets a GetObject of ``obj`` through, for a request whose
    context has ``context`` (an anonymous request has no aws:PrincipalAccount). The operators
    the policies use, as IAM evaluates them: a key absent from the context matches no
    ``StringEquals`` and every ``...IfExists``."""
    for statement in statements.values():
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        if statement["Effect"] != "Allow" or not {"*", "s3:GetObject"} & set(actions):
            continue
        if not any(fnmatch.fnmatchcase(obj, r) for r in resources):
            continue
        matched = True
        for operator, keys in statement.get("Condition", {}).items():
            for key, value in keys.items():
                present = key in context
                if operator == "StringEquals":
                    matched &= present and context[key] == value
                elif operator == "StringEqualsIfExists":
                    matched &= not present or context[key] == value
                elif operator == "Bool":
                    matched &= present and context[key] == value
                else:
                    raise AssertionError(f"operator this evaluator does not know: {operator}")
        if matched:
            return True
    return False


def test_aws_owned_buckets_admit_anonymous_reads_and_this_accounts_credentials_only(default_app):
    """Outside credentials on a node get nothing through the S3 endpoint: an AWS-owned object is
    readable anonymously (dnf, curl of the CloudWatch agent, SSM Agent) or with this account's
    credentials, never with another account's. ECR's layers, presigned by an account of ECR's,
    stay readable: no account condition can admit that account (scripts.security_report says so)."""
    statements = _by_sid(_endpoints(default_app)["s3"]["PolicyDocument"])
    # An AWS-owned bucket is in neither account; a service principal never calls from a node.
    signed = {"aws:ResourceAccount": "999999999999", "aws:PrincipalIsAWSService": "false"}
    for bucket in AWS_OWNED_BUCKETS:
        obj = f"arn:aws:s3:::{bucket.format(region='us-east-1')}/some/object"
        anonymous = _endpoint_allows(statements, obj, {"aws:ResourceAccount": "999999999999"})
        ours = _endpoint_allows(statements, obj, {**signed, "aws:PrincipalAccount": ACCOUNT})
        outside = _endpoint_allows(statements, obj, {**signed, "aws:PrincipalAccount": OTHER_ACCOUNT})
        assert anonymous and ours, bucket
        assert outside == (bucket == ECR_LAYER_BUCKET), bucket
    # And nothing else in another account: the datasets of an outside bucket stay out of reach.
    outside_bucket = {**signed, "aws:PrincipalAccount": ACCOUNT, "aws:ResourceAccount": OTHER_ACCOUNT}
    assert not _endpoint_allows(statements, "arn:aws:s3:::someone-elses-bucket/data.csv", outside_bucket)


def test_resourceless_actions_are_named_per_endpoint(default_app):
    endpoints = _endpoints(default_app)
    assert _by_sid(endpoints["ecr.api"]["PolicyDocument"])["ThisAccountActionsWithoutResource"]["Action"] == "ecr:GetAuthorizationToken"
    assert _by_sid(endpoints["ssmmessages"]["PolicyDocument"])["ThisAccountActionsWithoutResource"]["Action"] == "ssmmessages:*"
    assert "ThisAccountActionsWithoutResource" not in _by_sid(endpoints["logs"]["PolicyDocument"])


def _egress(synthesized: Synth, stack_id: str, group_prefix: str) -> list[dict[str, Any]]:
    """Every egress rule of the security group whose logical id starts with ``group_prefix``."""
    groups = _resources(synthesized, stack_id, "AWS::EC2::SecurityGroup")
    (group_id,) = [k for k in groups if k.startswith(group_prefix)]
    rules = list(groups[group_id]["Properties"].get("SecurityGroupEgress", []))
    rules += [
        r["Properties"]
        for r in _resources(synthesized, stack_id, "AWS::EC2::SecurityGroupEgress").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]}
    ]
    return rules


GROUPS = [("gputrain-cluster", "ClusterNodeSecurityGroup"), ("gputrain-training", "WorkflowNetworkSecurityGroup")]


@pytest.mark.parametrize("stack_id, group_prefix", GROUPS)
def test_node_and_job_groups_reach_only_the_endpoints(default_app, stack_id, group_prefix):
    rules = _egress(default_app, stack_id, group_prefix)
    assert not [r for r in rules if "CidrIp" in r]
    https = [r for r in rules if r["IpProtocol"] == "tcp"]
    assert all((r["FromPort"], r["ToPort"]) == (443, 443) for r in https)
    assert {r.get("DestinationPrefixListId") for r in https} == {PREFIX_LIST, None}
    (to_endpoints,) = [r for r in https if "DestinationSecurityGroupId" in r]
    assert "EndpointSecurityGroup" in json.dumps(to_endpoints["DestinationSecurityGroupId"])
    # Besides HTTPS, only all traffic to the group itself (distributed training).
    for rule in rules:
        if rule["IpProtocol"] != "tcp":
            assert rule["DestinationSecurityGroupId"] == {"Fn::GetAtt": [rule["GroupId"]["Fn::GetAtt"][0], "GroupId"]}


@pytest.mark.parametrize("stack_id, group_prefix", GROUPS)
def test_with_a_nat_gateway_the_groups_may_also_reach_the_internet_over_https(synth_app, stack_id, group_prefix):
    rules = _egress(synth_app({"network.nat_gateways": 1}), stack_id, group_prefix)
    assert [(r["CidrIp"], r["FromPort"]) for r in rules if "CidrIp" in r] == [("0.0.0.0/0", 443)]


MODEL_GROUPS = [("gputrain-serving", "EndpointSecurityGroup"), ("gputrain-training", "PipelineModelSecurityGroup")]
SERVING = {"serving.enabled": True, "serving.training_job_name": "gputrain-job-1"}


@pytest.mark.parametrize("nat_gateways", (0, 1))
@pytest.mark.parametrize("stack_id, group_prefix", MODEL_GROUPS)
def test_model_groups_reach_only_the_endpoints_even_with_a_nat_gateway(synth_app, stack_id, group_prefix, nat_gateways):
    """Hosting instances need ECR and S3 only (the model arrives from S3): no HTTPS to the
    internet through a NAT gateway, unlike training (which may pip install)."""
    rules = _egress(synth_app({**SERVING, "network.nat_gateways": nat_gateways}), stack_id, group_prefix)
    assert not [r for r in rules if "CidrIp" in r], rules
    assert all((r["IpProtocol"], r["FromPort"], r["ToPort"]) == ("tcp", 443, 443) for r in rules)
    assert {r.get("DestinationPrefixListId") for r in rules} == {PREFIX_LIST, None}
    (to_endpoints,) = [r for r in rules if "DestinationSecurityGroupId" in r]
    assert "EndpointSecurityGroup" in json.dumps(to_endpoints["DestinationSecurityGroupId"])


def _subnet_groups_referenced(template: dict[str, Any]) -> set[str]:
    """The data stack's subnets a template names (``Fn::GetStackOutput`` of their refs), as ``<Group><n>``."""
    return set(re.findall(r"NetworkVpc([A-Za-z]+Subnet\d)Subnet", json.dumps(template)))


def test_sagemaker_runs_only_in_the_training_subnets(synth_app):
    """Jobs, pipelines, batch transform and endpoints (VpcConfig, and the sagemaker:VpcSubnets conditions
    of the roles that start them) name the Training subnets and never the nodes' Cluster subnets."""
    synthesized = synth_app({**SERVING, "transform.enabled": True})
    for stack_id in ("gputrain-training", "gputrain-serving"):
        template = synthesized.template_json(stack_id)
        assert "VpcConfig" in json.dumps(template), stack_id
        assert _subnet_groups_referenced(template) == {"TrainingSubnet1", "TrainingSubnet2"}, stack_id


@pytest.mark.parametrize("zone", (0, 1))
def test_the_nodes_subnet_is_its_zones_cluster_subnet_and_reaches_the_endpoints(synth_app, zone):
    synthesized = synth_app({"cluster.availability_zone": zone})
    assert _subnet_groups_referenced(synthesized.template_json("gputrain-cluster")) == {f"ClusterSubnet{zone + 1}"}
    # The interface endpoints (in the Training subnets) admit HTTPS from the whole VPC, the nodes' subnet included.
    network = synthesized.platform.data_plane.network
    groups = _resources(synthesized, "gputrain-data", "AWS::EC2::SecurityGroup")
    (endpoint_group,) = [g for k, g in groups.items() if k.startswith("NetworkEndpointSecurityGroup")]
    (ingress,) = endpoint_group["Properties"]["SecurityGroupIngress"]
    assert (ingress["FromPort"], ingress["ToPort"]) == (443, 443)
    subnet = ipaddress.IPv4Network(network.cluster_subnets[zone].ipv4_cidr_block)
    assert subnet.subnet_of(ipaddress.IPv4Network(ingress["CidrIp"]))


def test_the_s3_prefix_list_is_a_committed_lookup():
    context = json.loads((ROOT / "cdk.context.json").read_text())
    (key,) = [k for k in context if s3_prefix_list_name("us-east-1") in k and f"account={ACCOUNT}" in k]
    assert context[key] == [{"PrefixListId": PREFIX_LIST}]


def _statements(synthesized: Synth, stack_id: str, kind: str, prefix: str, field: str) -> list[dict[str, Any]]:
    (resource,) = [v for k, v in _resources(synthesized, stack_id, kind).items() if k.startswith(prefix)]
    return resource["Properties"][field]["Statement"]


def test_eventbridge_publishes_only_for_this_accounts_rules(default_app):
    rules = [
        f"arn:aws:events:us-east-1:{ACCOUNT}:rule/gputrain-training-job-state",
        f"arn:aws:events:us-east-1:{ACCOUNT}:rule/gputrain-training-workflow-failure",
        f"arn:aws:events:us-east-1:{ACCOUNT}:rule/gputrain-pipeline-interrupted",
        f"arn:aws:events:us-east-1:{ACCOUNT}:rule/gputrain-gpu-idle-alarm",
    ]
    # Every rule of the stack publishes to the topic but the GPU idle watch's, which starts its state machine.
    names = sorted(r["Properties"]["Name"] for r in _resources(default_app, "gputrain-training", "AWS::Events::Rule").values())
    watch = f"arn:aws:events:us-east-1:{ACCOUNT}:rule/gputrain-gpu-idle-watch-jobs"
    assert sorted(f"arn:aws:events:us-east-1:{ACCOUNT}:rule/{n}" for n in names) == sorted([*rules, watch])
    expected = {"StringEquals": {"aws:SourceAccount": ACCOUNT}, "ArnEquals": {"aws:SourceArn": rules}}
    key_statements = _statements(default_app, "gputrain-training", "AWS::KMS::Key", "NotificationsTopicKey", "KeyPolicy")
    topic_statements = _statements(default_app, "gputrain-training", "AWS::SNS::TopicPolicy", "NotificationsTopicPolicy", "PolicyDocument")
    for statements in (key_statements, topic_statements):
        events = [s for s in statements if s.get("Principal") == {"Service": "events.amazonaws.com"}]
        assert len(events) == 1, events  # the key statement is no longer duplicated
        assert events[0]["Condition"] == expected


def test_only_sagemaker_for_this_account_may_assume_the_job_role(default_app):
    (trust,) = _statements(default_app, "gputrain-training", "AWS::IAM::Role", "WorkflowJobRole", "AssumeRolePolicyDocument")
    assert trust["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert trust["Condition"] == {
        "StringEquals": {"aws:SourceAccount": ACCOUNT},
        "ArnLike": {"aws:SourceArn": f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:*"},
    }


# ------------------------------------------------------------------------------------------
# DNS firewall (security finding 7): the VPC resolver answers AWS service names only.
# ------------------------------------------------------------------------------------------


def _dns_firewall(synthesized: Synth) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, list[str]]]:
    """(the association, the rules in priority order, domains by list logical id)."""
    (association,) = _resources(synthesized, "gputrain-data", "AWS::Route53Resolver::FirewallRuleGroupAssociation").values()
    (group,) = _resources(synthesized, "gputrain-data", "AWS::Route53Resolver::FirewallRuleGroup").values()
    lists = {k: v["Properties"]["Domains"] for k, v in _resources(synthesized, "gputrain-data", "AWS::Route53Resolver::FirewallDomainList").items()}
    rules = sorted(group["Properties"]["FirewallRules"], key=lambda r: r["Priority"])
    return association["Properties"], rules, lists


def _matches(domain: str, patterns: list[str]) -> bool:
    """Route 53 Resolver DNS Firewall matching: ``*.`` covers every subdomain, else exact."""
    domain = domain.rstrip(".") + "."
    for pattern in patterns:
        pattern = pattern if pattern.endswith(".") else pattern + "."
        if pattern == "*." or domain == pattern or (pattern.startswith("*.") and domain.endswith(pattern[1:])):
            return True
    return False


def _verdict(domain: str, rules: list[dict[str, Any]], lists: dict[str, list[str]]) -> str:
    for rule in rules:
        (list_id,) = [k for k in lists if rule["FirewallDomainListId"] == {"Fn::GetAtt": [k, "Id"]}]
        if _matches(domain, lists[list_id]):
            return rule["Action"]
    return "ALLOW"  # no rule matched: the resolver answers


def test_dns_firewall_answers_aws_service_names_and_blocks_the_rest_by_default(default_app):
    """With the GPU nodes (no network isolation) in the VPC, a name outside AWS cannot be
    resolved, so nothing in the VPC can tunnel data out through DNS queries."""
    association, rules, lists = _dns_firewall(default_app)
    assert association["VpcId"] == {"Ref": "NetworkVpc7FB7348F"}
    # Off: with it on, Route 53 Resolver refuses to disassociate and cdk destroy of the data stack fails.
    assert association["MutationProtection"] == "DISABLED"
    for name in ("s3.us-east-1.amazonaws.com", "api.ecr.us-east-1.amazonaws.com", "ip-10-40-0-5.ec2.internal",
                 "logs.us-east-1.amazonaws.com", "sts.amazonaws.com"):
        assert _verdict(name, rules, lists) == "ALLOW", name
    for name in ("exfil.attacker.example", "pypi.org", "c2VjcmV0.evil.com", "amazonaws.com.evil.com"):
        assert _verdict(name, rules, lists) == "BLOCK", name
    (block,) = [r for r in rules if r["Action"] == "BLOCK"]
    assert block["BlockResponse"] == "NXDOMAIN"


def test_dns_firewall_allows_the_configured_extra_domains(synth_app):
    _, rules, lists = _dns_firewall(synth_app({"network.nat_gateways": 1, "network.dns_allowed_domains": ["pypi.org", "*.pythonhosted.org"]}))
    assert _verdict("pypi.org", rules, lists) == "ALLOW"
    assert _verdict("files.pythonhosted.org", rules, lists) == "ALLOW"
    assert _verdict("example.com", rules, lists) == "BLOCK"


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"cluster.enabled": False}, 0),  # only SageMaker jobs and models, all network-isolated
        ({"cluster.enabled": False, **{"serving.enabled": True, "serving.training_job_name": "gputrain-job-1", "serving.network_isolation": False}}, 1),
        ({"network.dns_firewall": False}, 0),
        ({"cluster.enabled": False, "network.dns_firewall": True}, 1),
    ],
)
def test_dns_firewall_is_on_where_network_isolation_is_off_unless_configured(synth_app, overrides, expected):
    found = _resources(synth_app(overrides), "gputrain-data", "AWS::Route53Resolver::FirewallRuleGroupAssociation")
    assert len(found) == expected
