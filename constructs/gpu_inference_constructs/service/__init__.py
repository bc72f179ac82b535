"""One model's ECS service: ``ModelService``, the choices it takes (capacity, model source, route), its task definition
and sidecars, its checks, its target groups and listener rule, the ALB Target Optimizer's agent, and the API-key
secret. Imported on first use, like the package root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .adapter_queries import AdapterQueries
    from .api_keys import api_keys_secret
    from .checks import CheckedServer
    from .choices import ClusterCapacity, ListenerRoute, LoadBalancerRoute, ModelBucket
    from .model_pool import ModelPool
    from .model_service import ModelService
    from .pool_discovery import PoolDiscovery
    from .pool_queries import PoolQueries
    from .props import ServiceAccess, ServiceLogs
    from .server_context import CdkServerContext
    from .stack_limits import MAX_STACK_RESOURCES, stacks_per_model
    from .validation import validate_service

__all__ = [
    "AdapterQueries",
    "CheckedServer",
    "CdkServerContext",
    "ClusterCapacity",
    "ListenerRoute",
    "LoadBalancerRoute",
    "MAX_STACK_RESOURCES",
    "ModelBucket",
    "ModelPool",
    "ModelService",
    "PoolDiscovery",
    "PoolQueries",
    "ServiceAccess",
    "ServiceLogs",
    "api_keys_secret",
    "stacks_per_model",
    "validate_service",
]

_MODULE_OF = {
    "AdapterQueries": "adapter_queries",
    "CheckedServer": "checks",
    "validate_service": "validation",
    "CdkServerContext": "server_context",
    "ClusterCapacity": "choices",
    "ListenerRoute": "choices",
    "LoadBalancerRoute": "choices",
    "MAX_STACK_RESOURCES": "stack_limits",
    "ModelBucket": "choices",
    "ModelPool": "model_pool",
    "ModelService": "model_service",
    "PoolDiscovery": "pool_discovery",
    "PoolQueries": "pool_queries",
    "ServiceAccess": "props",
    "ServiceLogs": "props",
    "api_keys_secret": "api_keys",
    "stacks_per_model": "stack_limits",
}


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
