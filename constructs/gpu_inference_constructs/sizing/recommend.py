"""The recommended ``capacity`` and ``models[]`` blocks for cdk.json, validated by the library's own loader.

Instance types: the cheapest type that fits, then the other fitting, deployable types of the same
shape (vCPUs, memory, GPUs: what an ECS capacity provider requires) in order of cost.
``requests_per_target_per_minute`` comes from the slowest listed type with a known throughput, so a
fallback type is never asked for more than it sustains.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Optional

from ..errors import ConfigError
from ..gpu_capacity import GpuCapacityProps
from ..deployment_capacity import ServiceDeployment, instances_for_deployment_at_peak
from ..model_service import ROLLING_MAX_HEALTHY_PERCENT, ModelProps
from ..settings import from_dict
from .advisor import TypeAdvice
from .model_shape import ModelShape
from .workload import Assumptions, Purchase, Workload

MAX_TASKS = 100  # ModelProps.max_tasks' upper bound
MIN_FALLBACK_SPEED = 0.5  # a fallback type must sustain at least this fraction of the first type's throughput


@dataclass
class Recommendation:
    capacity: dict
    model: dict
    notes: list[str] = field(default_factory=list)


def recommend(advice: list[TypeAdvice], model: ModelShape, workload: Workload, purchase: Purchase,
              assumptions: Assumptions, name: Optional[str] = None, version: str = "1") -> Optional[Recommendation]:
    ranked = [a for a in advice if a.ranked]
    if not ranked:
        return None
    best = ranked[0]
    shape = best.instance_type.shape
    same_shape = [a for a in advice if a.fits and a.deployable and not a.too_slow and a.instance_type.shape == shape
                  and a.gpus_per_task == best.gpus_per_task]
    best_rps = best.throughput.requests_per_second
    chosen = [a for a in same_shape if _rps(a) is None or _rps(a) >= best_rps * MIN_FALLBACK_SPEED][:20]
    dropped = [a.name for a in same_shape if a not in chosen]
    known = [a for a in chosen if a.throughput and a.throughput.requests_per_second]
    slowest = min(known, key=lambda a: a.throughput.requests_per_second)
    per_task = slowest.throughput.requests_per_second
    tasks = max(1, math.ceil(workload.requests_per_second / (per_task * assumptions.target_utilization) - 1e-9))
    notes = [f"fallback types slower than {MIN_FALLBACK_SPEED:.0%} of {best.name}'s throughput left out (they would "
             f"need more tasks than the fleet is sized for): {', '.join(dropped)}"] if dropped else []
    unknown = [a.name for a in chosen if _rps(a) is None]
    if unknown:
        notes.append(f"throughput of {', '.join(unknown)} is not known (no sourced figure, no --measured): measure it "
                     "before relying on it as a fallback")
    max_tasks = min(MAX_TASKS, math.ceil(tasks * assumptions.peak_factor))
    if tasks > MAX_TASKS:
        notes.append(f"{tasks} tasks are needed but a model's max_tasks is at most {MAX_TASKS}: split the traffic over "
                     "several models or environments, or pick a faster type")
        tasks = MAX_TASKS
    per_instance = best.tasks_per_instance
    instance = best.instance_type
    batch = (best.throughput.max_batch_size or workload.max_batch_size) if model.kind == "encoder" else workload.concurrency
    # Room for every task at peak while a rolling deployment runs up to twice them (one GPU share each).
    instances, _ = instances_for_deployment_at_peak(
        [ServiceDeployment.rolling(name or model.name, max_tasks, ROLLING_MAX_HEALTHY_PERCENT)], per_instance
    )
    capacity = {
        "instance_types": [a.name for a in chosen],
        "on_demand_base_capacity": min(purchase.on_demand_base, math.ceil(max_tasks / per_instance)),
        "on_demand_percentage_above_base": purchase.on_demand_percent,
        "min_capacity": 0,
        "max_capacity": instances,
    }
    block = {
        "name": _model_name(name or model.name),
        "version": version,
        "task": "text-embedding",
        "cpu": (instance.task_cpu_limit_units - 512) // per_instance // 256 * 256,
        "memory_mib": instance.task_memory_limit_mib // per_instance,
        "min_tasks": tasks,
        "max_tasks": max_tasks,
        "max_batch_size": max(1, min(512, batch)),
        "max_sequence_length": max(8, min(8192, workload.tokens_per_request)),
        "scaling": {
            "requests_per_target_per_minute": max(1, math.floor(per_task * assumptions.target_utilization * 60)),
            "latency_p95_ms": max(1, min(60_000, round(workload.p95_ms))),
        },
    }
    if slowest is not best:
        notes.append(f"requests_per_target_per_minute is {slowest.name}'s (the slowest listed type), so a fallback "
                     "instance is never asked for more than it sustains")
    if model.kind == "llm":
        notes.append("the bundled server serves encoders (text-embedding, text-classification) only: for an LLM run your "
                     "own image (a vLLM or TGI container) and set the task it accepts; the sizes here hold for it")
    if best.gpus_per_task > 1:
        notes.append(f"each task needs {best.gpus_per_task} GPUs (tensor parallel): give the task definition that many GPUs")
    if purchase.on_demand_base > capacity["on_demand_base_capacity"]:
        notes.append("on_demand_base_capacity lowered to max_capacity")
    return Recommendation(capacity, block, notes)


def validate(recommendation: Recommendation, region: str) -> tuple[GpuCapacityProps, ModelProps]:
    """The blocks through the same strict loader and checks as cdk.json: types, region, shape, fit."""
    try:
        capacity = from_dict(GpuCapacityProps, recommendation.capacity, "capacity")
        model = from_dict(ModelProps, recommendation.model, "models[0]")
        model.check_fits(capacity.smallest_instance_type(region))
    except ConfigError as error:
        raise ConfigError(error.key, f"the recommended snippet does not validate (a bug in the advisor): {error.detail}") from None
    return capacity, model


def _model_name(raw: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"m-{name}".rstrip("-")
    return (name[:40].rstrip("-") or "model") if len(name) >= 2 else "model"


def _rps(advice: TypeAdvice) -> Optional[float]:
    return advice.throughput.requests_per_second if advice.throughput else None
