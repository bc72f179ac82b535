"""What LoRA adapters take of a GPU, and what an LLM server leaves for them: the one memory model of the synth check
(``lora.max_gpu_adapters``) and of the sizing advisor.

- one adapter on one GPU = rank x (in + out) of each target module x layers x bytes per element. A module's A matrix
  is rank x in and its B matrix out x rank (LoRA, arXiv:2106.09685). With tensor parallelism vLLM shards half of each
  module's pair (vllm/lora/layers: a column-parallel module's B by its output, a row-parallel one's A by its input);
  the other half is on every GPU.
- the server reserves that for every adapter slot on the GPU (vLLM ``--max-loras``, SGLang ``--max-loras-per-batch``)
  at the largest rank it takes (``--max-lora-rank``), before it sizes its KV cache.
- what is left for them = GPU memory x the server's fraction - the weights' share - the KV cache of one sequence of
  the longest context (the least vLLM starts with: it exits when the cache cannot hold one).

Activations and CUDA graphs are not counted: the figure is the most the adapters could take, not a promise that a
server with that much spare starts."""

from __future__ import annotations

from collections.abc import Iterable

GIB = 2**30
# The projections of a Llama-style decoder layer LoRA adapters target, each (input, output) in terms of the hidden
# size h, the MLP's width i and the key/value width kv (kv_heads x head_dim); vLLM's row-parallel ones are o_proj and
# down_proj (their input is sharded), the rest column-parallel.
LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ROW_PARALLEL = frozenset({"o_proj", "down_proj"})


def module_dimensions(hidden_size: int, intermediate_size: int, kv_width: int) -> dict[str, tuple[int, int]]:
    """(in, out) of each LoRA target module of one layer."""
    h, i, kv = hidden_size, intermediate_size, kv_width
    return {
        "q_proj": (h, h),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (h, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }


def adapter_bytes_per_gpu(
    dimensions: dict[str, tuple[int, int]],
    layers: int,
    rank: int,
    element_bytes: float,
    gpus: int = 1,
    modules: Iterable[str] = LORA_MODULES,
) -> float:
    """One adapter of ``rank`` on each of ``gpus`` tensor-parallel GPUs: rank x (in + out) x layers x bytes, with the
    sharded half of each module split over the GPUs."""
    elements = 0.0
    for module in modules:
        inputs, outputs = dimensions[module]
        elements += inputs / gpus + outputs if module in ROW_PARALLEL else inputs + outputs / gpus
    return rank * elements * layers * element_bytes


def kv_bytes_per_token(layers: int, kv_width: int, element_bytes: float) -> float:
    """K and V of one token in every layer: 2 x layers x kv_heads x head_dim x bytes."""
    return 2 * layers * kv_width * element_bytes


def leftover_bytes_per_gpu(
    gpu_bytes: float, fraction: float, weights_bytes: float, kv_minimum_bytes: float, gpus: int
) -> float:
    """What one GPU has left for adapters: ``fraction`` of it, less its share of the weights and of the KV cache of one
    longest sequence."""
    return gpu_bytes * fraction - (weights_bytes + kv_minimum_bytes) / gpus
