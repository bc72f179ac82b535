"""LoRA adapters over an LLM's base model (``VllmProps.lora``, ``SglangProps.lora``): how many the server holds on
the GPU and in host memory, the largest rank it takes, and how the task's ``adapter-sync`` sidecar keeps them in step
with the adapter registry (``adapters/<model>/registry.json`` in the model bucket; docs/lora-adapters.md).

The servers' flags (docs/vllm.md, "LoRA adapters", cites each): vLLM ``--enable-lora``, ``--max-loras``,
``--max-cpu-loras``, ``--max-lora-rank`` (vllm/config/lora.py); SGLang ``--enable-lora``, ``--max-loras-per-batch``,
``--max-loaded-loras``, ``--max-lora-rank``, ``--lora-target-modules`` (docs.sglang.io, "LoRA Serving")."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import require, require_range
from .lora_memory import (
    GIB,
    LORA_MODULES,
    adapter_bytes_per_gpu,
    kv_bytes_per_token,
    leftover_bytes_per_gpu,
    module_dimensions,
)
from .server_contract import EcrImage

# Our own bound on the rank (vLLM's largest supported rank, vllm/config/lora.py MaxLoRARanks).
MAX_LORA_RANK = 512
# SGLang's --lora-target-modules also takes "all" and vLLM's packed names.
TARGET_MODULES = (*LORA_MODULES, "qkv_proj", "gate_up_proj", "all")


@dataclass(frozen=True)
class LoraBaseModel:
    """The base model's size and geometry (its config.json), which the synth check of the adapters' GPU memory and
    the sizing advisor need; the library reads no weights at synth."""

    params: float
    """Parameters, e.g. 13e9 (the weights' bytes are this x 2 at float16/bfloat16). Required."""
    layers: int
    """``num_hidden_layers``. Required."""
    hidden_size: int
    """``hidden_size``. Required."""
    intermediate_size: int
    """``intermediate_size`` (the MLP's width). Required."""
    heads: int
    """``num_attention_heads``. Required."""
    kv_heads: int | None = None
    """``num_key_value_heads`` (grouped-query attention). Default: None (``heads``)."""

    def __post_init__(self) -> None:
        require(1e6 <= self.params <= 2e12, "params", f"{self.params:g}: the parameter count, e.g. 13e9")
        require_range(self.layers, 1, 1024, "layers")
        require_range(self.hidden_size, 64, 131_072, "hidden_size")
        require_range(self.intermediate_size, 64, 524_288, "intermediate_size")
        require_range(self.heads, 1, 1024, "heads")
        require(
            self.hidden_size % self.heads == 0,
            "heads",
            f"{self.heads} heads do not divide hidden_size {self.hidden_size}: give num_attention_heads",
        )
        if self.kv_heads is not None:
            require(
                1 <= self.kv_heads <= self.heads and self.heads % self.kv_heads == 0,
                "kv_heads",
                f"{self.kv_heads}: num_key_value_heads divides num_attention_heads ({self.heads})",
            )

    @property
    def kv_width(self) -> int:
        """kv_heads x head_dim."""
        return (self.kv_heads or self.heads) * (self.hidden_size // self.heads)

    def adapter_bytes_per_gpu(self, rank: int, element_bytes: float, gpus: int, modules: tuple[str, ...]) -> float:
        dimensions = module_dimensions(self.hidden_size, self.intermediate_size, self.kv_width)
        return adapter_bytes_per_gpu(dimensions, self.layers, rank, element_bytes, gpus, modules)

    def kv_minimum_bytes(self, context_tokens: int, element_bytes: float) -> float:
        """The KV cache of one sequence of ``context_tokens``, over every GPU."""
        return kv_bytes_per_token(self.layers, self.kv_width, element_bytes) * context_tokens


@dataclass(frozen=True)
class LoraSettings:
    """The server serves LoRA adapters over its base model; clients pick one by OpenAI's ``model`` field.

    Every adapter registered for the model (``python -m inference_server.publish --adapter DIR --base <model>``) is
    loaded into each task by its ``adapter-sync`` sidecar before the task takes traffic (the target group checks the
    sidecar's ``/ready``), and a registry change reaches every running task within ``poll_seconds`` plus the download
    and load. The server holds ``max_gpu_adapters`` of them on the GPU at once and swaps the rest in from host memory
    (at most ``max_cpu_adapters``) and from the task's disk."""

    max_gpu_adapters: int = 4
    """Adapters on the GPU at once, each a slot the server reserves at ``max_rank`` before it sizes its KV cache
    (vLLM ``--max-loras``, SGLang ``--max-loras-per-batch``; at most 256). Default: 4."""
    max_cpu_adapters: int | None = None
    """Adapters kept in host memory, at least ``max_gpu_adapters`` (vLLM ``--max-cpu-loras``, SGLang
    ``--max-loaded-loras``; SGLang refuses to load more, so give it at least the adapters you register). Default: None
    (the server's own: vLLM ``max_gpu_adapters``, SGLang no limit)."""
    max_rank: int = 16
    """The largest adapter rank the server takes (``--max-lora-rank``; the sidecar refuses a larger one and ``/ready``
    names it). vLLM takes 1, 8, 16, 32, 64, 128, 256, 320 or 512. Default: 16 (vLLM's own)."""
    target_modules: tuple[str, ...] = ()
    """The modules adapters may target (SGLang ``--lora-target-modules``: q_proj, k_proj, v_proj, o_proj, gate_proj,
    up_proj, down_proj, qkv_proj, gate_up_proj or all). vLLM takes adapters on every module it supports and has no such
    flag. Default: none (SGLang: all)."""
    poll_seconds: int = 10
    """How often the sidecar re-reads the registry (5-3600). Default: 10."""
    sidecar_image: EcrImage | None = None
    """Your ECR mirror of the ``adapter-sync`` image. Default: None (built by ``cdk deploy`` from the package's
    inference_image/, Dockerfile target ``adapter-sync``)."""
    expected_adapters: int | None = None
    """How many adapters you expect to register: the sizing advisor prices them; SGLang's ``max_cpu_adapters`` must hold
    them. Default: None (not known)."""
    base: LoraBaseModel | None = None
    """The base model's size and geometry: with it synth checks that ``max_gpu_adapters`` at ``max_rank`` fit what the
    GPU has left after the weights and one longest sequence's KV cache. Default: None (not checked: a synth warning
    says so)."""

    def __post_init__(self) -> None:
        require_range(self.max_gpu_adapters, 1, 256, "max_gpu_adapters")
        if self.max_cpu_adapters is not None:
            require(
                self.max_gpu_adapters <= self.max_cpu_adapters <= 100_000,
                "max_cpu_adapters",
                f"{self.max_cpu_adapters}: at least max_gpu_adapters ({self.max_gpu_adapters}), which the servers "
                "require of host memory; raise it or lower max_gpu_adapters",
            )
        require_range(
            self.max_rank,
            1,
            MAX_LORA_RANK,
            "max_rank",
            hint=f" (the servers take at most {MAX_LORA_RANK}; retrain the adapter at a lower rank)",
        )
        for index, module in enumerate(self.target_modules):
            require(
                module in TARGET_MODULES,
                f"target_modules[{index}]",
                f"{module!r} is not a module SGLang targets; use some of: {', '.join(TARGET_MODULES)}",
            )
        require_range(self.poll_seconds, 5, 3600, "poll_seconds")
        if self.expected_adapters is not None:
            require_range(self.expected_adapters, 1, 100_000, "expected_adapters")

    @property
    def modules(self) -> tuple[str, ...]:
        """The modules whose memory an adapter slot takes: ``target_modules``, else every one."""
        chosen = set(self.target_modules) - {"all"}
        if not chosen or "all" in self.target_modules:
            return LORA_MODULES
        expanded = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
        return tuple(m for m in LORA_MODULES if m in chosen or any(m in expanded.get(c, ()) for c in chosen))


@dataclass(frozen=True)
class LoraFit:
    """What ``max_gpu_adapters`` adapter slots take of each GPU against what is left for them, in bytes."""

    adapters_bytes: float
    leftover_bytes: float

    @property
    def fits(self) -> bool:
        return self.adapters_bytes <= self.leftover_bytes

    def describe(self, lora: LoraSettings) -> str:
        return (
            f"{lora.max_gpu_adapters} adapter slots at rank {lora.max_rank} take {self.adapters_bytes / GIB:.2f} GiB "
            f"of each GPU, which has {max(self.leftover_bytes, 0) / GIB:.2f} GiB left after the weights and one "
            "longest sequence's KV cache"
        )


def lora_fit(
    lora: LoraSettings,
    base: LoraBaseModel,
    *,
    gpu_bytes: float,
    fraction: float,
    gpus: int,
    context_tokens: int,
    element_bytes: float,
) -> LoraFit:
    """``lora``'s adapter slots on each of ``gpus`` GPUs of ``gpu_bytes``, against what the server (told to take
    ``fraction`` of each) leaves after ``base``'s weights and the KV cache of one ``context_tokens`` sequence."""
    adapters = lora.max_gpu_adapters * base.adapter_bytes_per_gpu(lora.max_rank, element_bytes, gpus, lora.modules)
    weights = base.params * element_bytes
    leftover = leftover_bytes_per_gpu(
        gpu_bytes, fraction, weights, base.kv_minimum_bytes(context_tokens, element_bytes), gpus
    )
    return LoraFit(adapters, leftover)


def largest_fitting(fit: LoraFit, lora: LoraSettings) -> int:
    """The most adapter slots that fit (0 when none does)."""
    per_slot = fit.adapters_bytes / lora.max_gpu_adapters
    return max(0, math.floor(fit.leftover_bytes / per_slot)) if per_slot else 0
