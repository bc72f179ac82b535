"""Server presets beside the bundled server, vLLM and SGLang (their own modules): NVIDIA Triton and Hugging Face TGI.

Each turns its own props and the model's (``ModelProps``: GPUs, memory, name) into a :class:`ServerContract`, with
the server's own ports, health paths, metrics and stop behaviour, so a team does not hand-write them.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_ecs as ecs

from ..core.errors import ConfigError, require, require_range
from ..core.server_contract import (
    SCRATCH_PATH,
    EcrImage,
    ModelFromS3,
    PrometheusMetrics,
    ScalingSignal,
    ServerContext,
    ServerContract,
    ServerDefinition,
    named_user,
    port_liveness,
    require_props,
)
from ..core.stop_timing import StopTiming

# Triton's documented defaults: HTTP 8000, gRPC 8001, Prometheus metrics 8002 (/metrics); KServe v2 health paths.
TRITON_HTTP_PORT = 8000
TRITON_METRICS_PORT = 8002
TRITON_METRICS = (
    "nv_inference_pending_request_count",
    "nv_inference_queue_duration_us",
    "nv_inference_request_success",
    "nv_gpu_utilization",
    "nv_gpu_memory_used_bytes",
)
# KServe v2 inference routes (the body is the tensors).
TRITON_PREDICTION_ROUTES = ("/v2/models/{model}/infer", "/v2/models/{model}/versions/{version}/infer")
TRITON_UNLOAD_SECONDS = 10
TRITON_OWNED_FLAGS = (
    "--model-repository",
    "--http-port",
    "--metrics-port",
    "--exit-timeout-secs",
    "--allow-grpc",
    "--allow-metrics",
    "--model-control-mode",
    "--strict-readiness",
    "--http-address",
)
# TGI: the launcher's /health, /metrics on the same port (TGI documentation, "Metrics").
TGI_PORT = 8080
TGI_METRICS = ("tgi_queue_size", "tgi_batch_current_size")
# TGI's routes that take a prompt: its own and the OpenAI-compatible ones.
TGI_PREDICTION_ROUTES = ("/generate", "/generate_stream", "/v1/chat/completions", "/v1/completions")
TGI_SHARD_EXIT_SECONDS = 20
TGI_OWNED_FLAGS = (
    "--model-id",
    "--port",
    "--hostname",
    "--num-shard",
    "--max-concurrent-requests",
    "--huggingface-hub-cache",
)
TGI_PYTHON_WARNING = "gpu-inference:tgi-python-under-root"
# Hugging Face put TGI in maintenance mode on 2025-12-11 (huggingface/text-generation-inference#3345, its README's
# caution banner): minor fixes only from then on, v3.3.7 (2025-12-19) its last release; the banner recommends vLLM
# and SGLang going forward. The preset keeps working; every model on it is told where to move.
TGI_MAINTENANCE_WARNING = "gpu-inference:tgi-maintenance"


def triton_stop(exit_timeout_seconds: int = 30) -> StopTiming:
    """NVIDIA Triton: on SIGTERM it waits for in-flight inferences up to ``--exit-timeout-secs`` (default 30; pass
    the same value in the command), then unloads its models (10 s)."""
    return StopTiming(exit_timeout_seconds, TRITON_UNLOAD_SECONDS)


def tgi_stop(longest_request_seconds: int = 60) -> StopTiming:
    """Hugging Face TGI (``text-generation-launcher``): on SIGTERM its router stops taking requests and finishes
    the running ones (the launcher waits up to 90 s for it), then the launcher stops the shards. The drain lasts as
    long as the longest generation, so say it: ``longest_request_seconds`` (default 60; bound it with
    ``--max-new-tokens``); shards: 20 s."""
    return StopTiming(longest_request_seconds, TGI_SHARD_EXIT_SECONDS, longest_request_seconds)


def _sidecar_images(
    props: TritonProps | TgiProps, context: ServerContext
) -> tuple[ecs.ContainerImage | None, ecs.ContainerImage | None]:
    """(model fetcher, metrics collector) images from the props' ECR mirrors, or None for the pinned public ones."""
    fetcher = context.ecr_image(props.fetcher_image, "FetcherImage") if props.fetcher_image else None
    collector = context.ecr_image(props.collector_image, "CollectorImage") if props.collector_image else None
    return fetcher, collector


