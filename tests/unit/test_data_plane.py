"""Security and data-retention properties of the data plane stack."""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import re

import pytest
from aws_cdk.assertions import Match

# Logical ids of stateful resources. Changing one makes CloudFormation replace the resource
# (a new, empty bucket or key), so a refactor that moves them must fail here first.
PINNED_LOGICAL_IDS = {
    "PlatformKey1C4A1A63": "AWS::KMS::Key",
    "AccessLogsBucketCD784A59": "AWS::S3::Bucket",
    "DatasetsBucket9EEDBE5A": "AWS::S3::Bucket",
    "ArtifactsBucket88671897": "AWS::S3::Bucket",
    "TrainingImageRepositoryA4686A09": "AWS::ECR::Repository",
    "NetworkVpc7FB7348F": "AWS::EC2::VPC",
}
DATA_BUCKETS = ("DatasetsBucket9EEDBE5A", "ArtifactsBucket88671897")

# The deployed subnets: logical id -> (block, zone), as the committed snapshots had them before the Cluster
# group was added (without and with a NAT gateway). A new subnet group must leave these alone: a changed
# block or id replaces the subnet, and the endpoints and ENIs in it.
DEPLOYED_SUBNETS = {
    "NetworkVpcTrainingSubnet1Subnet78795A94": ("10.40.0.0/20", "us-east-1a"),
    "NetworkVpcTrainingSubnet2Subnet2155B0E1": ("10.40.16.0/20", "us-east-1b"),
}
DEPLOYED_SUBNETS_WITH_NAT = {
    "NetworkVpcPublicSubnet1Subnet36933139": ("10.40.0.0/24", "us-east-1a"),
    "NetworkVpcPublicSubnet2SubnetC427CCE0": ("10.40.1.0/24", "us-east-1b"),
    "NetworkVpcTrainingSubnet1Subnet78795A94": ("10.40.16.0/20", "us-east-1a"),
    "NetworkVpcTrainingSubnet2Subnet2155B0E1": ("10.40.32.0/20", "us-east-1b"),
}
CLUSTER_SUBNETS = {
    "NetworkVpcClusterSubnet1Subnet46780068": ("10.40.32.0/23", "us-east-1a"),
    "NetworkVpcClusterSubnet2Subnet3B5FA098": ("10.40.34.0/23", "us-east-1b"),
}


@pytest.fixture(scope="module")
def template(default_app):
    return default_app.template("gputrain-data")


@pytest.fixture(scope="module")
def resources(default_app):
    return default_app.template_json("gputrain-data")["Resources"]


@pytest.fixture(scope="module")
def sandbox(synth_app):
    return synth_app({"delete_data_on_destroy": True}).template_json("gputrain-data")["Resources"]


def test_stateful_logical_ids_are_pinned(resources):
    assert {k: resources[k]["Type"] for k in PINNED_LOGICAL_IDS if k in resources} == PINNED_LOGICAL_IDS


def test_key_rotates_and_is_retained(template):
    template.has_resource(
        "AWS::KMS::Key",
        {"Properties": {"EnableKeyRotation": True}, "DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"},
    )


def _logs_key_statement(resources):
    statements = resources["PlatformKey1C4A1A63"]["Properties"]["KeyPolicy"]["Statement"]
    logs = [s for s in statements if s.get("Sid") == "AllowCloudWatchLogsInThisAccount"]
    assert len(logs) == 1
    return logs[0]


