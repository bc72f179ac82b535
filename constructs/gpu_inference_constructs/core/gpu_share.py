"""A share of one NVIDIA GPU instead of whole GPUs: ECS's GPU sharing through NVIDIA MPS.

A container's GPU ``ResourceRequirement`` carries ``SharingStrategy: {NvidiaMps: {Memory, MaxComputePercent}}``
instead of a whole-GPU ``Value``; ECS assigns it one GPU with that much memory free and sets
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` and ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` in the container (ECS API reference,
NvidiaMpsAllocation; CloudFormation template reference, AWS::ECS::TaskDefinition SharingStrategy and
NvidiaMpsAllocation).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import require, require_range

# What ECS sets in a container on a share (ECS API reference, NvidiaMpsAllocation).
MEMORY_LIMIT_VARIABLE = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
COMPUTE_PERCENT_VARIABLE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MIN_SHARE_MIB = 256


@dataclass(frozen=True)
class GpuShare:
    """One model's share of one GPU (``gpu_share`` in its cdk.json block)."""

    memory_mib: int
    """GPU memory the container may use, MiB: ECS places the task on a GPU with this much free and caps the
    container's device memory at it. Required; at least MIN_SHARE_MIB (the CUDA context alone takes hundreds)."""
    max_compute_percent: int | None = None
    """The most of the GPU's compute (MPS active threads) the container may use, 1-100: a limit, not a reservation.
    Default: None (ECS sets nothing and the MPS server's own default, 100 %, applies)."""

    def __post_init__(self) -> None:
        require(
            isinstance(self.memory_mib, int) and self.memory_mib >= MIN_SHARE_MIB,
            "gpu_share.memory_mib",
            f"{self.memory_mib!r}: give the GPU memory in MiB, at least {MIN_SHARE_MIB} (the CUDA context and the "
            "model's weights, activations and allocator reserve must fit in it)",
        )
        if self.max_compute_percent is not None:
            require_range(self.max_compute_percent, 1, 100, "gpu_share.max_compute_percent")

    def resource_requirement(self) -> dict:
        """The container's GPU ResourceRequirement, as the CloudFormation reference writes it."""
        allocation: dict = {"Memory": self.memory_mib}
        if self.max_compute_percent is not None:
            allocation["MaxComputePercent"] = self.max_compute_percent
        return {"Type": "GPU", "SharingStrategy": {"NvidiaMps": allocation}}


# GPU memory a device has, MiB: what nvidia-smi reports as the total (T4 15360, A10G 23028, L4 23034, L40S 46068 are
# the figures users report; an estimate, not an AWS document). Others: 94 % of the nominal memory.
DEVICE_MEMORY_MIB = {"NVIDIA T4": 15360, "NVIDIA A10G": 23028, "NVIDIA L4": 23034, "NVIDIA L40S": 46068}
# What the driver reserves of that total, MiB. The ECS agent registers each GPU's usable memory as NVML's total less
# this reserve and places shares against it (aws/amazon-ecs-agent PR #5061: an L4 host's 23,034 - 471 = 22,563 MiB).
DRIVER_RESERVED_MIB = {"NVIDIA L4": 471}
DRIVER_RESERVED_FALLBACK_MIB = 512
"""The reserve of a GPU with no sourced figure (T4, A10G, L40S): above the one found (L4, 471 MiB, PR #5061), so a share
that fits here fits what the agent registers; docs/aws-facts.md, "GPU memory ECS registers"."""
MPS_SERVER_MIB = 256
"""GPU memory the MPS server's own context holds on a GPU in MPS mode, outside any share: 27 MiB observed on a V100
(nebuly-ai/nos issue #39); kept conservative at 256 MiB, as a CUDA context's size varies with driver and GPU."""
# The container-instance attribute the ECS agent advertises when the host can run MPS shares: an NVIDIA GPU that is not
# a vGPU, /usr/bin/nvidia-cuda-mps-control installed and nvidia-mps.service enabled (aws/amazon-ecs-agent PRs #5053,
# #5139; the AL2023 GPU AMI's scripts/al2023/gpu/nvidia-mps.service, aws/amazon-ecs-ami).
MPS_CAPABILITY = "ecs.capability.gpu-sharing-mps"
MPS_PLACEMENT_EXPRESSION = f"attribute:{MPS_CAPABILITY} exists"
MPS_MIN_AGENT_VERSION = "1.107.0"


def device_memory_mib(gpu_model: str, nominal_gib: int) -> int:
    """The memory one GPU of ``gpu_model`` has (the figure above, else 94 % of ``nominal_gib``): what a server that
    sizes itself from the whole device sees."""
    return DEVICE_MEMORY_MIB.get(gpu_model, int(nominal_gib * 1024 * 0.94))


def registered_memory_mib(gpu_model: str, nominal_gib: int) -> int:
    """What the ECS agent registers for one GPU of ``gpu_model``: its total less the driver's reserve."""
    return device_memory_mib(gpu_model, nominal_gib) - DRIVER_RESERVED_MIB.get(gpu_model, DRIVER_RESERVED_FALLBACK_MIB)


def shareable_memory_mib(gpu_model: str, nominal_gib: int) -> int:
    """What the shares on one GPU of ``gpu_model`` may add up to: what ECS registers less the MPS server's context."""
    return registered_memory_mib(gpu_model, nominal_gib) - MPS_SERVER_MIB


def smallest_shareable_memory_mib(instance_types) -> int:
    """What the smallest GPU among ``instance_types`` (GpuInstanceType) offers its shares: a share must fit whichever
    type the fleet launches."""
    return min(shareable_memory_mib(t.gpu_model, t.gpu_memory_gib) for t in instance_types)


def share_fraction(share: GpuShare, gpu_model: str, nominal_gib: int) -> float:
    """The share's memory as a fraction of the GPU's: what a server that sizes itself from the whole device (vLLM's
    ``--gpu-memory-utilization``) must be told."""
    return share.memory_mib / device_memory_mib(gpu_model, nominal_gib)
