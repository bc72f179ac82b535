"""The recommended ``capacity`` and ``models[]`` blocks for cdk.json, validated by the library's own loader.

Instance types: the cheapest type that fits, then the other fitting, deployable types of the same
shape (vCPUs, memory, GPUs: what an ECS capacity provider requires) in order of cost.
``requests_per_target_per_minute`` comes from the slowest listed type with a known throughput, so a
fallback type is never asked for more than it sustains.

An encoder gets a bundled-server block for the environment's ``capacity``. An LLM gets a vLLM block
(``gpus`` = the tensor-parallel GPUs per task, ``vllm`` with the sized context and concurrency) on a
capacity group of its own: only types whose GPUs hold it, never a fallback that cannot.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..core.capacity_props import GpuCapacityProps
from ..core.deployment_capacity import (
    ServiceDeployment,
    check_group_holds_deployment_at_peak,
    instances_for_deployment_at_peak,
)
from ..core.errors import ConfigError
from ..core.instance_catalog import GpuInstanceType
from ..core.model_props import AGENT_RESERVED_CPU, ROLLING_MAX_HEALTHY_PERCENT, ModelProps, service_deployment
from ..core.server_contract import DEFAULT_FETCHER_IMAGE
from ..core.settings import from_dict
from ..servers.bundled import BundledServer
from ..servers.vllm import VllmServer
from ..task_telemetry.otel_collector import DEFAULT_OTEL_COLLECTOR_IMAGE
from .advisor import TypeAdvice, priced_throughput
from .model_shape import ModelShape
from .snippet_props import block_props
from .workload import Assumptions, Purchase, Workload

MAX_TASKS = 100  # ModelProps.max_tasks' upper bound
MIN_FALLBACK_SPEED = 0.5  # a fallback type must sustain at least this fraction of the first type's throughput
LLM_GROUP = "llm"
# ECR mirrors, as staging names them (docs/configuration.md, "LLMs on 4-GPU instances"): vLLM at the version the preset
# is tested with, the fetcher and the LLM presets' collector (ADOT) at the library's pinned public images' tags.
VLLM_IMAGE = {"repository": "mirror/vllm-openai", "tag": "v0.32.0"}
FETCHER_IMAGE = {"repository": "mirror/aws-cli", "tag": DEFAULT_FETCHER_IMAGE.rsplit(":", 1)[1]}
COLLECTOR_IMAGE = {"repository": "mirror/aws-otel-collector", "tag": DEFAULT_OTEL_COLLECTOR_IMAGE.rsplit(":", 1)[1]}
VLLM_DTYPE = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "int8": "auto", "int4": "auto"}
# Copy from S3, load and CUDA graph capture of a multi-GB checkpoint (staging's 13B: 600 s); measure yours.
LLM_EXPECTED_LOAD_SECONDS = 600
VLLM_MAX_SHARED_MEMORY_MIB = 16384


@dataclass
class Recommendation:
    """``capacity``: the GPU capacity block; for an LLM it is ``capacity_groups[LLM_GROUP]``'s, and the model runs
    there, not on the environment's ``capacity``."""

    capacity: dict
    model: dict
    notes: list[str] = field(default_factory=list)
    """What the snippet's reader should know. Default: empty."""
    capacity_group: str | None = None
    """An LLM's capacity group name. Default: None (the environment's own capacity)."""

    @property
    def capacity_groups(self) -> dict:
        if self.capacity_group is None:
            return {}
        return {self.capacity_group: {"capacity": self.capacity, "models": [self.model["name"]]}}

    def snippet(self) -> dict:
        """What to paste into the environment (an LLM's group goes beside the environment's own capacity)."""
        if self.capacity_group is None:
            return {"capacity": self.capacity, "models": [self.model]}
        return {"capacity_groups": self.capacity_groups, "models": [self.model]}


def _same_shape_fallbacks(advice: list[TypeAdvice], best: TypeAdvice) -> tuple[list[TypeAdvice], list[str]]:
    """The types the capacity may fall back to (best first): its shape and GPUs per task, not much slower than it;
    and the names of those left out as too slow."""
    shape = best.instance_type.shape
    same_shape = [
        a
        for a in advice
        if a.fits
        and a.deployable
        and a.instance_type.cuda
        and not a.too_slow
        and a.instance_type.shape == shape
        and a.gpus_per_task == best.gpus_per_task
    ]
    best_rps = _priced_rps(best)
    chosen = [a for a in same_shape if (rps := _rps(a)) is None or rps >= best_rps * MIN_FALLBACK_SPEED][:20]
    dropped = [a.name for a in same_shape if a not in chosen]
    return chosen, dropped


