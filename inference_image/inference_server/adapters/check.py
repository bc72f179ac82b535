"""An adapter against its base model and a rank limit: the facts its manifest records, or an AdapterError naming what is
wrong and the fix. What is checked is what vLLM and SGLang check when they load it, so a refusal comes at publish and
not on every replica: the LoRA rank within the server's maximum (vLLM --max-lora-rank, SGLang --max-lora-rank), and
every targeted module one the base model has."""

from __future__ import annotations

import re
from pathlib import Path

from ..manifest import AdapterFacts
from .base_model import BaseModel, model_id
from .peft_config import AdapterError, lora_tensors, read_peft_config

ALL_LINEAR = "all-linear"  # PEFT's shorthand for every linear layer but the output head


def check_adapter(directory: Path, base: BaseModel, base_name: str, max_rank: int | None = None) -> AdapterFacts:
    config = read_peft_config(directory)
    if config.base_model is not None and model_id(config.base_model) not in base.ids:
        raise AdapterError(
            f"adapter_config.json's base_model_name_or_path {config.base_model!r} is not base model {base_name!r} "
            f"(known as {', '.join(sorted(base.ids))}): publish it with --base naming the base it was trained on, "
            f"or set base_model_name_or_path to that base"
        )
    tensors = lora_tensors(directory)
    rank = max([config.rank, *(t.shape[0] for t in tensors if t.side == "A" and t.shape)])
    if max_rank is not None and rank > max_rank:
        raise AdapterError(
            f"the adapter's LoRA rank {rank} is above --max-rank {max_rank} (the server's --max-lora-rank): "
            f"retrain it at rank {max_rank} or less, or raise the service's max rank"
        )
    if isinstance(config.target_modules, tuple):
        unknown = sorted(set(config.target_modules) - base.modules - {ALL_LINEAR})
        if unknown:
            raise AdapterError(
                f"target_modules {unknown} are not modules of base model {base_name!r} "
                f"(it has {', '.join(sorted(base.modules))}): train the adapter on this base's modules"
            )
        targets = tuple(config.target_modules)
    else:
        pattern = re.compile(config.target_modules)
        targets = tuple(sorted({p.rsplit(".", 1)[-1] for p in base.module_paths if pattern.fullmatch(p)}))
        if not targets:
            raise AdapterError(
                f"target_modules regex {config.target_modules!r} matches no module of base model {base_name!r}"
            )
    strays = sorted({t.module for t in tensors} - base.module_paths) if _has_paths(base) else []
    if strays:
        raise AdapterError(
            f"adapter_model.safetensors has LoRA weights for {strays[:3]} (of {len(strays)}), modules base model "
            f"{base_name!r} does not have: the adapter was trained on another architecture"
        )
    return AdapterFacts(base_name, rank, targets)


def _has_paths(base: BaseModel) -> bool:
    """Whether the base's module paths are real weight names (not a family's stand-in names)."""
    return any("." in path for path in base.module_paths)
