"""A model pool's own settings: how often its tasks read the registry, the memory budgets of its load-on-demand tiers,
the thresholds of its pool alarms, and (for documentation only) the models it is expected to serve. The pool's
name, capacity, scaling and rollout are a ModelProps like any model's (the pool is one service); which models it
serves, and at which version, is its registry in the model store (``pools/<pool>/registry.json``), never a
synth-time input: a pool of 10 models and one of 1,000 synthesize to the same resources."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .errors import require, require_range
from .model_props import MODEL_NAME

# Where pools live in the model store: ``pools/<pool>/registry.json`` and ``pools/<pool>/models/<model>/<version>/``.
POOLS_PREFIX = "pools"
REGISTRY_FILE = "registry.json"
# A pool's ModelProps.version unless its entry names one: the pool's models' versions are in its registry.
DEFAULT_POOL_VERSION = "pool"


@dataclass(frozen=True)
class PoolAlarmProps:
    """Where a pool's own alarms trip: on the pool's metrics (one set per pool, whatever its model count)."""

    hit_rate_percent: float = 90.0
    """Requests answered by a model already on the GPU, in percent: below this for 15 minutes alarms (the pool
    thrashes: raise its GPU budget or tasks, or split it). Default: 90."""
    loads_per_minute: int = 120
    """Model loads per minute (all tasks): at or above this for 15 minutes alarms. Default: 120."""
    load_time_p95_ms: int = 10_000
    """p95 of one model load in ms: at or above this for 15 minutes alarms (slow S3 or disk tier). Default: 10000."""
    evictions_per_minute: int = 60
    """Evictions per minute (all tasks): at or above this for 15 minutes alarms. Default: 60."""
    resident_models: int = 1_000
    """Models resident on one task's GPU: at or above this for 15 minutes alarms (more than the pool was sized to
    hold; check the GPU budget against the sizing). Default: 1000."""
    failed_loads_per_5_minutes: int = 1
    """Failed model loads in 5 minutes (all tasks): at or above this alarms (a registered version that does not load
    or fails its manifest or probe check; the previous version keeps serving). Default: 1."""

    def __post_init__(self) -> None:
        require_range(self.hit_rate_percent, 1, 100, "hit_rate_percent")
        require_range(self.loads_per_minute, 1, 1_000_000, "loads_per_minute")
        require_range(self.load_time_p95_ms, 1, 3_600_000, "load_time_p95_ms")
        require_range(self.evictions_per_minute, 1, 1_000_000, "evictions_per_minute")
        require_range(self.resident_models, 1, 1_000_000, "resident_models")
        require_range(self.failed_loads_per_5_minutes, 1, 1_000_000, "failed_loads_per_5_minutes")


@dataclass(frozen=True)
class PoolProps:
    """What makes a model service a pool (cdk.json: a ``models[]`` entry's ``pool`` block)."""

    registry_poll_seconds: int = 10
    """How often each task reads the pool's registry: a change reaches every task within this plus one S3 read.
    Default: 10."""
    gpu_memory_budget_mib: int | None = None
    """GPU memory the pool keeps models in (weights plus each model's batch plan). Default: None (the task's
    ``gpu_share.memory_mib``, else the smallest GPU's memory, less 10 % for the CUDA context and allocator)."""
    host_memory_budget_mib: int | None = None
    """Host memory that keeps evicted models for a fast reload. Default: None (half the task's ``memory_mib``)."""
    disk_cache_mib: int = 20_480
    """Local disk cache of downloaded models, on the task's scratch volume. Default: 20480."""
    alarms: PoolAlarmProps = field(default_factory=PoolAlarmProps)
    """The pool alarms' thresholds. Default: PoolAlarmProps()."""
    registered_models: tuple[str, ...] = ()
    """Documentation only: the models this pool is expected to serve (its registry says which it does). Checked as
    model names; never a resource, so the list may grow without a template change. Default: empty."""

    def __post_init__(self) -> None:
        require_range(self.registry_poll_seconds, 1, 300, "registry_poll_seconds")
        if self.gpu_memory_budget_mib is not None:
            require_range(self.gpu_memory_budget_mib, 256, 1_048_576, "gpu_memory_budget_mib")
        if self.host_memory_budget_mib is not None:
            require_range(self.host_memory_budget_mib, 0, 4_194_304, "host_memory_budget_mib")
        require_range(self.disk_cache_mib, 0, 10_485_760, "disk_cache_mib")
        for index, name in enumerate(self.registered_models):
            require(
                isinstance(name, str) and bool(MODEL_NAME.match(name)),
                f"registered_models[{index}]",
                f"{name!r} is not a model name: 2-40 lowercase letters, digits and '-', starting with a letter",
            )
        duplicates = sorted(name for name, count in Counter(self.registered_models).items() if count > 1)
        require(not duplicates, "registered_models", f"{duplicates} are listed twice; list each model once")

    def host_budget_mib(self, task_memory_mib: int) -> int:
        return self.host_memory_budget_mib if self.host_memory_budget_mib is not None else task_memory_mib // 2


def pool_prefix(pool_name: str) -> str:
    """``pools/<pool>/``: everything the pool's tasks may read (its registry and its models)."""
    return f"{POOLS_PREFIX}/{pool_name}/"
