"""One task's throughput on an instance type, estimated from the GPU's figures (encoders, LLMs) or taken from a
published benchmark (Inferentia2), with the formula it used; and the GPUs' dense FP16 tensor throughput it starts from.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.instance_catalog import ACCELERATORS, GpuInstanceType
from .model_shape import ModelShape
from .neuron_benchmarks import BENCHMARK_SEQUENCE_LENGTH, NEURON_BENCHMARK_SOURCE, NeuronBenchmark
from .runtimes import runtime_factor
from .workload import SERVER_CEILING_SOURCE, Assumptions, Workload

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
