"""The GPU cluster stack: template assertions for one node, several nodes, EFA and teardown.

The training-job stack is left out of these synths: the cluster does not depend on it.
"""

from __future__ import annotations

import base64
import gzip
import ipaddress
import json
import subprocess
import re
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from stacks.components.gpu_cluster import SESSION_MANAGER_ACTIONS, dlami_parameter_name, node_addresses
from stacks.components.node_user_data import BOOT_DIR, BOOT_FILES, USER_DATA_LIMIT_BYTES, boot_file_bytes
from stacks.config import DEFAULT_INTERFACE_ENDPOINTS, ConfigError, load_config
from stacks.gpu_instances import lookup
from tests.synth import ROOT, Synth, project_context

BASE = {"training_job.enabled": False}
SINGLE = BASE
MULTI_EFA = {**BASE, "cluster.node_count": 2, "cluster.instance_type": "g5.12xlarge"}
MULTI_PLAIN = {**BASE, "cluster.node_count": 2}
P4D_TUNED = {
    **BASE,
    "cluster.node_count": 3,
    "cluster.instance_type": "p4d.24xlarge",
    "cluster.root_volume_gb": 500,
    "cluster.signal_timeout_minutes": 45,
    "cluster.start_training_on_boot": True,
    "cluster.idle_stop_minutes": 0,
    "cluster.max_lifetime_hours": 0,
}
P5_PAIR = {**BASE, "cluster.node_count": 2, "cluster.instance_type": "p5.48xlarge"}
OFFLINE_AMI = "ami-00000000000000000"


# ------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------


def _cluster(synth_app, overrides) -> tuple[Synth, Template, dict[str, Any]]:
    synthesized = synth_app(overrides)
    return synthesized, synthesized.template("gputrain-cluster"), synthesized.template_json("gputrain-cluster")