def _fallback_notes(best: TypeAdvice, chosen: list[TypeAdvice], dropped: list[str]) -> list[str]:
    """The fallback types left out as too slow, and those whose throughput is not known."""
    notes = (
        [
            f"fallback types slower than {MIN_FALLBACK_SPEED:.0%} of {best.name}'s throughput left out (they would "
            f"need more tasks than the fleet is sized for): {', '.join(dropped)}"
        ]
        if dropped
        else []
    )
    unknown = [a.name for a in chosen if _rps(a) is None]
    if unknown:
        notes.append(
            f"throughput of {', '.join(unknown)} is not known (no sourced figure, no --measured): measure it "
            "before relying on it as a fallback"
        )
    return notes


def _llm_notes(model: ModelShape, best: TypeAdvice, per_instance: int, instance: GpuInstanceType) -> list[str]:
    """What an LLM's recommendation needs said: its own capacity group, its GPUs per task, the images to mirror, a
    quantised checkpoint, and the assumed load time."""
    notes: list[str] = []
    notes.append(
        f"served by vLLM on a capacity group of its own ('{LLM_GROUP}': types whose GPUs hold the model), "
        "beside the environment's capacity: add capacity_groups and the model to the environment"
    )
    per_task_gpus = (
        f"vLLM runs tensor parallel over {best.gpus_per_task} GPUs per task"
        if best.gpus_per_task > 1
        else "one GPU per task"
    )
    notes.append(
        f"gpus {best.gpus_per_task}: {per_task_gpus}, {per_instance} task{'s' if per_instance > 1 else ''} "
        f"per {instance.name}"
    )
    notes.append(
        f"vllm.image, fetcher_image and collector_image are ECR mirrors ({VLLM_IMAGE['repository']}:"
        f"{VLLM_IMAGE['tag']}, ...): mirror them into the environment's account first "
        "(docs/configuration.md, 'LLMs on 4-GPU instances (vLLM)')"
    )
    if model.dtype in ("int8", "int4"):
        notes.append(
            "quantised weights: vllm.dtype is auto and vLLM reads the quantisation from the checkpoint's config"
        )
    notes.append(
        f"expected_load_seconds {LLM_EXPECTED_LOAD_SECONDS} is an assumption (copy, load and CUDA graph "
        "capture); time one task's start and set it"
    )
    return notes


def recommend(
    advice: list[TypeAdvice],
    model: ModelShape,
    workload: Workload,
    purchase: Purchase,
    assumptions: Assumptions,
    name: str | None = None,
    version: str = "1",
) -> Recommendation | None:
    ranked = [a for a in advice if a.ranked and a.instance_type.cuda]
    if not ranked:
        return None
    best = ranked[0]
    chosen, dropped = _same_shape_fallbacks(advice, best)
    known = [a for a in chosen if a.throughput and a.throughput.requests_per_second]
    slowest = min(known, key=_priced_rps)
    per_task = _priced_rps(slowest)
    tasks = max(1, math.ceil(workload.requests_per_second / (per_task * assumptions.target_utilization) - 1e-9))
    notes = _neuron_notes(advice, best)
    notes += _fallback_notes(best, chosen, dropped)
    max_tasks = min(MAX_TASKS, math.ceil(tasks * assumptions.peak_factor))
    if tasks > MAX_TASKS:
        notes.append(
            f"{tasks} tasks are needed but a model's max_tasks is at most {MAX_TASKS}: split the traffic over "
            "several models or environments, or pick a faster type"
        )
        tasks = MAX_TASKS
    per_instance = best.tasks_per_instance
    instance = best.instance_type
    llm = model.kind == "llm"
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
    cpu = (instance.task_cpu_limit_units - AGENT_RESERVED_CPU) // per_instance
    memory = instance.task_memory_limit_mib // per_instance
    block = {"name": _model_name(name or model.name), "version": version}
    # Every task's sidecars (the collector; an LLM's init containers) take their share of the task's room.
    sidecar_cpu, sidecar_memory = (VllmServer() if llm else BundledServer()).sidecar_reservation
    cpu, memory = cpu - sidecar_cpu, memory - sidecar_memory
    if llm:
        # The model's files are copied to scratch on the root volume, and a task of the outgoing version may
        # still hold its copy: room for two copies per task beside the image.
        weights_gib = model.weight_bytes / 2**30
        capacity["root_volume_gib"] = max(100, 50 * math.ceil((100 + 2 * per_instance * weights_gib) / 50))
        block |= {"gpus": best.gpus_per_task}
    else:
        block["task"] = "text-embedding"
    block |= {
        "cpu": cpu // 256 * 256,
        "memory_mib": memory,
        "min_tasks": tasks,
        "max_tasks": max_tasks,
    }
    scaling = {
        "requests_per_target_per_minute": max(1, math.floor(per_task * assumptions.target_utilization * 60)),
        "latency_p95_ms": max(1, min(60_000, round(workload.p95_ms))),
    }
    if llm:
        block |= {
            "expected_load_seconds": LLM_EXPECTED_LOAD_SECONDS,
            "scaling": scaling,
            "vllm": _vllm(model, workload, assumptions, memory),
        }
    else:
        batch = priced_throughput(best).max_batch_size or workload.max_batch_size
        block |= {
            "max_batch_size": max(1, min(512, batch)),
            "max_sequence_length": max(8, min(8192, workload.tokens_per_request)),
            "scaling": scaling,
        }
    if slowest is not best:
        notes.append(
            f"requests_per_target_per_minute is {slowest.name}'s (the slowest listed type), so a fallback "
            "instance is never asked for more than it sustains"
        )
    if llm:
        notes += _llm_notes(model, best, per_instance, instance)
    if purchase.on_demand_base > capacity["on_demand_base_capacity"]:
        notes.append("on_demand_base_capacity lowered to max_capacity")
    return Recommendation(capacity, block, notes, LLM_GROUP if llm else None)


