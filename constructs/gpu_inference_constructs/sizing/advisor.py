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
from .neuron_benchmarks import BENCHMARK_SEQUENCE_LENGTH, NEURON_BENCHMARK_SOURCE, NeuronBenchmark, neuron_benchmark
from .runtimes import runtime_factor
from .workload import SERVER_CEILING_SOURCE, Assumptions, Measurement, Purchase, Workload

GIB = 2**30
_NOTHING = {"on_demand": None, "spot": None, "mix": None}
TENSOR_PARALLEL = (1, 2, 4, 8)
NOT_ESTIMATED = "none"  # Throughput.source when no figure allows an estimate


@dataclass(frozen=True)
class EstimatedFigure:
    """A figure no datasheet gives, estimated: the value and the basis it was derived from."""

    value: float
    basis: str


# Dense FP16 tensor TFLOPS of the GPUs whose catalog entry records none (instance_catalog.ACCELERATORS keeps sourced
# figures only). The A10G: neither NVIDIA nor AWS publishes it; the lowest of the published candidates is taken, so a
# g5 is costed and never looks faster than it may be. Replace it with a measurement (python -m bench.gpu_bench on a g5,
# then --measured).
ESTIMATED_DENSE_FP16_TFLOPS: dict[str, EstimatedFigure] = {
    "NVIDIA A10G": EstimatedFigure(
        62.5,
        "estimated, the lowest published candidate: NVIDIA's A10 datasheet gives the A10 125 TFLOPS FP16 tensor dense "
        "(250 with sparsity), but the A10G is an AWS-only GA102 whose tensor throughput is below the A10's (Baseten, "
        "'NVIDIA A10 vs A10G for ML model inference': the A10 prioritises tensor compute, the A10G CUDA cores); "
        "third-party tables list 62.5 (e.g. the gpu_catalog.json of huggingface.co/RajBhope/gpu-runtime-predictor, "
        "which gives it 80 SMs), half the A10's, as GeForce GA102 parts run FP16 with FP32 accumulation at half the "
        "professional parts' rate (GA102 whitepaper, recalled, not re-read). 62.5 errs slow: a g5 costs more here, "
        "never less; measure one task (python -m bench.gpu_bench on a g5) and pass --measured",
    ),
}


def dense_fp16_tflops(gpu_model: str) -> tuple[float | None, str]:
    """The GPU's dense FP16 tensor TFLOPS and where it comes from: the catalog's sourced figure, else a labelled
    estimate (ESTIMATED_DENSE_FP16_TFLOPS), else None."""
    spec = ACCELERATORS[gpu_model]
    if spec.dense_fp16_tflops is not None:
        return spec.dense_fp16_tflops, f"sourced: {spec.source}"
    estimate = ESTIMATED_DENSE_FP16_TFLOPS.get(gpu_model)
    if estimate is not None:
        return estimate.value, estimate.basis
    return None, f"no sourced tensor throughput ({spec.source})"


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
class Throughput:
    requests_per_second: float | None  # one task
    source: str  # "measured", "estimate", "sourced" (a published benchmark: Inferentia2) or NOT_ESTIMATED
    formula: str
    bound: str = ""
    """What limits the rate: "HTTP server", "GPU compute", "GPU memory bandwidth" or "measured". Default: "" (none
    named)."""
    tokens_per_second: float | None = None
    """LLMs: one task's decode rate at the concurrency. Default: None (encoders)."""
    p95_ms_estimate: float | None = None
    """The p95 latency of one request, estimated or measured. Default: None (not known)."""
    max_batch_size: int | None = None
    """The batch (encoders) or concurrency (LLMs) the figure is for. Default: None (not known)."""
    gpu_requests_per_second: float | None = None
    """Encoder estimates: what the whole GPU sustains, before the server's cap. Default: None."""
    single_pass_ms: float | None = None
    """Encoder estimates: one request alone on the whole GPU (batch 1). Default: None."""
    largest_batch_ms: float | None = None
    """Encoder estimates: one pass of the largest batch (``max_batch_size``) on the whole GPU. Default: None."""


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


