"""GPU EC2 nodes on the Deep Learning AMI that prove their GPUs work before a deploy succeeds.

Every node runs ``node_boot/bootstrap.sh`` at boot: a GPU health check signals its instance
resource's CreationPolicy, so ``cdk deploy`` fails, naming the node and the reason, when a
node's driver is missing, it shows the wrong number of GPUs or a GPU cannot compute. Healthy
nodes pull the training image and, when configured, start training with the host list.

The AMI
    ``/aws/service/deeplearning/ami/x86_64/<cluster.dlami_flavour>/latest/ami-id``, looked up
    once and cached in ``cdk.context.json`` so that a new DLAMI release never replaces running
    nodes by surprise. The committed entry for the offline environment (account
    ``123456789012``, ``us-east-1``) holds a placeholder id, ``ami-00000000000000000``: it only
    lets synth and tests run without credentials. A real account gets its own entry on the
    first synth with credentials. To move to the newest DLAMI (this replaces every node)::

        npx cdk context --reset "ssm:account=<ACCOUNT>:parameterName=/aws/service/deeplearning/ami/x86_64/<flavour>/latest/ami-id:region=<REGION>"
        npx cdk synth        # with credentials: looks the parameter up again
        git commit cdk.context.json

    ``cluster.pinned_dlami`` replaces the lookup with an explicit release, e.g. for V100 nodes
    (p3), which the latest DLAMI's driver no longer supports (the config refuses p3 without it).

Addresses and the host list
    The nodes run in the VPC's ``Cluster`` subnet of the zone ``cluster.availability_zone``
    names, a subnet that holds nothing else (SageMaker and the interface endpoints use the
    ``Training`` subnets). Node ``i`` gets a fixed private address there, and so does each of its
    EFA interfaces that carries one (:func:`node_addresses`): as no interface in the subnet takes
    an address EC2 picks, none of these is ever taken by another, without a subnet CIDR
    reservation (a resource type most regions' CloudFormation lacks). Every node's address is
    thus known at synth, and every node gets the same ``TRAINING_HOSTS`` in node order without
    a node referring to another node (no circular references, nothing to discover at boot). A
    cluster placement group needs one subnet anyway. Changes that replace a node in place (a new
    AMI) cannot reuse its address while the old node exists: destroy the cluster stack, then
    deploy it (compute only; data stays in the data plane). Changes to the boot settings (image tag, host list...) do not
    replace nodes: CloudFormation stops and starts them with the new user data, and the boot
    sequence runs again.

Cost guards (on by default)
    * Idle stop: a CloudWatch alarm per node on the agent's ``nvidia_smi_utilization_gpu``
      (busiest GPU) stops the instance when every GPU stayed below
      ``cluster.idle_gpu_utilization_percent`` for ``cluster.idle_stop_minutes``.
    * Maximum lifetime: the node powers itself off ``cluster.max_lifetime_hours`` after its
      first boot (a later start gets 15 minutes). Instances shut down from inside *stop* rather
      than terminate: the GPU hours end either way, CloudFormation's view stays true (a
      terminated node would break the next update of the stack), and the root volume with the
      logs stays for a post-mortem until ``cdk destroy``.
"""

from __future__ import annotations

import ipaddress
import json
import math
from dataclasses import dataclass
from typing import Any, Optional

import jsii
from aws_cdk import Aws, CfnCreationPolicy, CfnResource, CfnResourceSignal, Duration, IStableAnyProducer, Lazy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm
from constructs import Construct, IValidation

from stacks.components.buckets import CLUSTER_CHECKPOINT_PREFIX, CLUSTER_OUTPUT_PREFIX
from stacks.components.cluster_job_document import SOURCE_CODE_KEYS, document_content, document_name
from stacks.components.log_group import encrypted_log_group
from stacks.components.network import TrainingNetwork, closed_security_group
from stacks.components.node_user_data import GPU_UTILIZATION_METRIC, NodeSettings, add_node_boot, gpu_metric_namespace
from stacks.components.policy import acknowledge
from stacks.config import MAX_CLUSTER_NODES, USER_CODE_PREFIX, ClusterConfig
from stacks.gpu_instances import lookup

DLAMI_PARAMETER = "/aws/service/deeplearning/ami/x86_64/{flavour}/latest/ami-id"
TRAINING_WORKER_PORT = 2222
"""Port the training workers listen on (the container's ``TRAINING_WORKER_PORT`` default)."""
EFA_ONLY_FAMILIES = ("p5", "p5e", "p5en")
"""Families whose extra network cards take ``efa-only`` interfaces (AWS's P5/P5e EFA layout)."""

