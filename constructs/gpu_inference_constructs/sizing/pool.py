"""Many sparse models in one pool (ModelPool): tasks that each hold as many models as their GPU budget takes, load
the others on demand, and are paid by the traffic, not by the model count.

``python -m gpu_inference_constructs.sizing pool MODELS.json [--popularity zipf:1.1|given] [--affinity]
[--instance-types t1,t2] [--region R] [--json]`` (MODELS.json as ``sizing pack`` reads it).

Per candidate type (one pool task per GPU), from the single-model advisor's own figures for each model (``advise``):

- GPU budget of a task = the GPU's usable memory (the advisor's, less --vram-headroom) less one CUDA context
  (CUDA_CONTEXT_MIB), the cuBLAS workspaces and the largest model's batch plan (activations; one forward runs at a
  time in the pool's one model process), with the allocator's reserve (ALLOCATOR_RESERVE) on it; each resident model
  takes its weights plus that reserve. Host tier = what a task may reserve on the instance less the server's
  processes and CUDA's host side (SERVER_PROCESSES_MIB, CUDA_HOST_MIB); each model there takes its weights.
- Hit rate: Che's approximation of an LRU cache (Che, Tung and Wang, IEEE JSAC 20(7), 2002; Fricker, Robert and
  Roberts, ITC 2012, for its accuracy) of that many models under the popularity: ``given`` (each model's share of
  requests as MODELS.json says) or ``zipf:S`` (ranked Zipf(S) with the same total: the issue's benchmark traffic,
  for a catalogue whose per-model rates are averages of bursty use). Without ``--affinity`` every task caches from
  every model (the load balancer's least-outstanding routing); with it each task holds its own share of the models
  (the models split over pools of one task each, docs/configuration.md), one cache of tasks x models in all.
- Load times (assumptions, printed): from host memory, weights / (PCIE_GB_PER_S x efficiency) + LOAD_OVERHEAD_MS;
  from local disk, weights / DISK_MB_PER_S more. Loads use the GPU's copy engines, not its SMs: a task is sized so
  that its GPU compute (hits / the advisor's requests per second), its PCIe link (loads x weights) and its disk
  each stay at most the advisor's target utilisation.
- Tasks: the fewest from --min-tasks (2: one per AZ) that hold those limits; instances = tasks / GPUs per instance,
  rounded up; USD per 1M requests = instances x hourly price / (requests per second x 3600) x 1e6, On-Demand and Spot.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from ..core.errors import ConfigError, require
from ..core.instance_catalog import GpuInstanceType
from .advisor import TypeAdvice, advise
from .candidates import candidate_types
from .pack_figures import ALLOCATOR_RESERVE, CUBLAS_WORKSPACE_MIB, CUDA_CONTEXT_MIB, CUDA_HOST_MIB, SERVER_PROCESSES_MIB
from .pack_models import PackModel
from .workload import Assumptions, Purchase

PCIE_GB_PER_S = (
    15.75  # PCIe 3.0 x16, the T4's and A10G's host link, per direction (PCI-SIG: 8 GT/s x 16 lanes, 128b/130b)
)
DISK_MB_PER_S = (
    125.0  # gp3's baseline throughput (Amazon EBS volume types): the task's scratch volume is on the root volume
)
LOAD_OVERHEAD_MS = (
    5.0  # building the module and its tokenizer around weights already in memory: estimated, not measured
)
MAX_TASKS = 100
# Above this share of misses a request's p95 includes a load.
P95_MISS_SHARE = 0.05


@dataclass(frozen=True)
class PoolAssumptions:
    """The pool's own modelling choices, printed with every figure."""

    popularity: str = "zipf:1.1"
    """``given`` (MODELS.json's rates) or ``zipf:S`` (ranked Zipf(S) over the models, the same total).
    Default: zipf:1.1."""
    affinity: bool = False
    """Each task holds its own share of the models (a pool per task), not a cache of all of them. Default: False."""
    min_tasks: int = 2
    """Fewest tasks (one per Availability Zone). Default: 2."""

    def __post_init__(self) -> None:
        require(
            self.popularity == "given" or _zipf_exponent(self.popularity) is not None,
            "--popularity",
            f"{self.popularity!r}: 'given', or 'zipf:S' with S above 0 such as zipf:1.1",
        )
        require(1 <= self.min_tasks <= MAX_TASKS, "--min-tasks", f"{self.min_tasks}: 1 to {MAX_TASKS}")