def _check_extra_args(extra_args: tuple[str, ...], owned: tuple[str, ...]) -> None:
    for index, arg in enumerate(extra_args):
        require(
            arg.split("=")[0] not in owned,
            f"extra_args[{index}]",
            f"{arg!r} is set from its own key; set that key instead",
        )


def _image(
    image: EcrImage | None, override: ecs.ContainerImage | None, context: ServerContext, key: str
) -> ecs.ContainerImage:
    if override is not None:
        return override
    if image is None:
        raise ConfigError(
            key, "is missing: give the ECR repository and tag of your mirror of the server's image, or pass image="
        )
    return context.ecr_image(image, "ServerImage")


@dataclass(frozen=True)
class TritonProps:
    """NVIDIA Triton Inference Server for one model (its model repository layout under the model's S3 prefix:
    ``config.pbtxt`` and ``1/``, copied to ``/scratch/models/<model name>/`` before Triton starts).

    ``image``: your ECR mirror of ``nvcr.io/nvidia/tritonserver`` (default None: pass ``image=`` to TritonServer).
    ``http_port`` (default 8000) and ``metrics_port`` (default 8002) are Triton's own defaults; gRPC is off.
    ``exit_timeout_seconds`` (default 30): Triton's ``--exit-timeout-secs``, how long it finishes in-flight inferences
    after SIGTERM (see :func:`triton_stop`). Scaling: hold ``pending_requests_per_task`` (default 8) requests
    pending per task (``nv_inference_pending_request_count``; target tracking adds and removes tasks).
    ``extra_args`` (default none) go after the preset's flags; flags the preset sets are refused.
    """

    image: EcrImage | None = None
    """Your ECR mirror of Triton's image. Default: None (pass ``TritonServer(image=...)``)."""
    http_port: int = TRITON_HTTP_PORT
    """Triton's HTTP port. Default: 8000."""
    metrics_port: int = TRITON_METRICS_PORT
    """Triton's Prometheus port. Default: 8002."""
    exit_timeout_seconds: int = 30
    """How long Triton waits for in-flight inferences after SIGTERM (``--exit-timeout-secs``). Default: 30."""
    pending_requests_per_task: int = 8
    """The pending requests per task target tracking holds. Default: 8."""
    extra_args: tuple[str, ...] = ()
    """More of Triton's flags, none of those the preset sets. Default: none."""
    fetcher_image: EcrImage | None = None
    """Your ECR mirror of the model fetcher's image. Default: None (DEFAULT_FETCHER_IMAGE)."""
    collector_image: EcrImage | None = None
    """Your ECR mirror of the metrics collector's image. Default: None (DEFAULT_COLLECTOR_IMAGE)."""

    def __post_init__(self) -> None:
        require_range(self.http_port, 1024, 65535, "http_port")
        require_range(self.metrics_port, 1024, 65535, "metrics_port")
        require(
            self.metrics_port != self.http_port,
            "metrics_port",
            f"{self.metrics_port} is also http_port: Triton needs two ports",
        )
        require_range(
            self.exit_timeout_seconds,
            0,
            100,
            "exit_timeout_seconds",
            hint=" (inside the 2-minute Spot notice with the 10 s unload)",
        )
        require_range(self.pending_requests_per_task, 1, 10_000, "pending_requests_per_task")
        _check_extra_args(self.extra_args, TRITON_OWNED_FLAGS)


