"""The environment's network: ``InferenceNetwork`` (VPC, subnets, interface endpoints, flow logs) and how constructs
choose their subnets. Imported on first use, like the package root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .network import DEFAULT_INTERFACE_ENDPOINTS, InferenceNetwork, NetworkProps, grant_logs_service

__all__ = [
    "DEFAULT_INTERFACE_ENDPOINTS",
    "InferenceNetwork",
    "NetworkProps",
    "grant_logs_service",
]

_MODULE_OF = {
    "DEFAULT_INTERFACE_ENDPOINTS": "network",
    "InferenceNetwork": "network",
    "NetworkProps": "network",
    "grant_logs_service": "network",
}


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
