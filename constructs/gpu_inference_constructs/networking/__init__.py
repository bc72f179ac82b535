"""The environment's network: ``InferenceNetwork`` (VPC, subnets, interface endpoints, flow logs) and how constructs
choose their subnets. Imported on first use, like the package root's names."""

import importlib
from typing import TYPE_CHECKING

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


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})