def encoder_throughput(
    model: ModelShape, workload: Workload, instance: GpuInstanceType, gpus: int, assumptions: Assumptions
) -> Throughput:
    spec = ACCELERATORS[instance.gpu_model]
    measure = f"measure one task (python -m bench.gpu_bench on a {instance.name}) and pass --measured"
    tflops, tflops_source = dense_fp16_tflops(instance.gpu_model)
    if tflops is None:
        return Throughput(
            None,
            NOT_ESTIMATED,
            f"not estimated: an encoder's estimate needs the GPU's tensor throughput, and "
            f"there is no sourced tensor throughput for {instance.gpu_model} ({spec.source}); {measure}",
        )
    if model.dtype == "fp32":
        return Throughput(
            None,
            NOT_ESTIMATED,
            "not estimated: no FP32 throughput figure is recorded (the catalog holds "
            f"FP16/BF16 tensor throughput): pass --dtype fp16 if you serve in half precision, or {measure}",
        )
    eff = assumptions.efficiency
    flops = tflops * 1e12 * gpus * eff
    bandwidth = spec.memory_bandwidth_gb_per_s * 1e9 * gpus * eff
    s = workload.prompt_tokens
    geometry = model.geometry
    attention = 4 * geometry[0] * s * s * geometry[1] if geometry is not None else 0
    per_request = 2 * model.compute_params * s + attention

    def batch_seconds(b: int) -> float:
        return max(b * per_request / flops, model.weight_bytes / bandwidth)

    b = workload.max_batch_size
    while b > 1 and workload.max_batch_wait_ms + 2 * batch_seconds(b) * 1000 > workload.p95_ms:
        b //= 2
    runtime = runtime_factor(workload.runtime)
    gpu_rps = b / batch_seconds(b) * runtime.factor
    rps = min(gpu_rps, assumptions.server_ceiling_rps)
    bound = (
        "HTTP server"
        if rps < gpu_rps
        else "GPU compute"
        if b * per_request / flops >= model.weight_bytes / bandwidth
        else "GPU memory bandwidth"
    )
    formula = (
        f"estimate: batch {b} / max({b} x {per_request / 1e9:.2f} GFLOP per request / ({tflops:g} TFLOPS"
        f" x {gpus} x {eff:g}), {model.weight_bytes / 1e9:.2f} GB / ({spec.memory_bandwidth_gb_per_s:g} GB/s x {gpus} "
        f"x {eff:g})) = {gpu_rps:,.0f} req/s on the GPU, capped at the server's {assumptions.server_ceiling_rps:,.0f} "
        f"req/s ({SERVER_CEILING_SOURCE}); FLOPs per request = 2 x {model.compute_params / 1e6:.1f}M parameters x {s} "
        "tokens"
        + (" + attention 4 x layers x tokens^2 x hidden" if attention else "")
        + (
            f"; x {runtime.factor:g} for runtime {workload.runtime} ({runtime.source}: {runtime.basis})"
            if workload.runtime != "eager"
            else ""
        )
        + (
            f"; {instance.gpu_model}'s tensor throughput is {tflops_source}"
            if instance.gpu_model in ESTIMATED_DENSE_FP16_TFLOPS
            else ""
        )
    )
    p95 = workload.max_batch_wait_ms + 2 * batch_seconds(b) / runtime.factor * 1000
    return Throughput(
        rps,
        "estimate",
        formula,
        bound,
        p95_ms_estimate=p95,
        max_batch_size=b,
        gpu_requests_per_second=gpu_rps,
        single_pass_ms=batch_seconds(1) / runtime.factor * 1000,
        largest_batch_ms=batch_seconds(b) / runtime.factor * 1000,
    )


