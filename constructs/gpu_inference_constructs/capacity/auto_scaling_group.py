"""The GPU Auto Scaling group and its mixed-instances policy: every type of one shape, in priority order, On-Demand
``prioritized`` and Spot ``capacity-optimized-prioritized`` (gpu_capacity.py says why no weights)."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from ..core.capacity_props import CapacityGroupProps
from ..core.instance_catalog import GpuInstanceType
from ..shared.acknowledgements import acknowledge, default_child


def mixed_instances_group(
    scope: Construct,
    props: CapacityGroupProps,
    *,
    vpc: ec2.IVpc,
    subnets: ec2.SubnetSelection,
    launch_template: ec2.ILaunchTemplate,
    instance_types: Sequence[GpuInstanceType],
) -> autoscaling.AutoScalingGroup:
    """The group (``AutoScalingGroup``) that launches ``launch_template`` as ``instance_types``, Spot above
    ``props``' On-Demand base, rebalanced before a Spot interruption."""
    group = autoscaling.AutoScalingGroup(
        scope,
        "AutoScalingGroup",
        vpc=vpc,
        vpc_subnets=subnets,
        mixed_instances_policy=autoscaling.MixedInstancesPolicy(
            launch_template=launch_template,
            launch_template_overrides=[
                autoscaling.LaunchTemplateOverrides(instance_type=ec2.InstanceType(t.name)) for t in instance_types
            ],
            instances_distribution=autoscaling.InstancesDistribution(
                on_demand_allocation_strategy=autoscaling.OnDemandAllocationStrategy.PRIORITIZED,
                on_demand_base_capacity=props.on_demand_base_capacity,
                on_demand_percentage_above_base_capacity=props.on_demand_percentage_above_base,
                spot_allocation_strategy=autoscaling.SpotAllocationStrategy.CAPACITY_OPTIMIZED_PRIORITIZED,
            ),
        ),
        min_capacity=props.min_capacity,
        max_capacity=props.max_capacity,
        capacity_rebalance=True,
        group_metrics=[autoscaling.GroupMetrics.all()],
    )
    acknowledge(
        default_child(group),
        "AwsSolutions-EC26",
        "cdk-nag reads only AutoScalingGroup.LaunchTemplate and throws on a mixed-instances policy "
        "(cdklabs/cdk-nag#1902). The launch template's root volume is encrypted gp3: asserted by "
        "tests/infra/test_capacity.py::test_launch_template_root_volume_is_encrypted_gp3.",
    )
    return group