def _nodes(template_json: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Instance resources in node order (by their Name tag)."""
    nodes = [(k, v) for k, v in template_json["Resources"].items() if v["Type"] == "AWS::EC2::Instance"]

    def index(item: tuple[str, dict[str, Any]]) -> int:
        name = next(t["Value"] for t in item[1]["Properties"]["Tags"] if t["Key"] == "Name")
        return int(name.rsplit("-", 1)[1])

    return sorted(nodes, key=index)


def _efa_interfaces(template_json: dict[str, Any], node: dict[str, Any]) -> list[dict[str, Any]]:
    """The network interfaces of a node's launch template (where an EFA node declares them)."""
    spec = node["Properties"]["LaunchTemplate"]
    launch_template = template_json["Resources"][spec["LaunchTemplateId"]["Ref"]]
    return launch_template["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]


def _user_data(resource: dict[str, Any]) -> str:
    """The user data text, with CloudFormation expressions shown as ``{{...}}``."""
    value = resource["Properties"]["UserData"]["Fn::Base64"]
    parts = value["Fn::Join"][1] if isinstance(value, dict) else [value]
    return "".join(p if isinstance(p, str) else "{{" + json.dumps(p, sort_keys=True) + "}}" for p in parts)


def _node_env(user_data: str) -> dict[str, str]:
    block = user_data.split("node.env <<'GPUTRAIN_EOF'\n", 1)[1].split("\nGPUTRAIN_EOF", 1)[0]
    return {k: v.strip("'") for k, v in (line.split("=", 1) for line in block.splitlines())}


def _unpacked(user_data: str, name: str) -> bytes:
    marker = f"| gunzip > /opt/gputrain/{name}\n"
    packed = user_data.split(marker, 1)[1].split("\nGPUTRAIN_EOF", 1)[0]
    return gzip.decompress(base64.b64decode(packed))


def _agent_config(user_data: str) -> dict[str, Any]:
    block = user_data.split("cloudwatch-agent.json <<'GPUTRAIN_EOF'\n", 1)[1].split("\nGPUTRAIN_EOF", 1)[0]
    return json.loads(re.sub(r"\{\{.*?\}\}", "TOKEN", block))


def _statements(template_json: dict[str, Any], policy_prefix: str = "ClusterNodePolicy") -> dict[str, dict[str, Any]]:
    """Statements by Sid of the managed policies whose logical id starts with ``policy_prefix``."""
    policies = [
        v for k, v in template_json["Resources"].items() if v["Type"] == "AWS::IAM::ManagedPolicy" and k.startswith(policy_prefix)
    ]
    assert policies
    return {s["Sid"]: s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# ------------------------------------------------------------------------------------------
# AMI
# ------------------------------------------------------------------------------------------


def test_ami_is_the_dlami_parameter_value_cached_in_context(synth_app):
    _, template, tj = _cluster(synth_app, SINGLE)
    parameter = dlami_parameter_name("base-oss-nvidia-driver-gpu-ubuntu-22.04")
    assert parameter == "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
    context = json.loads((ROOT / "cdk.context.json").read_text())
    key = f"ssm:account=123456789012:parameterName={parameter}:region=us-east-1"
    assert context[key] == OFFLINE_AMI
    template.all_resources_properties("AWS::EC2::Instance", {"ImageId": OFFLINE_AMI})
    template.has_output("AmiId", {"Value": OFFLINE_AMI})
    # A literal id, not an SSM parameter resolved at deploy time: a new DLAMI release never
    # replaces running nodes.
    assert "Parameters" not in tj or not any("Ssm" in k for k in tj["Parameters"])


def test_a_pinned_dlami_replaces_the_lookup(synth_app):
    """V100 nodes (p3) run only on a pinned DLAMI release whose driver still supports Volta."""
    pinned = {"ami_id": "ami-0123456789abcdef0", "nvidia_driver_branch": 580}
    _, template, _ = _cluster(synth_app, {"cluster.instance_type": "p3.2xlarge", "cluster.pinned_dlami": pinned})
    template.all_resources_properties("AWS::EC2::Instance", {"ImageId": "ami-0123456789abcdef0"})
    template.has_output("AmiId", {"Value": "ami-0123456789abcdef0"})


# ------------------------------------------------------------------------------------------
# Instances
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "instance_type", "count"),
    [(SINGLE, "g5.xlarge", 1), (MULTI_EFA, "g5.12xlarge", 2), (P4D_TUNED, "p4d.24xlarge", 3)],
    ids=["single", "g5-12xlarge-x2", "p4d-x3"],
)
def test_instance_type_and_count_come_from_config(synth_app, overrides, instance_type, count):
    _, template, tj = _cluster(synth_app, overrides)
    template.resource_count_is("AWS::EC2::Instance", count)
    template.all_resources_properties("AWS::EC2::Instance", {"InstanceType": instance_type})
    for _, node in _nodes(tj):
        assert _node_env(_user_data(node))["EXPECTED_GPU_COUNT"] == str(lookup(instance_type).gpu_count)


def test_node_is_private_without_public_ip_or_ssh(synth_app):
    _, template, tj = _cluster(synth_app, SINGLE)
    (_, node), = _nodes(tj)
    props = node["Properties"]
    assert "KeyName" not in props and "AssociatePublicIpAddress" not in json.dumps(props)
    assert props["SubnetId"]["Fn::GetStackOutput"]["StackName"] == "gputrain-data"
    assert "ClusterSubnet1" in props["SubnetId"]["Fn::GetStackOutput"]["OutputName"]
    for rule in template.find_resources("AWS::EC2::SecurityGroupIngress").values():
        assert "CidrIp" not in rule["Properties"] and "SourceSecurityGroupId" in rule["Properties"]
    template.has_resource_properties("AWS::EC2::SecurityGroup", {"SecurityGroupIngress": Match.absent()})


def test_access_is_through_session_manager_and_nothing_more_of_ssm(synth_app):
    """Only what Session Manager needs: no AmazonSSMManagedInstanceCore, whose ssm:GetParameter(s)
    on "*" would let a node (and its host-network container) read every parameter in the account."""
    _, template, tj = _cluster(synth_app, SINGLE)
    template.all_resources_properties("AWS::IAM::Role", {"ManagedPolicyArns": Match.absent()})
    statements = _statements(tj)
    ssm_actions = {a for s in statements.values() for a in _as_list(s["Action"]) if a.split(":")[0].startswith(("ssm", "ec2messages"))}
    assert {a.split(":")[0] for a in ssm_actions} == {"ssm", "ssmmessages", "ec2messages"}
    assert {a for a in ssm_actions if a.startswith("ssm:")} == {"ssm:UpdateInstanceInformation"}
    assert statements["SsmAgentRegistration"]["Resource"] == "arn:aws:ec2:us-east-1:123456789012:instance/*"
    assert {"ssm", "ssmmessages", "ec2messages"} <= set(DEFAULT_INTERFACE_ENDPOINTS)


def test_imdsv2_encrypted_gp3_root_volume_and_detailed_monitoring(synth_app):
    _, template, _ = _cluster(synth_app, SINGLE)
    template.all_resources_properties(
        "AWS::EC2::Instance",
        {
            "MetadataOptions": {"HttpEndpoint": "enabled", "HttpTokens": "required", "HttpPutResponseHopLimit": 1},
            "Monitoring": True,
            "EbsOptimized": True,
            "BlockDeviceMappings": [
                {
                    "DeviceName": "/dev/sda1",
                    "Ebs": {
                        "Encrypted": True,
                        "KmsKeyId": Match.any_value(),
                        "VolumeType": "gp3",
                        "VolumeSize": 200,
                        "DeleteOnTermination": True,
                    },
                }
            ],
        },
    )


def test_root_volume_size_and_signal_timeout_come_from_config(synth_app):
    _, template, _ = _cluster(synth_app, P4D_TUNED)
    template.all_resources_properties(
        "AWS::EC2::Instance", {"BlockDeviceMappings": [Match.object_like({"Ebs": Match.object_like({"VolumeSize": 500})})]}
    )
    template.all_resources("AWS::EC2::Instance", {"CreationPolicy": {"ResourceSignal": {"Count": 1, "Timeout": "PT45M"}}})


def test_every_node_waits_for_its_health_signal(synth_app):
    _, template, tj = _cluster(synth_app, MULTI_EFA)
    template.all_resources("AWS::EC2::Instance", {"CreationPolicy": {"ResourceSignal": {"Count": 1, "Timeout": "PT30M"}}})
    for logical_id, node in _nodes(tj):
        env = _node_env(_user_data(node))
        assert env["LOGICAL_RESOURCE_ID"] == logical_id
        assert env["STACK_NAME"] == "gputrain-cluster"
        assert env["AWS_REGION"] == "us-east-1"
    signal = _statements(tj)["SignalHealth"]
    assert signal["Action"] == "cloudformation:SignalResource"
    assert signal["Resource"] == {"Ref": "AWS::StackId"}


# ------------------------------------------------------------------------------------------
# Boot
# ------------------------------------------------------------------------------------------


def test_user_data_carries_the_repository_boot_files(synth_app):
    _, _, tj = _cluster(synth_app, SINGLE)
    (_, node), = _nodes(tj)
    user_data = _user_data(node)
    for name in BOOT_FILES:
        assert _unpacked(user_data, name) == boot_file_bytes(name), name
        if name.endswith(".sh"):
            # The node's copy is the repository's without comment lines: same commands, valid bash.
            code = [l for l in (BOOT_DIR / name).read_text().splitlines()[1:] if l.strip() and not l.lstrip().startswith("#")]
            assert _unpacked(user_data, name).decode().splitlines()[1:] == code
            check = subprocess.run(["bash", "-n"], input=_unpacked(user_data, name), capture_output=True, check=False)
            assert check.returncode == 0, check.stderr
    assert "[scripts-user, always]" in user_data  # the boot sequence runs on every boot
    assert user_data.rstrip().endswith("--+AWS+CDK+User+Data+Separator==--")
    assert "exec /opt/gputrain/bootstrap.sh" in user_data


def test_user_data_stays_under_the_ec2_limit_for_the_largest_cluster(synth_app):
    _, _, tj = _cluster(synth_app, P4D_TUNED)
    for _, node in _nodes(tj):
        # Resolved names are at most a few dozen characters longer than the expressions.
        assert len(_user_data(node).encode()) < USER_DATA_LIMIT_BYTES - 2048


def test_training_container_contract_in_node_settings(synth_app):
    _, _, tj = _cluster(synth_app, SINGLE)
    (_, node), = _nodes(tj)
    env = _node_env(_user_data(node))
    registry, _, repository_and_tag = env["IMAGE_URI"].partition("/")
    assert registry == "123456789012.dkr.ecr.us-east-1.{{" + json.dumps({"Ref": "AWS::URLSuffix"}) + "}}"
    repository, _, tag = repository_and_tag.rpartition(":")
    assert tag == "tf2.21.0-gpu-1"  # config.image.tag, never latest
    reference = json.loads(repository.removeprefix("{{").removesuffix("}}"))["Fn::GetStackOutput"]
    assert reference["StackName"] == "gputrain-data" and "TrainingImageRepository" in reference["OutputName"]
    assert env["TRAINING_WORKER_PORT"] == "2222"
    assert env["TRAINING_INSTANCE_TYPE"] == "g5.xlarge"
    assert env["START_TRAINING"] == "false"
    assert env["CHECKPOINT_S3_URI"].startswith("s3://{{")
    assert env["CHECKPOINT_S3_URI"].endswith("}}/cluster-checkpoints/gputrain-cluster/node-0/")
    bootstrap = (BOOT_DIR / "bootstrap.sh").read_text()
    for flag in (
        "--gpus all",
        "--env EXPECTED_GPU_COUNT",
        "--env TRAINING_HOSTS",
        "--env TRAINING_CURRENT_HOST",
        "--env TRAINING_WORKER_PORT",
        "--env TRAINING_INSTANCE_TYPE",
        "--env SAGEMAKER_BASE_DIR=/opt/ml",
        '--volume "$ML_DIR:/opt/ml"',
    ):
        assert flag in bootstrap


def test_nodes_run_the_configured_user_script(synth_app):
    _, _, built_in = _cluster(synth_app, SINGLE)
    env = _node_env(_user_data(_nodes(built_in)[0][1]))
    assert (env["CODE_S3_URI"], env["ENTRY_POINT"], env["TF_USE_LEGACY_KERAS"]) == ("", "", "0")
    script = {**SINGLE, "cluster.code_key": "code/run-1/sourcedir.tar.gz", "cluster.entry_point": "train.py",
              "cluster.legacy_keras": True}
    _, _, tj = _cluster(synth_app, script)
    env = _node_env(_user_data(_nodes(tj)[0][1]))
    assert env["CODE_S3_URI"].startswith("s3://{{") and env["CODE_S3_URI"].endswith("}}/code/run-1/sourcedir.tar.gz")
    assert "ArtifactsBucket" in env["CODE_S3_URI"]
    assert (env["ENTRY_POINT"], env["TF_USE_LEGACY_KERAS"]) == ("train.py", "1")
    assert "--env TF_USE_LEGACY_KERAS" in (BOOT_DIR / "bootstrap.sh").read_text()


def test_nodes_get_the_all_reduce_floor_of_their_instance_type(synth_app):
    from stacks.gpu_instances import lookup

    _, _, multi = _cluster(synth_app, MULTI_EFA)
    floors = {_node_env(_user_data(n))["ALLREDUCE_BUSBW_FLOOR_GBPS"] for _, n in _nodes(multi)}
    assert floors == {f"{lookup('g5.12xlarge').allreduce_busbw_floor_gbps:g}"}
    _, _, single = _cluster(synth_app, SINGLE)
    (node,) = _nodes(single)
    assert _node_env(_user_data(node[1]))["ALLREDUCE_BUSBW_FLOOR_GBPS"] == ""  # one GPU: nothing to all-reduce


def test_start_training_on_boot_is_configurable(synth_app):
    _, _, tj = _cluster(synth_app, P4D_TUNED)
    assert {_node_env(_user_data(n))["START_TRAINING"] for _, n in _nodes(tj)} == {"true"}


# ------------------------------------------------------------------------------------------
# Several nodes
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [MULTI_EFA, MULTI_PLAIN, P4D_TUNED], ids=["g5-12xlarge", "g5-xlarge", "p4d"])
def test_several_nodes_share_a_cluster_placement_group_in_one_subnet(synth_app, overrides):
    _, template, tj = _cluster(synth_app, overrides)
    (group_id,) = template.find_resources("AWS::EC2::PlacementGroup", {"Properties": {"Strategy": "cluster"}})
    template.all_resources_properties(
        "AWS::EC2::Instance", {"PlacementGroupName": {"Fn::GetAtt": [group_id, "GroupName"]}}
    )
    subnets = {json.dumps(r["Properties"]["SubnetId"], sort_keys=True) for r in tj["Resources"].values()
               if r["Type"] == "AWS::EC2::Instance" and "SubnetId" in r["Properties"]}
    for launch_template in template.find_resources("AWS::EC2::LaunchTemplate").values():
        for interface in launch_template["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]:
            subnets.add(json.dumps(interface["SubnetId"], sort_keys=True))
    assert len(subnets) == 1


def test_single_node_has_no_placement_group(synth_app):
    _, template, _ = _cluster(synth_app, SINGLE)
    template.resource_count_is("AWS::EC2::PlacementGroup", 0)


@pytest.mark.parametrize(
    ("overrides", "nodes", "cards", "extra_type"),
    [(MULTI_EFA, 2, 1, None), (P4D_TUNED, 3, 4, "efa"), (P5_PAIR, 2, 32, "efa-only")],
    ids=["g5-12xlarge", "p4d", "p5"],
)
def test_every_network_card_of_an_efa_node_gets_an_efa_interface(synth_app, overrides, nodes, cards, extra_type):
    """One EFA interface per network card (the GPU table's efa_interfaces), not one per node."""
    synthesized, template, tj = _cluster(synth_app, overrides)
    assert synthesized.platform.gpu_cluster.cluster.efa_interfaces == cards
    (group_id,) = template.find_resources("AWS::EC2::SecurityGroup", {"Properties": {"GroupDescription": Match.string_like_regexp("GPU nodes")}})
    template.resource_count_is("AWS::EC2::LaunchTemplate", nodes)
    for _, node in _nodes(tj):
        props = node["Properties"]
        assert "NetworkInterfaces" not in props and "SubnetId" not in props and "SecurityGroupIds" not in props
        interfaces = _efa_interfaces(tj, node)
        assert len(interfaces) == cards
        assert sorted(i["NetworkCardIndex"] for i in interfaces) == list(range(cards))  # distinct cards
        primary, *extra = interfaces
        assert (primary["NetworkCardIndex"], primary["DeviceIndex"], primary["InterfaceType"]) == (0, 0, "efa")
        assert "PrivateIpAddress" in primary
        assert {(i["DeviceIndex"], i["InterfaceType"]) for i in extra} == ({(1, extra_type)} if extra else set())
        for interface in interfaces:
            assert interface["Groups"] == [{"Fn::GetAtt": [group_id, "GroupId"]}]
            assert interface["DeleteOnTermination"] is True
            if interface["InterfaceType"] == "efa-only":
                assert "PrivateIpAddress" not in interface  # EFA-only interfaces take no IP address
        # The interfaces carry the instance's tags: teardown_audit finds what is left by Project.
        data = tj["Resources"][node["Properties"]["LaunchTemplate"]["LaunchTemplateId"]["Ref"]]["Properties"]["LaunchTemplateData"]
        (spec,) = data["TagSpecifications"]
        instance_tags = {t["Key"]: t["Value"] for t in props["Tags"]}
        assert spec["ResourceType"] == "network-interface"
        assert {t["Key"]: t["Value"] for t in spec["Tags"]} == instance_tags and instance_tags["Project"] == "gputrain"


@pytest.mark.parametrize("overrides", [SINGLE, MULTI_PLAIN], ids=["single-g5-12xlarge", "g5-xlarge-x2"])
def test_no_efa_where_unsupported_or_unneeded(synth_app, overrides):
    _, template, _ = _cluster(synth_app, overrides)
    template.resource_count_is("AWS::EC2::NetworkInterface", 0)
    template.resource_count_is("AWS::EC2::LaunchTemplate", 0)
    template.all_resources_properties(
        "AWS::EC2::Instance", {"NetworkInterfaces": Match.absent(), "LaunchTemplate": Match.absent()}
    )


@pytest.mark.parametrize("overrides", [MULTI_EFA, MULTI_PLAIN, P4D_TUNED], ids=["g5-12xlarge", "g5-xlarge", "p4d"])
def test_host_list_is_identical_and_ordered_on_every_node(synth_app, overrides):
    synthesized, template, tj = _cluster(synth_app, overrides)
    nodes = _nodes(tj)
    envs = [_node_env(_user_data(n)) for _, n in nodes]
    hosts = envs[0]["TRAINING_HOSTS"].split(",")
    assert len(hosts) == len(envs) == len(set(hosts))
    for index, env in enumerate(envs):
        assert env["TRAINING_HOSTS"] == ",".join(hosts)
        assert env["TRAINING_CURRENT_HOST"] == hosts[index]
        assert env["NODE_NAME"] == f"node-{index}"
    template.has_output("PrivateIps", {"Value": ",".join(hosts)})
    # Each node's (primary or first EFA) interface has its host-list address...
    addresses = []
    for _, node in nodes:
        props = node["Properties"]
        if "LaunchTemplate" in props:
            props = _efa_interfaces(tj, node)[0]
        addresses.append(props["PrivateIpAddress"])
    assert addresses == hosts
    # ...in the Cluster subnet, without a subnet CIDR reservation (missing from most regions' CloudFormation).
    template.resource_count_is("AWS::EC2::SubnetCidrReservation", 0)
    subnet = ipaddress.IPv4Network(synthesized.platform.data_plane.network.cluster_subnets[0].ipv4_cidr_block)
    assert all(ipaddress.IPv4Address(h) in subnet for h in hosts)


def test_security_group_admits_only_cluster_members(synth_app):
    _, template, tj = _cluster(synth_app, MULTI_EFA)
    (group_id,) = template.find_resources("AWS::EC2::SecurityGroup")
    own = {"Fn::GetAtt": [group_id, "GroupId"]}
    (ingress,) = template.find_resources("AWS::EC2::SecurityGroupIngress").values()
    assert ingress["Properties"]["SourceSecurityGroupId"] == own and ingress["Properties"]["GroupId"] == own
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupEgress", {"DestinationSecurityGroupId": own, "GroupId": own, "IpProtocol": "-1"}
    )
    for eni in template.find_resources("AWS::EC2::NetworkInterface").values():
        assert eni["Properties"]["GroupSet"] == [own]