ROOT_DEVICE_NAME = "/dev/sda1"
"""Root device of the Ubuntu DLAMIs; a mapping under another name would add a second volume."""

FIRST_NODE_OFFSET = 10
"""Node ``i``'s address is its subnet's ``10 + i``: clear of the first four addresses AWS reserves."""

NODES_PER_CHECKPOINT_POLICY = 16
"""Per-node checkpoint statements per managed policy (a managed policy holds at most 6,144
characters; 64 nodes need 4 policies)."""

SESSION_MANAGER_ACTIONS: tuple[str, ...] = (
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
    "ec2messages:AcknowledgeMessage",
    "ec2messages:DeleteMessage",
    "ec2messages:FailMessage",
    "ec2messages:GetEndpoint",
    "ec2messages:GetMessages",
    "ec2messages:SendReply",
)
"""What SSM Agent needs for Session Manager (the message channels), none with a resource."""


def dlami_parameter_name(flavour: str) -> str:
    """SSM parameter holding the newest AMI id of a Deep Learning AMI flavour."""
    return DLAMI_PARAMETER.format(flavour=flavour)


def node_addresses(subnet_cidr: str, node_count: int, *, per_node: int = 1) -> tuple[tuple[str, ...], ...]:
    """The fixed addresses of every node's interfaces in its (``Cluster``) subnet, ``[node][interface]``.

    Interface ``c`` of node ``i`` is ``subnet + 10 + 64 * c + i``: the primaries (``c = 0``, the host
    list) come first in node order, and no address moves when ``node_count`` does. Offset 10 is clear
    of the four addresses AWS reserves at the start, and the check keeps the last one (AWS's) free.

    Args:
        subnet_cidr: The subnet's block.
        node_count: Nodes, at most 64.
        per_node: Interfaces per node that carry an address: 1, or one per network card for EFA
            ``efa`` interfaces (4 on p4d; ``efa-only`` ones carry none).

    Raises:
        ValueError: the nodes' addresses do not fit in the subnet.
    """
    subnet = ipaddress.IPv4Network(subnet_cidr)
    last_offset = FIRST_NODE_OFFSET + MAX_CLUSTER_NODES * (per_node - 1) + node_count - 1
    if node_count > MAX_CLUSTER_NODES or last_offset >= subnet.num_addresses - 1:
        raise ValueError(f"{node_count} nodes with {per_node} address(es) each do not fit in subnet {subnet_cidr}")
    start = subnet.network_address + FIRST_NODE_OFFSET
    return tuple(tuple(str(start + MAX_CLUSTER_NODES * card + i) for card in range(per_node)) for i in range(node_count))


@dataclass(frozen=True)
class GpuNode:
    """One node of the cluster.

    Attributes:
        name: ``node-<index>``.
        instance: The EC2 instance.
        private_ip: Its fixed address (its ``TRAINING_HOSTS`` entry).
        idle_alarm: The alarm that stops it when idle, or ``None`` when idle stop is off.
    """

    name: str
    instance: ec2.Instance
    private_ip: str
    idle_alarm: Optional[cloudwatch.Alarm]


