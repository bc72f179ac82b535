"""A share of one GPU through NVIDIA MPS: what ECS sets in the container, and the batch sizes that fit in it.

ECS sets CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (the container's GPU memory cap) and, where the model asks for one,
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (its compute cap) in a container on a share (ECS API reference,
NvidiaMpsAllocation). The memory limit is NVIDIA MPS's format: comma-separated ``<device>=<limit>`` pairs, the
device an ordinal or a GPU UUID as in CUDA_VISIBLE_DEVICES, the limit an integer and ``M`` or ``G`` (``0=1G,1=512MB``),
or one limit for every device (``2048M``). An allocation past the limit fails with CUDA's out-of-memory error, so
the model process plans its largest batch within the limit before it warms up, and refuses to start when even one
input does not fit.

Nothing here imports torch: the first process checks the variables before it starts any other.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..settings import SettingsError

log = logging.getLogger(__name__)

MEMORY_VARIABLE = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
COMPUTE_VARIABLE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MIB = 1 << 20
EVERY_DEVICE = "*"
# Kept free of the plan: the caching allocator's rounding and fragmentation, cuBLAS/cuDNN workspaces and whatever of
# the CUDA context counts against the share.
RESERVE_FRACTION = 0.1
_LIMIT = re.compile(r"(\d+)([MG])B?", re.IGNORECASE)
_DEVICE = re.compile(r"\d+|GPU-[0-9A-Fa-f-]+")
_FORMS = (
    "a limit per device, e.g. 0=2048M or 0=1G,1=512MB (an ordinal or a GPU-<uuid>, '=', an integer and M or G), "
    "or one limit for every device, e.g. 2048M"
)


class ShareTooSmall(SettingsError):
    """The model does not fit in the GPU share even at batch 1."""

    def __init__(self, message: str) -> None:
        super().__init__(MEMORY_VARIABLE, message)


@dataclass(frozen=True)
class GpuShare:
    limits_mib: Mapping[str, int]  # device ordinal, GPU UUID or EVERY_DEVICE -> MiB
    compute_percent: float | None

    def memory_mib(self, index: int, uuid: str | None = None) -> int | None:
        """The limit on this device: its ordinal's, its UUID's (or a prefix of it, as CUDA_VISIBLE_DEVICES takes),
        else the one for every device; None when the variable names only other devices."""
        if str(index) in self.limits_mib:
            return self.limits_mib[str(index)]
        if uuid:
            own = _bare_uuid(uuid)
            for device, mib in self.limits_mib.items():
                if device.startswith("GPU-") and own.startswith(_bare_uuid(device)):
                    return mib
        return self.limits_mib.get(EVERY_DEVICE)


def _bare_uuid(uuid: str) -> str:
    text = uuid.lower()
    return text[4:] if text.startswith("gpu-") else text


def read_share(environ: Mapping[str, str]) -> GpuShare | None:
    """The share ECS gave this container, or None when neither variable is set (a whole GPU, or a CPU). Raises
    SettingsError naming the variable when one is malformed."""
    memory = environ.get(MEMORY_VARIABLE, "").strip()
    compute = environ.get(COMPUTE_VARIABLE, "").strip()
    if not memory and not compute:
        return None
    return GpuShare(parse_memory_limit(memory) if memory else {}, parse_compute_percent(compute) if compute else None)


def parse_memory_limit(raw: str) -> dict[str, int]:
    """MiB per device from CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's value."""
    entries = [entry.strip() for entry in raw.split(",")]
    if len(entries) == 1 and "=" not in entries[0]:
        return {EVERY_DEVICE: _limit_mib(entries[0], raw)}
    limits: dict[str, int] = {}
    for entry in entries:
        device, equals, limit = (part.strip() for part in entry.partition("="))
        if not equals or not _DEVICE.fullmatch(device):
            raise _malformed(raw, f"{entry!r} is not <device>=<limit>")
        if device in limits:
            raise _malformed(raw, f"device {device} is given twice")
        limits[device] = _limit_mib(limit, raw)
    return limits


def _limit_mib(text: str, raw: str) -> int:
    match = _LIMIT.fullmatch(text)
    if match is None:
        raise _malformed(raw, f"{text!r} is not an integer and M or G")
    mib = int(match[1]) * (1024 if match[2].upper() == "G" else 1)
    if mib == 0:
        raise _malformed(raw, "a limit of 0 leaves no GPU memory at all")
    return mib