def test_node_addresses_start_at_offset_10_of_the_cluster_subnet():
    assert node_addresses("10.40.32.0/23", 3) == (("10.40.32.10",), ("10.40.32.11",), ("10.40.32.12",))
    assert node_addresses("10.40.32.0/23", 64)[-1] == ("10.40.32.73",)
    # A node's further addressed interfaces follow the 64 primaries, card by card; nothing moves with node_count.
    assert node_addresses("10.40.32.0/23", 2, per_node=4)[1] == ("10.40.32.11", "10.40.32.75", "10.40.32.139", "10.40.32.203")
    assert node_addresses("10.40.32.0/23", 64, per_node=4)[-1][-1] == "10.40.33.9"
    with pytest.raises(ValueError, match="do not fit in subnet 10.40.32.0/24"):
        node_addresses("10.40.32.0/24", 64, per_node=4)
    with pytest.raises(ValueError, match="65 nodes"):
        node_addresses("10.40.32.0/23", 65)


def test_the_largest_cluster_of_every_gpu_type_fits_its_cluster_subnet():
    """64 nodes (the config's limit) with every addressed EFA interface, clear of AWS's reserved addresses
    (the first four and the last), in a Cluster subnet of the data stack's size."""
    from stacks.components.gpu_cluster import efa_interface_type_for_extra_cards
    from stacks.components.network import CLUSTER_SUBNET_PREFIX
    from stacks.config import MAX_CLUSTER_NODES
    from stacks.gpu_instances import gpu_instance_types

    subnet = ipaddress.IPv4Network(f"10.40.32.0/{CLUSTER_SUBNET_PREFIX}")
    usable = set(list(subnet)[4:-1])
    for name, row in gpu_instance_types().items():
        per_node = row.efa_interfaces if row.efa and efa_interface_type_for_extra_cards(name) == "efa" else 1
        addresses = [a for node in node_addresses(str(subnet), MAX_CLUSTER_NODES, per_node=max(1, per_node)) for a in node]
        assert len(set(addresses)) == len(addresses) == MAX_CLUSTER_NODES * max(1, per_node), name
        assert {ipaddress.IPv4Address(a) for a in addresses} <= usable, name


