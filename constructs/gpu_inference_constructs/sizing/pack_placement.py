"""The models' shares placed on one instance type: first-fit decreasing onto the fewest instances, then spread as
ECS places tasks, and each instance's price split across its tasks."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.gpu_share import shareable_memory_mib
from ..core.instance_catalog import GpuInstanceType
from ..core.model_props import AGENT_RESERVED_CPU
from ..servers.bundled import BundledServer
from .advisor import TypeAdvice
from .pack_figures import MPS_CLIENTS_PER_GPU
from .pack_models import PackModel
from .pack_shares import Refusal, Share, share_on
from .workload import Assumptions, Purchase


@dataclass
class Placed:
    share: Share
    task: int  # 0 .. tasks - 1


@dataclass
class Instance:
    gpus: list[list[Placed]]

    @property
    def tasks(self) -> list[Placed]:
        return [p for gpu in self.gpus for p in gpu]


@dataclass
class TypePack:
    """One candidate type: whether the models pack onto it, onto how many instances, and what each model then costs."""

    instance_type: GpuInstanceType
    price_usd: float
    price_source: str
    gpu_budget_mib: int
    cpu_budget: int
    memory_budget_mib: int
    sidecars: tuple[int, int] = (0, 0)
    """(CPU units, MiB) each task reserves beside its server (the bundled server's collector). Default: none."""
    refusals: dict[str, Refusal] = field(default_factory=dict)
    """Model name -> why it has no share on this type. Default: empty (every model has one)."""
    shares: list[Share] = field(default_factory=list)
    """Each model's share here. Default: empty (until packed; also when a model is refused)."""
    instances: list[Instance] = field(default_factory=list)
    """The instances and what each GPU holds. Default: empty (until packed)."""
    placement: str = ""
    """"spread" (as ECS places) or "first-fit". Default: "" (not packed)."""
    hourly_usd: dict[str, float] = field(default_factory=dict)
    """The instances' USD per hour, on_demand and spot. Default: empty (not priced)."""
    model_hourly_usd: dict[str, dict[str, float]] = field(default_factory=dict)
    """Model name -> its tasks' share of the hourly price. Default: empty (not priced)."""
    usd_per_million_requests: dict[str, dict[str, float]] = field(default_factory=dict)
    """Model name -> USD per 1M requests, on_demand and spot. Default: empty (not priced)."""

    @property
    def name(self) -> str:
        return self.instance_type.name

    @property
    def fits(self) -> bool:
        return not self.refusals

    @property
    def reason(self) -> str:
        return "; ".join(f"{name!r}: {r.text}" for name, r in self.refusals.items())

    @property
    def dedicated_hourly_usd(self) -> dict[str, float]:
        return {k: sum(s.advice.hourly_usd.get(k, 0.0) for s in self.shares) for k in ("on_demand", "spot")}


def pack_type(
    instance: GpuInstanceType,
    models: list[PackModel],
    advice: dict[str, dict[str, TypeAdvice]],
    purchase: Purchase,
    assumptions: Assumptions,
) -> TypePack:
    first = advice[models[0].name][instance.name]
    gpu_budget = int(
        shareable_memory_mib(instance.gpu_model, instance.gpu_memory_gib) * (1 - assumptions.vram_headroom)
    )
    sidecar_cpu, sidecar_memory = BundledServer().sidecar_reservation
    result = TypePack(
        instance,
        first.price_usd,
        first.price_source,
        gpu_budget,
        instance.task_cpu_limit_units - AGENT_RESERVED_CPU,
        instance.task_memory_limit_mib,
        (sidecar_cpu, sidecar_memory),
    )
    for model in models:
        share = share_on(model, advice[model.name][instance.name], instance, gpu_budget, assumptions)
        if isinstance(share, Refusal):
            result.refusals[model.name] = share
            continue
        cpu, memory = share.cpu + sidecar_cpu, share.task_memory_mib + sidecar_memory
        if cpu > result.cpu_budget or memory > result.memory_budget_mib:
            result.refusals[model.name] = Refusal(
                "task",
                f"one task ({cpu} CPU units, {memory} MiB with its sidecars) is more than a task may reserve on "
                f"{instance.name} ({result.cpu_budget} units, {result.memory_budget_mib} MiB): give it a smaller "
                "cpu or memory_mib",
            )
            continue
        result.shares.append(share)
    if result.refusals:
        result.shares = []
        return result
    tasks = [Placed(s, t) for s in result.shares for t in range(s.tasks)]
    tasks.sort(
        key=lambda p: (
            -p.share.memory_mib,
            -p.share.compute_percent,
            -p.share.cpu,
            -p.share.task_memory_mib,
            p.share.name,
            p.task,
        )
    )
    placed = _first_fit(tasks, result)
    spread = _spread(tasks, result, len(placed))
    result.instances, result.placement = (spread, "spread") if spread is not None else (placed, "first-fit")
    _price(result, purchase)
    return result


def _fits(instance: Instance, gpu: int, task: Placed, result: TypePack) -> bool:
    on_gpu = instance.gpus[gpu]
    everyone = instance.tasks
    tasks = len(everyone) + 1  # each with its sidecars
    return (
        sum(p.share.memory_mib for p in on_gpu) + task.share.memory_mib <= result.gpu_budget_mib
        and sum(p.share.compute_percent for p in on_gpu) + task.share.compute_percent <= 100
        and len(on_gpu) < MPS_CLIENTS_PER_GPU.value
        and sum(p.share.cpu for p in everyone) + task.share.cpu + tasks * result.sidecars[0] <= result.cpu_budget
        and sum(p.share.task_memory_mib for p in everyone) + task.share.task_memory_mib + tasks * result.sidecars[1]
        <= result.memory_budget_mib
    )


def _empty(result: TypePack) -> Instance:
    return Instance([[] for _ in range(result.instance_type.gpus)])


def _first_fit(tasks: list[Placed], result: TypePack) -> list[Instance]:
    """First-fit decreasing: each task onto the first instance and GPU that holds it, else a new instance."""
    instances: list[Instance] = []
    for task in tasks:
        spot = next(((i, g) for i in instances for g in range(len(i.gpus)) if _fits(i, g, task, result)), None)
        if spot is None:
            instances.append(_empty(result))
            spot = (instances[-1], 0)
            assert _fits(*spot, task, result)  # one task fits an empty instance: checked by _pack_type
        spot[0].gpus[spot[1]].append(task)
    return instances


def _spread(tasks: list[Placed], result: TypePack, count: int) -> list[Instance] | None:
    """The same tasks on ``count`` instances as ECS spreads them: largest first onto the instance with the fewest tasks
    (then the lowest), on its GPU with the most free memory; None if one does not fit there."""
    instances = [_empty(result) for _ in range(count)]
    for task in tasks:
        for instance in sorted(instances, key=lambda i: len(i.tasks)):
            gpus = sorted(range(len(instance.gpus)), key=lambda g: sum(p.share.memory_mib for p in instance.gpus[g]))
            gpu = next((g for g in gpus if _fits(instance, g, task, result)), None)
            if gpu is not None:
                instance.gpus[gpu].append(task)
                break
        else:
            return None
    return instances


def task_weight(placed: Placed, result: TypePack) -> float:
    """A task's claim on its instance: the larger of its GPU memory and compute fractions of the whole instance."""
    gpus = result.instance_type.gpus
    return max(placed.share.memory_mib / (result.gpu_budget_mib * gpus), placed.share.compute_percent / (100 * gpus))


def _price(result: TypePack, purchase: Purchase) -> None:
    spot = result.price_usd * purchase.spot_fraction
    result.hourly_usd = {"on_demand": len(result.instances) * result.price_usd, "spot": len(result.instances) * spot}
    hourly = {s.name: {"on_demand": 0.0, "spot": 0.0} for s in result.shares}
    for instance in result.instances:
        weights = {id(p): task_weight(p, result) for p in instance.tasks}
        total = sum(weights.values())
        for p in instance.tasks:
            hourly[p.share.name]["on_demand"] += result.price_usd * weights[id(p)] / total
            hourly[p.share.name]["spot"] += spot * weights[id(p)] / total
    result.model_hourly_usd = hourly
    for s in result.shares:
        per_hour = s.model.workload.requests_per_second * 3600
        result.usd_per_million_requests[s.name] = {k: v / per_hour * 1e6 for k, v in hourly[s.name].items()}
