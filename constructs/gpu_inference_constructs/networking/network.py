"""A VPC for a GPU fleet that reaches AWS through VPC endpoints, not the internet."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
import jsii
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from ..core.errors import ConfigError, require, require_range
from ..shared.acknowledgements import skip_checkov
from ..shared.cdk_interfaces import as_key, service_principal
from ..shared.log_retention import retention_days

# What ECS on EC2 with images from ECR, secrets, logs and metrics needs without a NAT gateway,
# traces, plus Session Manager and ECS Exec. ECR's layers live in S3: the S3 *gateway* endpoint is always added.
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
    "xray",  # every task's collector sends its traces to X-Ray
)
OPTIONAL_INTERFACE_ENDPOINTS: tuple[str, ...] = (
    "sts",
    "kms",
    "events",
    "autoscaling",
    "application-autoscaling",
    "kinesis-firehose",
)
KNOWN_INTERFACE_ENDPOINTS = frozenset(DEFAULT_INTERFACE_ENDPOINTS + OPTIONAL_INTERFACE_ENDPOINTS)

# An Availability Zone ID: the region's short code, then -az and a number (use1-az1, euw1-az3, apne1-az4). The same
# physical zone in every AWS account, where a zone *name* (us-east-1a) is mapped per account in the oldest regions.
ZONE_ID = re.compile(r"^(?P<prefix>[a-z]+[0-9]+)-az[0-9]+$")
# Region -> the prefix of its zone IDs, for the regions the instance catalog lists GPU families in
# (instance_catalog.REGIONS_BY_FAMILY). A region missing here is not refused: its IDs go unchecked, with a warning.
ZONE_ID_PREFIXES: dict[str, str] = {
    "us-east-1": "use1",
    "us-east-2": "use2",
    "us-west-1": "usw1",
    "us-west-2": "usw2",
    "ca-central-1": "cac1",
    "sa-east-1": "sae1",
    "eu-west-1": "euw1",
    "eu-west-2": "euw2",
    "eu-west-3": "euw3",
    "eu-central-1": "euc1",
    "eu-north-1": "eun1",
    "ap-northeast-1": "apne1",
    "ap-northeast-2": "apne2",
    "ap-southeast-1": "apse1",
    "ap-southeast-2": "apse2",
    "ap-south-1": "aps1",
}
ZONE_ID_SOURCE = (
    "AWS Regions and Availability Zones, 'AWS Availability Zones' (docs.aws.amazon.com/global-infrastructure/"
    "latest/regions/aws-availability-zones.html), its table of AZ IDs by region; as of 2026-12"
)
# What lists a region's zones with their IDs, as the account that deploys sees them.
DESCRIBE_ZONES = "aws ec2 describe-availability-zones --region {region} --query 'AvailabilityZones[].[ZoneName,ZoneId]'"
NAMES_WARNING_ID = "gpu-inference:availability-zone-names"
UNCHECKED_IDS_WARNING_ID = "gpu-inference:availability-zone-ids-unchecked"


@dataclass(frozen=True)
class NetworkProps:
    """The VPC: its zones, address ranges, endpoints and flow logs. Give the zones as ``availability_zone_ids``
    (preferred) or as ``availability_zones`` (names), not both."""

    availability_zone_ids: tuple[str, ...] = ()
    """The zones by ID (``use1-az1``): the same physical zone in every AWS account. The first ``max_azs`` are used;
    each must be of the stack's region. Default: none (then give ``availability_zones``)."""
    availability_zones: tuple[str, ...] = ()
    """The zones by name (``us-east-1a``). In the oldest regions AWS maps a name to a different physical zone in each
    account, so a name can land an environment on a zone without its GPU types or an endpoint service: synth warns.
    Default: none (then give ``availability_zone_ids``)."""
    vpc_cidr: str = "10.0.0.0/16"
    """The VPC's IPv4 range, /16 to /24. Default: 10.0.0.0/16."""
    max_azs: int = 2
    """How many of the listed zones get subnets, 1 to 6. Default: 2."""
    nat_gateways: int = 0
    """0: no route to the internet, AWS through the endpoints only; up to ``max_azs``. Default: 0."""
    interface_endpoints: tuple[str, ...] = DEFAULT_INTERFACE_ENDPOINTS
    """Interface endpoints by service name (the S3 gateway endpoint is always added).
    Default: DEFAULT_INTERFACE_ENDPOINTS."""
    flow_log_retention_days: int = 90
    """Days the flow log group keeps its events (a CloudWatch Logs retention period). Default: 90."""
    public_subnet_mask: int = 24
    """Prefix length of each public subnet (the load balancer's). Default: 24."""
    private_subnet_mask: int = 20
    """Prefix length of each private subnet (the fleet's and the endpoints'). Default: 20."""

    def __post_init__(self) -> None:
        try:
            network = ipaddress.IPv4Network(self.vpc_cidr, strict=True)
        except ValueError as error:
            raise ConfigError(
                "vpc_cidr", f"{self.vpc_cidr!r} is not an IPv4 network in CIDR form ({error}); e.g. '10.20.0.0/16'"
            ) from None
        require(16 <= network.prefixlen <= 24, "vpc_cidr", f"{self.vpc_cidr!r}: the prefix must be between /16 and /24")
        require_range(self.max_azs, 1, 6, "max_azs")
        self._check_zones()
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
            f"subnet masks /{self.public_subnet_mask} and /{self.private_subnet_mask} must be longer than the VPC's "
            f"/{network.prefixlen} and at most /28",
        )

    @property
    def zones_key(self) -> str:
        """The key the zones are given under: ``availability_zone_ids`` or ``availability_zones``."""
        return "availability_zone_ids" if self.availability_zone_ids else "availability_zones"

    def _check_zones(self) -> None:
        require(
            not (self.availability_zone_ids and self.availability_zones),
            "availability_zone_ids",
            "give the zones once: as zone IDs (availability_zone_ids, preferred) or as names (availability_zones), "
            "not both; drop availability_zones",
        )
        require(
            bool(self.availability_zone_ids or self.availability_zones),
            "availability_zone_ids",
            "list the zones by ID, such as ['use1-az1', 'use1-az2'] for us-east-1 (the same physical zones in every "
            "account; " + DESCRIBE_ZONES.format(region="<region>") + " lists them), or by name in availability_zones",
        )
        zones, key = (self.availability_zone_ids or self.availability_zones), self.zones_key
        require(
            len(zones) >= self.max_azs,
            key,
            f"lists {len(zones)} zone(s) but max_azs is {self.max_azs}; list at least max_azs zones",
        )
        require(len(set(zones)) == len(zones), key, f"{list(zones)} repeats a zone")
        if self.availability_zone_ids:
            malformed = [zone for zone in zones if not ZONE_ID.match(zone)]
            require(
                not malformed,
                key,
                f"{malformed} {'is not a zone ID' if len(malformed) == 1 else 'are not zone IDs'}: a zone ID is the "
                "region's short code, '-az' and a number, such as 'use1-az1' or 'euw1-az3'"
                + (
                    "; zone names such as 'us-east-1a' go in availability_zones (prefer the IDs: "
                    + DESCRIBE_ZONES.format(region="<region>")
                    + " shows each name's ID)"
                    if any(zone.count("-") >= 2 for zone in malformed)
                    else ""
                ),
            )
        else:
            ids = [zone for zone in zones if ZONE_ID.match(zone)]
            require(
                not ids,
                key,
                f"{ids} {'is a zone ID' if len(ids) == 1 else 'are zone IDs'}: list zone IDs in "
                "availability_zone_ids instead (and drop availability_zones)",
            )

    def zones_for(self, region: str) -> list[str]:
        """The zones the VPC uses (the first ``max_azs``, IDs or names as given), once they are checked to be of
        ``region`` (not checked while the region is unresolved, an environment-agnostic stack's)."""
        zones = self.availability_zone_ids or self.availability_zones
        if not cdk.Token.is_unresolved(region):
            if self.availability_zone_ids:
                _check_zone_ids_of(self.availability_zone_ids, region)
            else:
                wrong = [zone for zone in zones if not zone.startswith(region)]
                if wrong:
                    raise ConfigError(
                        "availability_zones",
                        f"{wrong} are not zones of region {region!r}: list its zones, such as "
                        f"'{region}a', or give them by ID in availability_zone_ids",
                    )
        return list(zones[: self.max_azs])


