"""The figures the packing takes beyond the single-model advisor's, each with what it is (measured, documented,
estimated) and its basis."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.gpu_share import MIN_SHARE_MIB


@dataclass(frozen=True)
class Figure:
    """A figure the packing uses: its value, what it is (measured, documented, estimated) and its basis."""

    value: float
    label: str
    basis: str


CUDA_CONTEXT_MIB = Figure(
    512,
    "estimated",
    "one CUDA context per MPS client: since Volta each MPS client keeps its own GPU address space and context storage, "
    "'so the resource reduction is to a much lesser degree' (NVIDIA MPS documentation, When to Use MPS); a PyTorch "
    "process's context with lazy module loading measured 274 MiB (287,047,680 bytes, pytorch/pytorch PR #86509), "
    "'around 400MB' (pytorch/pytorch issue #109888) and 426 MiB (RTX 6000 Ada, PyTorch 2.10 cu130, "
    "unslothai/unsloth-zoo PR #1053); 512 covers the largest and the model's kernels, loaded lazily at its first "
    "forward. Not measured under MPS or on these GPUs",
)

CUBLAS_WORKSPACE_MIB = Figure(
    9.125,
    "documented",
    "PyTorch's cuBLAS workspaces before Hopper: CUBLAS_WORKSPACE_CONFIG's default ':4096:2:16:8' (8,320 KiB) and the "
    "1,024 KiB cuBLASLt workspace (aten/src/ATen/cuda/CublasHandlePool.cpp), allocated at the first GEMM and kept",
)

ALLOCATOR_RESERVE = Figure(
    0.25,
    "estimated",
    "PyTorch's caching allocator keeps freed blocks: allocations up to 1 MiB in 2 MiB segments, 1-10 MiB in 20 MiB "
    "segments, larger rounded up to 2 MiB (c10/cuda/CUDACachingAllocator.cpp: kSmallBuffer, kLargeBuffer, "
    "kRoundLarge), and batches of other shapes fragment them; 25 % of the weights and activations, at least two "
    "20 MiB segments. Not measured",
)

ALLOCATOR_RESERVE_MIN_MIB = 40

SHARE_GRANULARITY_MIB = MIN_SHARE_MIB  # gpu_share's own minimum: shares are whole multiples of it

MPS_CLIENTS_PER_GPU = Figure(
    48,
    "documented",
    "NVIDIA's MIG user guide: 'CUDA MPS is supported on top of MIG. The only limitation is that the maximum number of "
    "clients (48) is lowered proportionally to the Compute Instance size' (read in a secondary quote; verify at "
    "docs.nvidia.com/deploy/mps)",
)

SERVER_PROCESSES_MIB = Figure(
    544,
    "measured",
    "the bundled server's model process (463 MiB) and one HTTP worker (81 MiB) at ready, python -m bench.startup "
    "--repeats 3 --workers 2, 2026-12-05 (bench/README.md), on the CPU build",
)

CUDA_HOST_MIB = Figure(
    512,
    "estimated",
    "CUDA's host side (driver, runtime and libraries mapped at context creation): a process's resident memory grew "
    "1,122 MiB at its first .to('cuda') when every kernel was loaded eagerly (pytorch/pytorch issue #12873, 2018); "
    "lazy module loading, PyTorch's default since 1.13, cut the device side from 636 to 274 MiB (PR #86509): 1,122 x "
    "274 / 636 = 483, taken as 512. Not measured: bench.startup runs on the CPU",
)

TASK_MEMORY_GRANULARITY_MIB = 256

TASK_CPU_GRANULARITY = 256  # ModelProps' smallest cpu


def figures() -> dict[str, dict]:
    """Every figure the packing takes that is not the single-model advisor's, labelled, with its basis."""
    named = {
        "cuda_context_mib": CUDA_CONTEXT_MIB,
        "cublas_workspace_mib": CUBLAS_WORKSPACE_MIB,
        "allocator_reserve": ALLOCATOR_RESERVE,
        "mps_clients_per_gpu": MPS_CLIENTS_PER_GPU,
        "server_processes_mib": SERVER_PROCESSES_MIB,
        "cuda_host_mib": CUDA_HOST_MIB,
    }
    return {name: {"value": f.value, "label": f.label, "basis": f.basis} for name, f in named.items()}
