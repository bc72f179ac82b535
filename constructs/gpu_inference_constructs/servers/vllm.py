"""The vLLM preset: vLLM's OpenAI-compatible server (``vllm serve``), its props and its contract."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..core.adapter_sync import REQUEST_LOG_DIRECTORY, REQUEST_LOG_MIDDLEWARE
from ..core.errors import require, require_range
from ..core.lora_settings import LoraSettings
from ..core.model_props import ModelProps
from ..core.server_contract import (
    API_KEY_NAME,
    DEFAULT_API_KEY_NAME,
    SCRATCH_PATH,
    EcrImage,
    LivenessCheck,
    ModelFromS3,
    PrometheusMetrics,
    ServerContext,
    ServerContract,
    named_user,
    port_liveness,
)
from ..core.stop_timing import StopTiming, drain_after_delay
from ..task_telemetry.otel_collector import GEN_AI_TIME_PER_OUTPUT_TOKEN, GEN_AI_TIME_TO_FIRST_TOKEN
from ..task_telemetry.telemetry import OTEL_ENVIRONMENT_KEYS, OTLP_GRPC_ADDRESS, otel_environment
from .llm_checks import (
    check_heads,
    check_shared_memory,
    load_signals,
    memory_fraction,
    preset_images,
    warn_unknown_heads,
)
from .llm_preset import LlmPreset
from .lora_contract import request_log_source
from .prediction_routes import OPENAI_PREDICTION_ROUTES

# vLLM 0.32 (vllm/engine/arg_utils.py, config/vllm.py): ``--shutdown-timeout N`` (default 0). On SIGTERM the API
# server stops the engine with that timeout: 0 aborts every running request; N > 0 rejects new requests and lets the
# running ones finish for up to N s, then aborts the rest and stops the engine processes.
VLLM_EXIT_SECONDS = 20
VLLM_LONGEST_REQUEST_SECONDS = 80


# vLLM's images carry the OpenTelemetry packages --otlp-traces-endpoint imports from v0.17.0 on (docs/aws-facts.md,
# "vLLM and OpenTelemetry"): earlier tags exit at start with the flag. The one command that checks a mirror:
VLLM_OPENTELEMETRY_SINCE = (0, 17, 0)
VLLM_RELEASE_TAG = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")
VLLM_OPENTELEMETRY_CHECK = (
    "docker run --rm --entrypoint python3 <your mirror>:<tag> -c "
    "'import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.grpc'"
)


def vllm_drain_seconds(longest_request_seconds: int) -> int:
    """vLLM's ``--shutdown-timeout``: what the Spot notice leaves after a deregistration delay of
    ``longest_request_seconds`` and vLLM's exit."""
    return drain_after_delay(longest_request_seconds, VLLM_EXIT_SECONDS, "vLLM")


def vllm_stop(longest_request_seconds: int = VLLM_LONGEST_REQUEST_SECONDS) -> StopTiming:
    """vLLM's OpenAI server (``vllm serve``) with ``--shutdown-timeout`` :func:`vllm_drain_seconds`: a generation up to
    ``longest_request_seconds`` (default 80) long finishes when its task stops. The ALB keeps it running through
    the deregistration delay (``longest_request_seconds``: AWS documents in-flight requests completing then);
    on SIGTERM vLLM refuses new requests and drains running ones for the rest of the Spot notice, less the ECS agent's
    detection time (10 s by default;
    without the flag, vLLM 0.32's default 0 aborts them at once), then the API server, engine core and
    tensor-parallel workers stop (``VLLM_EXIT_SECONDS``, 20 s budget). A generation still running when the drain
    ends is cut, and vLLM 0.32 then waits on its open response until SIGKILL at ``stopTimeout`` (seen in
    ``make e2e-vllm`` with ``--shutdown-timeout 0``), which the budget already allows for."""
    return StopTiming.after_delay(longest_request_seconds, VLLM_EXIT_SECONDS, "vLLM")


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
# With adapters, vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter answer any holder of the key (runtime
# updating is on for the adapter-sync sidecar): clients reach only the inference routes and the model list.
VLLM_LORA_PUBLIC_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/v1/responses*")
VLLM_STREAM_FLAGS = ("--load-format", "--model-loader-extra-config")
# The image's own ENTRYPOINT differs by release (`vllm serve` now, `python3 -m vllm.entrypoints.openai.api_server`
# before): the task sets it, so the command is vLLM's arguments whatever the mirror's release.
VLLM_ENTRY_POINT = ("vllm", "serve")
DEFAULT_STREAM_BUFFER_MIB = 4096

