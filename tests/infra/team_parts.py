"""A team's own account as tests import it: a VPC with one private subnet, an ECS cluster and an ALB listener, all
imported by their IDs and ARNs (nothing of ours built), in eu-west-1."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2

LISTENER_ARN = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:listener/app/team/0123456789abcdef/0123456789abcdef"


@dataclass(frozen=True)
class TeamParts:
    vpc: ec2.IVpc
    cluster: ecs.ICluster
    listener: elbv2.IApplicationListener


def imported_team_parts(stack: cdk.Stack) -> TeamParts:
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0a1b2c3d4e5f67890",
        vpc_cidr_block="10.0.0.0/16",
        availability_zones=["eu-west-1a"],
        private_subnet_ids=["subnet-0aaaaaaaaaaaaaaa1"],
    )
    cluster = ecs.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="team-gpu", vpc=vpc)
    listener = elbv2.ApplicationListener.from_application_listener_attributes(
        stack,
        "Listener",
        listener_arn=LISTENER_ARN,
        security_group=ec2.SecurityGroup.from_security_group_id(stack, "AlbSg", "sg-0123456789abcdef0"),
    )
    return TeamParts(vpc, cluster, listener)
