"""Per instance type: does the model fit, how fast can one task go, how many tasks, what a million requests cost.

The formulas (every estimate in the report names the one it used):
- weights = parameters x bytes per parameter; split over the GPUs of a task (tensor parallel)
- LLM KV cache = 2 x layers x kv_heads x head_dim x bytes x (prompt + output) x concurrency
- LoRA adapters (LLMs) = slots on the GPU x rank x (in + out of each target module) x layers x bytes, half of each
  module's pair split over tensor-parallel GPUs (core/lora_memory.py, the synth check's own model)
- encoder activations (peak, one layer) = batch x sequence x bytes x (4 x hidden + intermediate + heads x sequence)
- it fits when weights + KV cache or activations + adapters <= GPU memory x (1 - headroom)
- decode ceiling per sequence = memory bandwidth / weight bytes (every token reads every weight)
- a GPU pass takes max(FLOPs / (tensor FLOPS x efficiency), bytes read / (bandwidth x efficiency)); where the catalog
  records no tensor throughput (the A10G), ESTIMATED_DENSE_FP16_TFLOPS gives a labelled estimate and the formula says so
- tasks = requests per second / (one task's requests per second x target utilisation), rounded up
- USD per 1M requests = the fleet's hourly cost / (requests per second x 3600) x 1e6
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import ConfigError
from ..core.instance_catalog import (
    ACCELERATORS,
    CATALOG,
    NON_CUDA_CATALOG,
    REGIONS_BY_FAMILY,
    GpuInstanceType,
    on_demand_price,
)
from ..core.lora_memory import adapter_bytes_per_gpu, module_dimensions
from .model_shape import ModelShape
from .neuron_benchmarks import ACCELERATOR as NEURON_ACCELERATOR
from .neuron_benchmarks import BENCHMARK_SEQUENCE_LENGTH, neuron_benchmark
from .throughput import NOT_ESTIMATED, Throughput, encoder_throughput, llm_throughput, neuron_throughput
from .workload import Assumptions, Measurement, Purchase, Workload

GIB = 2**30
_NOTHING = {"on_demand": None, "spot": None, "mix": None}
TENSOR_PARALLEL = (1, 2, 4, 8)


@dataclass
class Memory:
    usable_gib: float
    weights_gib: float
    kv_cache_gib: float | None
    activations_gib: float | None
    adapters_gib: float | None = None
    """LoRA adapter slots on the GPU (Workload.lora_resident at lora_rank). Default: None (no adapters)."""

    @property
    def total_gib(self) -> float:
        return self.weights_gib + (self.kv_cache_gib or 0) + (self.activations_gib or 0) + (self.adapters_gib or 0)

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.usable_gib


@dataclass
class TypeAdvice:
    instance_type: GpuInstanceType
    fits: bool
    reason: str
    gpus_per_task: int
    tasks_per_instance: int
    deployable: bool
    memory: Memory | None
    decode_tokens_per_second_ceiling: float | None
    throughput: Throughput | None
    price_usd: float
    price_source: str
    tasks: int | None = None
    """Tasks needed for the workload. Default: None (not costed)."""
    instances: int | None = None
    """Instances those tasks need. Default: None (not costed)."""
    hourly_usd: dict[str, float] = field(default_factory=dict)
    """USD per hour by purchase (on_demand, spot, mix). Default: empty (not priced)."""
    usd_per_million_requests: dict[str, float | None] = field(default_factory=lambda: dict(_NOTHING))
    """By purchase (on_demand, spot, mix). Default: each None (not priced)."""
    usd_per_million_tokens: dict[str, float | None] = field(default_factory=lambda: dict(_NOTHING))
    """LLMs, by purchase (on_demand, spot, mix). Default: each None (encoders, or not priced)."""

    @property
    def name(self) -> str:
        return self.instance_type.name

    def meets_p95(self, p95_ms: float) -> bool | None:
        estimate = self.throughput.p95_ms_estimate if self.throughput else None
        return None if estimate is None else estimate <= p95_ms

    @property
    def ranked(self) -> bool:
        """Fits, can be deployed here, meets the latency goal as far as known, and has a throughput to cost."""
        return (
            self.fits and self.deployable and self.usd_per_million_requests.get("mix") is not None and not self.too_slow
        )

    too_slow: bool = False
    """Misses the latency goal even on the whole GPU. Default: False."""


def priced_throughput(advice: TypeAdvice) -> Throughput:
    """The throughput of a type that has a price per request (``ranked``): pricing needed its requests per second."""
    assert advice.throughput is not None and advice.throughput.requests_per_second, advice.name
    return advice.throughput


def types_in_region(region: str) -> list[GpuInstanceType]:
    found = [t for t in [*CATALOG.values(), *NON_CUDA_CATALOG.values()] if region in REGIONS_BY_FAMILY[t.family]]
    if not found:
        offered = sorted(set().union(*REGIONS_BY_FAMILY.values()))
        raise ConfigError(
            "--region", f"no catalog type is offered in {region!r}; the catalog knows: {', '.join(offered)}"
        )
    return found


def advise(
    model: ModelShape,
    workload: Workload,
    purchase: Purchase,
    assumptions: Assumptions,
    measurement: Measurement | None = None,
    only: list[str] | None = None,
) -> list[TypeAdvice]:
    """One TypeAdvice per catalog type offered in the region (or per type in ``only``), cheapest mix first."""
    _check_context(model, workload)
    types = types_in_region(purchase.region)
    if only:
        known = {t.name for t in types}
        unknown = [name for name in only if name not in known]
        if unknown:
            raise ConfigError(
                "--instance-types",
                f"{unknown} not offered in {purchase.region} or not in the catalog; "
                f"known here: {', '.join(sorted(known))}",
            )
        types = [t for t in types if t.name in only]
    if measurement is not None and not any(t.gpu_model == measurement.gpu_model for t in types):
        raise ConfigError(
            "--measured",
            f"it was measured on {measurement.gpu_model!r}, which no type here has "
            f"({', '.join(sorted({t.gpu_model for t in types}))}); pass --measured-on TYPE "
            "to say which type the measurement stands for",
        )
    results = [_advise_type(t, model, workload, purchase, assumptions, measurement) for t in types]
    return sorted(results, key=lambda a: (not a.ranked, a.usd_per_million_requests.get("mix") or math.inf, a.name))


def _check_context(model: ModelShape, workload: Workload) -> None:
    if model.context_limit and workload.tokens_per_request > model.context_limit:
        raise ConfigError(
            "--tokens-per-request",
            f"{workload.tokens_per_request} tokens exceed the model's max_position_embeddings ({model.context_limit})",
        )
    if model.kind == "encoder" and workload.output_tokens:
        raise ConfigError(
            "--tokens-per-request", "an encoder generates no tokens: give one number, the tokens per text"
        )


def _advise_type(
    instance: GpuInstanceType,
    model: ModelShape,
    workload: Workload,
    purchase: Purchase,
    assumptions: Assumptions,
    measurement: Measurement | None,
) -> TypeAdvice:
    spec = ACCELERATORS[instance.gpu_model]
    price, price_source = on_demand_price(instance.name, purchase.region)
    if instance.name in purchase.prices:
        price, price_source = purchase.prices[instance.name], "--price"
    neuron_encoder = instance.gpu_model == NEURON_ACCELERATOR and model.kind == "encoder"
    deployable = instance.cuda or neuron_encoder
    advice: dict[str, Any] = dict(
        instance_type=instance, price_usd=price, price_source=price_source, deployable=deployable
    )
    if model.dtype == "bf16" and not instance.supports_bf16:
        return TypeAdvice(
            **advice,
            fits=False,
            gpus_per_task=1,
            tasks_per_instance=instance.gpus,
            memory=None,
            decode_tokens_per_second_ceiling=None,
            throughput=None,
            reason=f"{instance.gpu_model} has no BF16 (compute capability {instance.compute_capability}): "
            "serve the model in FP16 (--dtype fp16) if it tolerates it",
        )
    candidates = [
        g
        for g in TENSOR_PARALLEL
        if g <= instance.gpus
        and instance.gpus % g == 0
        and all(h is None or h % g == 0 for h in (model.heads, model.kv_heads))
    ]
    memory = None
    for gpus in candidates:
        memory = memory_per_gpu(model, workload, instance, gpus, assumptions)
        if memory.fits:
            break
    assert memory is not None  # one GPU per task is always a candidate
    fits = memory.fits
    reason = _fit_reason(model, workload, instance, gpus, memory)
    if not deployable:
        reason += (
            f"; compared only: {instance.gpu_model} runs Neuron-compiled models, and the library serves only "
            "encoders there (no sourced LLM throughput on it)"
        )
    elif neuron_encoder:
        reason += (
            f"; deploy with NeuronCapacity (an inf2 capacity group), the Neuron serving preset and a "
            f"publish-time compile for {BENCHMARK_SEQUENCE_LENGTH}-token inputs"
        )
    ceiling = spec.memory_bandwidth_gb_per_s * 1e9 * gpus / model.weight_bytes if model.kind == "llm" else None
    result = TypeAdvice(
        **advice,
        fits=fits,
        reason=reason,
        gpus_per_task=gpus,
        tasks_per_instance=instance.gpus // gpus,
        memory=memory,
        decode_tokens_per_second_ceiling=ceiling,
        throughput=None,
    )
    if not fits:
        return result
    if measurement is not None and measurement.gpu_model == instance.gpu_model:
        result.throughput = Throughput(
            measurement.requests_per_second,
            "measured",
            f"{measurement.source}: {measurement.requests_per_second:.1f} req/s at {measurement.clients} clients, "
            f"p95 {measurement.p95_ms:.1f} ms",
            bound="measured",
            p95_ms_estimate=measurement.p95_ms,
            max_batch_size=measurement.max_batch_size,
        )
    elif neuron_encoder:
        benchmark, not_costed = neuron_benchmark(model, workload.prompt_tokens)
        result.throughput = (
            neuron_throughput(benchmark, workload, assumptions)
            if benchmark is not None
            else Throughput(None, NOT_ESTIMATED, not_costed)
        )
    elif model.kind == "llm":
        result.throughput = llm_throughput(model, workload, instance, gpus, assumptions)
    else:
        result.throughput = encoder_throughput(model, workload, instance, gpus, assumptions)
    if result.throughput.requests_per_second is None:
        result.reason += f"; not costed, {result.throughput.formula}"
    _cost(result, workload, purchase, assumptions)
    if result.meets_p95(workload.p95_ms) is False:
        result.too_slow = True
        result.reason += (
            f"; misses the latency goal: about {result.throughput.p95_ms_estimate:,.0f} ms per request "
            f"against p95 <= {workload.p95_ms:g} ms" + (" (lower --concurrency)" if model.kind == "llm" else "")
        )
    return result


def memory_per_gpu(
    model: ModelShape, workload: Workload, instance: GpuInstanceType, gpus: int, assumptions: Assumptions
) -> Memory:
    usable = instance.gpu_memory_gib * (1 - assumptions.vram_headroom)
    weights = model.weight_bytes / gpus / GIB
    act_bytes = 4 if model.dtype == "fp32" else 2
    kv = activations = adapters = None
    geometry, kv_per_token = model.geometry, model.kv_bytes_per_token
    if geometry is not None and kv_per_token is not None:  # both set exactly when model.has_geometry
        layers, h, heads = geometry
        inter = model.intermediate_size or 4 * h
        if model.kind == "llm":
            kv = kv_per_token * workload.tokens_per_request * workload.concurrency / gpus / GIB
            activations = workload.prompt_tokens * (4 * h + inter) * act_bytes / gpus / GIB
            if workload.lora_resident:  # adapters keep the model's precision (FP16 beside integer weights)
                dimensions = module_dimensions(h, inter, (model.kv_heads or heads) * (h // heads))
                element = model.bytes_per_param if model.dtype in ("fp32", "fp16", "bf16") else 2
                one = adapter_bytes_per_gpu(dimensions, layers, workload.lora_rank, element, gpus)
                adapters = workload.lora_resident * one / GIB
        else:
            b, s = workload.max_batch_size, workload.prompt_tokens
            activations = b * s * act_bytes * (4 * h + inter + heads * s) / gpus / GIB
    return Memory(usable, weights, kv, activations, adapters)


def _fit_reason(model: ModelShape, workload: Workload, instance: GpuInstanceType, gpus: int, memory: Memory) -> str:
    parts = [f"{_gib(memory.weights_gib)} GiB weights"]
    if model.kind == "llm":
        parts.append(
            f"{_gib(memory.kv_cache_gib)} GiB KV cache ({workload.concurrency} x {workload.tokens_per_request} tokens)"
            if memory.kv_cache_gib is not None
            else "KV cache not sized (no geometry: pass --model-dir, or --layers, --hidden-size and --heads)"
        )
    else:
        parts.append(
            f"{_gib(memory.activations_gib)} GiB activations (batch {workload.max_batch_size} x "
            f"{workload.prompt_tokens} tokens)"
            if memory.activations_gib is not None
            else "activations not sized (no geometry: pass --model-dir, or --layers, --hidden-size and --heads)"
        )
    if model.kind == "llm" and memory.activations_gib is not None:
        parts.append(f"{_gib(memory.activations_gib)} GiB prefill activations")
    if memory.adapters_gib is not None:
        parts.append(
            f"{_gib(memory.adapters_gib)} GiB LoRA adapters ({workload.lora_resident} on the GPU at rank "
            f"{workload.lora_rank})"
        )
    where = f"one {instance.gpu_model}" if gpus == 1 else f"each of {gpus} {instance.gpu_model} GPUs (tensor parallel)"
    used = f"{' + '.join(parts)} = {_gib(memory.total_gib)} of {memory.usable_gib:.1f} GiB usable on {where}"
    if memory.fits:
        return f"fits: {used}"
    smaller = {"fp32": "fp16", "fp16": "int8", "bf16": "int8", "int8": "int4"}.get(model.dtype)
    hint = (
        f"; quantised to {smaller} the weights take "
        f"{model.params * {'fp16': 2, 'int8': 1, 'int4': 0.5}[smaller] / gpus / GIB:.1f} GiB"
        if smaller
        else ""
    )
    return (
        f"does not fit: {used}, and {instance.name} has {instance.gpus} GPU{'s' if instance.gpus > 1 else ''}: "
        f"pick a type with more GPU memory or more GPUs{hint}"
    )


def _gib(value: float) -> str:
    return f"{value:.1f}" if value >= 1 else f"{value:.3f}"


def _cost(result: TypeAdvice, workload: Workload, purchase: Purchase, assumptions: Assumptions) -> None:
    per_task = result.throughput.requests_per_second if result.throughput else None
    if not per_task:
        return
    tasks = max(1, math.ceil(workload.requests_per_second / (per_task * assumptions.target_utilization) - 1e-9))
    instances = math.ceil(tasks / result.tasks_per_instance)
    price, spot_price = result.price_usd, result.price_usd * purchase.spot_fraction
    on_demand = purchase.on_demand_instances(instances)
    result.tasks, result.instances = tasks, instances
    result.hourly_usd = {
        "on_demand": instances * price,
        "spot": instances * spot_price,
        "mix": on_demand * price + (instances - on_demand) * spot_price,
    }
    per_hour = workload.requests_per_second * 3600
    result.usd_per_million_requests = {k: v / per_hour * 1e6 for k, v in result.hourly_usd.items()}
    if workload.output_tokens:
        tokens = per_hour * workload.tokens_per_request
        result.usd_per_million_tokens = {k: v / tokens * 1e6 for k, v in result.hourly_usd.items()}
