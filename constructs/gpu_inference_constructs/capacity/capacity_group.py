"""What every capacity group of this library is, whatever its accelerator: an EC2 Auto Scaling group of one shape,
Spot above an On-Demand base, launched from an encrypted, IMDSv2-only launch template, managed by an ECS capacity
provider of a cluster, telling a topic of its launches and terminations. GpuCapacity (CUDA GPUs, gpu_capacity.py) and
NeuronCapacity (Inferentia2, neuron_capacity.py) add their AMI and agent settings and how their models are counted.

The parts, one module each: what an instance launches with (gpu_instances.py), the group and its mixed-instances policy
(gpu_auto_scaling_group.py), where the group's events go (group_events.py) and the capacity provider in its cluster
(gpu_capacity_provider.py).
"""

from __future__ import annotations

from typing import Generic, TypeVar

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..core.capacity_props import CapacityGroupProps, launches_spot
from ..core.deployment_capacity import ServiceDeployment, check_group_holds_deployment_at_peak
from ..core.errors import require
from ..core.instance_catalog import GpuInstanceType
from ..core.model_props import ModelProps
from ..core.schedules import CapacityPrewarm
from ..networking.subnet_selection import private_subnets
from .auto_scaling_group import mixed_instances_group
from .capacity_provider import (
    acknowledge_agent_grants,
    add_to_cluster,
    grant_spot_draining,
    managed_capacity_provider,
)
from .group_events import group_event_topic, notify_group_events
from .instance_regions import warn_if_unlisted
from .instances import agent_user_data, gpu_launch_template, instance_role, instance_security_group
from .service_capacity import BoundCapacity, ServiceCapacity

PropsT = TypeVar("PropsT", bound=CapacityGroupProps)


