"""Where a ModelService's tasks run (its ``capacity``), as an open type in CDK's idiom: ``ServiceCapacity``, whose
``bind`` returns what the service needs (``BoundCapacity``: the cluster, the capacity provider strategy, the smallest
instance type, whether it may be Spot, and the library's group where there is one). The built-in choices: a
GpuCapacity or NeuronCapacity (capacity_group.py), and ``ClusterCapacity`` for a capacity provider of your own
(``ServiceCapacity.from_capacity_provider``). A team's own class that subclasses ServiceCapacity works the same."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from constructs import Construct, IDependable

from ..core.errors import require, require_cdk
from ..core.instance_catalog import GpuInstanceType, lookup_any
from ..core.model_props import ModelProps
from ..core.schedules import CapacityPrewarm


class ManagedCapacity(Protocol):
    """A capacity group the library manages (GpuCapacity, NeuronCapacity): it counts the models placed on it, raises
    its floor on a schedule and pulls their images ahead on its warm pool."""

    def add_model(self, model: ModelProps) -> None:
        """Count ``model``'s service on the group, refusing one whose deployment at peak would not fit it."""
        ...

    def add_prewarm(self, prewarm: CapacityPrewarm) -> autoscaling.ScheduledAction:
        """Raise the group's minimum on a schedule (ServiceScaling's ``capacity_prewarm``)."""
        ...

    def prepull_task(self, service: Construct, task_definition: ecs.TaskDefinition) -> None:
        """Pull every image ``task_definition`` runs where instances warm ahead of need (nothing without a warm
        pool)."""
        ...


@dataclass(frozen=True)
class BoundCapacity:
    """What a ModelService needs of the capacity its tasks run on: what ``ServiceCapacity.bind`` returns."""

    cluster: ecs.ICluster
    """The cluster the service runs in. Required."""
    capacity_provider_strategies: Sequence[ecs.CapacityProviderStrategy]
    """The service's capacity provider strategy: at least one of the cluster's capacity providers. Required."""
    instance_type: GpuInstanceType
    """The smallest instance type the tasks may land on, a catalog entry (``CATALOG["g5.xlarge"]``; an inf2 type makes
    the task map its Neuron devices): each task must fit it. Required."""
    fleet_types: Sequence[GpuInstanceType] = ()
    """Every instance type the capacity launches, which the fit check reads. Default: () (``instance_type`` alone)."""
    has_spot: bool = True
    """Whether the capacity may launch Spot instances (spot_draining.py). Default: True (a Spot notice finds the
    tasks free to stop; say False for On-Demand-only capacity, or a model of several tasks may run below its count
    on a deploy)."""
    group: ManagedCapacity | None = None
    """The library's capacity group the tasks run on. Default: None (a capacity provider the library does not
    manage: synth warns what its instances must run, and ``scaling.capacity_prewarm`` is refused)."""
    instance_subnets: ec2.SubnetSelection | None = None
    """The subnets of the capacity's instances, whose routes the image-egress check reads. Default: None (unknown:
    the check warns where it cannot see a route)."""
    depends_on: Sequence[IDependable] = ()
    """What the service is created after and deleted before, besides the cluster (an imported cluster's
    capacity-provider association). Default: ()."""

    def __post_init__(self) -> None:
        require_cdk(
            self.cluster,
            ("cluster_name", "vpc"),
            "capacity.cluster",
            "an ecs.ICluster (ecs.Cluster.from_cluster_attributes for an imported one)",
        )
        strategies = self.capacity_provider_strategies
        require(
            isinstance(strategies, (tuple, list))
            and len(strategies) > 0
            and all(isinstance(s, ecs.CapacityProviderStrategy) for s in strategies),
            "capacity.capacity_provider_strategies",
            f"{strategies!r}: pass at least one ecs.CapacityProviderStrategy(capacity_provider=<name>, weight=1)",
        )
        # ECS: one item at most defines a base, and at least one weighs more than 0 (CapacityProviderStrategyItem).
        require(
            sum(s.base is not None for s in strategies) <= 1 and any((s.weight or 0) > 0 for s in strategies),
            "capacity.capacity_provider_strategies",
            "ECS takes a base on one item at most and a weight above 0 on one at least: give the base to one "
            "provider and a weight to each that should take tasks",
        )
        for key, types in (("instance_type", (self.instance_type,)), ("fleet_types", tuple(self.fleet_types))):
            require(
                all(isinstance(t, GpuInstanceType) for t in types),
                f"capacity.{key}",
                "pass catalog entries (CATALOG['g5.xlarge'], or lookup_any(name, key) for an inf2 type)",
            )
        require(isinstance(self.has_spot, bool), "capacity.has_spot", f"{self.has_spot!r}: True or False")

    @property
    def fleet(self) -> tuple[GpuInstanceType, ...]:
        """Every type the tasks may land on: ``fleet_types``, else ``instance_type`` alone."""
        return tuple(self.fleet_types) or (self.instance_type,)

    @property
    def capacity_provider_names(self) -> list[str]:
        return [strategy.capacity_provider for strategy in self.capacity_provider_strategies]