VLLM_MAX_DEFAULT_SHM_MIB = 16384
VLLM_METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
# vLLM's time to first token and time between output tokens per request, Prometheus histograms in seconds
# (vllm/v1/metrics/loggers.py; vllm:inter_token_latency_seconds replaced vllm:time_per_output_token_seconds),
# brought into CloudWatch under the OpenTelemetry GenAI names by the ADOT collector.
VLLM_LATENCY_HISTOGRAMS = (
    ("vllm:time_to_first_token_seconds", GEN_AI_TIME_TO_FIRST_TOKEN),
    ("vllm:inter_token_latency_seconds", GEN_AI_TIME_PER_OUTPUT_TOKEN),
)


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
        require(
            bool(API_KEY_NAME.match(self.api_key_name)),
            "api_key_name",
            f"{self.api_key_name!r} is not a key name in the API-key secret (1-64 letters, digits, '.', '_', '-', "
            "starting with a letter or digit)",
        )
        if self.served_model_name:
            require(
                bool(re.match(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$", self.served_model_name)),
                "served_model_name",
                f"{self.served_model_name!r}: letters, digits, '.', '_', '-', '/'",
            )
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
        if self.target_running_requests_per_task is not None:
            require_range(
                self.target_running_requests_per_task,
                1,
                self.max_num_seqs,
                "target_running_requests_per_task",
                hint=" (at most max_num_seqs)",
            )
        require_range(self.waiting_requests_scale_out, 1, 100_000, "waiting_requests_scale_out")
        require_range(self.kv_cache_scale_out_percent, 10, 100, "kv_cache_scale_out_percent")
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


def vllm_tag_has_opentelemetry(tag: str) -> bool | None:
    """Whether a ``vllm/vllm-openai`` tag carries OpenTelemetry (``vX.Y.Z`` at or after
    :data:`VLLM_OPENTELEMETRY_SINCE`), or None for a tag that names no release."""
    match = VLLM_RELEASE_TAG.match(tag)
    return None if match is None else tuple(int(part) for part in match.groups()) >= VLLM_OPENTELEMETRY_SINCE


def vllm_liveness(port: int) -> LivenessCheck:
    """vLLM opens its port only once the weights are loaded: :func:`port_liveness` on ``/health``."""
    return port_liveness(port, "/health")


@dataclass(frozen=True)
class VllmServer(LlmPreset[VllmProps]):
    """The vLLM preset: ``props`` (default VllmProps()) say how vLLM serves the model; ``--tensor-parallel-size`` is
    the model's ``gpus``. ``image``, ``fetcher_image`` and ``collector_image`` (ContainerImage: your own build, for
    example) take the place of the props' ECR mirrors of the same; ``user`` defaults to 1000:1000."""

    props: VllmProps = field(default_factory=lambda: VllmProps())
    """How vLLM serves the model. Default: VllmProps()."""

    name = "vllm"
    sheds_load_itself = True  # answers 503 once its waiting queue is full

    def concurrency_limit(self) -> tuple[str, int]:
        return "max_num_seqs", self.props.max_num_seqs

    props_type = VllmProps
    adapter_server = "vllm"
    collected_metrics = PrometheusMetrics(metrics=VLLM_METRICS, histograms=VLLM_LATENCY_HISTOGRAMS)

    @property
    def stop(self) -> StopTiming:
        return vllm_stop(self.props.longest_request_seconds)

    def check(self, model: ModelProps) -> None:
        """What this preset needs of the model, checked before any construct is made."""
        model.check_reserved_environment(self.props.reserved_environment, self.name)
        check_heads(model, self.props.attention_heads, "vLLM", "vllm.attention_heads")
        shm = self.props.shared_memory_for(model.memory_mib)
        check_shared_memory(model, shm, "vllm.shared_memory_mib")
        if self.props.weights == "stream":
            buffers = model.gpus * self.props.buffer_mib
            require(
                shm + buffers < model.memory_mib,
                "vllm.stream_buffer_mib",
                f"{model.gpus} x {self.props.buffer_mib} MiB of streaming buffer (one per GPU process) and {shm} MiB "
                f"of /dev/shm must together be below memory_mib ({model.memory_mib}): both count against the task's "
                "memory; lower stream_buffer_mib or raise memory_mib",
            )

    def contract(self, context: ServerContext) -> ServerContract:
        model, props = context.model, self.props
        self.check(model)
        warn_unknown_heads(context, self.props.attention_heads, "vLLM", "vllm.attention_heads")
        image, fetcher_image, collector_image = preset_images(
            self,
            props,
            context,
            "VllmImage",
            (
                "vllm.image",
                "is missing: give the ECR repository and tag of your vllm/vllm-openai mirror, "
                "or pass image= to VllmServer",
            ),
        )
        source = props.model_source(fetcher_image)
        no_traces = self.no_traces_reason
        if props.weights == "stream":
            streaming: tuple[str, ...] = ("--load-format", "runai_streamer")
            loader: dict[str, object] = {}
            if props.stream_concurrency is not None:
                loader["concurrency"] = props.stream_concurrency
            if model.gpus > 1:  # each rank reads its share of the files and the ranks exchange the rest
                loader["distributed"] = True
            if loader:
                streaming += ("--model-loader-extra-config", json.dumps(loader, separators=(",", ":")))
            model_path = context.model_uri
        else:
            streaming, model_path = (), source.local_path
        command = (
            model_path,
            "--host",
            "0.0.0.0",
            "--port",
            str(props.port),
            "--served-model-name",
            props.served_model_name or model.name,
            "--tensor-parallel-size",
            str(model.gpus),
            "--max-model-len",
            str(props.max_model_len),
            "--gpu-memory-utilization",
            f"{memory_fraction(props.gpu_memory_utilization, context, 'vLLM'):g}",
            "--max-num-seqs",
            str(props.max_num_seqs),
            "--dtype",
            props.dtype,
            # Its spans over OTLP/gRPC (vLLM's default protocol) to the task's collector, which sends them to X-Ray:
            # only where traces are sampled and the image carries OpenTelemetry (vLLM exits at start without it).
            *(
                ("--otlp-traces-endpoint", f"grpc://{OTLP_GRPC_ADDRESS}")
                if no_traces is None and context.trace_sampling_ratio > 0
                else ()
            ),
            *self._lora_flags(),
            "--shutdown-timeout",
            str(vllm_drain_seconds(props.longest_request_seconds)),
            # Its /docs, /redoc and /openapi.json answer without the key: off (the listener forwards only /v1/* anyway).
            "--disable-fastapi-docs",
            *streaming,
            *props.extra_args,
        )
        lora = props.lora
        sync = self.adapter_sync_for(
            context, props.gpu_memory_utilization, props.max_model_len, props.dtype, "gpu_memory_utilization"
        )
        if sync is not None:  # the scratch owner writes the middleware that --middleware names
            sync = dataclasses.replace(sync, request_log=request_log_source())
        waiting, kv_cache = (PrometheusMetrics.cloudwatch_name(m) for m in VLLM_METRICS[1:])
        running = PrometheusMetrics.cloudwatch_name(VLLM_METRICS[0])
        return ServerContract(
            name=self.name,
            # At tensor-parallel size 1 (a share is one GPU) vLLM's engine and its one worker are one CUDA process.
            single_cuda_process=model.gpus == 1,
            image=image,
            entry_point=VLLM_ENTRY_POINT,
            command=command,
            port=props.port,
            readiness_path="/health",
            # vLLM's --api-key guards /v1 only: /invocations, /pooling, /score, /rerank, /tokenize and its control
            # routes answer without a key (docs.vllm.ai, "Security"). Clients reach the OpenAI API and nothing else.
            public_paths=VLLM_LORA_PUBLIC_PATHS if lora is not None else ("/v1/*",),
            liveness=vllm_liveness(props.port),
            user=self.user,
            model_source=source,
            shared_memory_mib=props.shared_memory_for(model.memory_mib),
            tmpfs_mib={"/tmp": 2048},
            environment={
                **model.environment,
                "HOME": f"{SCRATCH_PATH}/home",
                "XDG_CACHE_HOME": f"{SCRATCH_PATH}/cache",
                "VLLM_CACHE_ROOT": f"{SCRATCH_PATH}/cache/vllm",
                "HF_HOME": f"{SCRATCH_PATH}/cache/huggingface",
                # Never reach a model hub: the weights are on the scratch volume, or streamed from the model bucket.
                "HF_HUB_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                # Above the ALB idle timeout, or the ALB reuses connections vLLM closed (502s).
                "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(context.timing.keep_alive_seconds),
                "AWS_DEFAULT_REGION": context.region,
                # The image has no passwd entry for the task's uid (it runs as root, or as its own uid 2000).
                **named_user("vllm"),
                **otel_environment(model.name, context.trace_sampling_ratio),
                "OTEL_EXPORTER_OTLP_TRACES_INSECURE": "true",
                **(self._stream_environment(context.region) if props.weights == "stream" else {}),
                # The adapter-sync sidecar loads and unloads adapters through /v1/load_lora_adapter while vLLM runs.
                # ... and imports the request-log middleware the scratch owner wrote.
                **(
                    {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "PYTHONPATH": REQUEST_LOG_DIRECTORY}
                    if lora is not None
                    else {}
                ),
            },
            # vLLM takes one literal key: the one of this name in the secret's JSON object (see VllmProps).
            api_keys_variable="VLLM_API_KEY",
            api_key_field=props.api_key_name,
            keep_alive_seconds=context.timing.keep_alive_seconds,
            stop=self.stop,
            metrics=dataclasses.replace(self.collected_metrics, collector_image=collector_image),
            no_traces_reason=no_traces,
            adapter_sync=sync,
            prediction_routes=OPENAI_PREDICTION_ROUTES,
            scaling_signals=load_signals(
                running,
                waiting,
                kv_cache,
                running_target=props.running_target,
                waiting_scale_out=props.waiting_requests_scale_out,
                kv_cache_scale_out_percent=props.kv_cache_scale_out_percent,
            ),
        )

    @property
    def no_traces_reason(self) -> str | None:
        """Why vLLM gets no trace flag (its image may lack OpenTelemetry), or None: ``opentelemetry`` where set, else
        what the tag of ``props.image`` says; an ``image=`` the library cannot read a release from is not vouched
        for."""
        props = self.props
        fix = (
            f"check your image with `{VLLM_OPENTELEMETRY_CHECK}` and set vllm.opentelemetry to true, or use "
            f"vllm/vllm-openai v{'.'.join(map(str, VLLM_OPENTELEMETRY_SINCE))} or later"
        )
        if props.opentelemetry is not None:
            return None if props.opentelemetry else "vllm.opentelemetry is false (its image carries no OpenTelemetry)"
        if self.image is None and props.image is not None:
            if vllm_tag_has_opentelemetry(props.image.tag):
                return None
            return (
                f"its image tag {props.image.tag} is not a vllm/vllm-openai release the library knows carries "
                f"OpenTelemetry, without which vLLM exits at start: {fix}"
            )
        return (
            f"the library cannot tell whether its image carries OpenTelemetry, without which vLLM exits at start: {fix}"
        )

    def _lora_flags(self) -> tuple[str, ...]:
        """vLLM's LoRA flags (vllm/config/lora.py): on, the adapter slots on the GPU and in host memory, the largest
        rank."""
        lora = self.props.lora
        if lora is None:
            return ()
        cpu = ("--max-cpu-loras", str(lora.max_cpu_adapters)) if lora.max_cpu_adapters is not None else ()
        return (
            "--enable-lora",
            "--max-loras",
            str(lora.max_gpu_adapters),
            "--max-lora-rank",
            str(lora.max_rank),
            *cpu,
            # One log line per request naming its adapter (vLLM's own request metrics name only the base model):
            # vllm/entrypoints/serve/middleware/register.py imports the path and adds a class with add_middleware.
            "--middleware",
            REQUEST_LOG_MIDDLEWARE,
        )

    def _stream_environment(self, region: str) -> dict[str, str]:
        """The streamer takes its region and credentials from a boto3 session, as vLLM's boto3 does for the config
        and tokenizer files: the region from the environment and credentials from the task role, never from instance
        metadata, which awsvpc tasks cannot reach. Each process's CPU buffer is bounded."""
        return {
            "AWS_REGION": region,
            "AWS_EC2_METADATA_DISABLED": "true",
            "RUNAI_STREAMER_MEMORY_LIMIT": str(self.props.buffer_mib * 1024 * 1024),
        }
