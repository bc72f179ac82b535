"""What the LLM presets (vLLM, SGLang) check and size alike: the tensor-parallel split of the model's attention heads,
and the fraction of GPU memory they are told to take on a GPU share (NVIDIA MPS)."""

from __future__ import annotations

import aws_cdk as cdk

from .errors import require
from .gpu_share import share_fraction
from .model_props import ModelProps
from .server_contract import ServerContext

COMMON_SIZES = (1, 2, 4, 8)  # common models' head counts are multiples of 8


def check_heads(model: ModelProps, heads: int | None, server: str, key: str) -> None:
    """The model's known attention ``heads`` divide over its GPUs (the server's own check at start)."""
    if heads is not None:
        fits = [n for n in COMMON_SIZES if heads % n == 0]
        require(heads % model.gpus == 0, "gpus",
                f"{model.gpus} GPUs cannot split the model's {heads} attention heads ({key}): {server} fails at "
                f"start; give the model gpus that divide {heads} ({', '.join(map(str, fits))})")


def warn_unknown_heads(context: ServerContext, heads: int | None, server: str, key: str) -> None:
    """Where the heads are not known, a warning on a tensor-parallel size no common model's heads divide."""
    gpus = context.model.gpus
    if heads is None and COMMON_SIZES[-1] % gpus != 0:
        cdk.Annotations.of(context.scope).add_warning_v2(
            "gpu-inference:tensor-parallel",
            f"models[{context.model.name}] runs {server} with tensor-parallel size {gpus}, which no common model's "
            f"attention heads divide (they are multiples of 8): {server} would fail at start. Use gpus 1, 2, 4 or 8, "
            f"or give {key} (num_attention_heads in the model's config.json) so synth can check it")


def memory_fraction(fraction: float, context: ServerContext, server: str) -> float:
    """``fraction`` of the whole GPU, or, on a share, of the share: the LLM servers size their KV cache from the
    device's total memory, and on a share they may use only the share's."""
    share = context.model.gpu_share
    if share is None:
        return fraction
    require(context.instance_type is not None, "gpu_share",
            f"{server} on a share needs the GPU it shares to size its KV cache: pass instance_type (or a GpuCapacity)")
    assert context.instance_type is not None  # required above
    return round(fraction * share_fraction(share, context.instance_type.gpu_model, context.instance_type.gpu_memory_gib), 3)
