"""A Neuron (Inferentia2) capacity group's props: its instance types, Spot mix, bounds and root volume. Plain data
and checks, without aws_cdk, for the construct (neuron_capacity.py), the app's config and the sizing advisor alike."""

from __future__ import annotations

from dataclasses import dataclass

from .capacity_props import check_group_bounds, resolve_one_shape
from .instance_catalog import GpuInstanceType, lookup_neuron


@dataclass(frozen=True)
class NeuronCapacityProps:
    """Inferentia2 capacity, a capacity provider of its own (a Neuron fleet cannot share a launch template with CUDA
    types: another AMI, no NVIDIA runtime). Defaults are a small all-Spot fleet of inf2.xlarge that scales to zero: at
    most 8 instances, enough for ModelProps' defaults (4 tasks, one per instance) deploying at 200 % (8 tasks)."""

    instance_types: tuple[str, ...] = ("inf2.xlarge",)
    """The Inferentia2 types, preferred first, all of one shape (vCPUs, memory, Neuron devices). Default:
    ("inf2.xlarge",)."""
    on_demand_base_capacity: int = 0
    """Instances that are always On-Demand, before any Spot. Default: 0."""
    on_demand_percentage_above_base: int = 0
    """The On-Demand share of the instances above the base, 0-100. Default: 0 (all Spot above the base)."""
    min_capacity: int = 0
    """The group's fewest instances. Default: 0 (scales to zero)."""
    max_capacity: int = 8
    """The group's most instances; every model's deployment at its peak must fit them, one task per instance.
    Default: 8 (ModelProps' defaults, 4 tasks, deploying at 200 %)."""
    target_capacity_percent: int = 100
    """The capacity provider's target utilization, 1-100 (managed scaling). Default: 100 (no spare instance)."""
    root_volume_gib: int = 100
    """Each instance's gp3 root volume, 30-16384 GiB; it holds the images and the tasks' scratch volumes (a Neuron SDK
    image and the compiled model). Default: 100."""
    root_volume_throughput_mib_s: int = 125
    """The root volume's throughput, 125-1000 MiB/s (EC2 API EbsBlockDevice.Throughput). Default: 125 (gp3's
    included baseline; more is provisioned, with the IOPS it needs)."""
    managed_termination_protection: bool = False
    """The capacity provider's managed termination protection (scale-in spares instances that run tasks). Default:
    False (managed draining moves the tasks first)."""
    instance_warmup_seconds: int = 300
    """Seconds a new instance counts as warming up for managed scaling, 0-10000. Default: 300."""

    @property
    def warm_pool(self) -> None:
        """No warm pool for a Neuron group yet (neuron_capacity.py says why)."""
        return None

    def __post_init__(self) -> None:
        check_group_bounds(self, "Neuron", volume_hint=" (Neuron SDK images need room: 100 or more is sensible)")

    def resolve_instance_types(self) -> list[GpuInstanceType]:
        """The catalog entries, in priority order, checked to be Neuron types of one shape."""
        return resolve_one_shape(self.instance_types, lookup_neuron, "inf2.xlarge alone, or one size per family")

    def smallest_instance_type(self) -> GpuInstanceType:
        """The type a task must fit on: the least memory, then the fewest vCPUs."""
        return min(self.resolve_instance_types(), key=lambda t: (t.memory_gib, t.vcpus))
