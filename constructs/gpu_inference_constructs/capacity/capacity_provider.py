"""The GPU group's ECS capacity provider and its place in the cluster: added to a cluster of this app, or associated
with an imported one, and the grants the ECS agent on its instances needs (Spot draining included)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from constructs import Construct

from ..core.capacity_props import CapacityGroupProps
from ..core.errors import require
from ..shared.acknowledgements import acknowledge, default_policy, nag_rendering, skip_checkov


def managed_capacity_provider(
    scope: Construct, group: autoscaling.AutoScalingGroup, props: CapacityGroupProps
) -> ecs.AsgCapacityProvider:
    """The capacity provider (``CapacityProvider``): managed scaling at ``target_capacity_percent`` and managed
    draining."""
    return ecs.AsgCapacityProvider(
        scope,
        "CapacityProvider",
        auto_scaling_group=group,
        enable_managed_scaling=True,
        target_capacity_percent=props.target_capacity_percent,
        enable_managed_draining=True,
        enable_managed_termination_protection=props.managed_termination_protection,
        instance_warmup_period=props.instance_warmup_seconds,
        machine_image_type=ecs.MachineImageType.AMAZON_LINUX_2,
    )


def add_to_cluster(
    scope: Construct,
    cluster: ecs.ICluster,
    provider: ecs.AsgCapacityProvider,
    *,
    role: iam.Role,
    user_data: ec2.UserData,
    keep: tuple[str, ...],
) -> ecs.CfnClusterCapacityProviderAssociations | None:
    """Add ``provider`` to ``cluster``: through ``Cluster.add_asg_capacity_provider`` for a cluster of this app (None
    returned), else through an association (:func:`join_imported_cluster`)."""
    if isinstance(cluster, ecs.Cluster):
        cluster.add_asg_capacity_provider(provider)
        return None
    return join_imported_cluster(scope, cluster, provider, role=role, user_data=user_data, keep=keep)


def join_imported_cluster(
    scope: Construct,
    cluster: ecs.ICluster,
    provider: ecs.AsgCapacityProvider,
    *,
    role: iam.Role,
    user_data: ec2.UserData,
    keep: tuple[str, ...],
) -> ecs.CfnClusterCapacityProviderAssociations:
    """What ``Cluster.add_asg_capacity_provider`` does for a cluster of this app, for an imported one: the agent
    joins the cluster by name, the instance role gets the agent's cluster-scoped actions, and the provider is
    associated with the cluster (``ClusterAssociation``), beside ``keep``, the cluster's other providers."""
    user_data.add_commands(f"echo ECS_CLUSTER={cluster.cluster_name} >> /etc/ecs/ecs.config")
    role.add_to_principal_policy(
        iam.PolicyStatement(
            actions=["ecs:DeregisterContainerInstance", "ecs:RegisterContainerInstance", "ecs:Submit*"],
            resources=[cluster.cluster_arn],
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            actions=["ecs:Poll", "ecs:StartTelemetrySession"],
            resources=["*"],
            conditions={"ArnEquals": {"ecs:cluster": cluster.cluster_arn}},
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            actions=[
                "ecs:DiscoverPollEndpoint",
                "ecr:GetAuthorizationToken",
                "logs:CreateLogStream",
                "logs:PutLogEvents",
            ],
            resources=["*"],
        )
    )
    for index, name in enumerate(keep):
        require(
            bool(name) and name != provider.capacity_provider_name,
            f"keep_capacity_providers[{index}]",
            f"{name!r}: name the cluster's other capacity providers (this group's is added)",
        )
    cdk.Annotations.of(scope).add_warning_v2(
        "gpu-inference:imported-cluster-capacity-providers",
        f"cluster {cluster.cluster_name!r} is imported: its capacity providers are set to this group's"
        + (f" and {', '.join(keep)}" if keep else "")
        + " (AWS::ECS::ClusterCapacityProviderAssociations calls PutClusterCapacityProviders, which replaces the "
        "cluster's list). Name the cluster's other capacity providers in keep_capacity_providers, or they are "
        "removed from it; only one stack may associate capacity providers with one cluster. Once checked, acknowledge "
        "it: cdk.Annotations.of(<this GpuCapacity>)"
        ".acknowledge_warning('gpu-inference:imported-cluster-capacity-providers')",
    )
    return ecs.CfnClusterCapacityProviderAssociations(
        scope,
        "ClusterAssociation",
        cluster=cluster.cluster_name,
        capacity_providers=[provider.capacity_provider_name, *keep],
        default_capacity_provider_strategy=[],
    )


def grant_spot_draining(scope: Construct, cluster: ecs.ICluster, role: iam.Role) -> None:
    """On a Spot interruption notice the ECS agent sets its own instance to DRAINING
    (ECS_ENABLE_SPOT_INSTANCE_DRAINING): ``role`` may do so for ``cluster``'s container instances."""
    stack = cdk.Stack.of(scope)
    instances = f"arn:{stack.partition}:ecs:{stack.region}:{stack.account}:container-instance/{cluster.cluster_name}/*"
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="SpotDrainingOfThisClustersInstances",
            actions=["ecs:UpdateContainerInstancesState"],
            resources=[instances],
        )
    )
    acknowledge(
        default_policy(role),
        f"AwsSolutions-IAM5[Resource::{nag_rendering(scope, instances)}]",
        "Spot draining: the ECS agent sets its own container instance to DRAINING; instance IDs are not known "
        "in advance, so the grant covers this cluster's container instances "
        "(the cluster name is in the ARN) and no other.",
    )


def acknowledge_agent_grants(role: iam.Role) -> None:
    """The findings on the ECS agent's grants that aws-cdk-lib's AsgCapacityProvider adds to ``role``'s policy."""
    policy = default_policy(role)
    skip_checkov(
        policy,
        "CKV_AWS_111",
        "aws-cdk-lib's capacity provider grants the ECS agent logs:CreateLogStream and logs:PutLogEvents on * for "
        "tasks without an execution role; every task here has one, scoped to its own log group. The other writes "
        "(RegisterContainerInstance, Submit*, UpdateContainerInstancesState) are limited to this cluster.",
    )
    acknowledge(
        policy,
        "AwsSolutions-IAM5[Resource::*]",
        "Added by aws-cdk-lib's AsgCapacityProvider for the ECS agent: ecs:DiscoverPollEndpoint, "
        "ecr:GetAuthorizationToken and the agent's log actions support no resource-level permissions; "
        "ecs:Poll and ecs:StartTelemetrySession are conditioned on this cluster's ARN.",
    )
    acknowledge(
        policy,
        "AwsSolutions-IAM5[Action::ecs:Submit*]",
        "Added by aws-cdk-lib's AsgCapacityProvider: the ECS agent's ecs:Submit* state-change calls, "
        "limited to this cluster's ARN.",
    )
