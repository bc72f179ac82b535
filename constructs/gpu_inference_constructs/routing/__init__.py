"""How a request reaches a model's tasks: ``InferenceLoadBalancer`` and its props, listener rules, the web ACL, the
target groups' readiness check and their metrics (``TargetGroupMetrics``); ``ServiceRoute``, the open type of how
requests reach a ModelService (``bind`` gives a ``BoundRoute``), with ``LoadBalancerRoute`` and ``ListenerRoute``.
Imported on first use, like the package root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .listener_rules import ListenerPriorities
    from .load_balancer import ConfiguredLoad, InferenceLoadBalancer, LoadBalancerProps, LoadBalancerQuotas
    from .load_balancer_route import LoadBalancerRoute
    from .service_route import BoundRoute, ListenerRoute, RouteRule, ServiceRoute
    from .target_group_metrics import TargetGroupMetrics

__all__ = [
    "BoundRoute",
    "ConfiguredLoad",
    "InferenceLoadBalancer",
    "ListenerRoute",
    "ListenerPriorities",
    "LoadBalancerProps",
    "LoadBalancerQuotas",
    "LoadBalancerRoute",
    "RouteRule",
    "ServiceRoute",
    "TargetGroupMetrics",
]

_MODULE_OF = {
    "BoundRoute": "service_route",
    "ListenerPriorities": "listener_rules",
    "ConfiguredLoad": "load_balancer",
    "InferenceLoadBalancer": "load_balancer",
    "ListenerRoute": "service_route",
    "LoadBalancerProps": "load_balancer",
    "LoadBalancerQuotas": "load_balancer",
    "LoadBalancerRoute": "load_balancer_route",
    "RouteRule": "service_route",
    "ServiceRoute": "service_route",
    "TargetGroupMetrics": "target_group_metrics",
}


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
