"""A VPC for a GPU fleet that reaches AWS through VPC endpoints, not the internet."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from .acknowledgements import skip_checkov
from .cdk_interfaces import as_key, service_principal
from .errors import ConfigError, require, require_range
from .log_retention import retention_days

# What ECS on EC2 with images from ECR, secrets, logs and metrics needs without a NAT gateway,
# plus Session Manager and ECS Exec. ECR's layers live in S3: the S3 *gateway* endpoint is always added.
DEFAULT_INTERFACE_ENDPOINTS: tuple[str, ...] = (
    "ecr.api",
    "ecr.dkr",
    "logs",
    "ecs",
    "ecs-agent",
    "ecs-telemetry",
    "secretsmanager",
    "monitoring",
    "ssm",
    "ssmmessages",
    "ec2messages",
)
OPTIONAL_INTERFACE_ENDPOINTS: tuple[str, ...] = ("sts", "xray", "kms", "events", "autoscaling", "application-autoscaling")
KNOWN_INTERFACE_ENDPOINTS = frozenset(DEFAULT_INTERFACE_ENDPOINTS + OPTIONAL_INTERFACE_ENDPOINTS)


@dataclass(frozen=True)
class NetworkProps:
    availability_zones: tuple[str, ...]
    vpc_cidr: str = "10.0.0.0/16"
    max_azs: int = 2
    nat_gateways: int = 0
    interface_endpoints: tuple[str, ...] = DEFAULT_INTERFACE_ENDPOINTS
    flow_log_retention_days: int = 90
    public_subnet_mask: int = 24
    private_subnet_mask: int = 20

    def __post_init__(self) -> None:
        try:
            network = ipaddress.IPv4Network(self.vpc_cidr, strict=True)
        except ValueError as error:
            raise ConfigError("vpc_cidr", f"{self.vpc_cidr!r} is not an IPv4 network in CIDR form ({error}); e.g. '10.20.0.0/16'") from None
        require(16 <= network.prefixlen <= 24, "vpc_cidr", f"{self.vpc_cidr!r}: the prefix must be between /16 and /24")
        require_range(self.max_azs, 1, 6, "max_azs")
        require(
            len(self.availability_zones) >= self.max_azs,
            "availability_zones",
            f"lists {len(self.availability_zones)} zone(s) but max_azs is {self.max_azs}; list at least max_azs zones",
        )
        require(
            len(set(self.availability_zones)) == len(self.availability_zones),
            "availability_zones",
            f"{list(self.availability_zones)} repeats a zone",
        )
        require(
            0 <= self.nat_gateways <= self.max_azs,
            "nat_gateways",
            f"{self.nat_gateways} is out of range; allowed 0 (endpoints only) to max_azs ({self.max_azs})",
        )
        unknown = [name for name in self.interface_endpoints if name not in KNOWN_INTERFACE_ENDPOINTS]
        require(
            not unknown,
            "interface_endpoints",
            f"unknown endpoint(s) {unknown}; allowed: {', '.join(sorted(KNOWN_INTERFACE_ENDPOINTS))}",
        )
        retention_days(self.flow_log_retention_days, "flow_log_retention_days")
        require(
            network.prefixlen < self.private_subnet_mask <= 28 and network.prefixlen < self.public_subnet_mask <= 28,
            "private_subnet_mask",
            f"subnet masks /{self.public_subnet_mask} and /{self.private_subnet_mask} must be longer than the VPC's /{network.prefixlen} and at most /28",
        )

    def zones_for(self, region: str) -> list[str]:
        wrong = [zone for zone in self.availability_zones if not zone.startswith(region)]
        if wrong:
            raise ConfigError("availability_zones", f"{wrong} are not zones of region {region!r}")
        return list(self.availability_zones[: self.max_azs])


class InferenceNetwork(Construct):
    """VPC: public subnets for the load balancer only, private subnets for the fleet, VPC endpoints, flow logs.

    Attributes: ``vpc``, ``private_subnets`` (a SubnetSelection), ``endpoint_security_group``,
    ``interface_endpoints`` (name -> endpoint), ``flow_log_group``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, props: NetworkProps) -> None:
        super().__init__(scope, construct_id)
        region = cdk.Stack.of(self).region
        private_type = ec2.SubnetType.PRIVATE_WITH_EGRESS if props.nat_gateways else ec2.SubnetType.PRIVATE_ISOLATED

        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(props.vpc_cidr),
            availability_zones=props.zones_for(region),
            nat_gateways=props.nat_gateways,
            restrict_default_security_group=True,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=props.public_subnet_mask, map_public_ip_on_launch=False),
                ec2.SubnetConfiguration(name="private", subnet_type=private_type, cidr_mask=props.private_subnet_mask),
            ],
        )
        self.private_subnets = ec2.SubnetSelection(subnet_type=private_type)
        self._skip_checks_on_default_group_handler()

        self.flow_log_key = kms.Key(
            self,
            "FlowLogKey",
            description="Encrypts the VPC flow log group",
            enable_key_rotation=True,
        )
        grant_logs_service(as_key(self.flow_log_key), region, cdk.Stack.of(self).account)
        self.flow_log_group = logs.LogGroup(
            self,
            "FlowLogs",
            encryption_key=self.flow_log_key,
            retention=retention_days(props.flow_log_retention_days, "flow_log_retention_days"),
        )
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )

        self.vpc.add_gateway_endpoint(
            "S3Endpoint",
            service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[self.private_subnets],
        )
        self.endpoint_security_group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            description="VPC interface endpoints: HTTPS from inside the VPC only",
            allow_all_outbound=False,
        )
        self.endpoint_security_group.add_ingress_rule(
            ec2.Peer.ipv4(props.vpc_cidr), ec2.Port.tcp(443), "HTTPS from the VPC"
        )
        self.interface_endpoints: dict[str, ec2.InterfaceVpcEndpoint] = {}
        for name in props.interface_endpoints:
            self.interface_endpoints[name] = self.vpc.add_interface_endpoint(
                _endpoint_id(name),
                service=ec2.InterfaceVpcEndpointAwsService(name),
                subnets=self.private_subnets,
                security_groups=[self.endpoint_security_group],
                open=False,
                private_dns_enabled=True,
            )

    def _skip_checks_on_default_group_handler(self) -> None:
        """aws-cdk-lib's custom resource that strips the VPC's default security group runs a Lambda at deploy only."""
        provider = cdk.Stack.of(self).node.try_find_child("Custom::VpcRestrictDefaultSGCustomResourceProvider")
        if provider is None:
            return
        handler = provider.node.find_child("Handler")
        reasons = {
            "CKV_AWS_115": "Runs once per deployment, invoked by CloudFormation: a concurrency limit protects nothing.",
            "CKV_AWS_116": "CloudFormation invokes it and fails the deployment if it fails: a dead-letter queue would hold nothing to act on.",
            "CKV_AWS_117": "It calls only the EC2 API to revoke the default group's rules; inside the VPC it would need an EC2 endpoint for no gain.",
        }
        for check, reason in reasons.items():
            skip_checkov(handler, check, f"aws-cdk-lib's default-security-group custom resource. {reason}")


def grant_logs_service(key: kms.IKey, region: str, account: str) -> None:
    """Let CloudWatch Logs in this account and region use ``key`` for its log groups."""
    key.add_to_resource_policy(
        iam.PolicyStatement(
            principals=[service_principal(f"logs.{region}.amazonaws.com")],
            actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
            resources=["*"],
            conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": f"arn:{cdk.Aws.PARTITION}:logs:{region}:{account}:*"}},
        )
    )


def _endpoint_id(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace(".", "-").split("-")) + "Endpoint"