def _vllm(model: ModelShape, workload: Workload, assumptions: Assumptions, memory_mib: int) -> dict:
    """The vLLM preset's block: the context and concurrency the advisor sized the KV cache for."""
    return {
        "image": dict(VLLM_IMAGE),
        "max_model_len": max(128, workload.tokens_per_request),
        "gpu_memory_utilization": round(min(0.98, max(0.1, 1 - assumptions.vram_headroom)), 2),
        "max_num_seqs": max(1, min(4096, workload.concurrency)),
        "dtype": VLLM_DTYPE[model.dtype],
        # NCCL and the engine's workers use /dev/shm, which counts against the task's memory.
        "shared_memory_mib": max(1024, min(VLLM_MAX_SHARED_MEMORY_MIB, memory_mib // 4 // 1024 * 1024)),
        "fetcher_image": dict(FETCHER_IMAGE),
        "collector_image": dict(COLLECTOR_IMAGE),
    }


def validate(recommendation: Recommendation, region: str) -> tuple[GpuCapacityProps, ModelProps]:
    """The blocks through the same strict loader and checks as cdk.json: types, region, shape, fit, and room for a
    deployment at peak (counted in GPUs, as the app counts a capacity group)."""
    group = recommendation.capacity_group
    key = f"capacity_groups.{group}.capacity" if group else "capacity"
    try:
        capacity = from_dict(GpuCapacityProps, recommendation.capacity, key)
        model, server = block_props(recommendation.model, "models[0]")
        smallest = capacity.smallest_instance_type()
        server.check(model)
        model.check_fits(smallest, server.sidecar_reservation)
        check_group_holds_deployment_at_peak(
            capacity.max_capacity, smallest.gpus, [service_deployment(model, in_gpus=True)], key=f"{key}.max_capacity"
        )
    except ConfigError as error:
        raise ConfigError(
            error.key, f"the recommended snippet does not validate (a bug in the advisor): {error.detail}"
        ) from None
    return capacity, model


def _model_name(raw: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"m-{name}".rstrip("-")
    return (name[:40].rstrip("-") or "model") if len(name) >= 2 else "model"


def _priced_rps(advice: TypeAdvice) -> float:
    """Requests per second of a type that is priced, or of one with a known, non-zero throughput."""
    rps = priced_throughput(advice).requests_per_second
    assert rps is not None  # checked by priced_throughput
    return rps


def _rps(advice: TypeAdvice) -> float | None:
    return advice.throughput.requests_per_second if advice.throughput else None


def _neuron_notes(advice: list[TypeAdvice], best: TypeAdvice) -> list[str]:
    """Inferentia2 types that rank above the cheapest CUDA type: the block stays a GPU capacity block (an inf2 type
    cannot be one of its overrides); the note says what serving there takes."""
    best_cost = best.usd_per_million_requests["mix"] or 0.0  # ranked: priced
    costs = {a.name: a.usd_per_million_requests["mix"] or 0.0 for a in advice if a.ranked and not a.instance_type.cuda}
    return [
        f"{name} costs ${cost:,.3f} per million requests (mix) against {best.name}'s ${best_cost:,.3f}, on a "
        "sourced Neuron benchmark (not measured): "
        "serving it takes NeuronCapacity (an inf2 capacity group), the Neuron serving preset and a compile at "
        "publish time; the block below is the cheapest CUDA type"
        for name, cost in costs.items()
        if cost < best_cost
    ]
