"""Model directories for the advisor: real MiniLM weights, and header-only Llama-2 checkpoints (sparse files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_inference_constructs.sizing.safetensors_header import write_header_only

# Llama-2's published geometry (config.json of meta-llama/Llama-2-7b-hf and -13b-hf).
LLAMA2 = {
    "7b": dict(hidden=4096, layers=32, heads=32, intermediate=11008),
    "13b": dict(hidden=5120, layers=40, heads=40, intermediate=13824),
}
VOCAB = 32000


def llama_dir(root: Path, size: str) -> Path:
    g = LLAMA2[size]
    h, inter = g["hidden"], g["intermediate"]
    directory = root / f"llama-2-{size}"
    directory.mkdir()
    (directory / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": h,
                "intermediate_size": inter,
                "num_hidden_layers": g["layers"],
                "num_attention_heads": g["heads"],
                "num_key_value_heads": g["heads"],
                "max_position_embeddings": 4096,
                "vocab_size": VOCAB,
                "torch_dtype": "float16",
            }
        )
    )
    tensors = {
        "model.embed_tokens.weight": ("F16", (VOCAB, h)),
        "lm_head.weight": ("F16", (VOCAB, h)),
        "model.norm.weight": ("F16", (h,)),
    }
    for layer in range(g["layers"]):
        prefix = f"model.layers.{layer}"
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors[f"{prefix}.self_attn.{name}.weight"] = ("F16", (h, h))
        for name, shape in (("gate_proj", (inter, h)), ("up_proj", (inter, h)), ("down_proj", (h, inter))):
            tensors[f"{prefix}.mlp.{name}.weight"] = ("F16", shape)
        tensors[f"{prefix}.input_layernorm.weight"] = ("F16", (h,))
        tensors[f"{prefix}.post_attention_layernorm.weight"] = ("F16", (h,))
    names = list(tensors)
    half = len(names) // 2  # two shards, as Hugging Face saves large models
    write_header_only(directory / "model-00001-of-00002.safetensors", {n: tensors[n] for n in names[:half]})
    write_header_only(directory / "model-00002-of-00002.safetensors", {n: tensors[n] for n in names[half:]})
    return directory


@pytest.fixture(scope="session")
def llama_7b(tmp_path_factory) -> Path:
    return llama_dir(tmp_path_factory.mktemp("models"), "7b")


@pytest.fixture(scope="session")
def llama_13b(tmp_path_factory) -> Path:
    return llama_dir(tmp_path_factory.mktemp("models"), "13b")


@pytest.fixture(scope="session")
def minilm() -> Path:
    from bench.models import minilm_dir

    return minilm_dir()