def _log_group_arn_patterns(resources) -> list[str]:
    """The statement's ``aws:logs:arn`` patterns with the pseudo parameters of the test environment."""
    patterns = _logs_key_statement(resources)["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
    substitutions = {"AWS::Partition": "aws", "AWS::Region": "us-east-1", "AWS::AccountId": "123456789012"}
    resolved = []
    for pattern in patterns if isinstance(patterns, list) else [patterns]:
        parts = pattern["Fn::Join"][1] if isinstance(pattern, dict) else [pattern]
        resolved.append("".join(p if isinstance(p, str) else substitutions[p["Ref"]] for p in parts))
    return resolved


def test_key_lets_cloudwatch_logs_use_it_for_the_projects_log_groups_only(resources):
    principal = {"Fn::Join": ["", ["logs.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}
    assert _logs_key_statement(resources)["Principal"] == {"Service": principal}
    # Not arn:...:logs:<region>:<account>:*, which is any log group in the account.
    assert _log_group_arn_patterns(resources) == [
        "arn:aws:logs:us-east-1:123456789012:log-group:/gputrain/*",
        "arn:aws:logs:us-east-1:123456789012:log-group:/aws/vendedlogs/states/gputrain-*",
    ]


@pytest.mark.parametrize("overrides", [{}, {"serving.enabled": True, "serving.training_job_name": "gputrain-job-1"}])
def test_every_log_group_on_the_platform_key_is_one_the_key_policy_allows(synth_app, overrides):
    app = synth_app(overrides)
    patterns = _log_group_arn_patterns(app.template_json("gputrain-data")["Resources"])
    on_key = [
        res["Properties"]["LogGroupName"]
        for stack_id in app.stack_ids
        for res in app.template_json(stack_id)["Resources"].values()
        if res["Type"] == "AWS::Logs::LogGroup" and "KmsKeyId" in res["Properties"]
    ]
    assert len(on_key) == 4  # the cluster's node logs and three state machines' logs
    for name in on_key:
        arn = f"arn:aws:logs:us-east-1:123456789012:log-group:{name}"
        assert any(fnmatch.fnmatchcase(arn, p) for p in patterns), name


@pytest.mark.parametrize("bucket", DATA_BUCKETS)
def test_data_buckets_are_kms_encrypted_with_the_platform_key(resources, bucket):
    rule = resources[bucket]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    assert rule["ServerSideEncryptionByDefault"]["KMSMasterKeyID"] == {"Fn::GetAtt": ["PlatformKey1C4A1A63", "Arn"]}
    assert rule["BucketKeyEnabled"] is True


@pytest.mark.parametrize("bucket", (*DATA_BUCKETS, "AccessLogsBucketCD784A59"))
def test_buckets_block_public_access_version_and_are_retained(resources, bucket):
    res = resources[bucket]
    assert res["Properties"]["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert res["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    assert res["DeletionPolicy"] == "Retain" and res["UpdateReplacePolicy"] == "Retain"


@pytest.mark.parametrize("bucket", (*DATA_BUCKETS, "AccessLogsBucketCD784A59"))
def test_buckets_deny_requests_without_tls(template, bucket):
    template.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": bucket},
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "s3:*",
                                "Principal": {"AWS": "*"},
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            },
        },
    )


PLATFORM_KEY_ARN = {"Fn::GetAtt": ["PlatformKey1C4A1A63", "Arn"]}
KMS_KEY_ID = "s3:x-amz-server-side-encryption-aws-kms-key-id"
SSE = "s3:x-amz-server-side-encryption"


def _denied(statements, request: dict) -> bool:
    """Whether a Deny statement on s3:PutObject matches a request's condition keys
    (String/ArnNotEquals and Null, the operators the policy uses; an absent key never equals)."""
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if statement["Effect"] != "Deny" or not {"s3:PutObject", "s3:*"} & set(actions):
            continue
        conditions = statement.get("Condition", {})
        if set(conditions) - {"StringNotEquals", "ArnNotEquals", "Null", "Bool"}:
            raise AssertionError(f"operator this evaluator does not know: {conditions}")
        if "Bool" in conditions:
            continue  # the TLS statement; every request here uses TLS
        matched = True
        for key, value in {**conditions.get("StringNotEquals", {}), **conditions.get("ArnNotEquals", {})}.items():
            allowed = value if isinstance(value, list) else [value]
            matched &= key not in request or request[key] not in allowed
        for key, value in conditions.get("Null", {}).items():
            matched &= (key not in request) == (value == "true")
        if matched:
            return True
    return False


@pytest.mark.parametrize("bucket", DATA_BUCKETS)
def test_data_buckets_refuse_objects_encrypted_with_another_key(resources, bucket):
    """An upload may name no encryption (the bucket's default: the platform key) or the platform
    key; another KMS key, or SSE-S3, is denied, so no object escapes the platform key."""
    policy = next(
        r["Properties"]["PolicyDocument"]["Statement"]
        for r in resources.values()
        if r["Type"] == "AWS::S3::BucketPolicy" and r["Properties"]["Bucket"] == {"Ref": bucket}
    )
    other_key = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
    assert not _denied(policy, {})
    assert not _denied(policy, {SSE: "aws:kms"})
    assert not _denied(policy, {SSE: "aws:kms", KMS_KEY_ID: PLATFORM_KEY_ARN})
    assert _denied(policy, {SSE: "aws:kms", KMS_KEY_ID: other_key})
    assert _denied(policy, {SSE: "AES256"})


@pytest.mark.parametrize("bucket", DATA_BUCKETS)
def test_data_buckets_refuse_sse_c_uploads(resources, bucket):
    """An upload with a customer-provided key (SSE-C) names no SSE or KMS header, so the deny
    statements above cannot see it: S3 itself refuses it (BlockedEncryptionTypes), on every write
    path (PutObject, CopyObject, multipart), so no object sits under a key the platform does not hold."""
    (rule,) = resources[bucket]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["BlockedEncryptionTypes"] == {"EncryptionType": ["SSE-C"]}


@pytest.mark.parametrize("bucket, prefix", [(DATA_BUCKETS[0], "s3-access/datasets/"), (DATA_BUCKETS[1], "s3-access/artifacts/")])
def test_data_buckets_log_access_to_the_log_bucket(resources, bucket, prefix):
    assert resources[bucket]["Properties"]["LoggingConfiguration"] == {
        "DestinationBucketName": {"Ref": "AccessLogsBucketCD784A59"},
        "LogFilePrefix": prefix,
    }


def test_log_bucket_uses_sse_s3_because_access_log_delivery_requires_it(resources):
    rule = resources["AccessLogsBucketCD784A59"]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"


def _rules(resources, bucket):
    return {r["Id"]: r for r in resources[bucket]["Properties"]["LifecycleConfiguration"]["Rules"]}


def test_lifecycle_expires_noncurrent_versions_and_checkpoints(resources):
    for bucket in DATA_BUCKETS:
        rule = _rules(resources, bucket)["ExpireNoncurrentVersions"]
        assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 90}
        assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}
    checkpoints = _rules(resources, "ArtifactsBucket88671897")["ExpireCheckpoints"]
    assert checkpoints["Prefix"] == "checkpoints/" and checkpoints["ExpirationInDays"] == 30
    cluster = _rules(resources, "ArtifactsBucket88671897")["ExpireClusterCheckpoints"]
    assert cluster["Prefix"] == "cluster-checkpoints/" and cluster["ExpirationInDays"] == 30
    assert "ExpireCheckpoints" not in _rules(resources, "DatasetsBucket9EEDBE5A")