class CapacityGroup(Construct, ServiceCapacity, Generic[PropsT]):
    """An ECS capacity provider managing a mixed Spot/On-Demand Auto Scaling group of accelerated instances, in a
    cluster. The base of GpuCapacity and NeuronCapacity, which document their keyword arguments.

    Attributes: ``props``, ``subnets`` (the instances' SubnetSelection), ``cluster``, ``auto_scaling_group``,
    ``capacity_provider``, ``capacity_provider_association`` (an imported cluster's, else None), ``launch_template``,
    ``security_group`` (the instances'), ``instance_role``, ``user_data``, ``instance_types`` (catalog entries,
    preferred first), ``smallest_instance_type`` (what every task must fit), ``topic``, ``own_notifications``,
    ``group_events_rule``, ``services`` (the deployments counted on it), ``has_spot`` (whether its instances may be
    Spot, and so get interruption notices).

    A ServiceCapacity: a ModelService placed on it (``capacity=`` the group) runs on its capacity provider, is counted
    on it (``add_model``) and has its images pulled ahead where the group keeps a warm pool (``prepull_task``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        props: PropsT,
        instance_types: list[GpuInstanceType],
        image: ec2.IMachineImage,
        kind: str,
        gpu: bool,
        warm_pool: bool,
        subnets: ec2.SubnetSelection | None,
        topic: sns.ITopic | None,
        cluster: ecs.ICluster | None,
        keep_capacity_providers: tuple[str, ...],
    ) -> None:
        super().__init__(scope, construct_id)
        self.props = props
        self.services: list[ServiceDeployment] = []
        self._prewarms: dict[str, tuple[CapacityPrewarm, autoscaling.ScheduledAction]] = {}
        self.instance_types = instance_types
        for index, instance_type in enumerate(self.instance_types):
            warn_if_unlisted(self, instance_type, cdk.Stack.of(self).region, f"instance_types[{index}]")
        self.smallest_instance_type = min(self.instance_types, key=lambda t: (t.memory_gib, t.vcpus))
        subnets = subnets or private_subnets(vpc, type(self).__name__)
        self.subnets = subnets

        self.cluster = cluster or ecs.Cluster(
            self, "Cluster", vpc=vpc, container_insights_v2=ecs.ContainerInsights.ENHANCED
        )
        self.security_group = instance_security_group(self, vpc, kind)
        self.instance_role = instance_role(self, kind)
        self.user_data = agent_user_data(warm_pool=warm_pool, gpu=gpu)
        self.launch_template = gpu_launch_template(
            self,
            props,
            role=self.instance_role,
            security_group=self.security_group,
            user_data=self.user_data,
            image=image,
        )
        self.auto_scaling_group = mixed_instances_group(
            self,
            props,
            vpc=vpc,
            subnets=subnets,
            launch_template=self.launch_template,
            instance_types=self.instance_types,
        )
        self.own_notifications, self.topic = group_event_topic(self, topic)
        self.group_events_rule = notify_group_events(self, self.auto_scaling_group, self.topic, kind)

        self.capacity_provider = managed_capacity_provider(self, self.auto_scaling_group, props)
        self.capacity_provider_association = add_to_cluster(
            self,
            self.cluster,
            self.capacity_provider,
            role=self.instance_role,
            user_data=self.user_data,
            keep=keep_capacity_providers,
        )
        grant_spot_draining(self, self.cluster, self.instance_role)
        acknowledge_agent_grants(self.instance_role)

    def bind(self, service: Construct) -> BoundCapacity:
        return BoundCapacity(
            self.cluster,
            (ecs.CapacityProviderStrategy(capacity_provider=self.capacity_provider.capacity_provider_name, weight=1),),
            self.smallest_instance_type,
            fleet_types=tuple(self.instance_types),
            has_spot=self.has_spot,
            group=self,
            instance_subnets=self.subnets,
            depends_on=() if self.capacity_provider_association is None else (self.capacity_provider_association,),
        )

    def add_model(self, model: ModelProps) -> None:
        """Count ``model``'s service on this group (GpuCapacity and NeuronCapacity say how: in GPUs or GPU shares, or
        one task per instance)."""
        raise NotImplementedError(f"{type(self).__name__}.add_model")

    def prepull_task(self, service: Construct, task_definition: ecs.TaskDefinition) -> None:
        """Nothing: a group without a warm pool starts every instance when it is needed (GpuCapacity's pulls
        ahead)."""

    @property
    def has_spot(self) -> bool:
        """Whether the group may hold Spot instances (its props' On-Demand base and share above it)."""
        return launches_spot(self.props)

    def add_service(self, service: ServiceDeployment) -> None:
        """Count a service (in devices: GPUs, or Neuron devices) that runs on this group, refusing the one whose
        deployment at peak (all services at ``max_tasks``, the one with the largest surge deploying) would not fit
        ``max_capacity`` instances."""
        check_group_holds_deployment_at_peak(
            self.props.max_capacity,
            self.smallest_instance_type.gpus,
            [*self.services, service],
            key=f"{self.node.id}.max_capacity",
        )
        self.services.append(service)

    def add_prewarm(self, prewarm: CapacityPrewarm) -> autoscaling.ScheduledAction:
        """Raise the group's minimum on a schedule. Never its desired capacity: ECS managed scaling owns that. The same
        floor added again (ServiceScaling adds its ``capacity_prewarm`` for each model on the group) is added once."""
        require(
            prewarm.min_capacity <= self.props.max_capacity,
            f"capacity_prewarm.{prewarm.name}.min_capacity",
            f"{prewarm.min_capacity} is greater than the group's max_capacity {self.props.max_capacity}",
        )
        if prewarm.name in self._prewarms:
            added, action = self._prewarms[prewarm.name]
            require(
                added == prewarm,
                f"capacity_prewarm.{prewarm.name}",
                f"{self.node.path} already has a pre-warm of this name with other settings ({added}): give each "
                "floor its own name",
            )
            return action
        action = self.auto_scaling_group.scale_on_schedule(
            f"Prewarm-{prewarm.name}",
            schedule=autoscaling.Schedule.expression(prewarm.cron),
            time_zone=prewarm.time_zone,
            min_capacity=prewarm.min_capacity,
        )
        self._prewarms[prewarm.name] = (prewarm, action)
        return action

    def allow_ingress_from(self, peer: ec2.IConnectable, port: ec2.Port, description: str) -> None:
        """Open ``port`` on the instances to ``peer`` (for bridge- or host-mode tasks, e.g. from a load balancer)."""
        self.security_group.connections.allow_from(peer, port, description)
