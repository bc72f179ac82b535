"""The vLLM preset: vLLM's OpenAI-compatible server (``vllm serve``) and its contract; its props are in vllm_props."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field

from ..core.adapter_sync import REQUEST_LOG_DIRECTORY, REQUEST_LOG_MIDDLEWARE
from ..core.errors import require
from ..core.model_props import ModelProps
from ..core.server_contract import (
    SCRATCH_PATH,
    LivenessCheck,
    ModelFromS3,
    PrometheusMetrics,
    ServerContext,
    ServerContract,
    named_user,
    port_liveness,
)
from ..core.stop_timing import StopTiming
from ..task_telemetry.otel_collector import GEN_AI_TIME_PER_OUTPUT_TOKEN, GEN_AI_TIME_TO_FIRST_TOKEN
from ..task_telemetry.telemetry import OTLP_GRPC_ADDRESS, otel_environment
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
from .vllm_props import DEFAULT_STREAM_BUFFER_MIB as DEFAULT_STREAM_BUFFER_MIB
from .vllm_props import VLLM_LORA_RANKS as VLLM_LORA_RANKS
from .vllm_props import VLLM_MAX_DEFAULT_SHM_MIB as VLLM_MAX_DEFAULT_SHM_MIB
from .vllm_props import VLLM_OWNED_FLAGS as VLLM_OWNED_FLAGS
from .vllm_props import VLLM_RESERVED_ENVIRONMENT as VLLM_RESERVED_ENVIRONMENT
from .vllm_props import VLLM_STREAM_ENVIRONMENT as VLLM_STREAM_ENVIRONMENT
from .vllm_props import VLLM_STREAM_FLAGS as VLLM_STREAM_FLAGS
from .vllm_props import VllmProps as VllmProps
from .vllm_stop import VLLM_EXIT_SECONDS as VLLM_EXIT_SECONDS
from .vllm_stop import VLLM_LONGEST_REQUEST_SECONDS as VLLM_LONGEST_REQUEST_SECONDS
from .vllm_stop import vllm_drain_seconds as vllm_drain_seconds
from .vllm_stop import vllm_stop as vllm_stop

# vLLM's images carry the OpenTelemetry packages --otlp-traces-endpoint imports from v0.17.0 on (docs/aws-facts.md,
# "vLLM and OpenTelemetry"): earlier tags exit at start with the flag. The one command that checks a mirror:
VLLM_OPENTELEMETRY_SINCE = (0, 17, 0)
VLLM_RELEASE_TAG = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")
VLLM_OPENTELEMETRY_CHECK = (
    "docker run --rm --entrypoint python3 <your mirror>:<tag> -c "
    "'import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.grpc'"
)


# With adapters, vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter answer any holder of the key (runtime
# updating is on for the adapter-sync sidecar): clients reach only the inference routes and the model list.
VLLM_LORA_PUBLIC_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/v1/responses*")
# The image's own ENTRYPOINT differs by release (`vllm serve` now, `python3 -m vllm.entrypoints.openai.api_server`
# before): the task sets it, so the command is vLLM's arguments whatever the mirror's release.
VLLM_ENTRY_POINT = ("vllm", "serve")
VLLM_METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
# vLLM's time to first token and time between output tokens per request, Prometheus histograms in seconds
# (vllm/v1/metrics/loggers.py; vllm:inter_token_latency_seconds replaced vllm:time_per_output_token_seconds),
# brought into CloudWatch under the OpenTelemetry GenAI names by the ADOT collector.
VLLM_LATENCY_HISTOGRAMS = (
    ("vllm:time_to_first_token_seconds", GEN_AI_TIME_TO_FIRST_TOKEN),
    ("vllm:inter_token_latency_seconds", GEN_AI_TIME_PER_OUTPUT_TOKEN),
)


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
        command = self._command(context, source, no_traces)
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
            environment=self._environment(context),
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

    def _command(self, context: ServerContext, source: ModelFromS3, no_traces: str | None) -> tuple[str, ...]:
        """vLLM's arguments for this model: its weights (copied to scratch by ``source``, or streamed from the model
        bucket), its port and name, its parallelism and memory, its traces, LoRA, its drain and the props' extra
        arguments."""
        model, props = context.model, self.props
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
        return (
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

    def _environment(self, context: ServerContext) -> dict[str, str]:
        """The server container's environment: the model's own, scratch for its caches, no model hub or usage
        reports, the keep-alive, the region, a user name, OpenTelemetry's variables, the streamer's and LoRA's."""
        model, props, lora = context.model, self.props, self.props.lora
        return {
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
            # The adapter-sync sidecar loads and unloads adapters through /v1/load_lora_adapter while vLLM runs,
            # and vLLM imports the request-log middleware the scratch owner wrote.
            **(
                {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "PYTHONPATH": REQUEST_LOG_DIRECTORY}
                if lora is not None
                else {}
            ),
        }

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