@pytest.mark.parametrize(("zone", "subnet_output", "block"), [(0, "ClusterSubnet1", "10.40.32.0/23"), (1, "ClusterSubnet2", "10.40.34.0/23")])
def test_nodes_run_in_the_cluster_subnet_of_the_configured_zone(synth_app, zone, subnet_output, block):
    synthesized, template, tj = _cluster(synth_app, {**P4D_TUNED, "cluster.availability_zone": zone})
    network = synthesized.platform.data_plane.network
    assert network.cluster_subnets[zone].ipv4_cidr_block == block
    assert network.cluster_subnets[zone].availability_zone == ("us-east-1a", "us-east-1b")[zone]
    template.resource_count_is("AWS::EC2::SubnetCidrReservation", 0)
    subnet = ipaddress.IPv4Network(block)
    for _, node in _nodes(tj):
        for interface in _efa_interfaces(tj, node):
            assert subnet_output in interface["SubnetId"]["Fn::GetStackOutput"]["OutputName"]
            if interface["InterfaceType"] == "efa":  # p4d: every card's interface has a fixed address in that subnet
                assert ipaddress.IPv4Address(interface["PrivateIpAddress"]) in subnet
    fixed = [i["PrivateIpAddress"] for _, n in _nodes(tj) for i in _efa_interfaces(tj, n)]
    assert len(fixed) == len(set(fixed)) == 3 * 4


