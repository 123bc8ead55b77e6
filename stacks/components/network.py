"""The training VPC: private subnets, VPC endpoints instead of a NAT gateway, flow logs.

Two private subnet groups per availability zone: ``Training`` (/20), where SageMaker jobs and
endpoints and the interface endpoints live, and ``Cluster`` (/23), which holds the GPU nodes and
nothing else, so that the nodes' fixed addresses are free without a subnet CIDR reservation
(``AWS::EC2::SubnetCidrReservation`` is missing from most regions' CloudFormation). ``Cluster``
comes last in the subnet configuration: the CDK allocates blocks in that order, so adding it
left the ``Training`` (and ``Public``) subnets' blocks and logical ids as they were.

Every endpoint has a policy, so that the VPC is a data perimeter and not only a network
without a route out: through the endpoints, only this account's principals reach this
account's resources, plus the AWS-owned resources the nodes and jobs need (the pattern of
AWS's data perimeter examples, aws-samples/data-perimeter-policy-examples, for one account).
"""

from __future__ import annotations

from typing import Sequence

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.components.policy import acknowledge
from stacks.config import (
    CLUSTER_SUBNET_GROUP,
    CLUSTER_SUBNET_PREFIX,
    PUBLIC_SUBNET_PREFIX,
    TRAINING_SUBNET_GROUP,
    TRAINING_SUBNET_PREFIX,
    interface_endpoint_id,
)

ECR_LAYER_BUCKET = "prod-{region}-starport-layer-bucket"
"""ECR keeps image layers in this AWS-owned bucket; the layer URLs are presigned by an account of
ECR's (ECR user guide, "Minimum Amazon S3 bucket permissions for Amazon ECR")."""

AWS_OWNED_BUCKETS: tuple[str, ...] = (
    ECR_LAYER_BUCKET,
    # The CloudWatch agent package and its signature (CloudWatch user guide, "Download the
    # CloudWatch agent package").
    "amazoncloudwatch-agent-{region}",
    "amazoncloudwatch-agent",
    # What SSM Agent downloads (Systems Manager user guide, "SSM Agent communications with
    # AWS managed S3 buckets").
    "aws-ssm-{region}",
    "amazon-ssm-{region}",
    "amazon-ssm-packages-{region}",
    "{region}-birdwatcher-prod",
    "aws-ssm-distributor-file-{region}",
    "aws-ssm-document-attachments-{region}",
    "patch-baseline-snapshot-{region}",
    # Amazon Linux package repositories, for Amazon Linux DLAMI flavours (yum/dnf).
    "amazonlinux-2-repos-{region}",
    "al2023-repos-{region}-de612dc2",
    "packages.{region}.amazonaws.com",
    "repo.{region}.amazonaws.com",
)
"""AWS-owned buckets whose objects stay readable through the S3 gateway endpoint."""

RESOURCELESS_ACTIONS: dict[str, tuple[str, ...]] = {
    "ecr.api": ("ecr:GetAuthorizationToken",),
    "monitoring": ("cloudwatch:PutMetricData",),
    "sts": ("sts:GetCallerIdentity",),
    "ssmmessages": ("ssmmessages:*",),
    "ec2messages": ("ec2messages:*",),
}
"""Per interface endpoint, the actions the platform calls that name no resource (no resource
account to check), allowed for this account's principals."""

AWS_OWNED_SSM_RESOURCES: tuple[str, ...] = ("parameter/aws/*", "document/*")
"""Public parameters and AWS-owned documents (Session Manager's shell document) in the region."""



def s3_prefix_list_name(region: str) -> str:
    """Name of the AWS-managed prefix list of S3 in ``region`` (the gateway endpoint's routes)."""
    return f"com.amazonaws.{region}.s3"


def closed_security_group(scope: Construct, construct_id: str, vpc: ec2.IVpc, description: str) -> ec2.SecurityGroup:
    """A security group in ``vpc`` that lets nothing out but what its owner's rules add.

    The CDK's default allows all outbound traffic; every group here names its ways out.
    """
    return ec2.SecurityGroup(scope, construct_id, vpc=vpc, description=description, allow_all_outbound=False)


