"""What an LLM preset (vLLM, SGLang) adds to its contract for LoRA adapters (``lora`` in its props): the
``adapter-sync`` sidecar's description and image, and the synth check that the adapter slots fit what the GPU has
left after the weights and the KV cache of one longest sequence (core/lora_memory.py)."""

from __future__ import annotations

from ..core.adapter_sync import ADAPTER_SYNC_CONTAINER, AdapterSync, ServerKind
from ..core.errors import require
from ..core.lora_memory import GIB
from ..core.lora_settings import LoraSettings, largest_fitting, lora_fit
from ..core.server_contract import ServerContext
from .bundled import SERVER_IMAGE_DIRECTORY

LORA_MEMORY_UNCHECKED = "gpu-inference:lora-memory-unchecked"
REQUEST_LOG_SOURCE = SERVER_IMAGE_DIRECTORY / "inference_server" / "adapters" / "request_log.py"


def request_log_source() -> str:
    """The request-log middleware's text (standard library only), from the package's own copy of inference_image/."""
    return REQUEST_LOG_SOURCE.read_text(encoding="utf-8")


def adapter_sync(
    lora: LoraSettings,
    context: ServerContext,
    kind: ServerKind,
    *,
    fraction: float,
    context_tokens: int,
    element_bytes: float,
    fraction_key: str,
) -> AdapterSync:
    """The sidecar of a ``kind`` server with ``lora`` (from the ECR mirror ``lora.sidecar_image``, else built), once
    ``lora.max_gpu_adapters`` slots at ``lora.max_rank`` are checked against what each GPU has left at ``fraction``
    (already scaled to a GPU share): a ConfigError naming ``<kind>.lora.max_gpu_adapters`` and what fits. Where the base
    model's geometry (``lora.base``) or the GPU is not known: a warning that it was not checked."""
    _check_adapter_memory(
        context,
        lora,
        kind,
        fraction=fraction,
        context_tokens=context_tokens,
        element_bytes=element_bytes,
        fraction_key=fraction_key,
    )
    # Default: built by ``cdk deploy`` from the package's own copy of inference_image/ (Dockerfile target
    # ``adapter-sync``: Python, boto3 and the server package's adapter code).
    image = (
        context.ecr_image(lora.sidecar_image, "AdapterSyncImage")
        if lora.sidecar_image is not None
        else context.asset_image(str(SERVER_IMAGE_DIRECTORY), "gpu-inference-adapter-sync", ADAPTER_SYNC_CONTAINER)
    )
    return AdapterSync(kind, lora.max_rank, image, lora.poll_seconds)


def _check_adapter_memory(
    context: ServerContext,
    lora: LoraSettings,
    block: str,
    *,
    fraction: float,
    context_tokens: int,
    element_bytes: float,
    fraction_key: str,
) -> None:
    model, instance = context.model, context.instance_type
    if lora.base is None or instance is None:
        missing = f"{block}.lora.base (the base model's params and geometry)" if lora.base is None else "the GPU"
        context.warn(
            LORA_MEMORY_UNCHECKED,
            f"models[{model.name}]: synth cannot check that {lora.max_gpu_adapters} LoRA adapter slots at rank "
            f"{lora.max_rank} fit the GPU's memory beside the weights: {missing} is not known. Give {block}.lora.base "
            "(params, layers, hidden_size, intermediate_size, heads, kv_heads from config.json), or size it with "
            "python -m gpu_inference_constructs.sizing --lora-rank R --lora-resident N",
        )
        return
    fit = lora_fit(
        lora,
        lora.base,
        gpu_bytes=instance.gpu_memory_gib * GIB,
        fraction=fraction,
        gpus=model.gpus,
        context_tokens=context_tokens,
        element_bytes=element_bytes,
    )
    require(
        fit.fits,
        f"{block}.lora.max_gpu_adapters",
        f"{fit.describe(lora)} on {instance.name} ({instance.gpu_memory_gib} GiB per GPU, {fraction:g} of it for the "
        f"server): at most {largest_fitting(fit, lora)} fit; lower max_gpu_adapters or max_rank, raise "
        f"{block}.{fraction_key}, or run on a GPU with more memory",
    )