def test_lifecycle_days_come_from_config(synth_app):
    res = synth_app({"data.checkpoint_expiration_days": 3}).template_json("gputrain-data")["Resources"]
    assert _rules(res, "ArtifactsBucket88671897")["ExpireCheckpoints"]["ExpirationInDays"] == 3


def test_repository_scans_on_push_has_immutable_tags_and_a_lifecycle(template, resources):
    template.has_resource_properties(
        "AWS::ECR::Repository",
        {
            "RepositoryName": "gputrain-training",
            "ImageScanningConfiguration": {"ScanOnPush": True},
            "ImageTagMutability": "IMMUTABLE",
            "EncryptionConfiguration": {"EncryptionType": "KMS", "KmsKey": Match.any_value()},
            "LifecyclePolicy": {"LifecyclePolicyText": Match.string_like_regexp('"countNumber":20')},
        },
    )
    assert resources["TrainingImageRepositoryA4686A09"]["DeletionPolicy"] == "Retain"
    assert resources["TrainingImageRepositoryA4686A09"]["Properties"].get("EmptyOnDelete", False) is False


def _lifecycle_rules(resources) -> list[dict]:
    policy = resources["TrainingImageRepositoryA4686A09"]["Properties"]["LifecyclePolicy"]["LifecyclePolicyText"]
    return json.loads(policy)["rules"]


