"""The SGLang preset: SGLang's OpenAI-compatible server (``python3 -m sglang.launch_server``), its props and its
contract.

What the contract says of SGLang was read in its source (the PyPI wheel of sglang 0.5.23, and 0.4.10.post2, 0.5.5,
0.5.9 and 0.5.10 where a behaviour changed) and its documentation (docs.sglang.io, "Server Arguments" and
"Production Metrics"); docs/aws-facts.md, "SGLang and TGI (issue 46)", lists each fact and where it is.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Literal

from aws_cdk import aws_ecs as ecs

from ..core.errors import require, require_range
from ..core.lora_settings import LoraSettings
from ..core.model_props import ModelProps
from ..core.server_contract import (
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
from ..task_telemetry.telemetry import OTLP_GRPC_ADDRESS, otel_environment
from .llm_checks import (
    check_heads,
    check_llm_names,
    check_load_signal_props,
    check_shared_memory,
    load_signals,
    memory_fraction,
    preset_images,
    warn_unknown_heads,
)
from .llm_preset import LlmPreset
from .prediction_routes import OPENAI_PREDICTION_ROUTES
from .sglang_flags import SGLANG_OWNED_FLAGS as SGLANG_OWNED_FLAGS
from .sglang_flags import SGLANG_REFUSED_FLAGS as SGLANG_REFUSED_FLAGS
from .sglang_flags import flag_fix

# SGLang's own default port (``--port``, fields/serving.py).
SGLANG_PORT = 30000
# sglang:num_running_reqs and sglang:num_queue_reqs are the scheduler's running batch and waiting queue;
# sglang:token_usage is the KV pool in use, 0 to 1 (evictable prefix cache not counted)
# (observability/metrics_collector.py, managers/scheduler_components/pool_stats_observer.py).
SGLANG_METRICS = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage")
# SGLang's time to first token and inter-token latency, Prometheus histograms in seconds
# (observability/metrics_collector.py), brought into CloudWatch under the OpenTelemetry GenAI names by the ADOT
# collector.
SGLANG_LATENCY_HISTOGRAMS = (
    ("sglang:time_to_first_token_seconds", GEN_AI_TIME_TO_FIRST_TOKEN),
    ("sglang:inter_token_latency_seconds", GEN_AI_TIME_PER_OUTPUT_TOKEN),
)

# SGLang reads its API key from the command line only (``--api-key``; no variable), so the task receives the secret's
# key in this variable and a shell adds the flag when the variable is set.
SGLANG_API_KEY_VARIABLE = "SGLANG_API_KEY"
SGLANG_LAUNCH = ("python3", "-m", "sglang.launch_server")
SGLANG_ENTRY_POINT = (
    "/bin/sh",
    "-c",
    f'exec {" ".join(SGLANG_LAUNCH)} "$@" ${{{SGLANG_API_KEY_VARIABLE}:+--api-key "${SGLANG_API_KEY_VARIABLE}"}}',
    "sglang",  # $0; the command's arguments are "$@"
)

SGLANG_RESERVED_ENVIRONMENT = (
    "HOME",
    "XDG_CACHE_HOME",
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "SGLANG_TIMEOUT_KEEP_ALIVE",
    "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION",
    "AWS_DEFAULT_REGION",
    SGLANG_API_KEY_VARIABLE,
    "USER",
    "LOGNAME",
)

SGLANG_MAX_DEFAULT_SHM_MIB = 16384
# SGLang reads SGLANG_TIMEOUT_KEEP_ALIVE from 0.5.10 on; 0.5.9 and earlier keep idle connections a fixed 5 s, shorter
# than any ALB idle timeout (the ALB would reuse connections SGLang closed: 502s).
SGLANG_MIN_VERSION = (0, 5, 10)
TAG_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")

# On SIGTERM SGLang (managers/tokenizer_manager.py, SignalHandler.sigterm_handler and sigterm_watchdog; the same in
# 0.4.10 and 0.5.5) answers 503 on /health, notices the signal within 5 s, lets every running request finish however
# long it takes (checking every 5 s; SGLang has no drain limit), asks its schedulers to exit (15 s,
# _SCHEDULER_EXIT_TIMEOUT_SECS), kills what is left and exits. Its exit budget: 5 + 5 + 15 s, and 5 s to reap.
SGLANG_EXIT_SECONDS = 30
SGLANG_LONGEST_REQUEST_SECONDS = 80
DEFAULT_MEM_FRACTION_STATIC = 0.70


def sglang_drain_seconds(longest_request_seconds: int) -> int:
    """What the Spot notice leaves SGLang to finish requests after SIGTERM, after a deregistration delay of
    ``longest_request_seconds`` and its exit."""
    return drain_after_delay(longest_request_seconds, SGLANG_EXIT_SECONDS, "SGLang")


def sglang_stop(longest_request_seconds: int = SGLANG_LONGEST_REQUEST_SECONDS) -> StopTiming:
    """SGLang's stop: a generation up to ``longest_request_seconds`` (default 80) long finishes when its task stops.
    The ALB keeps it running through the deregistration delay (that long); SGLang has no drain setting and drains
    until its running requests end, so the drain is what the Spot notice leaves after the delay and the exit
    (``SGLANG_EXIT_SECONDS``, 30 s): a conservative budget, since SGLang's documentation says nothing of SIGTERM and
    the numbers are its source's. A generation still running at ``stopTimeout`` is cut by SIGKILL."""
    return StopTiming.after_delay(longest_request_seconds, SGLANG_EXIT_SECONDS, "SGLang")