@dataclass(frozen=True)
class TritonServer(ServerDefinition):
    """The Triton preset: ``props`` (default TritonProps()); ``image`` overrides ``props.image``; ``user`` (default
    1000:1000, Triton's image's ``triton-server`` user)."""

    props: TritonProps = TritonProps()
    """How Triton serves the model. Default: TritonProps()."""
    image: ecs.ContainerImage | None = None
    """The server's image, in place of ``props.image``. Default: None."""
    user: str = "1000:1000"
    """The uid:gid Triton runs as (its image's ``triton-server``). Default: 1000:1000."""

    name = "triton"

    def __post_init__(self) -> None:
        require_props(self.props, TritonProps, type(self).__name__)

    def contract(self, context: ServerContext) -> ServerContract:
        model, props = context.model, self.props
        fetcher, collector = _sidecar_images(props, context)
        repository = f"{SCRATCH_PATH}/models"
        pending = PrometheusMetrics.cloudwatch_name(TRITON_METRICS[0])
        return ServerContract(
            name=self.name,
            image=_image(props.image, self.image, context, "server.image"),
            command=(
                "tritonserver",
                f"--model-repository={repository}",
                f"--http-port={props.http_port}",
                "--allow-grpc=false",
                "--allow-metrics=true",
                f"--metrics-port={props.metrics_port}",
                f"--exit-timeout-secs={props.exit_timeout_seconds}",
                "--model-control-mode=none",
                "--strict-readiness=true",
                *props.extra_args,
            ),
            port=props.http_port,
            readiness_path="/v2/health/ready",
            liveness=port_liveness(props.http_port, "/v2/health/live"),
            user=self.user,
            model_source=ModelFromS3.copy_to_scratch(f"{repository}/{model.name}", fetcher_image=fetcher),
            shared_memory_mib=min(4096, model.memory_mib // 4),
            tmpfs_mib={"/tmp": 1024},
            environment={**model.environment, "HOME": f"{SCRATCH_PATH}/home", "AWS_DEFAULT_REGION": context.region},
            public_paths=("/v2/models/*",),
            stop=triton_stop(props.exit_timeout_seconds),
            prediction_routes=TRITON_PREDICTION_ROUTES,
            metrics=PrometheusMetrics(metrics=TRITON_METRICS, port=props.metrics_port, collector_image=collector),
            scaling_signals=(ScalingSignal(pending, statistic="Average", target=props.pending_requests_per_task),),
        )


@dataclass(frozen=True)
class TgiProps:
    """Hugging Face Text Generation Inference (``text-generation-launcher``) for one model, its weights copied from
    the model's S3 prefix to ``/scratch/model`` (``--model-id``), sharded over the model's ``gpus`` (``--num-shard``).
    TGI is in maintenance mode (2025-12): synth warns ``gpu-inference:tgi-maintenance``, naming VllmServer and
    SglangServer.

    ``image``: your ECR mirror of ``ghcr.io/huggingface/text-generation-inference`` (default None: pass ``image=``).
    ``port`` (default 8080; metrics on the same port, ``/metrics``); ``max_concurrent_requests`` (default 128);
    ``longest_request_seconds`` (default 60): the longest generation (bound it with ``--max-new-tokens`` in
    ``extra_args``): TGI drains that long after SIGTERM (:func:`tgi_stop`). Scaling: hold
    ``batch_size_per_task`` (default 16) requests in the running batch per task, and add tasks when more than
    ``queue_scale_out`` (default 8) wait.
    """

    image: EcrImage | None = None
    """Your ECR mirror of TGI's image. Default: None (pass ``TgiServer(image=...)``)."""
    port: int = TGI_PORT
    """TGI's port (metrics on the same, ``/metrics``). Default: 8080."""
    max_concurrent_requests: int = 128
    """The most requests TGI takes at once. Default: 128."""
    longest_request_seconds: int = 60
    """The longest generation: TGI drains that long after SIGTERM. Default: 60."""
    batch_size_per_task: int = 16
    """The running batch per task target tracking holds. Default: 16."""
    queue_scale_out: int = 8
    """Queued requests above which tasks are added. Default: 8."""
    extra_args: tuple[str, ...] = ()
    """More of TGI's flags, none of those the preset sets. Default: none."""
    fetcher_image: EcrImage | None = None
    """Your ECR mirror of the model fetcher's image. Default: None (DEFAULT_FETCHER_IMAGE)."""
    collector_image: EcrImage | None = None
    """Your ECR mirror of the metrics collector's image. Default: None (DEFAULT_COLLECTOR_IMAGE)."""

    def __post_init__(self) -> None:
        require_range(self.port, 1024, 65535, "port")
        require_range(self.max_concurrent_requests, 1, 100_000, "max_concurrent_requests")
        require_range(
            self.longest_request_seconds,
            1,
            90,
            "longest_request_seconds",
            hint=" (the launcher waits at most 90 s for its router)",
        )
        require_range(
            self.batch_size_per_task,
            1,
            self.max_concurrent_requests,
            "batch_size_per_task",
            hint=" (at most max_concurrent_requests)",
        )
        require_range(self.queue_scale_out, 1, 100_000, "queue_scale_out")
        _check_extra_args(self.extra_args, TGI_OWNED_FLAGS)


@dataclass(frozen=True)
class TgiServer(ServerDefinition):
    """The TGI preset: ``props`` (default TgiProps()); ``image`` overrides ``props.image``; ``user`` (default
    1000:1000)."""

    props: TgiProps = TgiProps()
    """How TGI serves the model. Default: TgiProps()."""
    image: ecs.ContainerImage | None = None
    """The server's image, in place of ``props.image``. Default: None."""
    user: str = "1000:1000"
    """The uid:gid TGI runs as. Default: 1000:1000."""

    name = "tgi"
    support = "deprecated"
    support_note = (
        "Hugging Face TGI is in maintenance mode since 2025-12-11 (v3.3.7 its last release: minor fixes "
        "only, no new models or features; its README recommends vLLM and SGLang): move to "
        "server=VllmServer(VllmProps(...)) or server=SglangServer(SglangProps(...)), both OpenAI-compatible "
        'under /v1 (docs/configuration.md, "SGLang, and leaving TGI")'
    )

    def deprecation_warning_id(self) -> str:
        return TGI_MAINTENANCE_WARNING  # its id since 0.2, which teams have acknowledged

    def concurrency_limit(self) -> tuple[str, int]:
        return "max_concurrent_requests", self.props.max_concurrent_requests

    def __post_init__(self) -> None:
        require_props(self.props, TgiProps, type(self).__name__)

    def contract(self, context: ServerContext) -> ServerContract:
        model, props = context.model, self.props
        # The image sets HF_HOME=/data, on the read-only root.
        own_environment = {
            "HOME": f"{SCRATCH_PATH}/home",
            "HF_HOME": f"{SCRATCH_PATH}/cache/huggingface",
            "HF_HUB_OFFLINE": "1",
            "AWS_DEFAULT_REGION": context.region,
            **named_user("tgi"),
        }
        model.check_reserved_environment(tuple(own_environment), "tgi")
        fetcher, collector = _sidecar_images(props, context)
        model_path = f"{SCRATCH_PATH}/model"
        queue, batch = (PrometheusMetrics.cloudwatch_name(m) for m in TGI_METRICS)
        context.warn(
            TGI_PYTHON_WARNING,
            f"TGI images from 3.1 install their Python under /root (mode 0700): run as {self.user} the launcher cannot "
            "load libpython and exits (huggingface/text-generation-inference#3082). Mirror an image that opens it "
            "(FROM <the TGI image>, then RUN chmod o+x /root) or pass a user= that can read it; once checked, "
            f"acknowledge it: cdk.Annotations.of(<this ModelService>).acknowledge_warning('{TGI_PYTHON_WARNING}')",
        )
        return ServerContract(
            name=self.name,
            image=_image(props.image, self.image, context, "server.image"),
            entry_point=("text-generation-launcher",),
            command=(
                "--model-id",
                model_path,
                "--hostname",
                "0.0.0.0",
                "--port",
                str(props.port),
                "--num-shard",
                str(model.gpus),
                "--max-concurrent-requests",
                str(props.max_concurrent_requests),
                "--huggingface-hub-cache",
                f"{SCRATCH_PATH}/cache/huggingface",
                *props.extra_args,
            ),
            port=props.port,
            readiness_path="/health",
            liveness=port_liveness(props.port, "/health"),
            user=self.user,
            model_source=ModelFromS3.copy_to_scratch(model_path, fetcher_image=fetcher),
            shared_memory_mib=min(4096, model.memory_mib // 4),
            tmpfs_mib={"/tmp": 2048},
            environment={**model.environment, **own_environment},
            public_paths=("/generate", "/generate_stream", "/v1/*"),
            stop=tgi_stop(props.longest_request_seconds),
            prediction_routes=TGI_PREDICTION_ROUTES,
            metrics=PrometheusMetrics(metrics=TGI_METRICS, collector_image=collector),
            scaling_signals=(
                ScalingSignal(batch, target=props.batch_size_per_task),
                ScalingSignal(queue, statistic="Maximum", scale_out_above=props.queue_scale_out),
            ),
        )