def _selects(selection: dict, tags: tuple[str, ...]) -> bool:
    """Whether an image with ``tags`` meets a rule's tag selection (ECR user guide, "Lifecycle
    policy properties"): ``any``; ``untagged``: no tag; ``tagged``: every entry of the prefix or
    pattern list matches one of the image's tags (``*`` the only wildcard of a pattern)."""
    status = selection["tagStatus"]
    if status == "any":
        return True
    if status == "untagged":
        return not tags
    if "tagPrefixList" in selection:
        return all(any(t.startswith(p) for t in tags) for p in selection["tagPrefixList"])
    patterns = [re.compile("^" + ".*".join(map(re.escape, p.split("*"))) + "$") for p in selection["tagPatternList"]]
    return all(any(p.match(t) for t in tags) for p in patterns)


def _expire(rules: list[dict], images: list[tuple[int, tuple[str, ...]]]) -> list[tuple[int, tuple[str, ...]]]:
    """One run of ECR's lifecycle evaluation over ``images`` ((push time, tags)); the images it keeps.

    As the ECR user guide's evaluation rules say: rules go by priority, lowest first; an image
    that meets the tag selection of a rule is never expired by a lower-priority rule; a rule still
    counts the images that higher rules selected or expired; ``imageCountMoreThan`` sorts its
    images youngest first and expires those past the count.
    """
    expired, selected_above = set(), set()
    for rule in sorted(rules, key=lambda r: r["rulePriority"]):
        selection = rule["selection"]
        assert selection["countType"] == "imageCountMoreThan", "this evaluator counts images only"
        assert rule["action"]["type"] == "expire"
        matching = sorted((i for i in images if _selects(selection, i[1])), key=lambda i: i[0], reverse=True)
        for image in matching[selection["countNumber"]:]:
            if image not in selected_above:
                expired.add(image)
        selected_above.update(matching)
    return [i for i in images if i not in expired]


def test_the_deployed_tag_survives_any_number_of_pushes(resources):
    """Jobs, nodes and the endpoint pull the configured tag: however many images are pushed after
    it (tags are immutable, so each push is a new tag, or none), the lifecycle never expires it,
    and still keeps the repository at the configured count plus that one image."""
    rules = _lifecycle_rules(resources)
    deployed = (0, ("tf2.21.0-gpu-1",))
    images = [deployed]
    for push in range(1, 101):
        # Newer builds (one tag a prefix of the deployed one's), untagged pushes now and then.
        tags = () if push % 7 == 0 else (f"tf2.21.0-gpu-1{push}" if push % 5 == 0 else f"build-{push}",)
        images = _expire(rules, [*images, (push, tags)])
        assert deployed in images, f"the deployed image expired after {push} pushes"
        assert len(images) <= 20 + 1
    # The count rule alone (the lifecycle before the deployed tag's rule) expires it at once.
    assert deployed not in _expire([r for r in rules if r["selection"]["tagStatus"] == "any"], images)


