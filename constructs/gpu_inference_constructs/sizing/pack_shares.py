"""One model's share of one GPU on one instance type (GPU memory and compute percent) and its task's CPU and memory,
each with its formula, or why it has none."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.gpu_share import GpuShare
from ..core.instance_catalog import GpuInstanceType
from .advisor import TypeAdvice
from .pack_figures import (
    ALLOCATOR_RESERVE,
    ALLOCATOR_RESERVE_MIN_MIB,
    CUBLAS_WORKSPACE_MIB,
    CUDA_CONTEXT_MIB,
    CUDA_HOST_MIB,
    SERVER_PROCESSES_MIB,
    SHARE_GRANULARITY_MIB,
    TASK_CPU_GRANULARITY,
    TASK_MEMORY_GRANULARITY_MIB,
)
from .pack_models import PackModel
from .workload import SERVER_CEILING_RPS, SERVER_CEILING_SOURCE, Assumptions

MIB = 2**20


@dataclass
class Share:
    """One model's share on one instance type, and why each figure is what it is."""

    model: PackModel
    advice: TypeAdvice  # the single-model advisor's, on this type: the dedicated figure
    tasks: int
    need_mib: float  # weights + activations (the advisor's Memory)
    allocator_mib: float
    memory_mib: int  # the GPU share, rounded
    utilisation: float  # of the whole GPU, per task, at the model's rate
    throughput_percent: float
    latency_percent: float
    compute_percent: int
    largest_batch: int  # the server's largest batch (the fragment's max_batch_size)
    largest_batch_ms: float  # its pass on the whole GPU
    latency_room_ms: float  # p95 less the batch wait
    cpu: int
    cpu_basis: str
    task_memory_mib: int
    memory_basis: str
    requests_per_second_per_task: float  # one task on its share, as scaling's target counts it

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def gpu_share(self) -> GpuShare:
        return GpuShare(self.memory_mib, self.compute_percent)

    def memory_formula(self) -> str:
        return (
            f"{self.memory_mib:,} MiB = {self.need_mib:,.0f} MiB weights and activations (the advisor's estimate) + "
            f"{self.allocator_mib:,.0f} allocator reserve ({ALLOCATOR_RESERVE.label}) + {CUDA_CONTEXT_MIB.value:g} "
            f"CUDA context ({CUDA_CONTEXT_MIB.label}) + {CUBLAS_WORKSPACE_MIB.value:g} cuBLAS workspaces "
            f"({CUBLAS_WORKSPACE_MIB.label}), rounded up to {SHARE_GRANULARITY_MIB}"
        )

    def compute_formula(self) -> str:
        return (
            f"{self.compute_percent} % = max(throughput {self.throughput_percent:.2f} % (utilisation "
            f"{self.utilisation:.2%} of the GPU, the advisor's estimate, / target), latency "
            f"{self.latency_percent:.2f} % (= 100 x 2 x {self.largest_batch_ms:.2f} ms, a batch of "
            f"{self.largest_batch} on the whole GPU, / {self.latency_room_ms:g} ms, p95 less the batch wait: "
            "MaxComputePercent caps the task even on an idle "
            "GPU, so its largest batch, and the one queued behind it, must finish within p95 at the cap)), rounded up"
        )


@dataclass(frozen=True)
class Refusal:
    """Why a model has no share on a type: ``kind`` is what to change (memory, compute, latency, task, other)."""

    kind: str
    text: str