# ------------------------------------------------------------------------------------------
# Least privilege
# ------------------------------------------------------------------------------------------


def test_role_has_least_privilege(synth_app):
    _, template, tj = _cluster(synth_app, SINGLE)
    statements = _statements(tj)
    actions = {sid: sorted(_as_list(s["Action"])) for sid, s in statements.items()}
    assert actions == {
        "ListDatasets": ["s3:ListBucket"],
        "ReadDatasets": ["s3:GetObject"],
        "ListClusterArtifacts": ["s3:ListBucket"],
        "ReadClusterArtifacts": ["s3:GetObject"],
        "WriteClusterOutputs": ["s3:AbortMultipartUpload", "s3:PutObject"],
        "BucketObjectKeys": ["kms:Decrypt", "kms:GenerateDataKey"],
        "PullTrainingImage": ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
        "EcrLogin": ["ecr:GetAuthorizationToken"],
        "WriteNodeLogs": ["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"],
        "FindJobOutputLogGroup": ["logs:DescribeLogGroups"],  # SSM Agent, before a cluster job's output
        "PublishGpuMetrics": ["cloudwatch:PutMetricData"],
        "SignalHealth": ["cloudformation:SignalResource"],
        "SessionManagerChannels": sorted(SESSION_MANAGER_ACTIONS),
        "SsmAgentRegistration": ["ssm:UpdateInstanceInformation"],
    }
    assert all(s["Effect"] == "Allow" and "*" not in "".join(actions[sid]) for sid, s in statements.items())
    # "*" only where the service has no resource-level permissions.
    assert {sid for sid, s in statements.items() if s["Resource"] == "*"} == {"EcrLogin", "PublishGpuMetrics", "SessionManagerChannels", "FindJobOutputLogGroup"}
    # Only into the project's namespace: a node cannot feed another deployment's graphs or idle alarms.
    assert statements["PublishGpuMetrics"]["Condition"] == {"StringEquals": {"cloudwatch:namespace": "gputrain/ClusterNodes"}}
    assert "kms:ViaService" in statements["BucketObjectKeys"]["Condition"]["StringEquals"]
    # Own log group only, and no creating log groups outside the stack.
    (log_group,) = template.find_resources("AWS::Logs::LogGroup")
    assert statements["WriteNodeLogs"]["Resource"] == {"Fn::GetAtt": [log_group, "Arn"]}
    # Buckets, key and repository are the data plane's.
    for sid in ("ListDatasets", "ListClusterArtifacts", "BucketObjectKeys", "PullTrainingImage"):
        assert statements[sid]["Resource"]["Fn::GetStackOutput"]["StackName"] == "gputrain-data"
    assert "Datasets" in json.dumps(statements["ReadDatasets"]["Resource"])
    # No inline policies; customer-managed policies only.
    template.all_resources_properties("AWS::IAM::Role", {"Policies": Match.absent()})
    template.resource_count_is("AWS::IAM::Policy", 0)