def _check_zone_ids_of(zone_ids: Sequence[str], region: str) -> None:
    """Each of ``zone_ids`` is a zone of ``region`` (a region missing from ZONE_ID_PREFIXES passes: see
    zone_warning)."""
    prefix = ZONE_ID_PREFIXES.get(region)
    if prefix is None:
        return
    regions_of = {code: name for name, code in ZONE_ID_PREFIXES.items()}
    wrong = {zone: regions_of.get(_zone_id_prefix(zone)) for zone in zone_ids if _zone_id_prefix(zone) != prefix}
    if wrong:
        whose = "; ".join(f"{zone!r} is a zone of {owner}" for zone, owner in wrong.items() if owner)
        raise ConfigError(
            "availability_zone_ids",
            f"{list(wrong)} are not zone IDs of region {region!r}{f' ({whose})' if whose else ''}: its zone IDs start "
            f"with '{prefix}-az', such as '{prefix}-az1'; list them with {DESCRIBE_ZONES.format(region=region)}",
        )


def _zone_id_prefix(zone_id: str) -> str:
    match = ZONE_ID.match(zone_id)
    return match.group("prefix") if match else ""


def zone_warning(props: NetworkProps, region: str) -> tuple[str, str] | None:
    """(acknowledgement id, message) of the warning ``props`` earns in ``region``, or None: zones given by name, or
    zone IDs of a region whose prefix ZONE_ID_PREFIXES does not list (so they went unchecked)."""
    unresolved = cdk.Token.is_unresolved(region)
    if props.availability_zone_ids:
        if unresolved or region in ZONE_ID_PREFIXES:
            return None
        return UNCHECKED_IDS_WARNING_ID, (
            f"availability_zone_ids: region {region!r} is not in "
            f"gpu_inference_constructs.networking.network.ZONE_ID_PREFIXES (from {ZONE_ID_SOURCE}), so "
            f"{list(props.availability_zone_ids)} could not be checked to be its zones (one of another region fails "
            f"only at deploy). Check them with {DESCRIBE_ZONES.format(region=region)}, "
            "and add the region's prefix to the table"
        )
    prefix = ZONE_ID_PREFIXES.get(region, "<code>")
    region = "<region>" if unresolved else region
    return NAMES_WARNING_ID, (
        f"availability_zones: {list(props.availability_zones)} are zone names, which AWS maps to physical zones per "
        "account in the oldest regions (for accounts created before November 2025): the same name can be another zone "
        "in each account, one without the GPU instance types or a VPC endpoint service this network needs, or apart "
        "from another account's resources. Give zone IDs instead, the same physical zone in every account: "
        f"availability_zone_ids=('{prefix}-az1', '{prefix}-az2', ...) ({DESCRIBE_ZONES.format(region=region)} shows "
        "the ID of each name in this account; aws ec2 describe-instance-type-offerings --location-type "
        "availability-zone-id shows which zones offer a type). Switching a deployed network to IDs replaces its subnets"
    )