class ServiceCapacity:
    """Where a ModelService's tasks run (its ``capacity``). A GpuCapacity or NeuronCapacity is one (the library's
    group); ``ServiceCapacity.from_capacity_provider(cluster, name, instance_type)`` is a capacity provider of your
    own. Subclass it and return a BoundCapacity from :meth:`bind` for capacity of any other kind."""

    @staticmethod
    def from_capacity_provider(
        cluster: ecs.ICluster,
        capacity_provider_name: str,
        instance_type: GpuInstanceType | str,
        *,
        has_spot: bool = True,
    ) -> ClusterCapacity:
        """Tasks on ``capacity_provider_name`` of ``cluster``, whose smallest instance type is ``instance_type``."""
        return ClusterCapacity(cluster, capacity_provider_name, instance_type, has_spot)

    def bind(self, service: Construct) -> BoundCapacity:
        """What ``service`` (the ModelService placed on this capacity) needs of it."""
        raise NotImplementedError(f"{type(self).__name__}.bind: return a BoundCapacity")


@dataclass(frozen=True)
class ClusterCapacity(ServiceCapacity):
    """Tasks on a capacity provider of a cluster of your own (the other options are a GpuCapacity or a
    NeuronCapacity)."""

    cluster: ecs.ICluster
    """The cluster (an imported one: ``ecs.Cluster.from_cluster_attributes``). Required."""
    capacity_provider_name: str
    """The cluster's capacity provider the tasks are placed on. Required."""
    instance_type: GpuInstanceType | str
    """The smallest instance type the capacity provider launches, by name or catalog entry: the task must fit it. A
    Neuron type (inf2) makes the task map its Neuron devices instead of asking for GPUs. Required."""
    has_spot: bool = True
    """Whether the capacity provider may launch Spot instances. With Spot, a model of several tasks gets the minimum
    healthy percent that lets ECS stop a Spot-doomed instance's tasks at once (spot_draining.py); without, every
    model starts replacements first (100 %). Default: True (a Spot notice finds its tasks free to stop; say False for
    On-Demand-only capacity, or a model of several tasks may run below its count on a deploy)."""

    def __post_init__(self) -> None:
        require_cdk(
            self.cluster,
            ("cluster_name", "vpc"),
            "cluster",
            "an ecs.ICluster (ecs.Cluster.from_cluster_attributes for an imported one)",
        )
        require(
            isinstance(self.capacity_provider_name, str) and bool(self.capacity_provider_name),
            "capacity_provider_name",
            f"{self.capacity_provider_name!r}: pass the name of the cluster's capacity provider the tasks run on",
        )
        if isinstance(self.instance_type, str):
            lookup_any(self.instance_type, "instance_type")
        else:
            require(
                isinstance(self.instance_type, GpuInstanceType),
                "instance_type",
                f"got {type(self.instance_type).__name__}: pass an instance type's name (such as 'g5.xlarge') "
                "or a CATALOG entry",
            )
        require(isinstance(self.has_spot, bool), "has_spot", f"{self.has_spot!r}: True or False")

    @property
    def gpu_instance_type(self) -> GpuInstanceType:
        """``instance_type`` as its catalog entry."""
        return (
            lookup_any(self.instance_type, "instance_type")
            if isinstance(self.instance_type, str)
            else self.instance_type
        )

    def bind(self, service: Construct) -> BoundCapacity:
        return BoundCapacity(
            self.cluster,
            (ecs.CapacityProviderStrategy(capacity_provider=self.capacity_provider_name, weight=1),),
            self.gpu_instance_type,
            has_spot=self.has_spot,
        )
