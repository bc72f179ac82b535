"""AWS CDK constructs for real-time PyTorch inference on ECS GPU capacity."""

from .errors import ConfigError
from .network import DEFAULT_INTERFACE_ENDPOINTS, InferenceNetwork, NetworkProps
from .settings import from_dict

__all__ = [
    "ConfigError",
    "DEFAULT_INTERFACE_ENDPOINTS",
    "InferenceNetwork",
    "NetworkProps",
    "from_dict",
]
