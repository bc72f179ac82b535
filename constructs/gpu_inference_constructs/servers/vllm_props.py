"""How vLLM serves one model (:class:`VllmProps`), and the flags and environment the vLLM preset sets itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..core.errors import require, require_range
from ..core.lora_settings import LoraSettings
from ..core.server_contract import DEFAULT_API_KEY_NAME, SCRATCH_PATH, EcrImage, ModelFromS3
from ..task_telemetry.telemetry import OTEL_ENVIRONMENT_KEYS
from .llm_checks import check_llm_names, check_load_signal_props
from .vllm_stop import VLLM_LONGEST_REQUEST_SECONDS, vllm_drain_seconds

if TYPE_CHECKING:
    from aws_cdk import aws_ecs as ecs

VLLM_RESERVED_ENVIRONMENT = (
    "HOME",
    "XDG_CACHE_HOME",
    "VLLM_CACHE_ROOT",
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "VLLM_NO_USAGE_STATS",
    "DO_NOT_TRACK",
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE",
    "AWS_DEFAULT_REGION",
    "VLLM_API_KEY",
    "USER",
    "LOGNAME",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
    *OTEL_ENVIRONMENT_KEYS,
)

# What the vLLM preset sets when it streams the weights (VllmProps.weights "stream").
VLLM_STREAM_ENVIRONMENT = ("AWS_REGION", "AWS_EC2_METADATA_DISABLED", "RUNAI_STREAMER_MEMORY_LIMIT")
VLLM_OWNED_FLAGS = (
    "--model",
    "--port",
    "--host",
    "--tensor-parallel-size",
    "--served-model-name",
    "--max-model-len",
    "--gpu-memory-utilization",
    "--max-num-seqs",
    "--dtype",
    "--api-key",
    "--download-dir",
    "--shutdown-timeout",
    "--otlp-traces-endpoint",
    "--enable-lora",
    "--max-loras",
    "--max-lora-rank",
    "--max-cpu-loras",
)
# The ranks vLLM's --max-lora-rank takes (vllm/config/lora.py, MaxLoRARanks).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
VLLM_STREAM_FLAGS = ("--load-format", "--model-loader-extra-config")
DEFAULT_STREAM_BUFFER_MIB = 4096

VLLM_MAX_DEFAULT_SHM_MIB = 16384


@dataclass(frozen=True)
class VllmProps:
    """vLLM's OpenAI-compatible server (``vllm serve``) for one model.

    ``weights`` (default ``copy``): an init container copies the model's S3 prefix into ``/scratch/model`` and checks
    every file against publish's SHA-256 digests before vLLM starts, and vLLM serves that directory; ``stream``: vLLM
    reads the safetensors straight from S3 into GPU memory with the Run:ai Model Streamer (``--load-format
    runai_streamer``, in the ``vllm/vllm-openai`` image), with no copy and no digest check (docs/configuration.md,
    "Weights from S3"): each GPU's process reads through a CPU buffer of ``stream_buffer_mib`` (default 4096; it must
    hold the model's largest tensor, and the buffers count against the task's memory) with ``stream_concurrency``
    S3 clients (default None: the streamer's own), and on several GPUs each rank reads its share
    (``{"distributed": true}``).
    ``--tensor-parallel-size`` is the model's ``gpus``. Defaults: ``served_model_name`` the model's name;
    ``max_model_len`` 4096; ``gpu_memory_utilization`` 0.90; ``max_num_seqs`` 64; ``dtype`` auto; ``shared_memory_mib``
    None: half the model's ``memory_mib``, at most 16384 (NCCL and the engine's worker processes use /dev/shm, which
    counts against the task's memory, so the default always fits the model's default 12288 MiB); port 8000; readiness
    ``/health``. ``longest_request_seconds`` (default 80, at most 90): the longest generation that still finishes when
    its task stops (scale-in, deployment, Spot): it is the deregistration delay of the model's target groups, and vLLM's
    ``--shutdown-timeout`` gets the rest of the 2-minute Spot notice after the agent's 10 s to see it, the delay and
    vLLM's 20 s exit (10 s by default), the container's ``stopTimeout`` that drain plus the exit (30 s). See
    :func:`vllm_stop`. Scaling: hold ``target_running_requests_per_task`` (default 3/4 of ``max_num_seqs``) running
    requests per task; add tasks when more than ``waiting_requests_scale_out`` requests wait or the
    KV cache is more than ``kv_cache_scale_out_percent`` full. ``image``: a mirror in your ECR of
    ``vllm/vllm-openai`` (no public registry is reachable from private subnets without NAT);
    ``fetcher_image`` and ``collector_image``: ECR mirrors of DEFAULT_FETCHER_IMAGE and
    DEFAULT_OTEL_COLLECTOR_IMAGE (default: those public images).
    ``api_key_name`` (default ``default``, the key the shared stack generates): vLLM takes exactly one literal key
    (``VLLM_API_KEY``), so it gets only the key of this name from the API-key secret. Rotating it: add the new key
    under a new name, set ``api_key_name`` to it and deploy; while the deployment replaces the tasks, old tasks
    accept only the old key and new ones only the new (docs/security.md, "API keys").
    """

    image: EcrImage | None = None
    """Your ECR mirror of ``vllm/vllm-openai``. Default: None (pass ``VllmServer(image=...)``)."""
    served_model_name: str = ""
    """The model's name in the OpenAI API. Default: "" (the model's name)."""
    max_model_len: int = 4096
    """The longest prompt plus generation (``--max-model-len``). Default: 4096."""
    gpu_memory_utilization: float = 0.90
    """The share of each GPU's memory vLLM plans for (``--gpu-memory-utilization``). Default: 0.90."""
    max_num_seqs: int = 64
    """The most sequences one batch runs (``--max-num-seqs``). Default: 64."""
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = "auto"
    """Weights' and activations' type (``--dtype``). Default: "auto"."""
    shared_memory_mib: int | None = None
    """/dev/shm (NCCL and the engine's workers use it; it counts against the task's memory). Default: None (half the
    model's ``memory_mib``, at most 16384)."""
    port: int = 8000
    """The port vLLM listens on. Default: 8000."""
    extra_args: tuple[str, ...] = ()
    """More of vLLM's flags, none of those the preset sets. Default: none."""
    target_running_requests_per_task: int | None = None
    """The running requests per task target tracking holds. Default: None (3/4 of ``max_num_seqs``)."""
    waiting_requests_scale_out: int = 4
    """Waiting requests above which tasks are added. Default: 4."""
    kv_cache_scale_out_percent: int = 90
    """KV-cache use (percent) above which tasks are added. Default: 90."""
    fetcher_image: EcrImage | None = None
    """Your ECR mirror of the model fetcher's image. Default: None (DEFAULT_FETCHER_IMAGE)."""
    collector_image: EcrImage | None = None
    """Your ECR mirror of the collector's image (metrics and traces): the ADOT collector. Default: None
    (DEFAULT_OTEL_COLLECTOR_IMAGE)."""
    longest_request_seconds: int = VLLM_LONGEST_REQUEST_SECONDS
    """The longest generation that still finishes when its task stops (at most 100). Default: 80."""
    api_key_name: str = DEFAULT_API_KEY_NAME
    """The key of the API-key secret vLLM takes (``VLLM_API_KEY``). Default: "default"."""
    weights: Literal["copy", "stream"] = "copy"
    """copy (to scratch, checked against publish's digests) or stream (from S3, unchecked). Default: copy."""
    stream_buffer_mib: int | None = None
    """Each GPU process's CPU buffer when streaming (it must hold the largest tensor). Default: None (4096)."""
    stream_concurrency: int | None = None
    """S3 clients per process when streaming. Default: None (the streamer's own)."""
    attention_heads: int | None = None
    """The model's attention heads (``num_attention_heads`` in its config.json): vLLM splits them over the
    tensor-parallel GPUs (the model's ``gpus``) and exits at start when they do not divide. Default: None (not
    known: synth warns on a size no common model's heads divide)."""
    opentelemetry: bool | None = None
    """The image carries OpenTelemetry, which ``--otlp-traces-endpoint`` needs (vLLM exits at start without it,
    "OpenTelemetry is not available"). Default: None (read off ``image``'s tag: ``vllm/vllm-openai`` v0.17.0 and later
    carry it; for any other image vLLM gets no trace flag, with a synth warning naming
    :data:`VLLM_OPENTELEMETRY_CHECK`). Set true once that check passes on your image; false for no traces."""
    lora: LoraSettings | None = None
    """LoRA adapters over the model, from the adapter registry (``--enable-lora``, ``--max-loras``, ``--max-cpu-loras``,
    ``--max-lora-rank``; runtime loading by the task's ``adapter-sync`` sidecar). Default: None (no adapters)."""

    def __post_init__(self) -> None:
        require(
            self.opentelemetry is None or isinstance(self.opentelemetry, bool),
            "opentelemetry",
            f"{self.opentelemetry!r}: true (the image carries OpenTelemetry), false, or leave it out",
        )
        if self.attention_heads is not None:
            require_range(self.attention_heads, 1, 1024, "attention_heads")
        require(
            self.weights in ("copy", "stream"),
            "weights",
            f"{self.weights!r}: 'copy' (copied to scratch and checked) or 'stream' "
            "(read from S3 by vLLM's streaming loader)",
        )
        for key in ("stream_buffer_mib", "stream_concurrency"):
            require(
                self.weights == "stream" or getattr(self, key) is None,
                key,
                'applies only to weights "stream"; leave it out, or set weights to "stream"',
            )
        if self.stream_buffer_mib is not None:
            require_range(
                self.stream_buffer_mib,
                1024,
                262_144,
                "stream_buffer_mib",
                hint=" (it must hold the model's largest tensor: Llama-3-70B's embedding is 2.1 GB)",
            )
        if self.stream_concurrency is not None:
            require_range(self.stream_concurrency, 1, 64, "stream_concurrency")
        vllm_drain_seconds(self.longest_request_seconds)
        check_llm_names(self.api_key_name, self.served_model_name)
        require_range(self.max_model_len, 128, 1_048_576, "max_model_len")
        require(
            0.1 <= self.gpu_memory_utilization <= 0.98,
            "gpu_memory_utilization",
            f"{self.gpu_memory_utilization} is out of range; a fraction from 0.1 to 0.98 "
            "(leave room for CUDA graphs and the runtime)",
        )
        require_range(self.max_num_seqs, 1, 4096, "max_num_seqs")
        if self.shared_memory_mib is not None:
            require_range(
                self.shared_memory_mib,
                1024,
                262_144,
                "shared_memory_mib",
                hint=" (vLLM with tensor parallelism needs gigabytes of /dev/shm)",
            )
        require_range(self.port, 1024, 65535, "port")
        owned = VLLM_OWNED_FLAGS + (VLLM_STREAM_FLAGS if self.weights == "stream" else ())
        for index, arg in enumerate(self.extra_args):
            require(
                arg.split("=")[0] not in owned,
                f"extra_args[{index}]",
                f"{arg!r} is set from its own key; set that key instead",
            )
        check_load_signal_props(
            self.target_running_requests_per_task,
            self.max_num_seqs,
            "max_num_seqs",
            waiting_scale_out=self.waiting_requests_scale_out,
            kv_cache_scale_out_percent=self.kv_cache_scale_out_percent,
        )
        if self.lora is not None:
            require(
                self.lora.max_rank in VLLM_LORA_RANKS,
                "lora.max_rank",
                f"{self.lora.max_rank}: vLLM's --max-lora-rank takes one of {', '.join(map(str, VLLM_LORA_RANKS))}; "
                "give the smallest of them at or above your adapters' rank",
            )
            require(
                not self.lora.target_modules,
                "lora.target_modules",
                "vLLM takes adapters on every module it supports and has no flag for them; leave it out (SGLang only)",
            )

    def shared_memory_for(self, memory_mib: int) -> int:
        """/dev/shm in MiB for a server container of ``memory_mib``: the setting, else half of it, at most 16384."""
        return (
            self.shared_memory_mib
            if self.shared_memory_mib is not None
            else min(VLLM_MAX_DEFAULT_SHM_MIB, memory_mib // 2)
        )

    def model_source(self, fetcher_image: ecs.ContainerImage | None = None) -> ModelFromS3:
        """How the weights reach vLLM, its init containers from ``fetcher_image`` (default the public AWS CLI's)."""
        if self.weights == "stream":
            return ModelFromS3.server_streams(fetcher_image=fetcher_image)
        return ModelFromS3.copy_to_scratch(f"{SCRATCH_PATH}/model", fetcher_image=fetcher_image)

    @property
    def buffer_mib(self) -> int:
        """Each GPU process's streaming buffer, in MiB."""
        return self.stream_buffer_mib or DEFAULT_STREAM_BUFFER_MIB

    @property
    def reserved_environment(self) -> tuple[str, ...]:
        return (
            VLLM_RESERVED_ENVIRONMENT
            + (VLLM_STREAM_ENVIRONMENT if self.weights == "stream" else ())
            + (("PYTHONPATH",) if self.lora is not None else ())  # the request-log middleware's folder
        )

    @property
    def running_target(self) -> int:
        return self.target_running_requests_per_task or max(1, (self.max_num_seqs * 3) // 4)