def share_on(
    model: PackModel, advice: TypeAdvice, instance: GpuInstanceType, gpu_budget: int, assumptions: Assumptions
) -> Share | Refusal:
    """The model's share on ``instance``, or why it has none."""
    if advice.memory is None or not advice.fits:
        return Refusal("memory" if advice.memory is not None else "other", advice.reason)
    throughput = advice.throughput
    if advice.gpus_per_task > 1:
        return Refusal("memory", f"needs {advice.gpus_per_task} GPUs per task, and a share is of one GPU")
    if throughput is None or not throughput.requests_per_second or advice.tasks is None:
        return Refusal("other", f"not costed ({throughput.formula if throughput else advice.reason})")
    if advice.too_slow:
        return Refusal(
            "latency", f"misses its latency goal even on the whole GPU ({advice.reason.rsplit('; ', 1)[-1]})"
        )
    if throughput.gpu_requests_per_second is None or throughput.largest_batch_ms is None:
        return Refusal(
            "other", f"no estimate of the whole GPU's throughput to size a compute share from ({throughput.source})"
        )
    need = advice.memory.total_gib * 1024
    allocator = max(ALLOCATOR_RESERVE_MIN_MIB, ALLOCATOR_RESERVE.value * need)
    total = need + allocator + CUDA_CONTEXT_MIB.value + CUBLAS_WORKSPACE_MIB.value
    memory = math.ceil(total / SHARE_GRANULARITY_MIB - 1e-9) * SHARE_GRANULARITY_MIB
    if memory > gpu_budget:
        return Refusal(
            "memory",
            f"needs {memory:,} MiB of GPU memory ({need:,.0f} MiB weights and activations + allocator, "
            f"CUDA context and cuBLAS), more than one {instance.gpu_model} of {instance.name} offers "
            f"shares ({gpu_budget:,} MiB)",
        )
    tasks = advice.tasks
    per_task = model.workload.requests_per_second / tasks
    utilisation = per_task / throughput.gpu_requests_per_second
    throughput_percent = 100 * utilisation / assumptions.target_utilization
    room = model.workload.p95_ms - model.workload.max_batch_wait_ms
    # A pass on p % of the GPU's SMs takes (100 / p) x its time on the whole GPU (conservative: no pass is faster than
    # the SMs it may use allow); the advisor's own p95 is the batch wait plus two passes of the largest batch.
    latency_percent = 100 * 2 * throughput.largest_batch_ms / room
    needed = max(throughput_percent, latency_percent)
    if needed > 100:
        return Refusal(
            "compute",
            f"needs {needed:.0f} % of one {instance.gpu_model}'s compute per task (utilisation "
            f"{utilisation:.1%} at {per_task:g} req/s over the {assumptions.target_utilization:.0%} "
            "target, or its largest batch within p95): give it whole GPUs",
        )
    percent = max(1, math.ceil(needed - 1e-9))
    cpu, cpu_basis = _task_cpu(model, per_task, assumptions)
    task_memory, memory_basis = _task_memory(model)
    capacity = min(throughput.gpu_requests_per_second * percent / 100, assumptions.server_ceiling_rps)
    largest = throughput.max_batch_size or model.workload.max_batch_size
    return Share(
        model,
        advice,
        tasks,
        need,
        allocator,
        memory,
        utilisation,
        throughput_percent,
        latency_percent,
        percent,
        largest,
        throughput.largest_batch_ms,
        room,
        cpu,
        cpu_basis,
        task_memory,
        memory_basis,
        capacity,
    )


def _task_cpu(model: PackModel, per_task_rps: float, assumptions: Assumptions) -> tuple[int, str]:
    if model.cpu is not None:
        return model.cpu, "MODELS.json"
    units = 1024 * per_task_rps / (SERVER_CEILING_RPS * assumptions.target_utilization)
    cpu = max(TASK_CPU_GRANULARITY, math.ceil(units / TASK_CPU_GRANULARITY - 1e-9) * TASK_CPU_GRANULARITY)
    return cpu, (
        f"estimated: 1024 x {per_task_rps:g} req/s / ({SERVER_CEILING_RPS:,.0f} req/s per core x "
        f"{assumptions.target_utilization:g}) = {units:.0f} units, at least {TASK_CPU_GRANULARITY} (measured ceiling: "
        f"{SERVER_CEILING_SOURCE}); a reservation is a CPU share under contention, not a cap"
    )


def _task_memory(model: PackModel) -> tuple[int, str]:
    if model.memory_mib is not None:
        return model.memory_mib, "MODELS.json"
    weights = model.shape.weight_bytes / MIB
    total = SERVER_PROCESSES_MIB.value + CUDA_HOST_MIB.value + weights
    memory = math.ceil(total / TASK_MEMORY_GRANULARITY_MIB - 1e-9) * TASK_MEMORY_GRANULARITY_MIB
    return memory, (
        f"{SERVER_PROCESSES_MIB.value:g} MiB server processes (measured) + {CUDA_HOST_MIB.value:g} CUDA host "
        f"side (estimated) + {weights:,.0f} weights, rounded up to {TASK_MEMORY_GRANULARITY_MIB}"
    )
