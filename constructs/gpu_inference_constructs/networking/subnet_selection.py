"""Where a construct puts its network interfaces when the caller names no subnets: by the VPC's subnet types, and an
error naming the construct and ``subnets=`` where an imported VPC has none of the type (aws-cdk-lib would fail with
"There are no 'Isolated' subnet groups in this VPC")."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2

from ..core.errors import require


def private_subnets(vpc: ec2.IVpc, who: str) -> ec2.SubnetSelection:
    """The VPC's private subnets for ``who``: with egress if it has them, else isolated ones."""
    if vpc.private_subnets:
        return ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
    require(
        bool(vpc.isolated_subnets),
        "subnets",
        f"{who} needs private subnets (with egress or isolated) and the VPC has none: pass subnets="
        "ec2.SubnetSelection(subnets=[...]) naming where its network interfaces go, or import the VPC with its "
        "private_subnet_ids or isolated_subnet_ids",
    )
    return ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)


def public_subnets(vpc: ec2.IVpc, who: str) -> ec2.SubnetSelection:
    """The VPC's public subnets for ``who`` (an internet-facing load balancer)."""
    require(
        bool(vpc.public_subnets),
        "subnets",
        f"{who} is internet-facing and the VPC has no public subnets: import the VPC with its public_subnet_ids, "
        "pass subnets=ec2.SubnetSelection(subnets=[...]), or make it internal (internet_facing=False)",
    )
    return ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC)