def _object_keys(resource: Any) -> list[str]:
    """The key patterns of bucket-object ARNs (``{"Fn::Join": ["", [<bucket arn>, "/key*"]]}``)."""
    return [r["Fn::Join"][1][-1] for r in _as_list(resource)]


def test_nodes_write_only_their_cluster_outputs_and_their_own_checkpoints(synth_app):
    """Nodes cannot overwrite SageMaker job outputs (training-jobs/) or checkpoints, nor another
    node's checkpoints: node i's writes are tied to its fixed private address."""
    synthesized, _, tj = _cluster(synth_app, MULTI_PLAIN)
    statements = _statements(tj)
    writes = {sid: s for sid, s in _statements(tj, "ClusterNode").items() if "s3:PutObject" in _as_list(s["Action"])}
    assert set(writes) == {"WriteClusterOutputs", "Node0Checkpoints", "Node1Checkpoints"}
    assert _object_keys(writes["WriteClusterOutputs"]["Resource"]) == ["/cluster-outputs/gputrain-cluster/*"]
    hosts = synthesized.platform.gpu_cluster.cluster.hosts
    for index, host in enumerate(hosts):
        node = writes[f"Node{index}Checkpoints"]
        assert _object_keys(node["Resource"]) == [f"/cluster-checkpoints/gputrain-cluster/node-{index}/*"]
        assert node["Condition"] == {"IpAddress": {"aws:Ec2InstanceSourcePrivateIPv4": f"{host}/32"}}
    assert _object_keys(statements["ReadClusterArtifacts"]["Resource"]) == [
        "/cluster-checkpoints/gputrain-cluster/*", "/cluster-outputs/gputrain-cluster/*", "/code/*"  # users' code: read only
    ]
    assert statements["ListClusterArtifacts"]["Condition"] == {
        "StringLike": {"s3:prefix": ["cluster-checkpoints/gputrain-cluster/*", "cluster-outputs/gputrain-cluster/*"]}
    }
    assert "training-jobs" not in json.dumps(_statements(tj, "ClusterNode"))


def test_checkpoint_statements_of_a_large_cluster_fit_managed_policy_limits(synth_app):
    _, _, tj = _cluster(synth_app, {**BASE, "cluster.node_count": 40})
    policies = [v for k, v in tj["Resources"].items() if k.startswith("ClusterNodeCheckpointPolicy")]
    assert len(policies) == 3
    longest_bucket_arn = "arn:aws:s3:::" + "b" * 63

    def resolved(value: Any) -> Any:
        if isinstance(value, dict) and "Fn::GetStackOutput" in value:
            return longest_bucket_arn
        if isinstance(value, dict) and "Fn::Join" in value:
            return value["Fn::Join"][0].join(resolved(v) for v in value["Fn::Join"][1])
        if isinstance(value, dict):
            return {k: resolved(v) for k, v in value.items()}
        if isinstance(value, list):
            return [resolved(v) for v in value]
        return value

    for policy in policies:
        # IAM's limit: 6,144 characters per managed policy, whitespace not counted.
        assert len(json.dumps(resolved(policy["Properties"]["PolicyDocument"]), separators=(",", ":"))) < 6144


def _acknowledged(construct) -> dict[str, str]:
    """Rule id -> reason of the policy-pack findings acknowledged on a construct."""
    found = {}
    for entry in construct.node.metadata:
        if entry.type == "aws:cdk:acknowledged-rules":
            found.update({k.split("::", 1)[1] if k.startswith("Annotation::") else k: v for k, v in entry.data.items()})
    return found


