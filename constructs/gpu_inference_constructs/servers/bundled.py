"""The bundled preset: this repository's model server (inference_image/), its props and its contract."""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..core.errors import require, require_range
from ..core.load_balancer_props import ALB_MAX_IDLE_TIMEOUT_SECONDS, IDLE_TIMEOUT_MARGIN_SECONDS
from ..core.model_props import ModelProps
from ..core.result_cache_props import ModelCacheProps
from ..core.server_contract import (
    BUNDLED_DEFAULT_DRAIN_SECONDS,
    BUNDLED_EXIT_SECONDS,
    SCRATCH_PATH,
    LivenessCheck,
    ModelFromS3,
    ServerContext,
    ServerContract,
    ServerDefinition,
    require_props,
    sidecar_reservation,
)
from ..core.server_facts import SERVER_IMAGE_DIRECTORY as SERVER_IMAGE_DIRECTORY
from ..core.server_facts import SERVER_IMAGE_NAME
from ..core.server_facts import server as server_facts
from ..core.stop_timing import StopTiming
from ..core.task_size import SidecarReservation
from ..task_telemetry.telemetry import OTEL_ENVIRONMENT_KEYS, otel_environment
from .bundled_signals import BUNDLED_ALARMS, BUNDLED_PREDICTION_ROUTES, BundledScalingProps, bundled_scaling_signals

if TYPE_CHECKING:
    from aws_cdk import aws_ecs as ecs
    from constructs import Construct

# The bundled server's own facts (inference_server/facts.py): its MODEL_RUNTIME values, tasks and port.
MODEL_RUNTIMES: tuple[str, ...] = server_facts.RUNTIMES
TASKS: tuple[str, ...] = server_facts.TASKS
TEXT_TASKS: tuple[str, ...] = server_facts.TEXT_TASKS

BUNDLED_PORT: int = server_facts.PORT
BUNDLED_USER = "10001:10001"
BUNDLED_COMMAND = ("python", "-m", "inference_server")
BUNDLED_LIVENESS = ("CMD", "python", "-m", "inference_server.healthcheck")
BUNDLED_READINESS_PATH = "/ready"
# What the listener rule forwards, below /<model>: the inference and metadata routes, every one behind the key
# (the server's own rule: every route but its probes needs one). /predict* is /predict and /predict/batch in one
# pattern and /v2* is the protocol's /v2 (server metadata) and /v2/..., leaving room for the docs within a rule's
# 5 condition values; anything else they match gets the server's 401 without a key. Probes, metrics and (unless
# api_docs) docs are never forwarded: the listener's 404.
BUNDLED_PUBLIC_PATHS = ("/predict*", "/v1/*", "/v2*")
BUNDLED_DOCS_PATHS = ("/docs", "/openapi.json")
MAX_BUNDLED_WORKERS: int = server_facts.MAX_WORKERS  # the server refuses more (its WORKERS)


def bundled_stop(
    drain_seconds: int = BUNDLED_DEFAULT_DRAIN_SECONDS, request_timeout_seconds: int | None = None
) -> StopTiming:
    """This repository's server: drains for ``DRAIN_TIMEOUT_S`` (default 70 s, its settings.py default), then its
    supervisor kills what is left after 15 s more and exits; no request runs past ``REQUEST_TIMEOUT_S``."""
    return StopTiming(drain_seconds, BUNDLED_EXIT_SECONDS, request_timeout_seconds)


def bundled_environment_keys() -> tuple[str, ...]:
    """Variables the bundled preset sets from the model's own keys (ModelProps.environment may not)."""
    return (
        "PORT",
        "MODEL_NAME",
        "MODEL_VERSION",
        "MODEL_URI",
        "MODEL_TASK",
        "MODEL_CACHE_DIR",
        "DEPLOYMENT_ENV",
        "MAX_BATCH_SIZE",
        "MAX_BATCH_WAIT_MS",
        "MAX_QUEUE_SIZE",
        "MAX_SEQUENCE_LENGTH",
        "REQUEST_TIMEOUT_S",
        "DRAIN_TIMEOUT_S",
        "KEEP_ALIVE_S",
        "RESULT_CACHE_SIZE",
        "MODEL_RUNTIME",
        "COMPILE_CACHE_URI",
        "REQUIRE_MANIFEST",
        "API_KEYS",
        "DOCS",
        "AWS_DEFAULT_REGION",
        "HOME",
        "TMPDIR",
        *OTEL_ENVIRONMENT_KEYS,
    )


