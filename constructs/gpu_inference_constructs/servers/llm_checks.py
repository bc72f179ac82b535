"""What the LLM presets (vLLM, SGLang) check and build alike: the tensor-parallel split of the model's attention heads,
the fraction of GPU memory they are told to take on a GPU share (NVIDIA MPS), their /dev/shm, their images, and the
three scaling signals their metrics give (running requests, waiting requests, KV cache)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

from ..core.errors import ConfigError, require, require_range
from ..core.gpu_share import share_fraction
from ..core.model_props import ModelProps
from ..core.server_contract import API_KEY_NAME, EcrImage, ScalingSignal, ServerContext

if TYPE_CHECKING:
    from aws_cdk import aws_ecs as ecs

COMMON_SIZES = (1, 2, 4, 8)  # common models' head counts are multiples of 8


def check_heads(model: ModelProps, heads: int | None, server: str, key: str) -> None:
    """The model's known attention ``heads`` divide over its GPUs (the server's own check at start)."""
    if heads is not None:
        fits = [n for n in COMMON_SIZES if heads % n == 0]
        require(
            heads % model.gpus == 0,
            "gpus",
            f"{model.gpus} GPUs cannot split the model's {heads} attention heads ({key}): {server} fails at "
            f"start; give the model gpus that divide {heads} ({', '.join(map(str, fits))})",
        )


def warn_unknown_heads(context: ServerContext, heads: int | None, server: str, key: str) -> None:
    """Where the heads are not known, a warning on a tensor-parallel size no common model's heads divide."""
    gpus = context.model.gpus
    if heads is None and COMMON_SIZES[-1] % gpus != 0:
        context.warn(
            "gpu-inference:tensor-parallel",
            f"models[{context.model.name}] runs {server} with tensor-parallel size {gpus}, which no common model's "
            f"attention heads divide (they are multiples of 8): {server} would fail at start. Use gpus 1, 2, 4 or 8, "
            f"or give {key} (num_attention_heads in the model's config.json) so synth can check it",
        )


def memory_fraction(fraction: float, context: ServerContext, server: str) -> float:
    """``fraction`` of the whole GPU, or, on a share, of the share: the LLM servers size their KV cache from the
    device's total memory, and on a share they may use only the share's."""
    share = context.model.gpu_share
    if share is None:
        return fraction
    require(
        context.instance_type is not None,
        "gpu_share",
        f"{server} on a share needs the GPU it shares to size its KV cache: pass instance_type (or a GpuCapacity)",
    )
    assert context.instance_type is not None  # required above
    return round(
        fraction * share_fraction(share, context.instance_type.gpu_model, context.instance_type.gpu_memory_gib), 3
    )


def check_shared_memory(model: ModelProps, shared_memory_mib: int, key: str) -> None:
    """The server's /dev/shm fits below the task's memory, which it counts against."""
    require(
        shared_memory_mib < model.memory_mib,
        key,
        f"{shared_memory_mib} MiB of /dev/shm must be below memory_mib ({model.memory_mib}): shared memory counts "
        "against the task's memory",
    )


class _Images(Protocol):
    """A preset's props: ECR mirrors (frozen dataclass fields, read-only here)."""

    @property
    def image(self) -> EcrImage | None: ...
    @property
    def fetcher_image(self) -> EcrImage | None: ...
    @property
    def collector_image(self) -> EcrImage | None: ...


class _Preset(Protocol):
    """A preset: its own images, which take the place of its props' mirrors."""

    @property
    def image(self) -> ecs.ContainerImage | None: ...
    @property
    def fetcher_image(self) -> ecs.ContainerImage | None: ...
    @property
    def collector_image(self) -> ecs.ContainerImage | None: ...


def preset_images(
    preset: _Preset, props: _Images, context: ServerContext, image_id: str, missing: tuple[str, str]
) -> tuple[ecs.ContainerImage, ecs.ContainerImage | None, ecs.ContainerImage | None]:
    """(server, fetcher, collector) images: the preset's own ContainerImage, else its props' ECR mirror; a server
    image neither gives is a ConfigError (``missing``: its key and the fix)."""
    image = preset.image or (context.ecr_image(props.image, image_id) if props.image is not None else None)
    if image is None:
        raise ConfigError(*missing)
    fetcher = preset.fetcher_image or (
        context.ecr_image(props.fetcher_image, "FetcherImage") if props.fetcher_image else None
    )
    collector = preset.collector_image or (
        context.ecr_image(props.collector_image, "CollectorImage") if props.collector_image else None
    )
    return image, fetcher, collector


def load_signals(
    running: str,
    waiting: str,
    kv_cache: str,
    *,
    running_target: int,
    waiting_scale_out: int,
    kv_cache_scale_out_percent: int,
) -> tuple[ScalingSignal, ...]:
    """Hold ``running_target`` running requests per task; add tasks when more than ``waiting_scale_out`` wait or the
    KV cache (a fraction, 0 to 1) is more than ``kv_cache_scale_out_percent`` full."""
    return (
        ScalingSignal(running, target=running_target),
        ScalingSignal(waiting, statistic="Maximum", scale_out_above=waiting_scale_out),
        ScalingSignal(kv_cache, statistic="Maximum", scale_out_above=kv_cache_scale_out_percent / 100, maximum=1),
    )


def check_load_signal_props(
    running_target: int | None,
    max_running: int,
    max_running_key: str,
    *,
    waiting_scale_out: int,
    kv_cache_scale_out_percent: int,
) -> None:
    """The props ``load_signals`` reads: the running requests a task holds (at most the server's ``max_running``,
    named by ``max_running_key``), the waiting requests and the KV cache percentage that add tasks."""
    if running_target is not None:
        require_range(
            running_target, 1, max_running, "target_running_requests_per_task", hint=f" (at most {max_running_key})"
        )
    require_range(waiting_scale_out, 1, 100_000, "waiting_requests_scale_out")
    require_range(kv_cache_scale_out_percent, 10, 100, "kv_cache_scale_out_percent")


SERVED_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")


def check_llm_names(api_key_name: str, served_model_name: str) -> None:
    """An LLM preset's props' names: the API-key secret's key it takes, and the model name it answers to (empty: the
    model's own)."""
    require(
        bool(API_KEY_NAME.match(api_key_name)),
        "api_key_name",
        f"{api_key_name!r} is not a key name in the API-key secret (1-64 letters, digits, '.', '_', '-', "
        "starting with a letter or digit)",
    )
    if served_model_name:
        require(
            bool(SERVED_MODEL_NAME.match(served_model_name)),
            "served_model_name",
            f"{served_model_name!r}: letters, digits, '.', '_', '-', '/'",
        )
