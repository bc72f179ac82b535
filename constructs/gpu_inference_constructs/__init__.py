"""AWS CDK constructs for real-time PyTorch inference on ECS GPU capacity."""

from .deployment import DeploymentProps
from .errors import ConfigError
from .gpu_capacity import GpuCapacity, GpuCapacityProps
from .instance_catalog import CATALOG, GpuInstanceType
from .load_balancer import InferenceLoadBalancer, LoadBalancerProps
from .model_service import ModelProps, ModelService, ServiceTimingProps
from .model_store import ModelStore, ModelStoreProps
from .network import DEFAULT_INTERFACE_ENDPOINTS, InferenceNetwork, NetworkProps
from .notifications import NotificationTopic
from .settings import from_dict

__all__ = [
    "CATALOG",
    "ConfigError",
    "DEFAULT_INTERFACE_ENDPOINTS",
    "DeploymentProps",
    "GpuCapacity",
    "GpuCapacityProps",
    "GpuInstanceType",
    "InferenceLoadBalancer",
    "InferenceNetwork",
    "LoadBalancerProps",
    "ModelProps",
    "ModelService",
    "ModelStore",
    "ModelStoreProps",
    "NetworkProps",
    "NotificationTopic",
    "ServiceTimingProps",
    "from_dict",
]