def _zipf_exponent(popularity: str) -> float | None:
    name, _, value = popularity.partition(":")
    try:
        exponent = float(value)
    except ValueError:
        return None
    return exponent if name == "zipf" and exponent > 0 else None


@dataclass
class PoolPlan:
    """One candidate type's pool: how many tasks and instances, what each task holds, the hit rate and the price."""

    instance_type: str
    fits: bool
    reason: str = ""
    tasks: int = 0
    instances: int = 0
    gpu_models_per_task: int = 0
    host_models_per_task: int = 0
    hit_rate: float = 0.0
    """Requests whose model is on the GPU."""
    host_rate: float = 0.0
    """Requests whose model is reloaded from host memory."""
    disk_rate: float = 0.0
    """Requests whose model is read from local disk (or, the first time, S3)."""
    load_ms: dict[str, float] = field(default_factory=dict)
    """One load's time from each tier (host, disk)."""
    utilization: dict[str, float] = field(default_factory=dict)
    """One task's busiest share of its GPU compute, PCIe link and disk."""
    p95_ms_estimate: float | None = None
    hourly_usd: dict[str, float] = field(default_factory=dict)
    usd_per_million_requests: dict[str, float] = field(default_factory=dict)


def popularity(models: list[PackModel], assumptions: PoolAssumptions) -> list[float]:
    """Each model's share of requests, in the models' order."""
    rates = [m.workload.requests_per_second for m in models]
    total = sum(rates)
    exponent = _zipf_exponent(assumptions.popularity)
    if exponent is None:
        return [rate / total for rate in rates]
    ranked = sorted(range(len(models)), key=lambda i: (-rates[i], models[i].name))
    weights = [0.0] * len(models)
    for rank, index in enumerate(ranked, start=1):
        weights[index] = rank**-exponent
    norm = sum(weights)
    return [w / norm for w in weights]


def lru_hit_rate(shares: list[float], capacity: int) -> float:
    """Che's approximation: the characteristic time T at which ``capacity`` models are expected to be resident,
    sum(1 - exp(-p T)) = capacity; a request hits with probability sum(p (1 - exp(-p T)))."""
    if capacity >= len(shares):
        return 1.0
    if capacity <= 0:
        return 0.0
    low, high = 0.0, 1.0
    while sum(1 - math.exp(-p * high) for p in shares) < capacity:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        if sum(1 - math.exp(-p * middle) for p in shares) < capacity:
            low = middle
        else:
            high = middle
    return sum(p * (1 - math.exp(-p * high)) for p in shares)