def neuron_throughput(benchmark: NeuronBenchmark, workload: Workload, assumptions: Assumptions) -> Throughput:
    """One task on one Inferentia2 chip at AWS's published rate for the model's geometry (sourced, not measured),
    capped at the server's ceiling; its p95 at most the batch wait plus the benchmark's p99."""
    rate = benchmark.inferences_per_second
    rps = min(rate, assumptions.server_ceiling_rps)
    geometry = " x ".join(str(v) for v in benchmark.geometry)
    formula = (
        f"sourced, not measured: {benchmark.model} (layers x hidden x heads x MLP {geometry}, the slowest benchmarked "
        f"model of this geometry) {rate:,.0f} inferences/s per Inferentia2 chip at batch {benchmark.batch_size}, "
        f"{BENCHMARK_SEQUENCE_LENGTH} tokens, p50 {benchmark.p50_ms:.1f} ms, p99 {benchmark.p99_ms:.1f} ms, Neuron "
        f"{benchmark.neuron_version} ({NEURON_BENCHMARK_SOURCE}); capped at the server's "
        f"{assumptions.server_ceiling_rps:,.0f} req/s ({SERVER_CEILING_SOURCE}); p95 <= batch wait + p99"
    )
    return Throughput(
        rps,
        "sourced",
        formula,
        "HTTP server" if rps < rate else "sourced benchmark",
        p95_ms_estimate=workload.max_batch_wait_ms + benchmark.p99_ms,
        max_batch_size=benchmark.batch_size,
        gpu_requests_per_second=rate,
    )


def llm_throughput(
    model: ModelShape, workload: Workload, instance: GpuInstanceType, gpus: int, assumptions: Assumptions
) -> Throughput:
    spec = ACCELERATORS[instance.gpu_model]
    eff = assumptions.efficiency
    bandwidth = spec.memory_bandwidth_gb_per_s * 1e9 * gpus * eff
    tflops, tflops_source = dense_fp16_tflops(instance.gpu_model)
    flops = tflops * 1e12 * gpus * eff if tflops and model.dtype != "fp32" else None
    c, prompt, output = workload.concurrency, workload.prompt_tokens, max(workload.output_tokens, 1)
    kv_read = c * (model.kv_bytes_per_token or 0) * (prompt + output / 2)
    step = max((model.weight_bytes + kv_read) / bandwidth, 2 * model.compute_params * c / flops if flops else 0)
    prefill = 2 * model.compute_params * prompt / flops if flops else 0
    rps = 1 / (prefill + output * step / c)
    notes = (
        []
        if flops
        else [f"prefill and decode compute not counted (no sourced tensor throughput for {instance.gpu_model})"]
    )
    if model.kv_bytes_per_token is None:
        notes.append("KV-cache reads not counted (no geometry)")
    formula = (
        f"estimate: decode step = max((weights {model.weight_bytes / 1e9:.1f} GB + KV reads {kv_read / 1e9:.2f} GB) / "
        f"({spec.memory_bandwidth_gb_per_s:g} GB/s x {gpus} x {eff:g}), 2 x params x {c} / tensor FLOPS) = "
        f"{step * 1000:.1f} ms for {c} sequences; prefill = 2 x params x {prompt} tokens / ({tflops or 'n/a'} TFLOPS x "
        f"{gpus} x {eff:g}) = {prefill * 1000:.1f} ms; req/s = 1 / (prefill + {output} x step / {c})"
        + (f"; {'; '.join(notes)}" if notes else "")
        + (
            f"; {instance.gpu_model}'s tensor throughput is {tflops_source}"
            if flops and instance.gpu_model in ESTIMATED_DENSE_FP16_TFLOPS
            else ""
        )
    )
    bound = (
        "GPU compute"
        if flops and 2 * model.compute_params * c / flops > (model.weight_bytes + kv_read) / bandwidth
        else "GPU memory bandwidth"
    )
    return Throughput(
        rps,
        "estimate",
        formula,
        bound,
        tokens_per_second=c / step,
        p95_ms_estimate=(prefill + output * step) * 1000,
        max_batch_size=c,
    )


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
