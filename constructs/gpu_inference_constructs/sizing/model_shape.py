"""What the advisor needs to know about a model: size, precision, kind and (where known) its geometry.

From a Hugging Face model directory (``config.json`` and the safetensors headers, sharded or not)
or from flags. Geometry (layers, hidden size, heads) sizes the KV cache and activations; without
it those terms are left out and every report says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..core.errors import ConfigError
from .safetensors_header import DTYPE_BYTES, read_header

Kind = Literal["encoder", "llm"]
BYTES_PER_PARAM: dict[str, float] = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1, "int4": 0.5}
_SAFETENSORS_DTYPES = {"F32": "fp32", "F16": "fp16", "BF16": "bf16", "I8": "int8", "U8": "int8"}
# Integer buffers saved beside the weights (position_ids, attention masks) are not parameters.
_BUFFER_DTYPES = {"I64", "U64", "I32", "U32", "I16", "U16", "BOOL"}


@dataclass(frozen=True)
class ModelShape:
    params: int
    dtype: str
    kind: Kind
    name: str = "model"
    """The model's name in reports and snippets. Default: "model"."""
    layers: int | None = None
    """Transformer layers (config.json num_hidden_layers). Default: None (unknown; an LLM needs it)."""
    hidden_size: int | None = None
    """Hidden size (config.json hidden_size). Default: None (unknown; an LLM needs it)."""
    heads: int | None = None
    """Attention heads (config.json num_attention_heads). Default: None (unknown; an LLM needs it)."""
    kv_heads: int | None = None
    """Key/value heads with grouped-query attention (num_key_value_heads). Default: None (heads)."""
    intermediate_size: int | None = None
    """The MLP's width (config.json intermediate_size). Default: None (unknown)."""
    vocab_size: int | None = None
    """Vocabulary size (config.json vocab_size). Default: None (unknown)."""
    max_positions: int | None = None
    """Learned position embeddings (encoders), counted as embeddings. Default: None (none)."""
    context_limit: int | None = None
    """max_position_embeddings: the longest sequence the model takes. Default: None (not checked)."""
    source: str = "flags"
    """Where the shape came from: "flags", or the model directory's config.json and safetensors headers.
    Default: "flags"."""

    def __post_init__(self) -> None:
        if self.params <= 0:
            raise ConfigError("--params", f"{self.params} must be a positive number of parameters, e.g. 7e9")
        if self.dtype not in BYTES_PER_PARAM:
            raise ConfigError("--dtype", f"{self.dtype!r} is not supported; use one of: {', '.join(BYTES_PER_PARAM)}")
        if self.kind not in ("encoder", "llm"):
            raise ConfigError("--kind", f"{self.kind!r} is not supported; use encoder or llm")
        for key in ("layers", "hidden_size", "heads", "kv_heads", "intermediate_size"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise ConfigError(f"--{key.replace('_', '-')}", f"{value} must be positive")

    @property
    def bytes_per_param(self) -> float:
        return BYTES_PER_PARAM[self.dtype]

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param

    @property
    def has_geometry(self) -> bool:
        return self.layers is not None and self.hidden_size is not None and self.heads is not None

    @property
    def geometry(self) -> tuple[int, int, int] | None:
        """``(layers, hidden_size, heads)``, or None unless ``has_geometry``."""
        if self.layers is None or self.hidden_size is None or self.heads is None:
            return None
        return self.layers, self.hidden_size, self.heads

    @property
    def head_dim(self) -> int | None:
        geometry = self.geometry
        return geometry[1] // geometry[2] if geometry is not None else None

    @property
    def kv_bytes_per_token(self) -> float | None:
        """K and V for every layer: 2 x layers x kv_heads x head_dim x bytes (the cache keeps the model's precision,
        FP16 for integer-quantised weights)."""
        geometry, head_dim = self.geometry, self.head_dim
        if geometry is None or head_dim is None:  # not has_geometry
            return None
        layers, _, heads = geometry
        element = self.bytes_per_param if self.dtype in ("fp32", "fp16", "bf16") else 2
        return 2 * layers * (self.kv_heads or heads) * head_dim * element

    @property
    def compute_params(self) -> int:
        """Parameters that do matrix multiplies per token: all but the input embeddings, where they are known."""
        if self.vocab_size and self.hidden_size:
            embeddings = (self.vocab_size + (self.max_positions or 0)) * self.hidden_size
            if embeddings < self.params:
                return self.params - embeddings
        return self.params


def from_model_dir(directory: str | Path, dtype: str | None = None, kind: Kind | None = None) -> ModelShape:
    """Parameter count and dtype from the safetensors headers, geometry and kind from config.json."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError("--model-dir", f"{str(directory)!r} is not a directory")
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise ConfigError(
            "--model-dir", f"{str(directory)!r} has no config.json (a Hugging Face model directory has one)"
        )
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as error:
        raise ConfigError("--model-dir", f"{config_path}: not JSON ({error})") from None
    config = {**config.get("text_config", {}), **config} if isinstance(config, dict) else {}
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ConfigError(
            "--model-dir",
            f"{str(directory)!r} has no *.safetensors file; save the model with "
            "safe_serialization=True, or pass --params and --dtype",
        )
    params, bytes_by_dtype = 0, dict[str, float]()
    for file in files:
        for tensor in read_header(file).values():
            if tensor.dtype in _BUFFER_DTYPES:
                continue
            params += tensor.elements
            bytes_by_dtype[tensor.dtype] = (
                bytes_by_dtype.get(tensor.dtype, 0) + tensor.elements * DTYPE_BYTES[tensor.dtype]
            )
    # The most bytes; the first seen of equals (as Counter.most_common).
    stored = sorted(bytes_by_dtype.items(), key=lambda item: item[1], reverse=True)[0][0]
    if dtype is None:
        if stored not in _SAFETENSORS_DTYPES:
            raise ConfigError(
                "--dtype", f"the weights are stored as {stored}; say how they will be served with --dtype"
            )
        dtype = _SAFETENSORS_DTYPES[stored]
    heads = config.get("num_attention_heads") or config.get("n_head") or config.get("n_heads")  # n_heads: DistilBERT
    return ModelShape(
        params=params,
        dtype=dtype,
        kind=kind or _kind(config),
        name=directory.name,
        layers=config.get("num_hidden_layers") or config.get("n_layer") or config.get("n_layers"),
        hidden_size=config.get("hidden_size") or config.get("n_embd") or config.get("d_model") or config.get("dim"),
        heads=heads,
        kv_heads=config.get("num_key_value_heads") or heads,
        intermediate_size=config.get("intermediate_size") or config.get("n_inner") or config.get("hidden_dim"),
        vocab_size=config.get("vocab_size"),
        max_positions=config.get("max_position_embeddings") if _kind(config) == "encoder" else None,
        context_limit=config.get("max_position_embeddings") or config.get("n_positions"),
        source=f"{directory}: config.json and {len(files)} safetensors header(s), stored as {stored}",
    )


def _kind(config: dict) -> Kind:
    architectures = " ".join(config.get("architectures") or [])
    if config.get("is_decoder") or "CausalLM" in architectures or "LMHead" in architectures:
        return "llm"
    return "encoder"