@pytest.mark.parametrize("overrides", [SINGLE, MULTI_EFA], ids=["single", "multi-efa"])
def test_every_remaining_wildcard_is_acknowledged_with_a_reason(synth_app, overrides):
    """The synth runs both policy packs and raises on any unacknowledged finding; here: which."""
    synthesized, _, tj = _cluster(synth_app, overrides)
    cluster = synthesized.platform.gpu_cluster.cluster
    acknowledged = _acknowledged(cluster.node.find_child("NodePolicy"))
    wildcards = []
    for statement in _statements(tj).values():
        for resource in _as_list(statement["Resource"]):
            if resource == "*":
                wildcards.append("*")
            elif "Fn::Join" in resource and resource["Fn::Join"][1][-1].endswith("*"):
                wildcards.append("".join(p if isinstance(p, str) else json.dumps(p, separators=(",", ":"))
                                         for p in resource["Fn::Join"][1]))
    # "*" (ECR login, metrics, SSM channels), datasets objects, cluster checkpoints and outputs, users' code
    assert len(set(wildcards)) == 5
    for wildcard in wildcards:
        reason = acknowledged[f"AwsSolutions-IAM5[Resource::{wildcard}]"]
        assert len(reason) > 60
    assert acknowledged["AwsSolutions-IAM5[Resource::arn:aws:ec2:us-east-1:123456789012:instance/*]"]
    assert not any("IAM4" in rule for rule in _acknowledged(cluster.role))
    assert "NIST.800.53.R5-EC2RestrictedCommonPorts" in _acknowledged(cluster.security_group)
    for node in cluster.nodes:
        rules = _acknowledged(node.instance)
        assert "AwsSolutions-EC29" in rules  # no termination protection: destroy must terminate
        assert ("NIST.800.53.R5-EC2InstancesInVPC" in rules) == cluster.efa


# ------------------------------------------------------------------------------------------
# Cost guards
# ------------------------------------------------------------------------------------------


def test_idle_nodes_are_stopped_by_default(synth_app):
    _, template, tj = _cluster(synth_app, MULTI_EFA)
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    assert len(alarms) == 2
    watched = set()
    for alarm in alarms.values():
        props = alarm["Properties"]
        assert props["Namespace"] == "gputrain/ClusterNodes" and props["MetricName"] == "nvidia_smi_utilization_gpu"
        assert props["Statistic"] == "Maximum"  # the busiest GPU: idle means every GPU is idle
        assert props["ComparisonOperator"] == "LessThanThreshold" and props["Threshold"] == 5
        assert props["Period"] * props["EvaluationPeriods"] == 60 * 60
        assert props["AlarmActions"] == ["arn:aws:automate:us-east-1:ec2:stop"]
        assert props["TreatMissingData"] == "notBreaching"
        (dimension,) = props["Dimensions"]
        assert dimension["Name"] == "InstanceId"
        watched.add(dimension["Value"]["Ref"])
    assert watched == {logical_id for logical_id, _ in _nodes(tj)}
    # The agent publishes the metric per instance.
    (_, node), *_ = _nodes(tj)
    agent = _agent_config(_user_data(node))["metrics"]
    assert "utilization_gpu" in agent["metrics_collected"]["nvidia_gpu"]["measurement"]
    assert agent["aggregation_dimensions"] == [["InstanceId"]]
    assert agent["append_dimensions"] == {"InstanceId": "${aws:InstanceId}"}
    # ... into the namespace the alarms watch and the role may publish to.
    assert agent["namespace"] == "gputrain/ClusterNodes"


def test_maximum_lifetime_is_enforced_by_default(synth_app):
    _, template, tj = _cluster(synth_app, SINGLE)
    (_, node), = _nodes(tj)
    assert _node_env(_user_data(node))["MAX_LIFETIME_HOURS"] == "24"
    template.all_resources_properties("AWS::EC2::Instance", {"InstanceInitiatedShutdownBehavior": "stop"})
    assert 'shutdown --poweroff "+$minutes"' in (BOOT_DIR / "bootstrap.sh").read_text()


def test_cost_guards_can_be_turned_off(synth_app):
    _, template, tj = _cluster(synth_app, P4D_TUNED)
    template.resource_count_is("AWS::CloudWatch::Alarm", 0)
    assert {_node_env(_user_data(n))["MAX_LIFETIME_HOURS"] for _, n in _nodes(tj)} == {"0"}


# ------------------------------------------------------------------------------------------
# Logs, outputs, teardown
# ------------------------------------------------------------------------------------------


def test_log_group_is_encrypted_and_named_for_operators(synth_app):
    _, template, _ = _cluster(synth_app, SINGLE)
    template.has_resource(
        "AWS::Logs::LogGroup",
        {
            "Properties": {"LogGroupName": "/gputrain/gpu-cluster", "KmsKeyId": Match.any_value(), "RetentionInDays": Match.any_value()},
            "DeletionPolicy": "Delete",
        },
    )


def test_outputs_for_operator_scripts(synth_app):
    _, template, tj = _cluster(synth_app, MULTI_EFA)
    (group_id,) = template.find_resources("AWS::EC2::SecurityGroup")
    (log_group,) = template.find_resources("AWS::Logs::LogGroup")
    template.has_output(
        "InstanceIds", {"Value": {"Fn::Join": [",", [{"Ref": logical_id} for logical_id, _ in _nodes(tj)]]}}
    )
    template.has_output("PrivateIps", {"Value": "10.40.32.10,10.40.32.11"})
    template.has_output("SecurityGroupId", {"Value": {"Fn::GetAtt": [group_id, "GroupId"]}})
    template.has_output("LogGroupName", {"Value": {"Ref": log_group}})
    template.has_output("ExpectedGpusPerNode", {"Value": "4"})


