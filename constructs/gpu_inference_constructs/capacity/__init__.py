"""The instances a model's tasks run on: ``GpuCapacity`` and ``NeuronCapacity`` on one ``CapacityGroup`` (Auto Scaling
group, launch template, capacity provider, lifecycle events), the warm pool, and the check that the fleet holds the
tasks of models sharing GPUs. Imported on first use, like the package root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