class TrainingNetwork(Construct):
    """A VPC where GPU nodes and SageMaker jobs run without internet access by default.

    With ``nat_gateways=0`` the subnets are isolated: S3 is reached through a gateway endpoint
    and every other AWS service training needs through interface endpoints. The default
    security group is stripped of its rules (``restrictDefaultSecurityGroup``) so nothing can use
    it by accident.

    Attributes:
        vpc: The VPC.
        subnet_selection: The ``Training`` subnets, where SageMaker jobs, endpoints and the
            interface endpoints run (never the ``Cluster`` subnets).
        cluster_subnets: The ``Cluster`` subnets, one per availability zone in the VPC's order:
            the GPU nodes' (see :meth:`cluster_subnet`).
        endpoint_security_group: Security group of the interface endpoints (HTTPS from the VPC).
        s3_prefix_list_id: The region's S3 prefix list, which the gateway endpoint routes; a
            lookup cached in ``cdk.context.json`` (a placeholder for the offline account).
        internet_egress: Whether the subnets have a NAT route to the internet.
        endpoints: Every endpoint by service name (``s3``, ``ecr.api``...).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cidr: str,
        max_azs: int,
        nat_gateways: int,
        interface_endpoints: Sequence[str],
        flow_log_bucket: s3.IBucket,
    ) -> None:
        """Create the network.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            cidr: VPC IPv4 block.
            max_azs: Availability zones used.
            nat_gateways: 0 for isolated subnets; otherwise this many NAT gateways.
            interface_endpoints: Service names for interface endpoints (``ecr.api``...).
            flow_log_bucket: Bucket receiving flow logs of all traffic.
        """
        super().__init__(scope, construct_id)
        private_type = ec2.SubnetType.PRIVATE_WITH_EGRESS if nat_gateways else ec2.SubnetType.PRIVATE_ISOLATED
        subnets = [
            ec2.SubnetConfiguration(name=TRAINING_SUBNET_GROUP, subnet_type=private_type, cidr_mask=TRAINING_SUBNET_PREFIX),
            # Last, always: the CDK allocates blocks in this order, and the deployed subnets keep theirs.
            ec2.SubnetConfiguration(name=CLUSTER_SUBNET_GROUP, subnet_type=private_type, cidr_mask=CLUSTER_SUBNET_PREFIX),
        ]
        if nat_gateways:
            subnets.insert(0, ec2.SubnetConfiguration(name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=PUBLIC_SUBNET_PREFIX))
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            max_azs=max_azs,
            nat_gateways=nat_gateways,
            subnet_configuration=subnets,
            restrict_default_security_group=True,
            enable_dns_hostnames=True,
            enable_dns_support=True,
        )
        # By group name: a selection by type would take the Cluster subnets too (same type).
        self.subnet_selection = ec2.SubnetSelection(subnet_group_name=TRAINING_SUBNET_GROUP)
        self.cluster_subnets: list[ec2.ISubnet] = self.vpc.select_subnets(subnet_group_name=CLUSTER_SUBNET_GROUP).subnets
        for subnet in self.vpc.public_subnets:
            acknowledge(
                subnet,
                "Public subnets exist only when nat_gateways > 0 and hold nothing but the NAT gateways; "
                "their default route to the internet gateway and public addressing are what a NAT gateway needs. "
                "Training runs in the private subnets.",
                "NIST.800.53.R5-VPCNoUnrestrictedRouteToIGW",
                "NIST.800.53.R5-VPCSubnetAutoAssignPublicIpDisabled",
            )
        self.vpc.add_flow_log(
            "FlowLogs",
            destination=ec2.FlowLogDestination.to_s3(flow_log_bucket, "vpc-flow-logs/"),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        stack = Stack.of(self)
        # Read once: each read of a stack attribute is a round trip to the CDK's process.
        account, region, partition = stack.account, stack.region, stack.partition
        self.internet_egress = nat_gateways > 0
        self.s3_prefix_list_id = ec2.PrefixList.from_lookup(
            self, "S3PrefixList", prefix_list_name=s3_prefix_list_name(region)
        ).prefix_list_id
        # Routes in both groups' route tables: the nodes read S3 through it too.
        s3_endpoint = self.vpc.add_gateway_endpoint(
            "S3Endpoint",
            service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[self.subnet_selection, ec2.SubnetSelection(subnet_group_name=CLUSTER_SUBNET_GROUP)],
        )
        self.endpoints: dict[str, ec2.IVpcEndpoint] = {"s3": s3_endpoint}
        for statement in self._account_perimeter(account):
            s3_endpoint.add_to_policy(statement)
        def owned_objects(*buckets: str) -> list[str]:
            return [f"arn:{partition}:s3:::{b.format(region=region)}/*" for b in buckets]

        # Package repositories, the CloudWatch agent (bootstrap.sh fetches it with curl) and SSM
        # Agent's downloads are read anonymously: such a request has no aws:PrincipalAccount, so
        # only ...IfExists lets it through. A signed request must be this account's: outside
        # credentials get nothing through the endpoint, not even these buckets' objects.
        s3_endpoint.add_to_policy(
            iam.PolicyStatement(
                sid="AwsOwnedBuckets",
                principals=[iam.AnyPrincipal()],
                actions=["s3:GetObject"],
                resources=owned_objects(*(b for b in AWS_OWNED_BUCKETS if b != ECR_LAYER_BUCKET)),
                conditions={"StringEqualsIfExists": {"aws:PrincipalAccount": account}},
            )
        )
        # Image layers come through URLs that an account of ECR's presigned, so the request's
        # aws:PrincipalAccount is ECR's (undocumented, per region): no account condition admits it.
        # What is left open is s3:GetObject on one AWS-owned bucket whose objects only those URLs
        # read (named in scripts.security_report's output).
        s3_endpoint.add_to_policy(
            iam.PolicyStatement(
                sid="EcrImageLayers",
                principals=[iam.AnyPrincipal()],
                actions=["s3:GetObject"],
                resources=owned_objects(ECR_LAYER_BUCKET),
            )
        )
        self.endpoint_security_group = closed_security_group(
            self, "EndpointSecurityGroup", self.vpc, "Interface endpoints: HTTPS from inside the training VPC only"
        )
        self.endpoint_security_group.add_ingress_rule(
            # The literal block, not the VPC's CidrBlock attribute: policy checks can read a literal.
            # The whole VPC, so the Cluster subnets' nodes reach the endpoints in the Training subnets.
            ec2.Peer.ipv4(cidr), ec2.Port.tcp(443), "HTTPS from the training VPC"
        )
        for name in interface_endpoints:
            endpoint = self.vpc.add_interface_endpoint(
                interface_endpoint_id(name),
                service=ec2.InterfaceVpcEndpointAwsService(name),
                subnets=self.subnet_selection,
                security_groups=[self.endpoint_security_group],
                private_dns_enabled=True,
                open=False,
            )
            for statement in self._account_perimeter(account, RESOURCELESS_ACTIONS.get(name, ())):
                endpoint.add_to_policy(statement)
            if name == "ssm":
                endpoint.add_to_policy(
                    iam.PolicyStatement(
                        sid="ThisAccountToAwsOwnedSsmResources",
                        principals=[iam.AnyPrincipal()],
                        actions=["ssm:Describe*", "ssm:List*", "ssm:Get*"],
                        resources=[f"arn:{partition}:ssm:{region}::{r}" for r in AWS_OWNED_SSM_RESOURCES],
                        conditions={"StringEquals": {"aws:PrincipalAccount": account}},
                    )
                )
            self.endpoints[name] = endpoint

    @property
    def private_subnet_ids(self) -> list[str]:
        """The ids of the ``Training`` subnets (``subnet_selection``) that jobs and endpoints run in."""
        return self.vpc.select_subnets(subnet_group_name=TRAINING_SUBNET_GROUP).subnet_ids

    def cluster_subnet(self, zone_index: int) -> ec2.ISubnet:
        """The ``Cluster`` subnet in the VPC's availability zone ``zone_index`` (``cluster.availability_zone``).

        Raises:
            ValueError: the VPC has no such zone (the region has fewer zones than ``network.max_azs``).
        """
        if not 0 <= zone_index < len(self.cluster_subnets):
            raise ValueError(
                f"cluster.availability_zone = {zone_index}: the VPC spans {len(self.cluster_subnets)} availability "
                f"zone(s) in this region; use 0 to {len(self.cluster_subnets) - 1}"
            )
        return self.cluster_subnets[zone_index]

    def allow_https_to_aws(self, group: ec2.SecurityGroup, *, internet: bool = True) -> None:
        """Let ``group`` reach AWS services the way this VPC offers them: HTTPS to the interface
        endpoints' security group and to the S3 prefix list (the gateway endpoint's routes), and,
        only where the subnets have a NAT route (``nat_gateways > 0``) and ``internet`` is true,
        HTTPS to the internet. Model hosting passes ``internet=False``: it needs ECR and S3 only."""
        group.add_egress_rule(self.endpoint_security_group, ec2.Port.tcp(443), "HTTPS to the VPC interface endpoints")
        group.add_egress_rule(
            ec2.Peer.prefix_list(self.s3_prefix_list_id), ec2.Port.tcp(443), "HTTPS to S3 through the gateway endpoint"
        )
        if self.internet_egress and internet:
            group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS out through the NAT gateway (nat_gateways > 0)")

    @staticmethod
    def _account_perimeter(account: str, resourceless_actions: Sequence[str] = ()) -> list[iam.PolicyStatement]:
        """This account's (``account``) principals to its resources, AWS services on its behalf,
        and the named actions that have no resource."""
        statements = [
            iam.PolicyStatement(
                sid="ThisAccountToThisAccount",
                principals=[iam.AnyPrincipal()],
                actions=["*"],
                resources=["*"],
                conditions={
                    "StringEquals": {"aws:PrincipalAccount": account, "aws:ResourceAccount": account}
                },
            ),
            iam.PolicyStatement(
                sid="AwsServicePrincipals",
                principals=[iam.AnyPrincipal()],
                actions=["*"],
                resources=["*"],
                conditions={"Bool": {"aws:PrincipalIsAWSService": "true"}},
            ),
        ]
        if resourceless_actions:
            statements.append(
                iam.PolicyStatement(
                    sid="ThisAccountActionsWithoutResource",
                    principals=[iam.AnyPrincipal()],
                    actions=list(resourceless_actions),
                    resources=["*"],
                    conditions={"StringEquals": {"aws:PrincipalAccount": account}},
                )
            )
        return statements
