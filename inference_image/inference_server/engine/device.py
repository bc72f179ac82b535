"""Device and precision: CUDA with FP16 (BF16 where the GPU has it) in production, CPU FP32 in tests."""

from __future__ import annotations

import logging

import torch

from ..settings import SettingsError

log = logging.getLogger(__name__)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def select_device(setting: str) -> torch.device:
    cuda = torch.cuda.is_available()
    if setting == "cuda" and not cuda:
        raise SettingsError("DEVICE", "cuda was asked for but no CUDA device is available")
    return torch.device("cuda" if setting == "cuda" or (setting == "auto" and cuda) else "cpu")


def select_dtype(setting: str, device: torch.device) -> torch.dtype:
    if device.type != "cuda":
        if setting not in ("auto", "fp32"):
            log.warning("reduced precision is for GPUs; using fp32 on the CPU", extra={"precision": setting})
        return torch.float32
    if setting == "bf16" and not torch.cuda.is_bf16_supported():
        # A mixed g5/g4dn fleet can land on a T4 (sm_75), which has no BF16.
        log.warning("this GPU has no bf16; using fp16", extra={"gpu": torch.cuda.get_device_name(device)})
        return torch.float16
    return DTYPES.get(setting, torch.float16)


def is_cuda_error(exc: BaseException) -> bool:
    """Errors after which the CUDA context cannot be trusted: the process should exit."""
    accelerator_error = getattr(torch, "AcceleratorError", None)
    if accelerator_error is not None and isinstance(exc, accelerator_error):
        return True
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(s in text for s in ("CUDA", "cuDNN", "CUBLAS", "NCCL", "cuda"))