ALLOWED_TYPES = {
    "AWS::EC2::Instance",
    "AWS::EC2::LaunchTemplate",  # an EFA node's network interfaces: EC2 deletes them with the instance
    "AWS::EC2::SecurityGroup",
    "AWS::EC2::SecurityGroupIngress",
    "AWS::EC2::SecurityGroupEgress",
    "AWS::EC2::PlacementGroup",
    "AWS::IAM::Role",
    "AWS::IAM::ManagedPolicy",
    "AWS::IAM::InstanceProfile",
    "AWS::CloudWatch::Alarm",
    "AWS::Logs::LogGroup",
    "AWS::SSM::Document",  # the cluster jobs' Command document: compute's, destroyed with it
}


@pytest.mark.parametrize("overrides", [SINGLE, MULTI_EFA], ids=["single", "multi-efa"])
def test_destroy_removes_everything_the_stack_created(synth_app, overrides):
    _, _, tj = _cluster(synth_app, overrides)
    for logical_id, resource in tj["Resources"].items():
        assert resource["Type"] in ALLOWED_TYPES, logical_id  # compute only: no buckets, keys, repositories
        assert resource.get("DeletionPolicy", "Delete") == "Delete", logical_id
        assert resource.get("UpdateReplacePolicy", "Delete") == "Delete", logical_id
    for _, node in _nodes(tj):
        props = node["Properties"]
        assert props.get("DisableApiTermination") in (None, False)
        assert all(m["Ebs"]["DeleteOnTermination"] for m in props["BlockDeviceMappings"])


def test_cluster_leaves_the_data_plane_untouched(synth_app):
    # The DNS firewall's default follows the cluster (its nodes have a network; tests/unit/test_isolation.py):
    # pinned here, the cluster itself adds nothing to the data plane.
    with_cluster = synth_app({**SINGLE, "network.dns_firewall": True})
    without_cluster = synth_app({**BASE, "cluster.enabled": False, "network.dns_firewall": True})
    assert "gputrain-cluster" not in without_cluster.stack_ids
    assert (
        with_cluster.template_json("gputrain-data")["Resources"] == without_cluster.template_json("gputrain-data")["Resources"]
    )


def test_idle_stop_longer_than_cloudwatch_can_evaluate_is_refused():
    context = {**project_context(), "gpu_training.cluster.idle_stop_minutes": "1441"}
    with pytest.raises(ConfigError, match="idle_stop_minutes = 1441: must be between 0 and 1440"):
        load_config(context)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cluster.availability_zone": "2"}, "cluster.availability_zone = 2: not one of the VPC's 2 availability zones (network.max_azs); use an index from 0 to 1"),
        ({"cluster.availability_zone": "-1"}, "cluster.availability_zone = -1: not one of the VPC's 2 availability zones"),
        ({"cluster.availability_zone": "2", "network.max_azs": "1"}, "not one of the VPC's 1 availability zones (network.max_azs); use an index from 0 to 0"),
        ({"cluster.availability_zone": '"us-east-1b"'}, "cluster.availability_zone = \"us-east-1b\": expected a whole number"),
    ],
    ids=["past-max-azs", "negative", "one-zone", "a-name"],
)
def test_availability_zone_outside_the_vpc_is_refused(overrides, message):
    context = {**project_context(), **{f"gpu_training.{k}": v for k, v in overrides.items()}}
    with pytest.raises(ConfigError, match=re.escape(message)) as raised:
        load_config(context)
    assert "\n" not in str(raised.value)


def test_availability_zone_within_the_vpc_is_accepted():
    context = {**project_context(), "gpu_training.network.max_azs": "3", "gpu_training.cluster.availability_zone": "2"}
    assert load_config(context).cluster.availability_zone == 2
    assert load_config(project_context()).cluster.availability_zone == 0


def _object_write_patterns(template_json: dict[str, Any]) -> list[str]:
    """Key patterns of every artifacts-bucket object ARN that a policy of ``template_json`` lets write."""
    patterns = []
    for resource in template_json["Resources"].values():
        if resource["Type"] not in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            actions = _as_list(statement["Action"])
            if statement["Effect"] == "Allow" and any(a in ("s3:PutObject", "s3:*", "s3:Put*") for a in actions):
                for item in _as_list(statement["Resource"]):
                    if isinstance(item, dict) and "Fn::Join" in item:
                        patterns.append(item["Fn::Join"][1][-1].lstrip("/"))
    return patterns


def test_no_training_or_processing_job_can_write_the_cluster_checkpoints(synth_app):
    """SageMaker jobs write ``checkpoints/<job name>/``: a job named like the cluster stack
    (``<project>-cluster``) must not land in, or be allowed to overwrite, the nodes' checkpoints."""
    import fnmatch

    synthesized, _, cluster = _cluster(synth_app, {**MULTI_PLAIN, "training_job.enabled": True})
    node_keys = [f"{_object_keys(s['Resource'])[0].lstrip('/').rstrip('*')}model.ckpt" for sid, s in _statements(cluster, "ClusterNode").items() if sid.endswith("Checkpoints")]
    assert len(node_keys) == 2
    job_writes = _object_write_patterns(synthesized.template_json("gputrain-training"))
    assert job_writes, "the job roles write somewhere"
    for key in node_keys:
        covering = [p for p in job_writes if fnmatch.fnmatchcase(key, p)]
        assert not covering, f"{key} is writable by the job roles through {covering}"
