"""The instances a model's tasks run on: ``GpuCapacity`` and ``NeuronCapacity`` on one ``CapacityGroup`` (Auto Scaling
group, launch template, capacity provider, lifecycle events), the warm pool, and the check that the fleet holds the
tasks of models sharing GPUs; ``ServiceCapacity``, the open type of where a ModelService's tasks run (``bind`` gives a
``BoundCapacity``), and ``ClusterCapacity`` for a capacity provider of a team's own. Imported on first use, like the
package root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .capacity_group import CapacityGroup
    from .gpu_capacity import GpuCapacity, GpuCapacityProps
    from .neuron_capacity import NeuronCapacity, NeuronCapacityProps
    from .service_capacity import BoundCapacity, ClusterCapacity, ManagedCapacity, ServiceCapacity
    from .warm_pool import WarmPoolLaunches, WarmPoolProps

__all__ = [
    "BoundCapacity",
    "CapacityGroup",
    "ClusterCapacity",
    "GpuCapacity",
    "GpuCapacityProps",
    "ManagedCapacity",
    "NeuronCapacity",
    "NeuronCapacityProps",
    "ServiceCapacity",
    "WarmPoolLaunches",
    "WarmPoolProps",
]

_MODULE_OF = {
    "BoundCapacity": "service_capacity",
    "CapacityGroup": "capacity_group",
    "ClusterCapacity": "service_capacity",
    "GpuCapacity": "gpu_capacity",
    "GpuCapacityProps": "gpu_capacity",
    "ManagedCapacity": "service_capacity",
    "NeuronCapacity": "neuron_capacity",
    "NeuronCapacityProps": "neuron_capacity",
    "ServiceCapacity": "service_capacity",
    "WarmPoolLaunches": "warm_pool",
    "WarmPoolProps": "warm_pool",
}


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