def test_lifecycle_keeps_the_configured_count_and_tag(synth_app):
    rules = _lifecycle_rules(
        synth_app({"image.tag": "tf2.21.0-gpu-7", "image.keep_images": 5}).template_json("gputrain-data")["Resources"]
    )
    assert [r["selection"] for r in rules] == [
        {"tagStatus": "tagged", "tagPatternList": ["tf2.21.0-gpu-7"], "countType": "imageCountMoreThan", "countNumber": 1},
        {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": 5},
    ]


def test_default_destroy_keeps_data_so_no_auto_delete_machinery(resources):
    types = {r["Type"] for r in resources.values()}
    assert "Custom::S3AutoDeleteObjects" not in types


def _bucket_policies(resources) -> dict[str, dict]:
    """Each bucket's policy resource, by the bucket's logical id."""
    return {
        r["Properties"]["Bucket"]["Ref"]: r for r in resources.values() if r["Type"] == "AWS::S3::BucketPolicy"
    }


def test_kept_buckets_keep_their_policies(resources):
    # CDK deletes a bucket's auto-created policy even when the bucket is retained: cdk destroy
    # would leave the kept data open to plain HTTP and other keys, and the log bucket refusing logs.
    policies = _bucket_policies(resources)
    for bucket in (*DATA_BUCKETS, "AccessLogsBucketCD784A59"):
        assert policies[bucket].get("DeletionPolicy") == "Retain", bucket
        assert policies[bucket].get("UpdateReplacePolicy") == "Retain", bucket


def test_sandbox_buckets_delete_their_policies(sandbox):
    for bucket, policy in _bucket_policies(sandbox).items():
        assert policy.get("DeletionPolicy", "Delete") == "Delete", bucket


def test_sandbox_setting_deletes_and_empties_buckets_key_and_repository(sandbox):
    for bucket in (*DATA_BUCKETS, "AccessLogsBucketCD784A59"):
        assert sandbox[bucket]["DeletionPolicy"] == "Delete"
    auto_delete = [r for r in sandbox.values() if r["Type"] == "Custom::S3AutoDeleteObjects"]
    assert len(auto_delete) == 3
    assert sandbox["PlatformKey1C4A1A63"]["DeletionPolicy"] == "Delete"
    assert sandbox["PlatformKey1C4A1A63"]["Properties"]["PendingWindowInDays"] == 7
    assert sandbox["TrainingImageRepositoryA4686A09"]["DeletionPolicy"] == "Delete"
    assert sandbox["TrainingImageRepositoryA4686A09"]["Properties"]["EmptyOnDelete"] is True


def test_outputs_say_what_destroy_does_with_data(default_app, synth_app):
    outputs = default_app.template_json("gputrain-data")["Outputs"]
    assert outputs["DataRetention"]["Value"] == "kept on cdk destroy"
    assert "kept on cdk destroy" in outputs["DatasetsBucketName"]["Description"]
    sandbox_outputs = synth_app({"delete_data_on_destroy": True}).template_json("gputrain-data")["Outputs"]
    assert sandbox_outputs["DataRetention"]["Value"].startswith("EMPTIED AND DELETED")


def test_outputs_the_operator_scripts_read(default_app):
    outputs = default_app.template_json("gputrain-data")["Outputs"]
    assert {
        "DatasetsBucketName",
        "ArtifactsBucketName",
        "AccessLogBucketName",
        "KeyArn",
        "RepositoryUri",
        "RepositoryName",
        "ImageUri",
        "VpcId",
        "PrivateSubnetIds",
        "EndpointSecurityGroupId",
    } <= set(outputs)
    assert outputs["ImageUri"]["Value"]["Fn::Join"][1][-1].endswith(":tf2.21.0-gpu-1")


def test_vpc_has_isolated_subnets_and_no_nat_or_internet_gateway_by_default(template):
    template.resource_count_is("AWS::EC2::NatGateway", 0)
    template.resource_count_is("AWS::EC2::InternetGateway", 0)
    template.resource_count_is("AWS::EC2::Subnet", 4)  # Training and Cluster, in each of 2 zones
    template.has_resource_properties("AWS::EC2::Subnet", {"MapPublicIpOnLaunch": False})
    template.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.40.0.0/16", "EnableDnsHostnames": True})


def test_nat_gateways_setting_adds_egress(synth_app):
    template = synth_app({"network.nat_gateways": 1}).template("gputrain-data")
    template.resource_count_is("AWS::EC2::NatGateway", 1)
    template.resource_count_is("AWS::EC2::InternetGateway", 1)


def test_flow_logs_capture_all_traffic_to_the_log_bucket(template):
    template.has_resource_properties(
        "AWS::EC2::FlowLog",
        {
            "ResourceType": "VPC",
            "TrafficType": "ALL",
            "LogDestinationType": "s3",
            "LogDestination": Match.object_like({"Fn::Join": Match.array_with([Match.array_with([Match.object_like({"Fn::GetAtt": ["AccessLogsBucketCD784A59", "Arn"]})])])}),
        },
    )


def test_default_security_group_is_stripped(template):
    template.resource_count_is("Custom::VpcRestrictDefaultSG", 1)


def _subnets(resources) -> dict[str, tuple[str, str]]:
    return {
        k: (r["Properties"]["CidrBlock"], r["Properties"]["AvailabilityZone"])
        for k, r in resources.items()
        if r["Type"] == "AWS::EC2::Subnet"
    }


def _route_table_of(resources, subnet_id: str) -> dict[str, str]:
    (association,) = [
        r for r in resources.values()
        if r["Type"] == "AWS::EC2::SubnetRouteTableAssociation" and r["Properties"]["SubnetId"] == {"Ref": subnet_id}
    ]
    return association["Properties"]["RouteTableId"]


def test_deployed_subnets_keep_their_blocks_and_logical_ids(resources, synth_app):
    """The Cluster group comes last, so the CDK allocates its blocks after the deployed subnets'."""
    assert _subnets(resources) == {**DEPLOYED_SUBNETS, **CLUSTER_SUBNETS}
    with_nat = _subnets(synth_app({"network.nat_gateways": 1}).template_json("gputrain-data")["Resources"])
    assert {k: v for k, v in with_nat.items() if "Cluster" not in k} == DEPLOYED_SUBNETS_WITH_NAT


@pytest.mark.parametrize("overrides", [{}, {"network.nat_gateways": 1}, {"network.max_azs": 3, "network.nat_gateways": 2}],
                         ids=["isolated", "nat", "three-zones"])
def test_the_configs_subnet_layout_is_the_one_cdk_carves(synth_app, overrides):
    """What the config checks a VPC block against is what the CDK allocates from it."""
    from stacks.config import vpc_subnet_blocks

    app = synth_app(overrides)
    resources = app.template_json("gputrain-data")["Resources"]
    carved = sorted(r["Properties"]["CidrBlock"] for r in resources.values() if r["Type"] == "AWS::EC2::Subnet")
    zones = overrides.get("network.max_azs", 2)
    expected = vpc_subnet_blocks(ipaddress.IPv4Network("10.40.0.0/16"), zones, overrides.get("network.nat_gateways", 0))
    assert expected is not None and carved == sorted(map(str, expected))


def test_cluster_subnets_are_private_and_hold_only_the_nodes(resources, default_app):
    network = default_app.platform.data_plane.network
    assert [s.ipv4_cidr_block for s in network.cluster_subnets] == ["10.40.32.0/23", "10.40.34.0/23"]
    for logical_id in CLUSTER_SUBNETS:
        assert resources[logical_id]["Properties"]["MapPublicIpOnLaunch"] is False
        tags = {t["Key"]: t["Value"] for t in resources[logical_id]["Properties"]["Tags"]}
        assert tags["aws-cdk:subnet-name"] == "Cluster" and tags["aws-cdk:subnet-type"] == "Isolated"


def test_s3_gateway_endpoint_on_the_training_and_cluster_route_tables(resources):
    (gateway,) = [
        r["Properties"] for r in resources.values()
        if r["Type"] == "AWS::EC2::VPCEndpoint" and r["Properties"]["VpcEndpointType"] == "Gateway"
    ]
    assert ".s3" in json.dumps(gateway["ServiceName"])
    expected = [_route_table_of(resources, s) for s in (*DEPLOYED_SUBNETS, *CLUSTER_SUBNETS)]
    assert sorted(map(json.dumps, gateway["RouteTableIds"])) == sorted(map(json.dumps, expected))


def test_interface_endpoints_and_the_subnet_output_are_in_the_training_subnets_only(resources, default_app):
    training = sorted(({"Ref": s} for s in DEPLOYED_SUBNETS), key=json.dumps)
    interfaces = [
        r["Properties"] for r in resources.values()
        if r["Type"] == "AWS::EC2::VPCEndpoint" and r["Properties"]["VpcEndpointType"] == "Interface"
    ]
    assert interfaces and all(sorted(e["SubnetIds"], key=json.dumps) == training for e in interfaces)
    output = default_app.template_json("gputrain-data")["Outputs"]["PrivateSubnetIds"]["Value"]
    assert output == {"Fn::Join": [",", [{"Ref": s} for s in DEPLOYED_SUBNETS]]}


@pytest.mark.parametrize(
    "service", ["ecr.api", "ecr.dkr", "logs", "monitoring", "sts", "sagemaker.api", "ssm", "ssmmessages", "ec2messages", "cloudformation"]
)
def test_interface_endpoints_training_needs(resources, service):
    endpoints = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::EC2::VPCEndpoint" and r["Properties"].get("VpcEndpointType") == "Interface"
    ]
    names = {e["ServiceName"] for e in endpoints}
    assert f"com.amazonaws.us-east-1.{service}" in names
    assert all(e["PrivateDnsEnabled"] is True for e in endpoints)