def _malformed(raw: str, why: str) -> SettingsError:
    return SettingsError(
        MEMORY_VARIABLE,
        f"{raw!r}: {why}; expected {_FORMS} (NVIDIA MPS's format, which ECS sets "
        "from the task definition's gpu_share.memory_mib)",
    )


def parse_compute_percent(raw: str) -> float:
    """CUDA_MPS_ACTIVE_THREAD_PERCENTAGE's value: a percentage above 0, at most 100."""
    try:
        percent = float(raw)
    except ValueError:
        percent = math.nan
    if not 0 < percent <= 100:
        raise SettingsError(
            COMPUTE_VARIABLE,
            f"{raw!r}: expected a percentage above 0 and at most 100 (ECS sets it "
            "from the task definition's gpu_share.max_compute_percent)",
        )
    return percent


@dataclass(frozen=True)
class BatchPlan:
    limit_mib: int
    weights_bytes: int
    input_bytes: int | None  # one input at the longest length; None: no estimate (the weights alone are checked)
    batch_bytes: int | None  # the largest batch at the longest length
    largest_batch: int

    def fields(self) -> dict[str, Any]:
        """For the log line."""
        return {
            "limit_mib": self.limit_mib,
            "reserve_fraction": RESERVE_FRACTION,
            "weights_mib": _mib(self.weights_bytes),
            "input_mib": _mib(self.input_bytes),
            "batch_mib": _mib(self.batch_bytes),
            "largest_batch": self.largest_batch,
        }


def _mib(size: int | None) -> float | None:
    return None if size is None else round(size / MIB, 3)


def plan_batches(
    limit_mib: int, weights_bytes: int, batch_bytes: Callable[[int], int | None], max_batch_size: int, length: int
) -> BatchPlan:
    """The largest batch (at most max_batch_size) whose estimate, with the weights, fits in the limit less
    RESERVE_FRACTION; batch_bytes(n) is what a batch of n inputs of `length` needs beyond the weights (None: unknown).
    Raises ShareTooSmall when not even one input fits."""
    budget = limit_mib * MIB * (1 - RESERVE_FRACTION) - weights_bytes
    one = batch_bytes(1)
    if budget < (one or 0):
        raise ShareTooSmall(_too_small(limit_mib, weights_bytes, one, length))
    if one is None:
        return BatchPlan(limit_mib, weights_bytes, None, None, max_batch_size)
    fits, above = 1, max_batch_size + 1  # batch_bytes grows with the batch: the largest that fits lies between
    while above - fits > 1:
        middle = (fits + above) // 2
        fits, above = (middle, above) if (batch_bytes(middle) or 0) <= budget else (fits, middle)
    return BatchPlan(limit_mib, weights_bytes, one, batch_bytes(fits), fits)


def share_needed_mib(weights_bytes: int, batch_bytes: int) -> int:
    """The smallest share (MiB) that holds the weights and a batch with the reserve."""
    return math.ceil((weights_bytes + batch_bytes) / (1 - RESERVE_FRACTION) / MIB)


def _too_small(limit_mib: int, weights_bytes: int, one: int | None, length: int) -> str:
    one_text = "" if one is None else f" plus {_mib(one)} MiB for one input of {length} tokens"
    shorter = " or a smaller MAX_SEQUENCE_LENGTH" if one is not None and length > 1 else ""
    return (
        f"the GPU share of {limit_mib} MiB cannot hold the model: it needs {_mib(weights_bytes)} MiB of "
        f"weights{one_text}, and {int(RESERVE_FRACTION * 100)} % of the share is kept for the allocator and "
        f"the CUDA libraries; give the model a larger gpu_share.memory_mib (at least "
        f"{share_needed_mib(weights_bytes, one or 0)} MiB){shorter}"
    )


def measure_input_bytes(handler: Any, length: int, device: Any) -> int:
    """On a GPU: the peak memory one forward of a single input of `length` allocates beyond what it held before."""
    import torch

    from ..handlers.batch import batch_for

    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    try:
        handler.forward(batch_for(handler, [handler.warmup_input(length)], 1, length))
    except torch.cuda.OutOfMemoryError:
        raise ShareTooSmall(
            f"a forward of one input of {length} tokens ran out of GPU memory with "
            f"{_mib(before)} MiB held; give the model a larger gpu_share.memory_mib or a smaller "
            "MAX_SEQUENCE_LENGTH"
        ) from None
    torch.cuda.synchronize(device)
    return max(0, torch.cuda.max_memory_allocated(device) - before)
