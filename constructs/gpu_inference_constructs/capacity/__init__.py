"""The instances a model's tasks run on: ``GpuCapacity`` and ``NeuronCapacity`` on one ``CapacityGroup`` (Auto Scaling
group, launch template, capacity provider, lifecycle events), the warm pool, and the check that the fleet holds the
tasks of models sharing GPUs. Imported on first use, like the package root's names."""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .capacity_group import CapacityGroup
    from .gpu_capacity import GpuCapacity, GpuCapacityProps
    from .neuron_capacity import NeuronCapacity, NeuronCapacityProps
    from .warm_pool import WarmPoolLaunches, WarmPoolProps

__all__ = [
    "CapacityGroup",
    "GpuCapacity",
    "GpuCapacityProps",
    "NeuronCapacity",
    "NeuronCapacityProps",
    "WarmPoolLaunches",
    "WarmPoolProps",
]

_MODULE_OF = {
    "CapacityGroup": "capacity_group",
    "GpuCapacity": "gpu_capacity",
    "GpuCapacityProps": "gpu_capacity",
    "NeuronCapacity": "neuron_capacity",
    "NeuronCapacityProps": "neuron_capacity",
    "WarmPoolLaunches": "warm_pool",
    "WarmPoolProps": "warm_pool",
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
