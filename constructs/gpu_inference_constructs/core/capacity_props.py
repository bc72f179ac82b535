"""A GPU capacity group's props (an environment's ``capacity``): its instance types, Spot mix, bounds and root volume.
Plain data and checks, without aws_cdk, for the constructs and the sizing advisor alike; the group itself is
gpu_capacity.py's."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypedDict

from .errors import ConfigError, require, require_range
from .instance_catalog import GpuInstanceType, lookup
from .warm_pool_props import WarmPoolProps

GP3_BASELINE_MIB_S = 125  # included in every gp3 volume (EC2 API EbsBlockDevice.Throughput minimum)
GP3_BASELINE_IOPS = 3000  # included in every gp3 volume (EC2 API EbsBlockDevice.Iops: 3,000-16,000)


class Gp3Performance(TypedDict, total=False):
    """``ec2.BlockDeviceVolume.ebs`` keyword arguments above gp3's baseline."""

    throughput: int
    iops: int


def root_volume_performance(throughput_mib_s: int) -> Gp3Performance:
    """gp3 above its included 125 MiB/s: the throughput, and the IOPS it needs (at most 0.25 MiB/s per IOPS; 3,000
    IOPS are included). Nothing at the baseline, so default volumes keep their template."""
    if throughput_mib_s <= GP3_BASELINE_MIB_S:
        return {}
    return {"throughput": throughput_mib_s, "iops": max(GP3_BASELINE_IOPS, math.ceil(throughput_mib_s / 0.25))}