class GpuCluster(Construct):
    """GPU nodes in one Cluster subnet of the VPC that pass a boot-time health check (see module docs).

    Attributes:
        nodes: The nodes in host-list order.
        hosts: Every node's address, in node order (``TRAINING_HOSTS``).
        security_group: Members only: all traffic between nodes, HTTPS out to AWS endpoints.
        role: The nodes' instance role.
        log_group: Boot, health and training logs of every node.
        placement_group: Cluster placement group, or ``None`` for a single node.
        job_document: The SSM Command document a cluster job is sent as (``scripts.cluster_job``; see
            :mod:`stacks.components.cluster_job_document`).
        job_document_name: Its name, ``<project>-cluster-train``.
        job_operator_policy: What ``scripts.cluster_job`` needs, for teams to attach to their operators:
            the document sent to this cluster's nodes only, the commands followed and cancelled, the
            jobs' log lines read.
        efa: Whether nodes have EFA interfaces (several nodes of an EFA-capable type).
        efa_interfaces: EFA interfaces per node, one per network card (the GPU table's
            ``efa_interfaces``: 4 on p4d, 32 on p5.48xlarge); 0 without EFA.
        ami_id: The cached Deep Learning AMI id the nodes run.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: ClusterConfig,
        project_name: str,
        image_uri: str,
        network: TrainingNetwork,
        key: kms.IKey,
        datasets_bucket: s3.IBucket,
        artifacts_bucket: s3.IBucket,
        repository: ecr.IRepository,
        data_stack_name: str,
    ) -> None:
        """Create the nodes and everything they need.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            config: The validated cluster settings.
            project_name: Prefix of names (log group, node names).
            image_uri: Training image, ``<repository uri>:<tag>`` (never ``latest``).
            network: The training VPC; nodes go to its ``Cluster`` subnet in ``config.availability_zone``.
            key: Platform key: root volumes, the log group, the buckets' objects.
            datasets_bucket: Read by the nodes.
            artifacts_bucket: Models and checkpoints, written by the nodes.
            repository: Where the training image is pulled from.
            data_stack_name: The data plane's stack, whose outputs (buckets, key) operators read to
                upload a job's code.
        """
        super().__init__(scope, construct_id)
        row = lookup(config.instance_type)
        if row is None:
            raise ValueError(f"{config.instance_type} is not in the GPU table")  # config validation prevents it
        self._config = config
        self._project_name = project_name
        self.efa = config.node_count > 1 and row.efa
        self.efa_interfaces = row.efa_interfaces if self.efa else 0

        self._subnet = network.cluster_subnet(config.availability_zone)
        # Every interface with an address gets a fixed one: the primary, and each further EFA card's
        # `efa` interface (an `efa-only` one has none). Nothing in the subnet is left to EC2's choice.
        extra_addressed = efa_interface_type_for_extra_cards(config.instance_type) == "efa"
        per_node = self.efa_interfaces if self.efa and extra_addressed else 1
        self._addresses = node_addresses(self._subnet.ipv4_cidr_block, config.node_count, per_node=per_node)
        self.hosts = tuple(addresses[0] for addresses in self._addresses)
        self.security_group = self._members_only_security_group(network)
        self.placement_group = (
            ec2.PlacementGroup(self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER)
            if config.node_count > 1
            else None
        )
        self.log_group: logs.LogGroup = encrypted_log_group(
            self, "NodeLogs", key=key, log_group_name=f"/{project_name}/gpu-cluster"
        )
        self.role = self._node_role(key, datasets_bucket, artifacts_bucket, repository)
        self._checkpoint_policies(artifacts_bucket)
        self._instance_profile = iam.InstanceProfile(self, "NodeInstanceProfile", role=self.role)
        if config.pinned_dlami is not None:
            # An explicit release (config validation checked its driver against the GPUs).
            self._machine_image: ec2.IMachineImage = ec2.MachineImage.generic_linux(
                {Stack.of(self).region: config.pinned_dlami.ami_id}
            )
        else:
            self._machine_image = ec2.MachineImage.from_ssm_parameter(
                dlami_parameter_name(config.dlami_flavour), cached_in_context=True
            )
        self.ami_id = self._machine_image.get_image(self).image_id

        stack = Stack.of(self)
        self.nodes: list[GpuNode] = []
        for index, host in enumerate(self.hosts):
            name = f"node-{index}"
            user_data = ec2.MultipartUserData()
            instance = self._instance(f"Node{index}", name, self._addresses[index], network.vpc, key, user_data)
            # The boot script names the instance's own logical id, so it is written last.
            add_node_boot(
                user_data,
                NodeSettings(
                    node_name=name,
                    instance_type=config.instance_type,
                    expected_gpu_count=config.gpus_per_node,
                    training_hosts=self.hosts,
                    current_host=host,
                    worker_port=TRAINING_WORKER_PORT,
                    image_uri=image_uri,
                    start_training=config.start_training_on_boot,
                    max_lifetime_hours=config.max_lifetime_hours,
                    stack_name=stack.stack_name,
                    logical_resource_id=stack.get_logical_id(instance.instance),
                    region=stack.region,
                    log_group_name=self.log_group.log_group_name,
                    metric_namespace=gpu_metric_namespace(project_name),
                    checkpoint_s3_uri=f"s3://{artifacts_bucket.bucket_name}/{self._checkpoint_prefix(name)}",
                    output_s3_uri=f"s3://{artifacts_bucket.bucket_name}/{self._output_prefix()}",
                    code_s3_uri=f"s3://{artifacts_bucket.bucket_name}/{config.code_key}" if config.code_key else "",
                    entry_point=config.entry_point or "",
                    legacy_keras=config.legacy_keras,
                    allreduce_busbw_floor_gbps=row.allreduce_busbw_floor_gbps,
                ),
            )
            alarm = self._idle_alarm(f"Node{index}IdleAlarm", name, instance) if config.idle_stop_minutes else None
            self.nodes.append(GpuNode(name=name, instance=instance, private_ip=host, idle_alarm=alarm))
        self.job_document_name = document_name(project_name)
        self.job_document = ssm.CfnDocument(
            self,
            "JobDocument",
            name=self.job_document_name,
            document_type="Command",
            document_format="JSON",
            target_type="/AWS::EC2::Instance",
            # A changed document becomes its new default version; the name stays the operators'.
            update_method="NewVersion",
            content=document_content(
                datasets_s3_uri=f"s3://{datasets_bucket.bucket_name}/",
                artifacts_s3_uri=f"s3://{artifacts_bucket.bucket_name}/",
            ),
        )
        self.job_operator_policy = self._job_operator_policy(key, artifacts_bucket, data_stack_name)

    def _members_only_security_group(self, network: TrainingNetwork) -> ec2.SecurityGroup:
        group = closed_security_group(
            self,
            "NodeSecurityGroup",
            network.vpc,
            "GPU nodes: all traffic between cluster members only; HTTPS out to AWS service endpoints",
        )
        # EFA and NCCL need all traffic to and from the group itself; nothing else comes in
        # (no SSH: access is SSM Session Manager).
        group.add_ingress_rule(group, ec2.Port.all_traffic(), "Cluster members")
        group.add_egress_rule(group, ec2.Port.all_traffic(), "Cluster members")
        # Out: only the VPC endpoints (and the internet only where a NAT gateway was asked for).
        network.allow_https_to_aws(group)
        acknowledge(
            group,
            "The only inbound rule admits the group itself (the cluster's own nodes), not an address range; EFA "
            "requires all protocols between members, so the rule cannot name ports.",
            "NIST.800.53.R5-EC2RestrictedCommonPorts",
        )
        return group

    def _instance(
        self,
        construct_id: str,
        name: str,
        addresses: tuple[str, ...],
        vpc: ec2.IVpc,
        key: kms.IKey,
        user_data: ec2.UserData,
    ) -> ec2.Instance:
        config = self._config
        host = addresses[0]
        instance = ec2.Instance(
            self,
            construct_id,
            instance_name=f"{self._project_name}-gpu-{name}",
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnets=[self._subnet]),
            private_ip_address=host,
            security_group=self.security_group,
            instance_type=ec2.InstanceType(config.instance_type),
            machine_image=self._machine_image,
            instance_profile=self._instance_profile,
            user_data=user_data,
            placement_group=self.placement_group,
            http_endpoint=True,
            http_tokens=ec2.HttpTokens.REQUIRED,
            # The training container uses host networking, so one hop reaches the metadata
            # service; containers on a bridge network do not get the node's credentials.
            http_put_response_hop_limit=1,
            detailed_monitoring=True,
            ebs_optimized=True,
            instance_initiated_shutdown_behavior=ec2.InstanceInitiatedShutdownBehavior.STOP,
            propagate_tags_to_volume_on_creation=True,
            block_devices=[
                ec2.BlockDevice(
                    device_name=ROOT_DEVICE_NAME,
                    volume=ec2.BlockDeviceVolume.ebs(
                        config.root_volume_gb,
                        encrypted=True,
                        kms_key=key,
                        volume_type=ec2.EbsDeviceVolumeType.GP3,
                        delete_on_termination=True,
                    ),
                )
            ],
        )
        cfn_instance = instance.instance
        cfn_instance.availability_zone = None  # the subnet decides it
        cfn_instance.cfn_options.creation_policy = CfnCreationPolicy(
            resource_signal=CfnResourceSignal(count=1, timeout=f"PT{config.signal_timeout_minutes}M")
        )
        if self.efa:
            self._attach_efa_interfaces(instance, name, addresses)
        acknowledge(
            instance,
            "Training nodes are disposable compute: `cdk destroy` of the cluster stack must terminate them, "
            "and checkpoints and data live in the data plane's S3 buckets. Termination protection would block that.",
            "AwsSolutions-EC29",
        )
        return instance

    def _attach_efa_interfaces(self, instance: ec2.Instance, name: str, addresses: tuple[str, ...]) -> None:
        """Give the node one EFA interface per network card, all in its subnet and security group.

        Card 0, device 0 is the primary interface: ``efa`` (EFA with ENA) with the node's host-list
        address, ``addresses[0]``. Every further card ``i`` gets one interface at device index 1 with
        ``NetworkCardIndex=i``: ``efa-only`` (no IP address) on the P5 family, as AWS's P5 layout
        asks, ``efa`` with the fixed ``addresses[i]`` elsewhere (EC2 User Guide, "Maximize network bandwidth on instances with
        multiple network cards"). AWS::EC2::Instance's interfaces take neither an interface type
        nor a network card index; a launch template's do, so each node gets its own template (its
        address is its own) and the instance launches from it. EC2 deletes the interfaces with the
        instance.
        """
        extra_type = efa_interface_type_for_extra_cards(self._config.instance_type)
        interfaces = [
            ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
                network_card_index=0,
                device_index=0,
                interface_type="efa",
                subnet_id=self._subnet.subnet_id,
                groups=[self.security_group.security_group_id],
                private_ip_address=addresses[0],
                delete_on_termination=True,
                description=f"{self._project_name} {name} EFA 0",
            )
        ]
        interfaces += [
            ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
                network_card_index=card,
                device_index=1,
                interface_type=extra_type,
                subnet_id=self._subnet.subnet_id,
                groups=[self.security_group.security_group_id],
                private_ip_address=addresses[card] if extra_type == "efa" else None,
                delete_on_termination=True,
                description=f"{self._project_name} {name} EFA {card}",
            )
            for card in range(1, self.efa_interfaces)
        ]
        cfn_instance = instance.instance
        # The interfaces carry the instance's tags (Project, Name...), as the interfaces an instance makes
        # itself do not: read once the app's tags are applied, so teardown_audit finds them by Project.
        interface_tags = Lazy.any(_RenderedTags(cfn_instance))
        template = ec2.CfnLaunchTemplate(
            instance,
            "EfaInterfaces",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(network_interfaces=interfaces),
        )
        # (An override: the typed property takes no token for the tag list.)
        template.add_property_override(
            "LaunchTemplateData.TagSpecifications", [{"ResourceType": "network-interface", "Tags": interface_tags}]
        )
        cfn_instance.launch_template = ec2.CfnInstance.LaunchTemplateSpecificationProperty(
            launch_template_id=template.ref, version=template.attr_latest_version_number
        )
        cfn_instance.subnet_id = None
        cfn_instance.security_group_ids = None
        cfn_instance.private_ip_address = None
        acknowledge(
            instance,
            "The instance is in the training VPC: its subnet is that of its EFA network interfaces, declared in its "
            "launch template, which replace the top-level subnet on an EFA instance.",
            "NIST.800.53.R5-EC2InstancesInVPC",
        )

    def _checkpoint_prefix(self, node_name: str) -> str:
        return f"{CLUSTER_CHECKPOINT_PREFIX}{Stack.of(self).stack_name}/{node_name}/"

    def _output_prefix(self) -> str:
        return f"{CLUSTER_OUTPUT_PREFIX}{Stack.of(self).stack_name}/"

    def _node_role(
        self, key: kms.IKey, datasets: s3.IBucket, artifacts: s3.IBucket, repository: ecr.IRepository
    ) -> iam.Role:
        stack = Stack.of(self)
        role = iam.Role(
            self,
            "NodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="GPU training nodes: read datasets, write the cluster's artifacts, pull the image, own logs, SSM",
        )
        cluster_checkpoints = f"{CLUSTER_CHECKPOINT_PREFIX}{stack.stack_name}/"
        cluster_outputs = self._output_prefix()
        instances = stack.format_arn(service="ec2", resource="instance", resource_name="*")
        policy = iam.ManagedPolicy(
            self,
            "NodePolicy",
            description="GPU training nodes: least privilege, Session Manager included",
            roles=[role],
            statements=[
                iam.PolicyStatement(sid="ListDatasets", actions=["s3:ListBucket"], resources=[datasets.bucket_arn]),
                iam.PolicyStatement(sid="ReadDatasets", actions=["s3:GetObject"], resources=[datasets.arn_for_objects("*")]),
                iam.PolicyStatement(
                    sid="ListClusterArtifacts",
                    actions=["s3:ListBucket"],
                    resources=[artifacts.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{cluster_checkpoints}*", f"{cluster_outputs}*"]}},
                ),
                iam.PolicyStatement(
                    sid="ReadClusterArtifacts",
                    actions=["s3:GetObject"],
                    resources=[
                        artifacts.arn_for_objects(f"{cluster_checkpoints}*"),
                        artifacts.arn_for_objects(f"{cluster_outputs}*"),
                        # Script mode: users' sourcedir.tar.gz (cluster.code_key), read-only.
                        artifacts.arn_for_objects(f"{USER_CODE_PREFIX}*"),
                    ],
                ),
                # Each node writes its own checkpoints (the per-node policies below); models and
                # other outputs go to the cluster's prefix. Nothing else in the bucket, so a node
                # (or its container) cannot overwrite SageMaker jobs' outputs or checkpoints.
                iam.PolicyStatement(
                    sid="WriteClusterOutputs",
                    actions=["s3:PutObject", "s3:AbortMultipartUpload"],
                    resources=[artifacts.arn_for_objects(f"{cluster_outputs}*")],
                ),
                iam.PolicyStatement(
                    sid="BucketObjectKeys",
                    actions=["kms:Decrypt", "kms:GenerateDataKey"],
                    resources=[key.key_arn],
                    conditions={"StringEquals": {"kms:ViaService": f"s3.{Aws.REGION}.amazonaws.com"}},
                ),
                iam.PolicyStatement(
                    sid="PullTrainingImage",
                    actions=["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
                    resources=[repository.repository_arn],
                ),
                iam.PolicyStatement(sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"]),
                iam.PolicyStatement(
                    sid="WriteNodeLogs",
                    actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                    resources=[self.log_group.log_group_arn],
                ),
                # SSM Agent looks the log group up before it sends a cluster job's output there
                # (CloudWatchOutputConfig); DescribeLogGroups has no resource-level permissions.
                iam.PolicyStatement(sid="FindJobOutputLogGroup", actions=["logs:DescribeLogGroups"], resources=["*"]),
                iam.PolicyStatement(
                    sid="PublishGpuMetrics",
                    actions=["cloudwatch:PutMetricData"],
                    resources=["*"],
                    conditions={"StringEquals": {"cloudwatch:namespace": gpu_metric_namespace(self._project_name)}},
                ),
                # This stack only. SignalResource has no condition key for the logical id signalled,
                # so per-node address conditions would still let any node signal for any other.
                iam.PolicyStatement(
                    sid="SignalHealth", actions=["cloudformation:SignalResource"], resources=[Aws.STACK_ID]
                ),
                # Session Manager only (AWS's minimal instance profile for it), instead of
                # AmazonSSMManagedInstanceCore, whose ssm:GetParameter(s) on "*" would let every
                # node and its host-network container read every parameter in the account.
                iam.PolicyStatement(sid="SessionManagerChannels", actions=list(SESSION_MANAGER_ACTIONS), resources=["*"]),
                # Not this cluster's instances by id: a policy naming them is created only after they
                # are CREATE_COMPLETE, and until then SSM Agent (3.2+) is refused at boot, so it falls
                # back to the account's Default Host Management role where one is set, or else retries
                # with exponential backoff (1 s, 2 s, 4 s ...): no Session Manager during the boot and
                # no Run Command for about as long again after it.
                iam.PolicyStatement(
                    sid="SsmAgentRegistration", actions=["ssm:UpdateInstanceInformation"], resources=[instances]
                ),
            ],
        )
        acknowledge(
            policy,
            "ecr:GetAuthorizationToken, cloudwatch:PutMetricData, logs:DescribeLogGroups (SSM Agent's look-up of "
            "the log group a cluster job's output goes to) and Session Manager's ssmmessages/ec2messages channel "
            "actions support no resource-level permissions; the metric statement is limited to the CloudWatch "
            "agent's namespace by a condition.",
            "AwsSolutions-IAM5[Resource::*]",
        )
        policy.node.add_validation(
            _AcknowledgeObjectWildcards(
                policy,
                ("ReadDatasets", "ReadClusterArtifacts", "WriteClusterOutputs"),
                "The objects of the project's datasets bucket (read) and, in the artifacts bucket, only this "
                "cluster's checkpoints (read) and outputs (read/write) and users' code (read), whose keys are chosen "
                "at run time.",
            )
        )
        policy.node.add_validation(
            _AcknowledgeObjectWildcards(
                policy,
                ("SsmAgentRegistration",),
                "SSM Agent registers the instance it runs on; the role is created before its instances (they "
                "need it to boot), so it names the account's instances in this region rather than ids.",
            )
        )
        return role

    def _checkpoint_policies(self, artifacts: s3.IBucket) -> None:
        """Each node may write only its own checkpoint prefix.

        The nodes share one role; a node is told apart by the private address its role
        credentials were issued to (``aws:Ec2InstanceSourcePrivateIPv4``), which is fixed per
        node (see the module docs), so node ``i`` cannot overwrite node ``j``'s checkpoints.
        """
        hosts = list(enumerate(self.hosts))
        for chunk in range(0, len(hosts), NODES_PER_CHECKPOINT_POLICY):
            members = hosts[chunk : chunk + NODES_PER_CHECKPOINT_POLICY]
            sids = tuple(f"Node{index}Checkpoints" for index, _ in members)
            policy = iam.ManagedPolicy(
                self,
                f"NodeCheckpointPolicy{chunk // NODES_PER_CHECKPOINT_POLICY}",
                description="GPU training nodes: each node writes its own checkpoint prefix only",
                roles=[self.role],
                statements=[
                    iam.PolicyStatement(
                        sid=sid,
                        actions=["s3:PutObject", "s3:AbortMultipartUpload"],
                        resources=[artifacts.arn_for_objects(f"{self._checkpoint_prefix(f'node-{index}')}*")],
                        conditions={"IpAddress": {"aws:Ec2InstanceSourcePrivateIPv4": f"{host}/32"}},
                    )
                    for sid, (index, host) in zip(sids, members)
                ],
            )
            policy.node.add_validation(
                _AcknowledgeObjectWildcards(
                    policy,
                    sids,
                    "One node's checkpoint objects, whose keys the training loop chooses at run time; the statement "
                    "applies only to credentials issued to that node's fixed private address.",
                )
            )

    def _job_operator_policy(self, key: kms.IKey, artifacts: s3.IBucket, data_stack_name: str) -> iam.ManagedPolicy:
        """Cluster jobs for operators (attached to no one here; the stack outputs its ARN)."""
        stack = Stack.of(self)
        policy = iam.ManagedPolicy(
            self,
            "JobOperatorPolicy",
            description=f"Run, follow and stop jobs on {stack.stack_name} (python -m scripts.cluster_job)",
            statements=[
                # The document and this cluster's instances by id: SendCommand is authorized on both.
                iam.PolicyStatement(
                    sid="SendClusterJobs",
                    actions=["ssm:SendCommand"],
                    resources=[
                        stack.format_arn(service="ssm", resource="document", resource_name=self.job_document_name),
                        *(stack.format_arn(service="ec2", resource="instance", resource_name=n.instance.instance_id)
                          for n in self.nodes),
                    ],
                ),  # fmt: skip
                iam.PolicyStatement(
                    sid="FollowAndCancelCommands",
                    actions=["ssm:ListCommands", "ssm:ListCommandInvocations", "ssm:CancelCommand"],
                    resources=["*"],
                ),
                iam.PolicyStatement(sid="SeeNodesRunning", actions=["ec2:DescribeInstances"], resources=["*"]),
                iam.PolicyStatement(sid="ReadJobLogs", actions=["logs:GetLogEvents"], resources=[self.log_group.log_group_arn]),
                iam.PolicyStatement(
                    sid="ReadClusterOutputs", actions=["cloudformation:DescribeStacks"], resources=[Aws.STACK_ID]
                ),
                # run --source-dir (scripts.source_code.upload_archive): the data stack's outputs name the
                # artifacts bucket and the key; the archive goes to the cluster jobs' code keys only, KMS-encrypted.
                iam.PolicyStatement(
                    sid="ReadDataStackOutputs",
                    actions=["cloudformation:DescribeStacks"],
                    resources=[stack.format_arn(service="cloudformation", resource="stack", resource_name=f"{data_stack_name}/*")],
                ),
                iam.PolicyStatement(
                    sid="UploadJobCode", actions=["s3:PutObject"], resources=[artifacts.arn_for_objects(SOURCE_CODE_KEYS)]
                ),
                iam.PolicyStatement(
                    sid="EncryptJobCode",
                    actions=["kms:GenerateDataKey"],
                    resources=[key.key_arn],
                    conditions={"StringEquals": {"kms:ViaService": f"s3.{Aws.REGION}.amazonaws.com"}},
                ),
            ],
        )
        acknowledge(
            policy,
            "ssm:ListCommands, ssm:ListCommandInvocations, ssm:CancelCommand and ec2:DescribeInstances support no "
            "resource-level permissions; sending, the one action that runs anything, names the document and this "
            "cluster's instances.",
            "AwsSolutions-IAM5[Resource::*]",
        )
        policy.node.add_validation(
            _AcknowledgeObjectWildcards(
                policy,
                ("ReadDataStackOutputs", "UploadJobCode"),
                "The data stack by name (its id ends in a GUID CloudFormation chooses) and the code archives of "
                "cluster jobs, code/cluster-<job>/sourcedir.tar.gz, whose job name the operator chooses at run time.",
            )
        )
        return policy

    def _idle_alarm(self, construct_id: str, name: str, instance: ec2.Instance) -> cloudwatch.Alarm:
        config = self._config
        minutes = config.idle_stop_minutes
        period = 5 if minutes % 5 == 0 else 1
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            alarm_description=(
                f"{name}: stop the instance when every GPU stayed below {config.idle_gpu_utilization_percent}% "
                f"utilization for {minutes} minutes (cost guard)"
            ),
            metric=cloudwatch.Metric(
                namespace=gpu_metric_namespace(self._project_name),
                metric_name=GPU_UTILIZATION_METRIC,
                dimensions_map={"InstanceId": instance.instance_id},
                statistic=cloudwatch.Stats.MAXIMUM,
                period=Duration.minutes(period),
            ),
            threshold=config.idle_gpu_utilization_percent,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=math.ceil(minutes / period),
            # No data means the node is stopped or booting: not idle. A node whose agent never
            # reports is still bounded by the maximum lifetime.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(cloudwatch_actions.Ec2Action(cloudwatch_actions.Ec2InstanceAction.STOP))
        return alarm


def _flatten_reference(value: Any) -> str:
    """A resolved CloudFormation value as cdk-nag flattens it into finding ids."""
    if isinstance(value, str):
        return value.replace("${", "<").replace("}", ">")
    if isinstance(value, dict) and "Fn::Join" in value:
        delimiter, items = value["Fn::Join"]
        return delimiter.join(_flatten_reference(item) for item in items)
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        resource, attribute = value["Fn::GetAtt"]
        return f"<{_flatten_reference(resource)}.{_flatten_reference(attribute)}>"
    if isinstance(value, dict) and "Ref" in value:
        return f"<{_flatten_reference(value['Ref'])}>"
    if isinstance(value, dict) and "Fn::ImportValue" in value:
        return _flatten_reference(value["Fn::ImportValue"])
    return json.dumps(value, separators=(",", ":"))


@jsii.implements(IStableAnyProducer)
class _RenderedTags:
    """A resource's tags as CloudFormation gets them, read when the template is written (after the app's tags
    are applied)."""

    def __init__(self, resource: CfnResource) -> None:
        self._resource = resource

    def produce(self) -> Any:
        rendered = self._resource.tags.render_tags() or []
        pairs = [(t["key"], t["value"]) if isinstance(t, dict) else (t.key, t.value) for t in rendered]
        return [{"Key": key, "Value": value} for key, value in pairs]


@jsii.implements(IValidation)
class _AcknowledgeObjectWildcards:
    """Acknowledges the wildcards (bucket objects, a stack's id) of named statements, once their ARNs resolve.

    cdk-nag names such a finding after the resolved resource, and a bucket ARN from the data
    plane resolves to the data plane's output only once CDK has prepared the app. Construct
    validation runs after that and before the policy packs, so this acknowledges exactly the
    findings of those statements, whatever shape the cross-stack reference takes.
    """

    def __init__(self, policy: iam.ManagedPolicy, sids: tuple[str, ...], reason: str) -> None:
        self._policy = policy
        self._sids = sids
        self._reason = reason

    def validate(self) -> list[str]:
        cfn_policy = self._policy.node.default_child
        document = Stack.of(self._policy).resolve(cfn_policy.policy_document)  # type: ignore[union-attr]
        findings = []
        for statement in document["Statement"]:
            if statement.get("Sid") not in self._sids:
                continue
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            findings += [f"AwsSolutions-IAM5[Resource::{_flatten_reference(r)}]" for r in resources]
        acknowledge(self._policy, self._reason, *(f for f in findings if "*" in f))
        return []


def efa_interface_type_for_extra_cards(instance_type: str) -> str:
    """Interface type on network cards 1..n-1: ``efa-only`` on the P5 family, else ``efa``.

    An ``efa-only`` interface carries no IP address (EFA traffic only), which spares the subnet 31
    addresses per p5 node; the primary interface on card 0 stays ``efa`` for the node's IP traffic.
    """
    family = instance_type.removeprefix("ml.").split(".", 1)[0]
    return "efa-only" if family in EFA_ONLY_FAMILIES else "efa"
