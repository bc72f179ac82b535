"""How a request reaches a model's tasks: ``InferenceLoadBalancer`` and its props, listener rules, the web ACL, the
target groups' readiness check and their metrics (``TargetGroupMetrics``). Imported on first use, like the package
root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .listener_rules import ListenerPriorities
    from .load_balancer import ConfiguredLoad, InferenceLoadBalancer, LoadBalancerProps, LoadBalancerQuotas
    from .target_group_metrics import TargetGroupMetrics

__all__ = [
    "ConfiguredLoad",
    "InferenceLoadBalancer",
    "ListenerPriorities",
    "LoadBalancerProps",
    "LoadBalancerQuotas",
    "TargetGroupMetrics",
]

_MODULE_OF = {
    "ListenerPriorities": "listener_rules",
    "ConfiguredLoad": "load_balancer",
    "InferenceLoadBalancer": "load_balancer",
    "LoadBalancerProps": "load_balancer",
    "LoadBalancerQuotas": "load_balancer",
    "TargetGroupMetrics": "target_group_metrics",
}


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
