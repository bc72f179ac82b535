"""The three choices a ModelService is built from, each an open type whose ``bind`` says what the service needs:
where its tasks run (``capacity``: a ServiceCapacity), where its model's files are (``model_source``: a ModelSource)
and how requests reach it (``route``: a ServiceRoute). The library's own options are in capacity/, store/ and
routing/; a team's own class that subclasses one works the same. :func:`placement_of`, :func:`bucket_of` and
:func:`route_of` bind a choice, refusing anything else passed for it, naming the key and the options."""

from __future__ import annotations

from typing import TypeVar

from constructs import Construct

from ..capacity.service_capacity import BoundCapacity, ClusterCapacity, ServiceCapacity
from ..core.errors import require, require_cdk
from ..routing.load_balancer_route import LoadBalancerRoute
from ..routing.service_route import BoundRoute, ListenerRoute, ServiceRoute
from ..store.model_bucket import BoundModelSource, ModelBucket, ModelSource

# The options' 0.3 home was this module: importable from here as before.
__all__ = [
    "ClusterCapacity",
    "ListenerRoute",
    "LoadBalancerRoute",
    "ModelBucket",
    "bucket_of",
    "placement_of",
    "require_cdk",
    "route_of",
]

BoundT = TypeVar("BoundT")


def _bound(bound: BoundT, expected: type[BoundT], choice: object, key: str) -> BoundT:
    require(
        isinstance(bound, expected),
        key,
        f"{type(choice).__name__}.bind returned {type(bound).__name__}: return a {expected.__name__}",
    )
    return bound


def placement_of(capacity: object, service: Construct) -> BoundCapacity:
    """Where ``service``'s tasks run: ``capacity`` bound to it."""
    require(
        isinstance(capacity, ServiceCapacity),
        "capacity",
        f"got {type(capacity).__name__}: pass a GpuCapacity, a NeuronCapacity, "
        "ClusterCapacity(cluster, capacity_provider_name, instance_type) for a capacity provider of your own, or a "
        "class of your own that subclasses ServiceCapacity",
    )
    assert isinstance(capacity, ServiceCapacity)
    return _bound(capacity.bind(service), BoundCapacity, capacity, "capacity")


def bucket_of(model_source: object, service: Construct, key: str = "model_source") -> BoundModelSource:
    """The bucket and prefix of ``model_source``, bound to ``service``."""
    require(
        isinstance(model_source, ModelSource),
        key,
        f"got {type(model_source).__name__}: pass a ModelStore, ModelBucket(bucket, prefix='models') for a "
        "bucket of your own, or a class of your own that subclasses ModelSource",
    )
    assert isinstance(model_source, ModelSource)
    return _bound(model_source.bind(service), BoundModelSource, model_source, key)


def route_of(route: object, service: Construct) -> BoundRoute:
    """How requests reach ``service``: ``route`` bound to it."""
    require(
        isinstance(route, ServiceRoute),
        "route",
        f"got {type(route).__name__}: pass an InferenceLoadBalancer, LoadBalancerRoute(load_balancer, "
        "priority) for a priority of your own, ListenerRoute(listener, priority, load_balancer=None) "
        "for a listener of your own, or a class of your own that subclasses ServiceRoute",
    )
    assert isinstance(route, ServiceRoute)
    return _bound(route.bind(service), BoundRoute, route, "route")