def plan_type(
    instance: GpuInstanceType,
    models: list[PackModel],
    advice: dict[str, TypeAdvice],
    purchase: Purchase,
    assumptions: Assumptions,
    pool: PoolAssumptions,
) -> PoolPlan:
    """The fewest tasks of ``instance`` that serve ``models`` as one pool within the target utilisation."""
    name = instance.name
    found = [advice[m.name] for m in models]
    unfit = next(
        (
            a
            for a in found
            if a.memory is None or a.throughput is None or a.throughput.requests_per_second is None or not a.fits
        ),
        None,
    )
    if unfit is not None:
        return PoolPlan(name, False, f"a model does not fit or has no throughput estimate here: {unfit.reason}")
    weights = [a.memory.weights_gib * 1024 for a in found if a.memory is not None]
    mean_weights = sum(weights) / len(weights)
    plans = [(a.memory.activations_gib or 0) * 1024 for a in found if a.memory is not None]
    reserve = 1 + ALLOCATOR_RESERVE.value
    usable = found[0].memory.usable_gib * 1024 if found[0].memory is not None else 0.0
    budget = usable - CUDA_CONTEXT_MIB.value - CUBLAS_WORKSPACE_MIB.value - max(plans) * reserve
    gpu_models = int(budget // (mean_weights * reserve))
    host_models = int(
        max(0.0, instance.task_memory_limit_mib - SERVER_PROCESSES_MIB.value - CUDA_HOST_MIB.value) // mean_weights
    )
    if gpu_models < 1:
        return PoolPlan(
            name, False, f"no model fits the GPU budget ({budget:.0f} MiB after the context and batch plan)"
        )
    shares = popularity(models, pool)
    total_rps = sum(m.workload.requests_per_second for m in models)
    # requests per second a task's GPU sustains, weighted by what each model asks
    seconds_per_request = sum(
        p / a.throughput.requests_per_second
        for p, a in zip(shares, found, strict=True)
        if a.throughput is not None and a.throughput.requests_per_second
    )
    pcie = PCIE_GB_PER_S * assumptions.efficiency * 1000  # MB/s
    host_ms = mean_weights * 1.048576 / pcie * 1000 + LOAD_OVERHEAD_MS
    disk_ms = mean_weights * 1.048576 / DISK_MB_PER_S * 1000 + host_ms
    target = assumptions.target_utilization
    shared_hit = (
        None if pool.affinity else (lru_hit_rate(shares, gpu_models), lru_hit_rate(shares, gpu_models + host_models))
    )
    for tasks in range(pool.min_tasks, MAX_TASKS + 1):
        hit, in_memory = shared_hit or (
            lru_hit_rate(shares, gpu_models * tasks),
            lru_hit_rate(shares, (gpu_models + host_models) * tasks),
        )
        per_task = total_rps / tasks
        busy = {
            "gpu": per_task * seconds_per_request,
            "pcie": per_task * (1 - hit) * (host_ms - LOAD_OVERHEAD_MS) / 1000,
            "disk": per_task * (1 - in_memory) * (disk_ms - host_ms) / 1000,
        }
        if max(busy.values()) <= target:
            break
    else:
        return PoolPlan(
            name,
            False,
            f"{MAX_TASKS} tasks do not keep GPU, PCIe and disk under {target:.0%}: the "
            "models' working set is larger than the pool's tiers; raise the share on the GPU "
            "(--affinity), or serve the busiest models as their own services",
        )
    instances = math.ceil(tasks / instance.gpus)
    price = found[0].price_usd
    hourly = {"on_demand": instances * price, "spot": instances * price * purchase.spot_fraction}
    pass_ms = max((a.throughput.p95_ms_estimate or 0) for a in found if a.throughput is not None)
    misses = 1 - hit
    p95 = pass_ms + (disk_ms if 1 - in_memory > P95_MISS_SHARE else host_ms if misses > P95_MISS_SHARE else 0.0)
    return PoolPlan(
        name,
        True,
        tasks=tasks,
        instances=instances,
        gpu_models_per_task=gpu_models,
        host_models_per_task=host_models,
        hit_rate=hit,
        host_rate=in_memory - hit,
        disk_rate=1 - in_memory,
        load_ms={"host": host_ms, "disk": disk_ms},
        utilization=busy,
        p95_ms_estimate=p95,
        hourly_usd=hourly,
        usd_per_million_requests={k: v / (total_rps * 3600) * 1e6 for k, v in hourly.items()},
    )


def _shape_key(model: PackModel) -> tuple:
    """What the single-model advisor's memory and throughput depend on: not the model's name or rate."""
    return (model.shape, replace(model.workload, requests_per_second=1.0))


def plan_pool(
    models: list[PackModel],
    purchase: Purchase,
    assumptions: Assumptions | None = None,
    pool: PoolAssumptions | None = None,
    only: list[str] | None = None,
) -> list[PoolPlan]:
    """One PoolPlan per candidate type, cheapest On-Demand first (those that cannot hold the pool last)."""
    assumptions, pool = assumptions or Assumptions(), pool or PoolAssumptions()
    if not models:
        raise ConfigError("models", "the list is empty: give the pool's models")
    types = candidate_types(purchase, only)
    names = [t.name for t in types]
    by_shape: dict[tuple, dict[str, TypeAdvice]] = {}
    for model in models:
        key = _shape_key(model)
        if key not in by_shape:
            by_shape[key] = {a.name: a for a in advise(model.shape, model.workload, purchase, assumptions, only=names)}
    plans = [
        plan_type(t, models, {m.name: by_shape[_shape_key(m)][t.name] for m in models}, purchase, assumptions, pool)
        for t in types
    ]
    plans.sort(key=lambda p: (not p.fits, p.usd_per_million_requests.get("on_demand", math.inf), p.instance_type))
    return plans


def pool_assumptions_text(pool: PoolAssumptions, assumptions: Assumptions) -> list[str]:
    routing = (
        "each task holds its own share of the models (--affinity: a pool per task)"
        if pool.affinity
        else "every task caches from every model (the load balancer's least-outstanding routing; --affinity to split)"
    )
    return [
        f"popularity: {pool.popularity} "
        f"({'MODELS.json rates' if pool.popularity == 'given' else 'ranked by MODELS.json rates, same total'})",
        f"routing: {routing}; at least {pool.min_tasks} tasks",
        f"hit rate: Che's approximation of LRU over the tasks' GPU budgets (weights + {ALLOCATOR_RESERVE.value:.0%} "
        "allocator reserve per model; one CUDA context and one batch plan per task)",
        f"load from host memory: weights / ({PCIE_GB_PER_S} GB/s PCIe x {assumptions.efficiency} efficiency) + "
        f"{LOAD_OVERHEAD_MS:g} ms (estimated); from local disk: weights / {DISK_MB_PER_S:g} MB/s (gp3 baseline) more",
        f"tasks keep GPU compute, PCIe and disk each at most {assumptions.target_utilization:.0%} busy",
    ]


def pool_table(plans: list[PoolPlan], models: list[PackModel], pool: PoolAssumptions, assumptions: Assumptions) -> str:
    total = sum(m.workload.requests_per_second for m in models)
    lines = [f"A pool of {len(models)} models, {total:,.0f} requests/s in all (ModelPool: one service, one rule):", ""]
    lines.append(
        f"{'type':<14}{'tasks':>6}{'inst':>6}{'on GPU':>8}{'in host':>8}{'hit':>8}{'host':>7}{'disk':>7}"
        f"{'p95 ms':>8}{'$/h OD':>9}{'$/1M OD':>9}{'$/1M Spot':>10}"
    )
    for plan in plans:
        if not plan.fits:
            lines.append(f"{plan.instance_type:<14}  cannot: {plan.reason}")
            continue
        lines.append(
            f"{plan.instance_type:<14}{plan.tasks:>6}{plan.instances:>6}{plan.gpu_models_per_task:>8}"
            f"{plan.host_models_per_task:>8}{plan.hit_rate:>8.1%}{plan.host_rate:>7.1%}{plan.disk_rate:>7.1%}"
            f"{plan.p95_ms_estimate or 0:>8.0f}{plan.hourly_usd['on_demand']:>9.3f}"
            f"{plan.usd_per_million_requests['on_demand']:>9.3f}{plan.usd_per_million_requests['spot']:>10.3f}"
        )
    lines += ["", "Assumptions (not measurements; make bench-pool measures hit rates and load times on a CPU):"]
    lines += [f"  - {text}" for text in pool_assumptions_text(pool, assumptions)]
    return "\n".join(lines)


def pool_json(plans: list[PoolPlan], pool: PoolAssumptions, assumptions: Assumptions) -> dict:
    return {
        "assumptions": {**asdict(pool), "text": pool_assumptions_text(pool, assumptions)},
        "types": [asdict(plan) for plan in plans],
    }


# ``sizing pack`` weighs a pool from this many models on.
POOL_HINT_MODELS = 20


def pool_note(
    models: list[PackModel],
    purchase: Purchase,
    assumptions: Assumptions,
    instance_type: str,
    shared_usd_per_million: float,
) -> str | None:
    """What ``sizing pack`` says of a pool of ``models`` on ``instance_type`` where it costs less per request than the
    packing's ``shared_usd_per_million`` (many sparse models), with and without affinity; None otherwise."""
    if len(models) < POOL_HINT_MODELS:
        return None
    figures = []
    for affinity in (False, True):
        pool = PoolAssumptions(affinity=affinity)
        (plan,) = plan_pool(models, purchase, assumptions, pool, only=[instance_type])
        if plan.fits and plan.usd_per_million_requests["on_demand"] < shared_usd_per_million:
            figures.append(
                f"{plan.tasks} x {instance_type}, ${plan.usd_per_million_requests['on_demand']:.3f} per 1M "
                f"On-Demand at a {plan.hit_rate:.1%} hit rate{' with --affinity' if affinity else ''}"
            )
    if not figures:
        return None
    return (
        f"{len(models)} models: a pool (ModelPool, one service for all) would serve them on "
        + "; or ".join(figures)
        + f" (popularity {PoolAssumptions.popularity} and the load times assumed there): python -m "
        "gpu_inference_constructs.sizing pool MODELS.json prints every assumption"
    )
