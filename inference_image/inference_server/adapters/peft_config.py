"""A PEFT LoRA adapter directory as serving needs it: adapter_config.json (its base, rank and target modules) and its
weights in adapter_model.safetensors, whose tensor names and shapes are read from the file's header alone.

Sources: PEFT's LoraConfig (https://huggingface.co/docs/peft/package_reference/lora: ``r``, ``target_modules`` a list of
module names or a regex, ``rank_pattern`` per-module ranks, ``base_model_name_or_path``); the safetensors format
(https://huggingface.co/docs/safetensors: an 8-byte little-endian header length, then a JSON header naming each
tensor's dtype and shape)."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
HEADER_LIMIT = 100 * 1024 * 1024  # the safetensors library's own bound on a header
# base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight -> (model.layers.0.self_attn.q_proj, A)
_LORA_TENSOR = re.compile(r"(?:base_model\.model\.)?(?P<module>.+)\.lora_(?:embedding_)?(?P<side>[AB])(?:\.weight)?")


class AdapterError(Exception):
    """The adapter cannot be served over this base (the message names what and the fix)."""


@dataclass(frozen=True)
class PeftConfig:
    base_model: str | None  # base_model_name_or_path: the id or path it was trained on
    rank: int  # the largest rank of any module (r, or a larger rank_pattern entry)
    target_modules: tuple[str, ...] | str  # module names, or one regex over full module paths


@dataclass(frozen=True)
class LoraTensor:
    module: str  # the full module path, as the base names it
    side: str  # "A" or "B"
    shape: tuple[int, ...]


def read_peft_config(directory: Path) -> PeftConfig:
    path = directory / ADAPTER_CONFIG
    if not path.is_file():
        raise AdapterError(f"{directory} has no {ADAPTER_CONFIG}: give the directory PEFT's save_pretrained wrote")
    try:
        doc: Any = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise AdapterError(f"{path} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise AdapterError(f"{path} must be a JSON object")
    if doc.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{path}: peft_type {doc['peft_type']!r} is not LORA: vLLM and SGLang serve LoRA adapters")
    rank = doc.get("r")
    if type(rank) is not int or rank < 1:
        raise AdapterError(f"{path}: 'r' (the rank) must be a positive integer, got {rank!r}")
    pattern = doc.get("rank_pattern") or {}
    if not isinstance(pattern, dict) or not all(type(r) is int and r > 0 for r in pattern.values()):
        raise AdapterError(f"{path}: 'rank_pattern' must map module names to positive ranks")
    modules = doc.get("target_modules")
    if isinstance(modules, list) and modules and all(isinstance(m, str) and m for m in modules):
        targets: tuple[str, ...] | str = tuple(modules)
    elif isinstance(modules, str) and modules:
        targets = modules
    else:
        raise AdapterError(f"{path}: 'target_modules' must be a non-empty list of module names or a regex")
    base = doc.get("base_model_name_or_path")
    return PeftConfig(base if isinstance(base, str) and base else None, max([rank, *pattern.values()]), targets)


def safetensors_header(head: bytes, name: str) -> dict[str, Any]:
    """The JSON header of a safetensors file from its first bytes (at least 8 + the header's length)."""
    if len(head) < 8:
        raise AdapterError(f"{name} is not a safetensors file (shorter than its 8-byte header length)")
    (length,) = struct.unpack("<Q", head[:8])
    if length > HEADER_LIMIT or len(head) < 8 + length:
        raise AdapterError(f"{name} is not a safetensors file (its header length {length} is past its end)")
    try:
        header = orjson.loads(head[8 : 8 + length])
    except orjson.JSONDecodeError:
        raise AdapterError(f"{name} is not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise AdapterError(f"{name} is not a safetensors file (its header is not a JSON object)")
    header.pop("__metadata__", None)
    return header


def read_header(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        head = f.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        return safetensors_header(head + f.read(min(length, HEADER_LIMIT + 1)), path.name)


def lora_tensors(directory: Path) -> list[LoraTensor]:
    """The adapter's LoRA tensors (lora_A / lora_B per module) from adapter_model.safetensors' header."""
    path = directory / ADAPTER_WEIGHTS
    if not path.is_file():
        pickled = [p.name for p in directory.glob("adapter_model.bin")]
        fix = "save it with safe_serialization=True (pickled .bin weights are not published)" if pickled else ""
        raise AdapterError(f"{directory} has no {ADAPTER_WEIGHTS}{': ' + fix if fix else ''}")
    tensors = []
    for name, info in read_header(path).items():
        match = _LORA_TENSOR.fullmatch(name)
        shape = info.get("shape") if isinstance(info, dict) else None
        if match is None or not isinstance(shape, list):
            raise AdapterError(f"{path.name}: tensor {name!r} is not a LoRA weight (<module>.lora_A/lora_B.weight)")
        tensors.append(LoraTensor(match["module"], match["side"], tuple(shape)))
    if not tensors:
        raise AdapterError(f"{path.name} holds no tensors")
    return tensors
