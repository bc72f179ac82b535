"""How a request reaches a model's tasks: ``InferenceLoadBalancer`` and its props, listener rules, the web ACL, the
target groups' readiness check and their metrics (``TargetGroupMetrics``). Imported on first use, like the package
root's names."""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .load_balancer import ConfiguredLoad, InferenceLoadBalancer, LoadBalancerProps, LoadBalancerQuotas
    from .target_group_metrics import TargetGroupMetrics

__all__ = [
    "ConfiguredLoad",
    "InferenceLoadBalancer",
    "LoadBalancerProps",
    "LoadBalancerQuotas",
    "TargetGroupMetrics",
]

_MODULE_OF = {
    "ConfiguredLoad": "load_balancer",
    "InferenceLoadBalancer": "load_balancer",
    "LoadBalancerProps": "load_balancer",
    "LoadBalancerQuotas": "load_balancer",
    "TargetGroupMetrics": "target_group_metrics",
}


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})