class InferenceNetwork(Construct):
    """VPC: public subnets for the load balancer only, private subnets for the fleet, VPC endpoints, flow logs.

    Zones given by ID are written to each subnet as ``AvailabilityZoneId`` (see _SubnetsByZoneId); a subnet's
    ``availability_zone`` is then its zone's name as CloudFormation reports it at deploy. Zones given by name warn.

    Attributes: ``vpc``, ``private_subnets`` (a SubnetSelection), ``endpoint_security_group``,
    ``interface_endpoints`` (name -> endpoint), ``flow_log_group``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, props: NetworkProps) -> None:
        super().__init__(scope, construct_id)
        region = cdk.Stack.of(self).region
        private_type = ec2.SubnetType.PRIVATE_WITH_EGRESS if props.nat_gateways else ec2.SubnetType.PRIVATE_ISOLATED
        zones = props.zones_for(region)
        placement = _SubnetsByZoneId(zones) if props.availability_zone_ids else None
        warning = zone_warning(props, region)
        if warning is not None:
            cdk.Annotations.of(self).add_warning_v2(*warning)

        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(props.vpc_cidr),
            availability_zones=placement.names if placement else zones,
            nat_gateways=props.nat_gateways,
            restrict_default_security_group=True,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="public",
                    subnet_type=ec2.SubnetType.PUBLIC,
                    cidr_mask=props.public_subnet_mask,
                    map_public_ip_on_launch=False,
                ),
                ec2.SubnetConfiguration(name="private", subnet_type=private_type, cidr_mask=props.private_subnet_mask),
            ],
        )
        if placement:
            placement.place(self.vpc)
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
            "CKV_AWS_116": "CloudFormation invokes it and fails the deployment if it fails: a dead-letter queue would "
            "hold nothing to act on.",
            "CKV_AWS_117": "It calls only the EC2 API to revoke the default group's rules; inside the VPC it would "
            "need an EC2 endpoint for no gain.",
        }
        for check, reason in reasons.items():
            skip_checkov(handler, check, f"aws-cdk-lib's default-security-group custom resource. {reason}")


@jsii.implements(cdk.IStableStringProducer)
class _ZoneName:
    """The name of a zone given by ID, as CloudFormation reports it for the first subnet placed there."""

    def __init__(self, zone_id: str) -> None:
        self.zone_id = zone_id
        self.subnet: ec2.CfnSubnet | None = None

    def produce(self) -> str:
        if self.subnet is None:  # the Vpc made no subnet in the zone: nothing can be in it
            raise ValueError(f"availability_zone_ids: no subnet was placed in {self.zone_id}, so it has no zone name")
        return self.subnet.attr_availability_zone


class _SubnetsByZoneId:
    """Subnets placed by zone ID: the one escape hatch for it.

    aws-cdk-lib's ``ec2.Vpc`` (2.275) takes zone names only, and CloudFormation's ``AWS::EC2::Subnet`` takes
    ``AvailabilityZoneId`` instead of ``AvailabilityZone`` (not both). So the Vpc gets, for each zone, a name that
    resolves to ``Fn::GetAtt <its first subnet>.AvailabilityZone`` (the zone's name in the deploying account, known at
    deploy only), and ``place`` gives every CfnSubnet the zone's ID in place of that name. Whatever reads a subnet's
    ``availability_zone`` (an instance, a volume) gets the real name at deploy, and per-zone logic (one endpoint
    subnet per zone, NAT gateways per zone) still tells the zones apart. What compares names at synth (a
    SubnetSelection by ``availability_zones``, an endpoint's ``lookup_supported_azs``) matches none of them.
    """

    def __init__(self, zone_ids: Sequence[str]) -> None:
        self.zone_ids = list(zone_ids)
        self._names = [_ZoneName(zone_id) for zone_id in self.zone_ids]
        self.names = [cdk.Lazy.string(name, display_hint=f"{name.zone_id}.name") for name in self._names]

    def place(self, vpc: ec2.Vpc) -> None:
        for subnet in [*vpc.public_subnets, *vpc.private_subnets, *vpc.isolated_subnets]:
            index = self.names.index(subnet.availability_zone)
            resource = subnet.node.find_child("Subnet")
            if not isinstance(resource, ec2.CfnSubnet):  # aws-cdk-lib's Subnet changed shape: fail, never write names
                raise TypeError(
                    f"{subnet.node.path}/Subnet is a {type(resource).__name__}, not the CfnSubnet to place by zone ID"
                )
            resource.availability_zone_id = self.zone_ids[index]
            resource.availability_zone = None
            if self._names[index].subnet is None:
                self._names[index].subnet = resource


def grant_logs_service(key: kms.IKey, region: str, account: str) -> None:
    """Let CloudWatch Logs in this account and region use ``key`` for its log groups."""
    key.add_to_resource_policy(
        iam.PolicyStatement(
            principals=[service_principal(f"logs.{region}.amazonaws.com")],
            actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
            resources=["*"],
            conditions={
                "ArnLike": {"kms:EncryptionContext:aws:logs:arn": f"arn:{cdk.Aws.PARTITION}:logs:{region}:{account}:*"}
            },
        )
    )


def _endpoint_id(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace(".", "-").split("-")) + "Endpoint"