def _version_of(tag: str) -> tuple[int, int, int] | None:
    match = TAG_VERSION.match(tag)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


@dataclass(frozen=True)
class SglangProps:
    """SGLang's OpenAI-compatible server (``python3 -m sglang.launch_server``) for one model, its weights copied from
    the model's S3 prefix to ``/scratch/model`` and checked against publish's digests before SGLang starts;
    ``--tp-size`` is the model's ``gpus``. Each field's default is stated under it."""

    image: EcrImage | None = None
    """Your ECR mirror of ``lmsysorg/sglang``, 0.5.10 or later (a tag naming an older release is refused: before it,
    SGLang keeps idle connections a fixed 5 s). Default: None (pass ``image=`` to SglangServer)."""
    served_model_name: str = ""
    """The model name clients send (``--served-model-name``). Default: "" (the model's name)."""
    context_length: int = 4096
    """The longest prompt plus generation (``--context-length``). Default: 4096."""
    mem_fraction_static: float = DEFAULT_MEM_FRACTION_STATIC
    """The share of the GPU's memory for the weights and the KV cache (``--mem-fraction-static``); on a GPU share
    (``ModelProps.gpu_share``) the task gets this fraction of the share. Default: 0.70 (about what SGLang sizes itself
    on a 24 GB A10G or L4, where it reserves about 6.9 GiB for a 4096-token chunked prefill and CUDA graphs; below its
    own choice on a T4 or L40S)."""
    max_running_requests: int = 64
    """Requests SGLang runs at once (``--max-running-requests``). Default: 64."""
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = "auto"
    """Weights' and activations' type (``--dtype``). Default: "auto"."""
    shared_memory_mib: int | None = None
    """/dev/shm (SGLang's processes and NCCL use it; it counts against the task's memory). Default: None (half the
    model's ``memory_mib``, at most 16384)."""
    port: int = SGLANG_PORT
    """The port SGLang serves on, metrics included (``--port``). Default: 30000 (SGLang's own)."""
    extra_args: tuple[str, ...] = ()
    """More of SGLang's flags, after the preset's; those the preset sets (or a prefix of one) are refused.
    Default: ()."""
    target_running_requests_per_task: int | None = None
    """Running requests per task that target tracking holds (``sglang:num_running_reqs``). Default: None (3/4 of
    ``max_running_requests``)."""
    waiting_requests_scale_out: int = 4
    """Add a task when more than this many requests wait (``sglang:num_queue_reqs``, maximum). Default: 4."""
    kv_cache_scale_out_percent: int = 90
    """Add a task when the KV cache is more than this full (``sglang:token_usage``, maximum). Default: 90."""
    fetcher_image: EcrImage | None = None
    """An ECR mirror of DEFAULT_FETCHER_IMAGE for the init containers. Default: None (the public image)."""
    collector_image: EcrImage | None = None
    """An ECR mirror of DEFAULT_OTEL_COLLECTOR_IMAGE (the ADOT collector) for the metrics and traces collector.
    Default: None (the public image)."""
    longest_request_seconds: int = SGLANG_LONGEST_REQUEST_SECONDS
    """The longest generation that still finishes when its task stops: the deregistration delay; SGLang then drains
    for what the Spot notice leaves after the agent's 10 s to see it and its 30 s exit (see :func:`sglang_stop`).
    Default: 80 (at most 80)."""
    api_key_name: str = DEFAULT_API_KEY_NAME
    """SGLang takes one literal key (``--api-key``): the key of this name in the API-key secret. Default: "default"
    (the key the shared stack generates)."""
    attention_heads: int | None = None
    """The model's attention heads (``num_attention_heads`` in its config.json): SGLang splits them over the
    tensor-parallel GPUs and fails at start when they do not divide. Default: None (not known: synth warns on a size
    no common model's heads divide)."""
    opentelemetry: bool = False
    """The image carries SGLang's tracing extra (``sglang[tracing]``: the OpenTelemetry SDK and OTLP exporters), so
    SGLang may trace (``--enable-trace --otlp-traces-endpoint`` to the task's collector, at the environment's
    sampling ratio). Default: false (SGLang's docs install these separately; no trace flags, and a synth warning
    where the environment samples traces)."""
    lora: LoraSettings | None = None
    """LoRA adapters over the model, from the adapter registry (``--enable-lora``, ``--max-loras-per-batch``,
    ``--max-loaded-loras``, ``--max-lora-rank``, ``--lora-target-modules``; loaded at run time by the task's
    ``adapter-sync`` sidecar). Default: None (no adapters)."""

    def __post_init__(self) -> None:
        if self.image is not None:
            version = _version_of(self.image.tag)
            require(
                version is None or version >= SGLANG_MIN_VERSION,
                "image",
                f"tag {self.image.tag!r} is SGLang {'.'.join(map(str, version or ()))}: before "
                f"{'.'.join(map(str, SGLANG_MIN_VERSION))} SGLang keeps idle connections a fixed 5 s, shorter than "
                "the load balancer's idle timeout (the ALB would reuse closed connections: 502s); mirror "
                "lmsysorg/sglang v0.5.10 or later",
            )
        if self.attention_heads is not None:
            require_range(self.attention_heads, 1, 1024, "attention_heads")
        sglang_drain_seconds(self.longest_request_seconds)
        check_llm_names(self.api_key_name, self.served_model_name)
        require_range(self.context_length, 128, 1_048_576, "context_length")
        require(
            0.1 <= self.mem_fraction_static <= 0.95,
            "mem_fraction_static",
            f"{self.mem_fraction_static} is out of range; a fraction from 0.1 to 0.95 (SGLang needs the rest for "
            "activations and CUDA graphs)",
        )
        require_range(self.max_running_requests, 1, 4096, "max_running_requests")
        require(
            self.dtype in ("auto", "float16", "bfloat16", "float32"),
            "dtype",
            f"{self.dtype!r}: auto, float16, bfloat16 or float32",
        )
        if self.shared_memory_mib is not None:
            require_range(
                self.shared_memory_mib,
                1024,
                262_144,
                "shared_memory_mib",
                hint=" (SGLang with tensor parallelism needs gigabytes of /dev/shm)",
            )
        require_range(self.port, 1024, 65535, "port")
        for index, arg in enumerate(self.extra_args):
            fix = flag_fix(arg)
            require(fix is None, f"extra_args[{index}]", fix or "")
        check_load_signal_props(
            self.target_running_requests_per_task,
            self.max_running_requests,
            "max_running_requests",
            waiting_scale_out=self.waiting_requests_scale_out,
            kv_cache_scale_out_percent=self.kv_cache_scale_out_percent,
        )
        lora = self.lora
        if lora is not None and lora.max_cpu_adapters is not None and lora.expected_adapters is not None:
            require(
                lora.max_cpu_adapters >= lora.expected_adapters,
                "lora.max_cpu_adapters",
                f"{lora.max_cpu_adapters} is below expected_adapters ({lora.expected_adapters}): "
                "SGLang refuses to load "
                "more than --max-loaded-loras, so a task would never serve them all; raise it, or leave it out",
            )

    def shared_memory_for(self, memory_mib: int) -> int:
        """/dev/shm in MiB for a server container of ``memory_mib``: the setting, else half of it, at most 16384."""
        return (
            self.shared_memory_mib
            if self.shared_memory_mib is not None
            else min(SGLANG_MAX_DEFAULT_SHM_MIB, memory_mib // 2)
        )

    def model_source(self, fetcher_image: ecs.ContainerImage | None = None) -> ModelFromS3:
        """The weights copied to ``/scratch/model`` and checked, by init containers from ``fetcher_image``."""
        return ModelFromS3.copy_to_scratch(f"{SCRATCH_PATH}/model", fetcher_image=fetcher_image)

    @property
    def running_target(self) -> int:
        return self.target_running_requests_per_task or max(1, (self.max_running_requests * 3) // 4)


def sglang_liveness(port: int) -> LivenessCheck:
    """SGLang opens its port only once its weights are loaded (entrypoints/engine.py waits for the schedulers before
    the HTTP server starts): :func:`port_liveness` on ``/metrics``, which answers while the HTTP server runs and
    never runs the model (``/health`` answers 503 through the warm-up after the port opens, and generates a token)."""
    return port_liveness(port, "/metrics")


@dataclass(frozen=True)
class SglangServer(LlmPreset[SglangProps]):
    """The SGLang preset: ``props`` (default SglangProps()) say how SGLang serves the model; ``--tp-size`` is the
    model's ``gpus``. ``image``, ``fetcher_image`` and ``collector_image`` (ContainerImage: your own build, for
    example) take the place of the props' ECR mirrors of the same; ``user`` defaults to 1000:1000."""

    props: SglangProps = field(default_factory=lambda: SglangProps())
    """How SGLang serves the model. Default: SglangProps()."""

    name = "sglang"
    support = "experimental"
    support_note = (
        "built from SGLang's documentation and checked at synth; not yet run end to end on a GPU by this "
        "library's tests (vLLM is)"
    )

    def concurrency_limit(self) -> tuple[str, int]:
        return "max_running_requests", self.props.max_running_requests

    props_type = SglangProps
    adapter_server = "sglang"
    collected_metrics = PrometheusMetrics(metrics=SGLANG_METRICS, histograms=SGLANG_LATENCY_HISTOGRAMS)

    @property
    def stop(self) -> StopTiming:
        return sglang_stop(self.props.longest_request_seconds)

    def check(self, model: ModelProps) -> None:
        """What this preset needs of the model, checked before any construct is made."""
        model.check_reserved_environment(SGLANG_RESERVED_ENVIRONMENT, self.name)
        check_heads(model, self.props.attention_heads, "SGLang", "sglang.attention_heads")
        shm = self.props.shared_memory_for(model.memory_mib)
        check_shared_memory(model, shm, "sglang.shared_memory_mib")

    def contract(self, context: ServerContext) -> ServerContract:
        model, props = context.model, self.props
        self.check(model)
        warn_unknown_heads(context, self.props.attention_heads, "SGLang", "sglang.attention_heads")
        image, fetcher_image, collector_image = preset_images(
            self,
            props,
            context,
            "SglangImage",
            (
                "sglang.image",
                "is missing: give the ECR repository and tag of your lmsysorg/sglang mirror, "
                "or pass image= to SglangServer",
            ),
        )
        source = props.model_source(fetcher_image)
        traces = props.opentelemetry and context.trace_sampling_ratio > 0
        command = self._command(context, source.local_path, traces)
        sync = self.adapter_sync_for(
            context, props.mem_fraction_static, props.context_length, props.dtype, "mem_fraction_static"
        )
        running, waiting, kv_cache = (PrometheusMetrics.cloudwatch_name(m) for m in SGLANG_METRICS)
        return ServerContract(
            name=self.name,
            # At tensor-parallel size 1 SGLang's one scheduler process holds the GPU; its HTTP server (tokenizer) and
            # detokenizer processes do not use CUDA for a text model.
            single_cuda_process=model.gpus == 1,
            image=image,
            entry_point=SGLANG_ENTRY_POINT,
            command=command,
            port=props.port,
            # /health generates one token when SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION is true (set below): 503 while
            # SGLang warms up, from SIGTERM on, and once 20 s pass without output from its scheduler.
            readiness_path="/health",
            # --api-key guards every route but /health*, /ready* and /metrics* (utils/auth.py), and with no admin key
            # the client's key also opens SGLang's control routes (/flush_cache, /update_weights_from_disk, ...).
            # Clients reach the OpenAI API and nothing else.
            public_paths=("/v1/*",),
            liveness=sglang_liveness(props.port),
            user=self.user,
            model_source=source,
            shared_memory_mib=props.shared_memory_for(model.memory_mib),
            tmpfs_mib={"/tmp": 2048},  # its Prometheus multiprocess directory and torch's compile caches
            environment=self._environment(context, traces),
            no_traces_reason=(
                None
                if props.opentelemetry
                else "sglang.opentelemetry is false: SGLang traces only where its image carries its tracing "
                "extra (pip install 'sglang[tracing]'); build or mirror such an image and set "
                "sglang.opentelemetry to true"
            ),
            # SGLang takes one literal key: the one of this name in the secret's JSON object (see SglangProps).
            api_keys_variable=SGLANG_API_KEY_VARIABLE,
            api_key_field=props.api_key_name,
            keep_alive_seconds=context.timing.keep_alive_seconds,
            stop=self.stop,
            metrics=dataclasses.replace(self.collected_metrics, collector_image=collector_image),
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

    def _command(self, context: ServerContext, local_path: str, traces: bool) -> tuple[str, ...]:
        """SGLang's arguments for this model: where its weights are, its port and name, its parallelism and memory, its
        metrics and traces, LoRA and the props' extra arguments."""
        model, props = context.model, self.props
        return (
            "--model-path",
            local_path,
            "--host",
            "0.0.0.0",
            "--port",
            str(props.port),
            "--served-model-name",
            props.served_model_name or model.name,
            "--tp-size",
            str(model.gpus),
            "--context-length",
            str(props.context_length),
            "--mem-fraction-static",
            f"{memory_fraction(props.mem_fraction_static, context, 'SGLang'):g}",
            "--max-running-requests",
            str(props.max_running_requests),
            "--dtype",
            props.dtype,
            "--enable-metrics",
            # Its spans over OTLP/gRPC (host:port, SGLang's form) to the task's collector, which sends them to X-Ray.
            *(("--enable-trace", "--otlp-traces-endpoint", OTLP_GRPC_ADDRESS) if traces else ()),
            *self._lora_flags(),
            *props.extra_args,
        )

    def _environment(self, context: ServerContext, traces: bool) -> dict[str, str]:
        """The server container's environment: the model's own, scratch for its caches, no model hub, the keep-alive,
        the health check's generation, the region, a user name and OpenTelemetry's variables."""
        model = context.model
        return {
            **model.environment,
            "HOME": f"{SCRATCH_PATH}/home",
            "XDG_CACHE_HOME": f"{SCRATCH_PATH}/cache",
            "HF_HOME": f"{SCRATCH_PATH}/cache/huggingface",
            # Never reach a model hub: the weights are on the scratch volume.
            "HF_HUB_OFFLINE": "1",
            # Above the ALB idle timeout, or the ALB reuses connections SGLang closed (502s); SGLang's default is 5.
            "SGLANG_TIMEOUT_KEEP_ALIVE": str(context.timing.keep_alive_seconds),
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "true",
            "AWS_DEFAULT_REGION": context.region,
            # The image has no passwd entry for the task's uid.
            **named_user("sglang"),
            # The OpenTelemetry SDK's own variables: the service name and the parent-based ratio sampler.
            **(otel_environment(model.name, context.trace_sampling_ratio) if traces else {}),
        }

    def _lora_flags(self) -> tuple[str, ...]:
        """SGLang's LoRA flags (docs.sglang.io, "LoRA Serving"): on, the adapter slots per batch and in host memory, the
        largest rank and the target modules (both needed when adapters are loaded only at run time)."""
        lora = self.props.lora
        if lora is None:
            return ()
        loaded = ("--max-loaded-loras", str(lora.max_cpu_adapters)) if lora.max_cpu_adapters is not None else ()
        return (
            "--enable-lora",
            "--max-loras-per-batch",
            str(lora.max_gpu_adapters),
            "--max-lora-rank",
            str(lora.max_rank),
            "--lora-target-modules",
            *(lora.target_modules or ("all",)),
            *loaded,
        )