def bundled_workers(cpu_units: int) -> int:
    """HTTP workers for a bundled-server task reserving ``cpu_units`` (1024 = one vCPU): one per whole vCPU of the
    reservation, less one for the model process (which drives the GPU, batches and runs the forward pass: a core
    of its own), at least 1. ``floor``, not ``ceil``: on ECS on EC2 the reservation is a CPU share, the minimum the
    task is guaranteed under contention, not a limit; the container sees every vCPU of the host (its cgroup has no
    CPU quota), so the server's own default, one worker per CPU it can see, would start 47 on a g5.12xlarge."""
    return max(1, cpu_units // 1024 - 1)


def bundled_workers_for(environment: Mapping[str, str], cpu_units: int) -> int:
    """The bundled server's ``WORKERS``: ``environment["WORKERS"]`` when the model sets it (a whole number from 1 to
    the server's own limit, MAX_BUNDLED_WORKERS), else :func:`bundled_workers` of ``cpu_units``."""
    raw = environment.get("WORKERS")
    if raw is None:
        return bundled_workers(cpu_units)
    require(
        isinstance(raw, str) and re.fullmatch(r"[1-9][0-9]*", raw) is not None and int(raw) <= MAX_BUNDLED_WORKERS,
        "environment.WORKERS",
        f"{raw!r} is not a worker count: set a whole number from 1 to {MAX_BUNDLED_WORKERS} (the bundled server's HTTP "
        f"worker processes), or leave WORKERS out for one per whole vCPU of cpu less one ({bundled_workers(cpu_units)} "
        f"for cpu {cpu_units})",
    )
    return int(raw)


@dataclass(frozen=True)
class BundledServerProps:
    """How the bundled server serves one model: its task, batching, timeouts, runtime and caches."""

    task: str = "text-embedding"
    """What the model does: text-embedding, text-classification, torch-export or image-classification.
    Default: text-embedding."""
    max_batch_size: int = 32
    """Most requests one forward pass batches (1-512). Default: 32."""
    max_batch_wait_ms: int = 2
    """Longest a request waits for others to batch with (0-100 ms). Default: 2."""
    max_queue_size: int = 256
    """Requests queued per task before it answers 503 with Retry-After. Default: 256."""
    max_sequence_length: int = 256
    """Tokens per text; longer texts are truncated (8-8192). Default: 256."""
    request_timeout_seconds: int = 10
    """The longest one request may run, and its default deadline; the load balancer's idle timeout follows it.
    Default: 10."""
    drain_seconds: int = BUNDLED_DEFAULT_DRAIN_SECONDS
    """After SIGTERM, how long the server finishes the requests it accepted (its DRAIN_TIMEOUT_S); it then takes up to
    15 s more to exit, and both must fit the environment's ``ServiceTimingProps.stop_timeout_seconds``. Default: 70."""
    result_cache_size: int = 0
    """Results each task keeps in memory for repeated inputs (0 = off, at most 1000000). Default: 0."""
    runtime: str = "eager"
    """eager, compile, onnx or int8 (the server's MODEL_RUNTIME): all but eager need a version published with
    ``--runtime`` (the converted artifact and its accuracy gate), and only for text tasks. Default: eager."""
    api_docs: bool = False
    """Serve ``/<model>/docs`` and ``/<model>/openapi.json`` behind the API key (the listener rule forwards them);
    off, neither exists and the load balancer answers 404. Default: false."""
    shared_cache: ModelCacheProps = field(default_factory=ModelCacheProps)
    """How the model uses its environment's shared result cache, when the environment has one (the app's stacks
    attach it). Default: on, with ModelCacheProps' defaults."""
    scaling: BundledScalingProps = field(default_factory=BundledScalingProps)
    """The thresholds of its own scaling signals: queue depth, GPU utilisation, CPU while the queue grows (cdk.json:
    the model's ``scaling`` block). Default: BundledScalingProps()."""

    def __post_init__(self) -> None:
        require(self.task in TASKS, "task", f"{self.task!r} is not supported; use one of: {', '.join(TASKS)}")
        require_range(self.max_batch_size, 1, 512, "max_batch_size")
        require_range(self.max_batch_wait_ms, 0, 100, "max_batch_wait_ms", hint=" (a few ms is right)")
        require_range(self.max_queue_size, 1, 100_000, "max_queue_size")
        require_range(self.max_sequence_length, 8, 8192, "max_sequence_length")
        require_range(
            self.request_timeout_seconds,
            1,
            ALB_MAX_IDLE_TIMEOUT_SECONDS - IDLE_TIMEOUT_MARGIN_SECONDS,
            "request_timeout_seconds",
            hint=" (the load balancer's idle timeout, at most 4000 s, is derived from it)",
        )
        require_range(
            self.drain_seconds,
            5,
            120 - BUNDLED_EXIT_SECONDS,
            "drain_seconds",
            hint=f" (with the {BUNDLED_EXIT_SECONDS} s the server then takes to exit, inside the 2-minute Spot notice)",
        )
        require(
            self.scaling.queue_depth_scale_out < self.max_queue_size,
            "scaling.queue_depth_scale_out",
            f"{self.scaling.queue_depth_scale_out} can never be passed: a task queues at most max_queue_size "
            f"({self.max_queue_size}); lower it, or raise max_queue_size",
        )
        require(
            0 <= self.result_cache_size <= 1_000_000,
            "result_cache_size",
            f"{self.result_cache_size} is out of range; allowed 0 (off) to 1000000",
        )
        require(
            self.runtime in MODEL_RUNTIMES,
            "runtime",
            f"{self.runtime!r}: use one of {', '.join(MODEL_RUNTIMES)} "
            f"(publish the version with --runtime {self.runtime})",
        )
        require(
            self.runtime == "eager" or self.task in TEXT_TASKS,
            "runtime",
            f"{self.runtime!r} is built for the bundled server's text-classification and text-embedding; "
            "use eager for this model",
        )


@runtime_checkable
class HandlerImage(Protocol):
    """An image of the bundled server with a team's handler in it (``bundled_server_image(handler=...)`` makes one, a
    ``BundledServerImage``): the handler it runs, and the check that its build context outlives synth."""

    handler: str

    def check_staging(self, scope: Construct) -> None: ...


@dataclass(frozen=True)
class BundledServer(ServerDefinition):
    """This repository's server (inference_image/): one GPU, port 8080, ``/ready``, uid 10001,
    downloads and verifies its model itself, emits the library's EMF metrics, runs
    :func:`bundled_workers` HTTP workers for the model's ``cpu``, or ``environment["WORKERS"]`` when the model sets
    it (a whole number from 1 to 256; see :func:`bundled_workers_for`)."""

    props: BundledServerProps = field(default_factory=BundledServerProps)
    """The server's settings for this model. Default: BundledServerProps()."""
    image: ecs.ContainerImage | None = None
    """Default: :func:`bundled_server_image` (built by ``cdk deploy`` from the package's own copy of
    inference_image/); pass your ECR copy of it where the deploying machine has no Docker. An image made by
    ``bundled_server_image(handler_package=..., handler=...)`` carries the team's handler: the task then sets
    ``MODEL_HANDLER`` to it."""

    name = "bundled"
    sheds_load_itself = True  # its admission answers 503 once the queue is full

    def cache_client(self) -> ModelCacheProps:
        return self.props.shared_cache

    def __post_init__(self) -> None:
        require_props(self.props, BundledServerProps, type(self).__name__)

    @property
    def stop(self) -> StopTiming:
        return bundled_stop(self.props.drain_seconds, self.props.request_timeout_seconds)

    @property
    def longest_request_seconds(self) -> int:
        return self.props.request_timeout_seconds

    @property
    def sidecar_reservation(self) -> SidecarReservation:
        return sidecar_reservation(ModelFromS3.server_downloads(), None)

    def check(self, model: ModelProps) -> None:
        """What this preset needs of the model, checked before any construct is made."""
        require(
            model.gpus == 1,
            "gpus",
            f"{model.gpus}: the bundled server uses one GPU per task; run more tasks, or serve with vLLM (VllmServer) "
            "for tensor parallelism",
        )
        model.check_reserved_environment(bundled_environment_keys(), self.name)
        handler = self.handler
        require(
            handler is None or "MODEL_HANDLER" not in model.environment,
            "environment",
            f"['MODEL_HANDLER'] is {model.environment.get('MODEL_HANDLER')!r}, but the image was built with the "
            f"handler {handler!r} (bundled_server_image(handler=...)), which the task sets: remove "
            "environment['MODEL_HANDLER']",
        )
        bundled_workers_for(model.environment, model.cpu)

    @property
    def handler(self) -> str | None:
        """The team's handler the image was built with (``bundled_server_image(handler=...)``), else None."""
        return self.image.handler if isinstance(self.image, HandlerImage) else None

    def contract(self, context: ServerContext) -> ServerContract:
        model, timing, props = context.model, context.timing, self.props
        self.check(model)
        if isinstance(self.image, HandlerImage):
            self.image.check_staging(context.scope)
        environment = {
            **model.environment,
            "PORT": str(BUNDLED_PORT),
            "MODEL_NAME": model.name,
            "MODEL_VERSION": model.version,
            "MODEL_URI": context.model_uri,
            "MODEL_TASK": props.task,
            "MODEL_CACHE_DIR": f"{SCRATCH_PATH}/model-cache",
            "REQUIRE_MANIFEST": "true",
            "DEPLOYMENT_ENV": context.environment_name,
            "MAX_BATCH_SIZE": str(props.max_batch_size),
            "MAX_BATCH_WAIT_MS": str(props.max_batch_wait_ms),
            "MAX_QUEUE_SIZE": str(props.max_queue_size),
            "MAX_SEQUENCE_LENGTH": str(props.max_sequence_length),
            "REQUEST_TIMEOUT_S": str(props.request_timeout_seconds),
            "DRAIN_TIMEOUT_S": str(props.drain_seconds),
            "KEEP_ALIVE_S": str(timing.keep_alive_seconds),
            "RESULT_CACHE_SIZE": str(props.result_cache_size),
            **({"MODEL_RUNTIME": props.runtime} if props.runtime != "eager" else {}),
            **({"MODEL_HANDLER": self.handler} if self.handler is not None else {}),
            "DOCS": "true" if props.api_docs else "false",
            "WORKERS": str(bundled_workers_for(model.environment, model.cpu)),
            "AWS_DEFAULT_REGION": context.region,
            "HOME": f"{SCRATCH_PATH}/home",
            "TMPDIR": f"{SCRATCH_PATH}/tmp",
            # Spans over OTLP/HTTP to the task's collector, which sends them to X-Ray.
            **otel_environment(model.name, context.trace_sampling_ratio),
        }
        return ServerContract(
            name=self.name,
            # The model process alone uses the GPU; the HTTP workers tokenize on the CPU.
            single_cuda_process=True,
            image=self.image or context.asset_image(str(SERVER_IMAGE_DIRECTORY), SERVER_IMAGE_NAME),
            command=BUNDLED_COMMAND,
            port=BUNDLED_PORT,
            readiness_path=BUNDLED_READINESS_PATH,
            # /health answers as soon as the server listens, while the model loads (/ready answers 503 "loading").
            liveness=LivenessCheck(command=BUNDLED_LIVENESS, passes_while_loading=True),
            user=BUNDLED_USER,
            model_source=ModelFromS3.server_downloads("MODEL_URI"),
            environment=environment,
            # The compiled kernels of one task on a kind of GPU serve the next (inference_server/compile_cache.py).
            compile_cache_variable="COMPILE_CACHE_URI" if props.runtime == "compile" else None,
            api_keys_variable="API_KEYS",
            public_paths=BUNDLED_PUBLIC_PATHS + (BUNDLED_DOCS_PATHS if props.api_docs else ()),
            scaling_signals=bundled_scaling_signals(props.scaling, props.max_queue_size),
            # Its EMF lines on stdout (inference_server/emf.py), every metric its facts name.
            emf_metrics=tuple(server_facts.METRIC_NAMES),
            alarms=BUNDLED_ALARMS,
            prediction_routes=BUNDLED_PREDICTION_ROUTES,
            serves_at_root=False,
            keep_alive_seconds=timing.keep_alive_seconds,
            queue_capacity=props.max_queue_size,
            stop=self.stop,
        )


def __getattr__(name: str) -> object:
    """``bundled_server_image``, 0.3.0's path: it moved to ``servers.handler_image`` (it needs aws_cdk, this module
    does not load it). Warns; remove in 0.4."""
    if name != "bundled_server_image":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"{__name__}.bundled_server_image moved to gpu_inference_constructs.servers.handler_image (import it from "
        "there, or from gpu_inference_constructs); the old path goes in 0.4",
        DeprecationWarning,
        stacklevel=2,
    )
    from .handler_image import bundled_server_image

    return bundled_server_image
