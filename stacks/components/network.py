"""The training VPC: private subnets, VPC endpoints instead of a NAT gateway, flow logs."""

from __future__ import annotations

from typing import Sequence

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.components.policy import acknowledge


class TrainingNetwork(Construct):
    """A VPC where GPU nodes and SageMaker jobs run without internet access by default.

    With ``nat_gateways=0`` the subnets are isolated: S3 is reached through a gateway endpoint
    and every other AWS service training needs through interface endpoints. The default
    security group is stripped of its rules (``restrictDefaultSecurityGroup``) so nothing can use
    it by accident.

    Attributes:
        vpc: The VPC.
        subnet_selection: The private subnets training runs in.
        endpoint_security_group: Security group of the interface endpoints (HTTPS from the VPC).
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
        subnets = [ec2.SubnetConfiguration(name="Training", subnet_type=private_type, cidr_mask=20)]
        if nat_gateways:
            subnets.insert(0, ec2.SubnetConfiguration(name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24))
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
        self.subnet_selection = ec2.SubnetSelection(subnet_type=private_type)
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
        self.vpc.add_gateway_endpoint(
            "S3Endpoint", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[self.subnet_selection]
        )
        self.endpoint_security_group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            description="Interface endpoints: HTTPS from inside the training VPC only",
            allow_all_outbound=False,
        )
        self.endpoint_security_group.add_ingress_rule(
            # The literal block, not the VPC's CidrBlock attribute: policy checks can read a literal.
            ec2.Peer.ipv4(cidr), ec2.Port.tcp(443), "HTTPS from the training VPC"
        )
        for name in interface_endpoints:
            construct_name = "".join(part.capitalize() for part in name.replace("-", ".").split(".")) + "Endpoint"
            self.vpc.add_interface_endpoint(
                construct_name,
                service=ec2.InterfaceVpcEndpointAwsService(name),
                subnets=self.subnet_selection,
                security_groups=[self.endpoint_security_group],
                private_dns_enabled=True,
                open=False,
            )