def test_the_config_names_the_endpoint_constructs_as_the_network_does(resources):
    """``network.interface_endpoints`` refuses two names with one construct id (``ecr.api``, ``ecr-api``) by the
    config's :func:`interface_endpoint_id`: it must be the id the network construct gives each endpoint."""
    from stacks.config import DEFAULT_INTERFACE_ENDPOINTS, interface_endpoint_id

    endpoints = {k for k, r in resources.items() if r["Type"] == "AWS::EC2::VPCEndpoint" and r["Properties"].get("VpcEndpointType") == "Interface"}
    expected = {f"NetworkVpc{interface_endpoint_id(name)}" for name in DEFAULT_INTERFACE_ENDPOINTS}
    assert {re.sub(r"[0-9A-F]{8}$", "", logical_id) for logical_id in endpoints} == expected


def test_endpoint_security_group_allows_only_https_from_the_vpc(template):
    template.has_resource_properties(
        "AWS::EC2::SecurityGroup",
        {
            "GroupDescription": Match.string_like_regexp("Interface endpoints"),
            "SecurityGroupIngress": [Match.object_like({"CidrIp": "10.40.0.0/16", "FromPort": 443, "ToPort": 443, "IpProtocol": "tcp"})],
            "SecurityGroupEgress": [Match.object_like({"CidrIp": "255.255.255.255/32"})],  # CDK's "no egress" marker
        },
    )


def test_every_resource_is_tagged_with_the_project(resources):
    tagged = [r for r in resources.values() if r["Type"] in ("AWS::S3::Bucket", "AWS::KMS::Key", "AWS::ECR::Repository", "AWS::EC2::VPC")]
    for res in tagged:
        tags = {t["Key"]: t["Value"] for t in res["Properties"]["Tags"]}
        assert tags["Project"] == "gputrain" and tags["ManagedBy"] == "cdk" and tags["CostCenter"] == "ml-platform"