@dataclass(frozen=True)
class GpuCapacityProps:
    """GPU capacity for one cluster. Defaults are a small all-Spot fleet that scales to zero: at most 8 instances,
    enough for ModelProps' defaults (4 tasks of 1 GPU) deploying at 200 % (8 tasks) on 1-GPU types."""

    instance_types: tuple[str, ...] = ("g5.xlarge", "g4dn.xlarge")
    """The instance types, preferred first, all of one shape (vCPUs, memory, GPUs): On-Demand and Spot try the first
    and fall back to the next when it is short. At most 20. Default: ("g5.xlarge", "g4dn.xlarge")."""
    on_demand_base_capacity: int = 0
    """Instances that are always On-Demand, before any Spot. Default: 0."""
    on_demand_percentage_above_base: int = 0
    """The On-Demand share of the instances above the base, 0-100. Default: 0 (all Spot above the base)."""
    min_capacity: int = 0
    """The group's fewest instances. Default: 0 (scales to zero)."""
    max_capacity: int = 8
    """The group's most instances; every model's deployment at its peak must fit them. Default: 8 (ModelProps'
    defaults, 4 tasks of 1 GPU, deploying at 200 % on 1-GPU types)."""
    target_capacity_percent: int = 100
    """The capacity provider's target utilization, 1-100 (managed scaling). Default: 100 (no spare instance)."""
    root_volume_gib: int = 100
    """Each instance's gp3 root volume, 30-16384 GiB; it holds the images and the tasks' scratch volumes. Default:
    100."""
    root_volume_throughput_mib_s: int = 125
    """The root volume's throughput, 125-1000 MiB/s (EC2 API EbsBlockDevice.Throughput). It holds the task's scratch
    volume (the model copy): gp3's 125 MiB/s baseline moves 26 GB in 3.5 minutes. Default: 125 (gp3's included
    baseline; more is provisioned, with the IOPS it needs)."""
    managed_termination_protection: bool = False
    """The capacity provider's managed termination protection (scale-in spares instances that run tasks). Default:
    False (managed draining moves the tasks first)."""
    instance_warmup_seconds: int = 300
    """Seconds a new instance counts as warming up for managed scaling, 0-10000. Default: 300."""
    instance_weights: dict[str, int] | None = None
    """Refused when set: ECS capacity providers do not support instance weighting; list types of one shape in
    ``instance_types`` instead. Default: None."""
    machine_image_ids: dict[str, str] | None = None
    """Region -> the ID of an AMI built from the ECS-optimized Amazon Linux 2023 GPU AMI with the task images already
    pulled (docs/scaling-and-alarms.md, "An AMI with the images"): a new instance starts its tasks without pulling
    them (ECS_IMAGE_PULL_BEHAVIOR=prefer-cached). Default: None (the ECS-optimized GPU AMI, from its SSM
    parameter)."""
    warm_pool: WarmPoolProps | None = None
    """Stopped instances that booted once and pulled the task images, started on a scale-out instead of launching a
    new one (:class:`~.warm_pool_props.WarmPoolProps`; docs/scaling-and-alarms.md, "A warm pool"). Default: None (no
    pool)."""

    def __post_init__(self) -> None:
        require(
            self.instance_weights is None,
            "instance_weights",
            "ECS capacity providers do not support instance weighting; list types of one shape in priority order in "
            "instance_types instead",
        )
        check_group_bounds(self, "GPU", volume_hint=" (CUDA images need room: 100 or more is sensible)")
        if self.machine_image_ids is not None:
            require(
                bool(self.machine_image_ids),
                "machine_image_ids",
                "is empty: give region -> AMI ID, or leave it out for the ECS-optimized GPU AMI",
            )
            for region, image_id in self.machine_image_ids.items():
                require(
                    bool(re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", region)),
                    f"machine_image_ids.{region}",
                    "is not a region name such as us-east-1",
                )
                require(
                    bool(re.fullmatch(r"ami-([0-9a-f]{8}|[0-9a-f]{17})", image_id)),
                    f"machine_image_ids.{region}",
                    f"{image_id!r} is not an AMI ID (ami- and 8 or 17 hex digits)",
                )
        if self.warm_pool is not None:
            require(
                self.warm_pool.min_size <= self.max_capacity,
                "warm_pool.min_size",
                f"{self.warm_pool.min_size} is greater than max_capacity {self.max_capacity}; keep at most as many "
                "stopped instances as the group may run",
            )

    def resolve_instance_types(self) -> list[GpuInstanceType]:
        """The catalog entries, in priority order, checked for one shape (the region:
        :func:`~.instance_regions.region_warning`)."""
        return resolve_one_shape(self.instance_types, lookup, "g5.xlarge and g4dn.xlarge")

    def smallest_instance_type(self) -> GpuInstanceType:
        """The type a task must fit on: the least memory, then the fewest vCPUs."""
        return min(self.resolve_instance_types(), key=lambda t: (t.memory_gib, t.vcpus))


class CapacityGroupProps(Protocol):
    """What a capacity group's Auto Scaling group, launch template and capacity provider read from its props
    (GpuCapacityProps, NeuronCapacityProps)."""

    @property
    def instance_types(self) -> tuple[str, ...]: ...
    @property
    def on_demand_base_capacity(self) -> int: ...
    @property
    def on_demand_percentage_above_base(self) -> int: ...
    @property
    def min_capacity(self) -> int: ...
    @property
    def max_capacity(self) -> int: ...
    @property
    def target_capacity_percent(self) -> int: ...
    @property
    def root_volume_gib(self) -> int: ...
    @property
    def root_volume_throughput_mib_s(self) -> int: ...
    @property
    def managed_termination_protection(self) -> bool: ...
    @property
    def instance_warmup_seconds(self) -> int: ...
    @property
    def warm_pool(self) -> WarmPoolProps | None: ...


def launches_spot(props: CapacityGroupProps) -> bool:
    """Whether a group of ``props`` may hold Spot instances: some On-Demand share above the base below 100 % and room
    above the base (EC2 Auto Scaling's instances distribution)."""
    return props.on_demand_percentage_above_base < 100 and props.max_capacity > props.on_demand_base_capacity


def check_group_bounds(props: CapacityGroupProps, kind: str, *, volume_hint: str) -> None:
    """The checks every capacity group's props share: its types listed once each (at most 20), the Spot mix, the bounds,
    the root volume and the warm-up."""
    require(
        len(props.instance_types) >= 1, "instance_types", f"list at least one {kind} instance type, preferred first"
    )
    require(
        len(set(props.instance_types)) == len(props.instance_types),
        "instance_types",
        f"{list(props.instance_types)} repeats a type",
    )
    require(len(props.instance_types) <= 20, "instance_types", "a mixed-instances policy takes at most 20 overrides")
    require(
        0 <= props.on_demand_base_capacity,
        "on_demand_base_capacity",
        f"{props.on_demand_base_capacity} must be 0 or more",
    )
    require_range(
        props.on_demand_percentage_above_base,
        0,
        100,
        "on_demand_percentage_above_base",
        hint=" (0 = all Spot above the base)",
    )
    require(0 <= props.min_capacity, "min_capacity", f"{props.min_capacity} must be 0 or more")
    require(
        props.min_capacity <= props.max_capacity,
        "min_capacity",
        f"{props.min_capacity} is greater than max_capacity {props.max_capacity}; min must be <= max",
    )
    require(props.max_capacity >= 1, "max_capacity", f"{props.max_capacity} must be at least 1")
    require(
        props.on_demand_base_capacity <= props.max_capacity,
        "on_demand_base_capacity",
        f"{props.on_demand_base_capacity} is greater than max_capacity {props.max_capacity}; "
        "the base must fit in the group",
    )
    require_range(props.target_capacity_percent, 1, 100, "target_capacity_percent")
    require_range(props.root_volume_gib, 30, 16384, "root_volume_gib", hint=volume_hint)
    require_range(
        props.root_volume_throughput_mib_s,
        125,
        1000,
        "root_volume_throughput_mib_s",
        hint=" (gp3: 125 MiB/s included, up to 1000 provisioned)",
    )
    require_range(props.instance_warmup_seconds, 0, 10000, "instance_warmup_seconds")


def resolve_one_shape(
    names: tuple[str, ...], lookup_type: Callable[[str, str], GpuInstanceType], example: str
) -> list[GpuInstanceType]:
    """The catalog entries of ``names`` (``lookup_type`` refuses what the group cannot launch), in priority order,
    all of one shape; ``example``: two types of one shape, for the fix."""
    types = [lookup_type(name, f"instance_types[{index}]") for index, name in enumerate(names)]
    first = types[0]
    for index, other in enumerate(types[1:], start=1):
        if other.shape != first.shape:
            raise ConfigError(
                f"instance_types[{index}]",
                f"{other.name} has shape {_shape(other)} but {first.name} has {_shape(first)}; every type must have "
                "the same vCPUs, memory and GPUs (managed scaling sizes from the smallest type and capacity "
                f"providers allow no weights); pick the same size in each family, e.g. {example}",
            )
    return types


def _shape(instance_type: GpuInstanceType) -> str:
    return f"({instance_type.vcpus} vCPU, {instance_type.memory_gib} GiB, {instance_type.gpus} GPU)"
