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

    # Instances the pool always keeps (the warm pool's MinSize). Default 1.
    min_size: int = 1
    # Instances allowed in the group and the pool together (MaxGroupPreparedCapacity): the pool is this less the
    # group's desired capacity, and at least min_size. Default None: min_size, a pool of exactly min_size instances
    # ("Only when MaxGroupPreparedCapacity and MinSize are set to the same value does the warm pool have an absolute
    # size", PutWarmPool API reference).
    max_group_prepared_capacity: int | None = None
    # The state a pooled instance waits in. Default "Stopped": only its EBS volumes cost money. "Running" keeps it
    # running (the instance's full price, a few seconds faster). "Hibernated" is refused: it needs the launch
    # template's hibernation options and a root volume that holds the RAM, which this group does not configure.
    pool_state: str = "Stopped"
    # Seconds a new instance has to boot and pull the task images before Auto Scaling stops it into the pool: the launch
    # hook's heartbeat timeout (30-7200 s, PutLifecycleHook). Default 600: the boot (60 s, estimated) and an 8 GB
    # CUDA image at 60 MB/s (133 s, estimated), four times over. Each warming runs the instance this long, On-Demand.
    prepare_seconds: int = 600
    # Refused when true: "you cannot set the option that returns instances to the warm pool on scale in
    # (ReuseOnScaleIn)" for a group of an ECS capacity provider (ECS developer guide, using-warm-pool). Default False.
    reuse_on_scale_in: bool = False

    def __post_init__(self) -> None:
        require(self.min_size >= 1, "min_size", f"{self.min_size} must be at least 1 (a pool of none is no pool: leave "
                                                "warm_pool out)")
        if self.max_group_prepared_capacity is not None:
            require(self.max_group_prepared_capacity >= self.min_size, "max_group_prepared_capacity",
                    f"{self.max_group_prepared_capacity} is below min_size {self.min_size}; give at least min_size, or "
                    "leave it out for a pool of exactly min_size")
        require(self.pool_state in POOL_STATES, "pool_state",
                f"{self.pool_state!r} is not allowed; use 'Stopped' (EBS only) or 'Running'"
                + (" (Hibernated needs the launch template's hibernation options and a root volume that holds the "
                   "instance's RAM, which this group does not configure)" if self.pool_state == "Hibernated" else ""))
        require_range(self.prepare_seconds, 60, 7200, "prepare_seconds",
                      hint=" (the launch hook's heartbeat: boot and pull the images within it)")
        require(not self.reuse_on_scale_in, "reuse_on_scale_in",
                "is not allowed on an ECS capacity provider's group (ECS developer guide: a warm pool for ECS cannot "
                "return instances on scale in); remove it: a scaled-in instance is terminated and the pool refills")

    @property
    def prepared_capacity(self) -> int:
        return self.min_size if self.max_group_prepared_capacity is None else self.max_group_prepared_capacity
