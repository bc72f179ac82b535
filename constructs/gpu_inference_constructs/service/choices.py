"""The three choices a ModelService is built from, each a type of its own so that a wrong combination cannot be
written: where its tasks run (``capacity``), where its model's files are (``model_source``) and how requests reach
it (``route``). Each option checks its own inputs; :func:`placement_of`, :func:`bucket_of` and :func:`route_of`
refuse anything else passed for the choice, naming the key and the options."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_s3 as s3

from ..capacity.gpu_capacity import GpuCapacity
from ..capacity.neuron_capacity import NeuronCapacity
from ..core.errors import ConfigError, require
from ..core.instance_catalog import GpuInstanceType, lookup_any
from ..routing.load_balancer import InferenceLoadBalancer, check_rule_priority
from ..store.model_store import MODELS_PREFIX, ModelStore


def require_cdk(value: object, members: tuple[str, ...], key: str, what: str) -> None:
    """``value`` is an aws-cdk-lib object with ``members`` (how a jsii interface such as ``ecs.ICluster`` is told at
    run time), or a ConfigError naming ``key`` and ``what`` to pass."""
    require(all(hasattr(value, member) for member in members), key, f"got {type(value).__name__}: pass {what}")


@dataclass(frozen=True)
class ClusterCapacity:
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
                f"got {type(self.instance_type).__name__}: pass an instance type's name "
                "(such as 'g5.xlarge') or a CATALOG entry",
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


@dataclass(frozen=True)
class ModelBucket:
    """A model's files in a bucket of your own (the other option is a ModelStore), under
    ``<prefix>/<model name>/<version>/``."""

    bucket: s3.IBucket
    """The bucket (an imported one: ``s3.Bucket.from_bucket_name``). Required."""
    prefix: str = MODELS_PREFIX
    """The folder that holds one folder per model. Default: ``"models"`` (a ModelStore's)."""

    def __post_init__(self) -> None:
        require_cdk(
            self.bucket,
            ("bucket_name", "arn_for_objects"),
            "bucket",
            "an s3.IBucket (s3.Bucket.from_bucket_name for an imported one)",
        )
        require(
            isinstance(self.prefix, str) and not any(c in self.prefix for c in "*? "),
            "prefix",
            f"{self.prefix!r}: pass the folder that holds the models' folders, such as 'models' "
            "('' for the bucket's root)",
        )


@dataclass(frozen=True)
class LoadBalancerRoute:
    """A route on an InferenceLoadBalancer's listener at a priority of your choosing (an InferenceLoadBalancer
    passed alone as ``route`` derives the priority from the model's name)."""

    load_balancer: InferenceLoadBalancer
    """The load balancer. Required."""
    priority: int | None = None
    """The listener rule's priority (1-50000). Default: derived from the model's name; two names that give one
    priority are refused."""

    def __post_init__(self) -> None:
        require(
            isinstance(self.load_balancer, InferenceLoadBalancer),
            "load_balancer",
            f"got {type(self.load_balancer).__name__}: pass an InferenceLoadBalancer, "
            "or use ListenerRoute for your own listener",
        )
        if self.priority is not None:
            _check_priority(self.priority)

    @property
    def listener(self) -> elbv2.IApplicationListener:
        """The load balancer's listener the route's rule is on."""
        return self.load_balancer.listener


@dataclass(frozen=True)
class ListenerRoute:
    """A rule on a listener of your own (the other options are an InferenceLoadBalancer, or a LoadBalancerRoute);
    the listener's connections reach the tasks."""

    listener: elbv2.IApplicationListener
    """Any ALB listener (an imported one: ``ApplicationListener.from_lookup`` or
    ``from_application_listener_attributes``). Required."""
    priority: int
    """The rule's priority, unique on that listener (1-50000). Required."""
    load_balancer: elbv2.IApplicationLoadBalancer | None = None
    """The listener's load balancer, whose name dimensions the target-group metrics (an imported one, or another
    stack's). Default: parsed from the listener's ARN, which CloudFormation may not accept inside ``Fn::Split`` when
    the ARN is another stack's output."""

    def __post_init__(self) -> None:
        require_cdk(self.listener, ("listener_arn", "connections"), "listener", "an elbv2.IApplicationListener")
        _check_priority(self.priority)
        if self.load_balancer is not None:
            require_cdk(
                self.load_balancer,
                ("load_balancer_arn", "metrics"),
                "load_balancer",
                "the listener's elbv2.IApplicationLoadBalancer "
                "(ApplicationLoadBalancer.from_application_load_balancer_attributes)",
            )


def _check_priority(priority: object) -> None:
    require(
        isinstance(priority, int) and not isinstance(priority, bool),
        "priority",
        f"{priority!r}: a whole number, unique on the listener",
    )
    assert isinstance(priority, int)
    check_rule_priority(priority, "priority")


@dataclass(frozen=True)
class Placement:
    """Where a ModelService's tasks run, resolved from its ``capacity``."""

    cluster: ecs.ICluster
    capacity_provider_name: str
    instance_type: GpuInstanceType
    fleet_types: tuple[GpuInstanceType, ...]
    capacity_group: GpuCapacity | NeuronCapacity | None
    """The library's capacity group the tasks run on; None on a capacity provider of the team's own."""
    has_spot: bool
    """Whether the capacity may be Spot (asked of the capacity: ``has_spot``)."""


def placement_of(capacity: object) -> Placement:
    if isinstance(capacity, (GpuCapacity, NeuronCapacity)):
        return Placement(
            capacity.cluster,
            capacity.capacity_provider.capacity_provider_name,
            capacity.smallest_instance_type,
            tuple(capacity.instance_types),
            capacity,
            capacity.has_spot,
        )
    if isinstance(capacity, ClusterCapacity):
        instance_type = capacity.gpu_instance_type
        return Placement(
            capacity.cluster, capacity.capacity_provider_name, instance_type, (instance_type,), None, capacity.has_spot
        )
    raise ConfigError(
        "capacity",
        f"got {type(capacity).__name__}: pass a GpuCapacity, a NeuronCapacity, or "
        "ClusterCapacity(cluster, capacity_provider_name, instance_type) for a capacity provider of your own",
    )


def bucket_of(model_source: object) -> ModelBucket:
    """The bucket and prefix of ``model_source``."""
    if isinstance(model_source, ModelStore):
        return ModelBucket(model_source.bucket)
    if isinstance(model_source, ModelBucket):
        return model_source
    raise ConfigError(
        "model_source",
        f"got {type(model_source).__name__}: pass a ModelStore, or "
        "ModelBucket(bucket, prefix='models') for a bucket of your own",
    )


def route_of(route: object) -> LoadBalancerRoute | ListenerRoute:
    if isinstance(route, InferenceLoadBalancer):
        return LoadBalancerRoute(route)
    if isinstance(route, (LoadBalancerRoute, ListenerRoute)):
        return route
    raise ConfigError(
        "route",
        f"got {type(route).__name__}: pass an InferenceLoadBalancer, LoadBalancerRoute(load_balancer, "
        "priority) for a priority of your own, or ListenerRoute(listener, priority, load_balancer=None) "
        "for a listener of your own",
    )
