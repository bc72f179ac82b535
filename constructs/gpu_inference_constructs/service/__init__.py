"""One model's ECS service: ``ModelService``, the choices it takes (capacity, model source, route), its task definition
and sidecars, its checks, its target groups and listener rule, the ALB Target Optimizer's agent, and the API-key
secret. Imported on first use, like the package root's names."""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .api_keys import api_keys_secret
    from .choices import ClusterCapacity, ListenerRoute, LoadBalancerRoute, ModelBucket
    from .model_pool import ModelPool
    from .model_service import ModelService
    from .pool_queries import PoolQueries
    from .props import ServiceAccess, ServiceLogs
    from .stack_limits import MAX_STACK_RESOURCES, stacks_per_model

__all__ = [
    "ClusterCapacity",
    "ListenerRoute",
    "LoadBalancerRoute",
    "MAX_STACK_RESOURCES",
    "ModelBucket",
    "ModelPool",
    "ModelService",
    "PoolQueries",
    "ServiceAccess",
    "ServiceLogs",
    "api_keys_secret",
    "stacks_per_model",
]

_MODULE_OF = {
    "ClusterCapacity": "choices",
    "ListenerRoute": "choices",
    "LoadBalancerRoute": "choices",
    "MAX_STACK_RESOURCES": "stack_limits",
    "ModelBucket": "choices",
    "ModelPool": "model_pool",
    "ModelService": "model_service",
    "PoolQueries": "pool_queries",
    "ServiceAccess": "props",
    "ServiceLogs": "props",
    "api_keys_secret": "api_keys",
    "stacks_per_model": "stack_limits",
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
