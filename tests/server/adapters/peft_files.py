"""Tiny checkpoints written by hand (no torch, no PEFT): a Llama-shaped base model's config.json and safetensors, and
PEFT LoRA adapter directories over it (adapter_config.json and adapter_model.safetensors, the layout PEFT's
save_pretrained writes). Also used by the vLLM end-to-end test, where the values must be real numbers."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

LLAMA_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    """A safetensors file: an 8-byte little-endian header length, the JSON header, then each tensor's bytes."""
    header: dict[str, dict] = {}
    offset = 0
    for name, array in tensors.items():
        size = array.astype(np.float32).nbytes
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for array in tensors.values():
            f.write(np.ascontiguousarray(array, dtype=np.float32).tobytes())
    return path


def module_shapes(hidden: int, intermediate: int, kv_hidden: int | None = None) -> dict[str, tuple[int, int]]:
    """(out, in) of each Llama projection."""
    kv = kv_hidden or hidden
    return {
        "q_proj": (hidden, hidden),
        "k_proj": (kv, hidden),
        "v_proj": (kv, hidden),
        "o_proj": (hidden, hidden),
        "gate_proj": (intermediate, hidden),
        "up_proj": (intermediate, hidden),
        "down_proj": (hidden, intermediate),
    }


def _block(module: str) -> str:
    return "self_attn" if module in ATTENTION else "mlp"


def write_llama_base(directory: Path, *, layers: int = 2, hidden: int = 16, intermediate: int = 32) -> Path:
    """A Llama-shaped base model's config.json and model.safetensors (zeros): what publish checks an adapter against."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": 2,
        "vocab_size": 32,
    }
    (directory / "config.json").write_text(json.dumps(config))
    tensors = {"model.embed_tokens.weight": np.zeros((32, hidden)), "lm_head.weight": np.zeros((32, hidden))}
    for layer in range(layers):
        for module, shape in module_shapes(hidden, intermediate).items():
            tensors[f"model.layers.{layer}.{_block(module)}.{module}.weight"] = np.zeros(shape)
    write_safetensors(directory / "model.safetensors", tensors)
    return directory


def write_lora_adapter(
    directory: Path,
    *,
    base: str = "tiny-llama",
    rank: int = 8,
    targets: tuple[str, ...] = ("q_proj", "v_proj"),
    layers: int = 2,
    hidden: int = 16,
    intermediate: int = 32,
    kv_hidden: int | None = None,
    seed: int = 0,
    config: dict | None = None,
) -> Path:
    """A PEFT LoRA adapter: lora_A (rank, in) and lora_B (out, rank) for each target module of each layer."""
    directory.mkdir(parents=True, exist_ok=True)
    shapes = module_shapes(hidden, intermediate, kv_hidden)
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(layers):
        for module in targets:
            out_features, in_features = shapes[module]
            prefix = f"base_model.model.model.layers.{layer}.{_block(module)}.{module}"
            tensors[f"{prefix}.lora_A.weight"] = rng.normal(0, 0.02, (rank, in_features))
            tensors[f"{prefix}.lora_B.weight"] = rng.normal(0, 0.02, (out_features, rank))
    write_safetensors(directory / "adapter_model.safetensors", tensors)
    doc = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": list(targets),
        **(config or {}),
    }
    (directory / "adapter_config.json").write_text(json.dumps(doc))
    return directory
