"""A warm pool's props (``GpuCapacityProps.warm_pool``): plain data and checks, without aws_cdk, for the constructs
and the sizing advisor alike; the pool itself is warm_pool.py's."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import require, require_range

POOL_STATES = ("Stopped", "Running")


@dataclass(frozen=True)
class WarmPoolProps:
    """A warm pool of stopped, pre-initialized instances beside the group (``GpuCapacityProps.warm_pool``; default
    None: no pool). Each default is the cheapest pool that still serves a scale-out's first instance."""

    min_size: int = 1
    """Instances the pool always keeps (the warm pool's MinSize), 1 or more and at most the group's
    ``max_capacity``. Default: 1."""
    max_group_prepared_capacity: int | None = None
    """Instances allowed in the group and the pool together (MaxGroupPreparedCapacity), at least ``min_size``: the
    pool is this less the group's desired capacity, and at least ``min_size``. Default: None (``min_size``: a pool of
    exactly ``min_size`` instances; "Only when MaxGroupPreparedCapacity and MinSize are set to the same value does
    the warm pool have an absolute size", PutWarmPool API reference)."""
    pool_state: str = "Stopped"
    """The state a pooled instance waits in: "Stopped" (only its EBS volumes cost money) or "Running" (the instance's
    full price, a few seconds faster). "Hibernated" is refused: it needs the launch template's hibernation options and
    a root volume that holds the RAM, which this group does not configure. Default: "Stopped"."""
    prepare_seconds: int = 600
    """Seconds a new instance has to boot and pull the task images before Auto Scaling stops it into the pool: the
    launch hook's heartbeat timeout, 60-7200 (PutLifecycleHook allows 30-7200). Each warming runs the instance this
    long, On-Demand. Default: 600 (the boot, 60 s, and an 8 GB CUDA image at 60 MB/s, 133 s, both estimated, four
    times over)."""
    reuse_on_scale_in: bool = False
    """Refused when true: "you cannot set the option that returns instances to the warm pool on scale in
    (ReuseOnScaleIn)" for a group of an ECS capacity provider (ECS developer guide, using-warm-pool). Default: False."""

    def __post_init__(self) -> None:
        require(
            self.min_size >= 1,
            "min_size",
            f"{self.min_size} must be at least 1 (a pool of none is no pool: leave warm_pool out)",
        )
        if self.max_group_prepared_capacity is not None:
            require(
                self.max_group_prepared_capacity >= self.min_size,
                "max_group_prepared_capacity",
                f"{self.max_group_prepared_capacity} is below min_size {self.min_size}; give at least min_size, or "
                "leave it out for a pool of exactly min_size",
            )
        require(
            self.pool_state in POOL_STATES,
            "pool_state",
            f"{self.pool_state!r} is not allowed; use 'Stopped' (EBS only) or 'Running'"
            + (
                " (Hibernated needs the launch template's hibernation options and a root volume that holds the "
                "instance's RAM, which this group does not configure)"
                if self.pool_state == "Hibernated"
                else ""
            ),
        )
        require_range(
            self.prepare_seconds,
            60,
            7200,
            "prepare_seconds",
            hint=" (the launch hook's heartbeat: boot and pull the images within it)",
        )
        require(
            not self.reuse_on_scale_in,
            "reuse_on_scale_in",
            "is not allowed on an ECS capacity provider's group (ECS developer guide: a warm pool for ECS cannot "
            "return instances on scale in); remove it: a scaled-in instance is terminated and the pool refills",
        )

    @property
    def prepared_capacity(self) -> int:
        return self.min_size if self.max_group_prepared_capacity is None else self.max_group_prepared_capacity
