"""The contract between a model server container and the infrastructure that runs it.

A container must declare what ECS, the load balancer and auto scaling need: its image and
command, the port it listens on, the path that answers 200 once it can serve (ALB readiness),
a cheap liveness command (container health check), GPUs per task, the size of ``/dev/shm``,
where it may write, its user, its environment and secrets, where its model comes from and
which metrics it emits for scaling. :class:`ServerContract` holds all of it; ``ModelService``
builds the task definition, target group and scaling from it and from nothing else.

Presets build a contract for one model: :class:`BundledServer` (this repository's server, the
default) and :class:`VllmServer` (vLLM's OpenAI-compatible server). A team with its own image
passes a :class:`ServerContract` directly. Every contract is checked when it is made: one that
leaves out something the infrastructure needs fails with a message naming it.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .adapter_sync import ADAPTER_READY_PATH, ADAPTER_SYNC_CPU, ADAPTER_SYNC_MEMORY_MIB, AdapterSync
from .ecr_image import EcrImage as EcrImage
from .ecr_image import registry_host as registry_host
from .errors import ConfigError, require, require_range
from .instance_catalog import GpuInstanceType
from .legacy_keywords import with_legacy_keywords
from .liveness_check import LivenessCheck
from .liveness_check import port_liveness as port_liveness
from .model_props import ModelProps
from .model_source import FETCH_CONTAINERS as FETCH_CONTAINERS
from .model_source import PATH, SCRATCH_PATH, ModelFromS3
from .preset_arguments import require_one_image as require_one_image
from .preset_arguments import require_props as require_props
from .prometheus_metrics import PrometheusMetrics
from .prometheus_metrics import collector_config as collector_config
from .server_command import check_command
from .server_command import command_flag as command_flag
from .server_command import holds_token as holds_token
from .server_facts import server as server_facts
from .server_signals import ExpressionSignal, ScalingSignal, ServerAlarm, alarms_of_signals
from .service_timing import ServiceTimingProps
from .stop_timing import StopTiming
from .stop_timing import drain_after_delay as drain_after_delay
from .task_size import SidecarReservation

if TYPE_CHECKING:
    from aws_cdk import aws_ecs as ecs
    from constructs import Construct

    # aws_cdk is imported where a construct is built, so the props load without it (the sizing advisor)
    from .result_cache_props import ModelCacheProps

ROOT_USERS = frozenset({"0", "root"})
USER = re.compile(r"^[0-9]+(:[0-9]+)?$")
PUBLIC_PATH = re.compile(r"^/[A-Za-z0-9._/*?-]*$")
PREDICTION_ROUTE = re.compile(r"^/[A-Za-z0-9._/{}-]*$")
# An ALB rule's limits (Elastic Load Balancing quotas, "Rules"): condition values and wildcards per rule.
MAX_RULE_CONDITION_VALUES = 5
MAX_RULE_CONDITION_WILDCARDS = 5
# Names of the keys in the API-key secret's JSON object (as the bundled server's API_KEYS accepts them).
API_KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# The name of the key the shared stack generates in the secret; vLLM reads it unless vllm.api_key_name says another.
DEFAULT_API_KEY_NAME = "default"
# Pinned tags seen in public sources (DESIGN.md: never a digest not seen). In a VPC without a route
# to the internet, pass copies from your own ECR (a mirror, or a pull-through cache rule for public.ecr.aws).
DEFAULT_FETCHER_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.32.9"
DEFAULT_COLLECTOR_IMAGE = "public.ecr.aws/cloudwatch-agent/cloudwatch-agent:1.300059.0b1207"
# Each of the two init containers that put a model on scratch (scratch-owner, model-fetch): ECS reserves both.
FETCHER_CPU, FETCHER_MEMORY_MIB = 128, 256
# The collector of a task whose server exports no Prometheus metrics (traces only): the ADOT collector's reservation
# (a soft reservation: ECS sets no hard limit on it; AWS's own ADOT ECS test task gives it 10 CPU units, 256 MiB).
TRACE_COLLECTOR_CPU, TRACE_COLLECTOR_MEMORY_MIB = 64, 128
# The bundled server's measured default (inference_server/facts.py), every server's unless the environment sets one.
DEFAULT_TRACE_SAMPLING_RATIO: float = server_facts.TRACE_SAMPLE_RATIO


# The bundled server (inference_image/inference_server): SIGTERM -> every HTTP worker finishes its accepted requests
# for at most DRAIN_TIMEOUT_S (default 70), then the supervisor gives what is left 15 s before it kills it and exits:
# the server's own facts (inference_server/facts.py).
BUNDLED_DEFAULT_DRAIN_SECONDS: int = server_facts.DRAIN_TIMEOUT_S
BUNDLED_EXIT_SECONDS: int = server_facts.EXIT_GRACE_S


def sidecar_reservation(
    model_source: ModelFromS3, metrics: PrometheusMetrics | None, adapter_sync: bool = False
) -> SidecarReservation:
    """(CPU units, MiB) of the containers beside the server, each named (``parts``): the init containers that
    prepare scratch and copy a model to it, the collector every task has (traces; and the server's Prometheus
    metrics, with ``metrics``' own reservation) and, for a server with LoRA adapters (``adapter_sync``), the
    ``adapter-sync`` sidecar. The one calculation of a task's size, for the constructs and the app's config alike."""
    count = model_source.init_containers
    init = "scratch owner and model fetcher" if count == FETCH_CONTAINERS else "scratch owner"
    parts = [(init, count * FETCHER_CPU, count * FETCHER_MEMORY_MIB)] if count else []
    if metrics is not None:
        parts.append(("metrics collector", metrics.collector_cpu, metrics.collector_memory_mib))
    else:
        parts.append(("trace collector", TRACE_COLLECTOR_CPU, TRACE_COLLECTOR_MEMORY_MIB))
    if adapter_sync:
        parts.append(("adapter sync", ADAPTER_SYNC_CPU, ADAPTER_SYNC_MEMORY_MIB))
    return SidecarReservation(tuple(parts))


Accelerator = Literal["cuda", "neuron"]
ACCELERATORS: tuple[Accelerator, ...] = ("cuda", "neuron")
SupportLevel = Literal["supported", "experimental", "deprecated"]
SUPPORT_LEVELS: tuple[SupportLevel, ...] = ("supported", "experimental", "deprecated")


class ServerDefinition(ABC):
    """A server ``ModelService`` can run: its contract for one model, and what it declares about itself."""

    name: str = "custom"
    """The server's name in messages and graphs. Default: "custom"."""
    accelerator: Accelerator = "cuda"
    """What its image and model are built for: ``cuda`` (NVIDIA GPUs) or ``neuron`` (Inferentia2/Trainium);
    ``ModelService`` refuses capacity of the other kind before the contract is built. Default: "cuda"."""
    support: SupportLevel = "supported"
    """How far this library vouches for the preset: ``supported`` (run and tested end to end), ``experimental`` (built
    from its maker's documentation, not yet run on its hardware: a synth note says so) or ``deprecated`` (a synth
    warning with ``support_note``). Default: "supported"."""
    support_note: str = ""
    """Why the preset is experimental or deprecated, and what to use instead. Default: none."""
    sheds_load_itself: bool = False
    """The server answers 503 itself once full (its own admission), so a load balancer's concurrency cap in front of
    it is a second one (a synth warning where ``target_optimizer`` is set). Default: false."""
    takes_lora_adapters: bool = False
    """The server serves LoRA adapters over its base model (its props take ``lora``: vLLM, SGLang); a ``lora`` setting
    for any other server is refused. Default: false."""

    @abstractmethod
    def contract(self, context: ServerContext) -> ServerContract:
        """The contract for ``context.model``."""

    def concurrency_limit(self) -> tuple[str, int] | None:
        """(the setting's key, its value): the most requests the server runs at once; a load balancer cap above it
        never binds and is refused. Default: None (not known)."""
        return None

    def cache_client(self) -> ModelCacheProps | None:
        """The server's settings as a client of the shared result cache (``ModelService.use_cache``); None for a
        server that reads no cache. Default: None."""
        return None

    def deprecation_warning_id(self) -> str:
        """The id of the synth warning a deprecated preset gets (to acknowledge it). Default:
        ``gpu-inference:<name>-deprecated``."""
        return f"gpu-inference:{self.name}-deprecated"

    def check(self, model: ModelProps) -> None:
        """What this server needs of the model, checked before any construct is made (and by the sizing advisor).
        Default: nothing."""
        return None


@with_legacy_keywords("ServerContract")
@dataclass(frozen=True, kw_only=True)
class ServerContract(ServerDefinition):
    """Everything the infrastructure needs to know about a model server container, and the only thing it knows.

    Keyword-only. Required (Python refuses a contract without one): ``image``, ``command``, ``port``,
    ``readiness_path``, ``liveness``, ``user`` (never root), ``model_source``, ``stop`` (a :class:`StopTiming`).
    GPUs per task are the model's (``ModelProps.gpus``), never the contract's. What the command says is
    cross-checked (:func:`check_command`): ``--port``/``--http-port`` against ``port``, ``--metrics-port``/
    ``--prometheus-port`` against ``metrics.port``, ``--exit-timeout-secs`` against ``stop.drain_seconds``.

    The server declares what scales it (``scaling_signals``), what pages about it (``alarms``), which of its routes
    take prediction bodies (``prediction_routes``) and how it stops (``stop``): ``ServiceScaling``, ``ModelAlarms``
    and the load balancer read those and nothing else about it. Every preset builds its own. Defaults: each
    field's, below.
    """

    image: ecs.ContainerImage
    """The container image. Required."""
    command: tuple[str, ...]
    """The command that starts the server. Required."""
    port: int
    """The TCP port it listens on (1024-65535). Required."""
    readiness_path: str
    """The path that answers 200 once it can serve (the target group's health check). Required."""
    liveness: LivenessCheck
    """The container health check. Required."""
    user: str
    """The numeric non-root ``uid[:gid]`` it runs as. Required."""
    model_source: ModelFromS3
    """How the model gets from S3 to the server. Required."""
    stop: StopTiming
    """How long it needs after SIGTERM to drain and exit. Required."""
    entry_point: tuple[str, ...] | None = None
    """Replaces the image's entry point. Default: None (the image's)."""
    shared_memory_mib: int | None = None
    """The size of ``/dev/shm`` (64-262144). Default: None (Docker's 64 MiB)."""
    tmpfs_mib: Mapping[str, int] = field(default_factory=dict)
    """Writable in-memory paths outside the scratch volume, path -> MiB. Default: none."""
    read_only_root_filesystem: bool = True
    """The root filesystem is read-only; ``/scratch`` (a task-scoped volume) and ``tmpfs_mib`` are writable.
    Default: true."""
    environment: Mapping[str, str] = field(default_factory=dict)
    """Plain environment variables. Default: none."""
    secrets: Mapping[str, ecs.Secret] = field(default_factory=dict)
    """Variables from Secrets Manager or SSM. Default: none."""
    api_keys_variable: str | None = None
    """The variable that receives the environment's API-key secret. Default: None (not injected)."""
    api_key_field: str | None = None
    """Only this key of the API-key secret reaches ``api_keys_variable`` (ECS's JSON-key reference), for a server that
    takes one literal key (vLLM). Default: None (the whole secret, a JSON object of names to keys)."""
    emf_metrics: tuple[str, ...] = ()
    """The CloudWatch metrics the server writes itself, as Embedded Metric Format documents on its stdout: its log
    route must deliver each line to CloudWatch Logs as the JSON object it is (the awslogs driver does; FireLens's
    ``cloudwatch_logs`` output with ``log_key log``). Default: none."""
    metrics: PrometheusMetrics | None = None
    """Prometheus metrics the task's collector (the CloudWatch agent sidecar, there for traces in every task) also
    brings into CloudWatch. Default: None (traces only)."""
    no_traces_reason: str | None = None
    """Why the server sends no spans to the task's collector, and what would make it (a synth warning
    ``gpu-inference:server-sends-no-traces`` where the environment samples traces). Default: None (it sends them, or
    the contract does not say)."""
    scaling_signals: tuple[ScalingSignal | ExpressionSignal, ...] = ()
    """The server's metrics that scale it, beside ALB p95 latency (always) and requests per target (unless some signal
    has a ``target``: step policies only add tasks, so without one requests per target also scales in).
    Default: none."""
    alarms: tuple[ServerAlarm, ...] | None = None
    """The alarms on the server's metrics. Default: None (one per scale-out :class:`ScalingSignal`, held above its
    threshold for 15 minutes: scaling is not keeping up)."""
    prediction_routes: tuple[str, ...] = ()
    """Paths below the model's prefix whose bodies are prediction inputs (texts that may hold HTML, paths or URLs),
    which the load balancer's WAF body rules must not block; ``{name}`` is one path segment. Default: none."""
    serves_at_root: bool = True
    """The listener rule rewrites ``/<model>/<path>`` to ``/<path>``, so a server that knows nothing of the prefix
    answers it. Default: true."""
    public_paths: tuple[str, ...] = ()
    """ALB path patterns below the model's prefix that clients may reach (at most 5 patterns with 5 wildcards, each
    with the prefix at most 128 characters); every other path gets the listener's 404. A server that guards only some
    routes with its key (vLLM: ``/v1``) lists just those. Default: none (everything under ``/<model>/``)."""
    keep_alive_seconds: int | None = None
    """How long the server keeps an idle HTTP connection open: must exceed the load balancer's idle timeout.
    Default: None (unknown, a synth warning)."""
    queue_capacity: int | None = None
    """The most requests one task queues: a scale-out threshold above it is refused. Default: None (unknown)."""
    compile_cache_variable: str | None = None
    """The variable in which a server that compiles at start finds its S3 compile cache (``ModelService`` sets it and
    lets the task role create objects there). Default: None (no cache)."""
    single_cuda_process: bool = False
    """The server uses the GPU from one process only, which a GPU share (NVIDIA MPS) needs. Default: false (not
    known)."""
    adapter_sync: AdapterSync | None = None
    """The server serves LoRA adapters kept in step with the adapter registry by the task's ``adapter-sync`` sidecar,
    whose ``/ready`` the target group checks (docs/lora-adapters.md). Needs a model source with init containers (the
    scratch owner hands the adapters' volume to the server's user). Default: None (no adapters)."""
    accelerator: Accelerator = "cuda"
    """The accelerator the server's image and model are built for: ``cuda`` (NVIDIA GPUs) or ``neuron`` (AWS
    Inferentia2/Trainium, a Neuron-compiled model); ``ModelService`` refuses capacity of the other kind.
    Default: "cuda"."""
    name: str = "custom"
    """The server's name in messages and graphs. Default: custom."""

    def __post_init__(self) -> None:
        self._require_complete()
        self._check_container()
        self._check_routes()
        self._check_serving()
        self._check_variables()
        if self.adapter_sync is not None:
            self.adapter_sync.check_beside(self.port, self.model_source)
        self._check_api_key_field()

    def _require_complete(self) -> None:
        """Every field the infrastructure needs is given: a missing one is named, with what it is for."""
        needs = {
            "image": "the container image (ecs.ContainerImage)",
            "command": "the command that starts the server, e.g. ('vllm', 'serve', ...): "
            "the template must say what runs",
            "port": "the TCP port the server listens on (target group, security group and health checks use it)",
            "readiness_path": "the HTTP path that answers 200 once the server can serve "
            "(the target group's health check)",
            "liveness": "a cheap container health check (LivenessCheck) so ECS replaces a wedged container",
            "user": "the uid[:gid] the server runs as (not root)",
            "model_source": "how the model gets from S3 to the server (ModelFromS3.server_downloads(), "
            ".copy_to_scratch() or .server_streams())",
            "stop": "how long the server needs after SIGTERM to drain and exit (StopTiming, e.g. vllm_stop(), "
            "tgi_stop(), triton_stop()), checked against the task's stop timeout and the deregistration delay",
        }
        missing = [
            name
            for name in needs
            if getattr(self, name) is None or getattr(self, name) == () or getattr(self, name) == ""
        ]
        if missing:
            raise ConfigError(
                f"server.{missing[0]}",
                f"the {self.name} server contract is incomplete; missing: "
                + "; ".join(f"{name} ({needs[name]})" for name in missing),
            )

    def _check_container(self) -> None:
        """The container's port, readiness path, user, accelerator, command, shared memory, tmpfs mounts and
        environment are each valid."""
        require_range(
            self.port, 1024, 65535, "server.port", hint=" (unprivileged ports only: the container runs as non-root)"
        )
        require(
            self.readiness_path.startswith("/") and bool(PATH.match(self.readiness_path.split("?")[0])),
            "server.readiness_path",
            f"{self.readiness_path!r} must be an absolute URL path such as '/health'",
        )
        require(
            bool(USER.match(self.user)) and self.user.split(":")[0] not in ROOT_USERS,
            "server.user",
            f"{self.user!r}: give a numeric non-root uid or uid:gid such as '1000:1000' "
            "(ECS cannot check a name exists in the image)",
        )
        require(
            self.accelerator in ACCELERATORS,
            "server.accelerator",
            f"{self.accelerator!r}: one of {', '.join(ACCELERATORS)}",
        )
        check_command(self)
        if self.shared_memory_mib is not None:
            require_range(self.shared_memory_mib, 64, 262_144, "server.shared_memory_mib")
        for path, size in self.tmpfs_mib.items():
            require(
                bool(PATH.match(path)) and not path.startswith(SCRATCH_PATH),
                f"server.tmpfs_mib[{path}]",
                "must be an absolute path outside the scratch volume",
            )
            require_range(size, 1, 65_536, f"server.tmpfs_mib[{path}]")
        clashing = sorted(set(self.environment) & set(self.secrets))
        require(not clashing, "server.environment", f"{clashing} are set both as plain environment and as secrets")

    def _check_routes(self) -> None:
        """The public paths fit one listener rule and, like the prediction routes, are URL paths."""
        require(
            len(self.public_paths) <= MAX_RULE_CONDITION_VALUES,
            "server.public_paths",
            f"{len(self.public_paths)} patterns; "
            f"a listener rule holds at most {MAX_RULE_CONDITION_VALUES} condition values",
        )
        wildcards = sum(pattern.count("*") + pattern.count("?") for pattern in self.public_paths)
        require(
            wildcards <= MAX_RULE_CONDITION_WILDCARDS,
            "server.public_paths",
            f"{wildcards} wildcards ('*', '?') in {list(self.public_paths)}; a listener rule allows at most "
            f"{MAX_RULE_CONDITION_WILDCARDS}",
        )
        for pattern in self.public_paths:
            require(
                bool(PUBLIC_PATH.match(pattern)),
                "server.public_paths",
                f"{pattern!r} must be an absolute URL path pattern such as '/v1/*'",
            )
        for route in self.prediction_routes:
            require(
                bool(PREDICTION_ROUTE.match(route)),
                "server.prediction_routes",
                f"{route!r} must be an absolute URL path such as '/v1/completions' ('{{name}}' for one segment)",
            )

    def _check_serving(self) -> None:
        """The keep-alive and the queue capacity, when given, are in range."""
        if self.keep_alive_seconds is not None:
            require_range(self.keep_alive_seconds, 1, 86_400, "server.keep_alive_seconds")
        if self.queue_capacity is not None:
            require_range(self.queue_capacity, 1, 1_000_000, "server.queue_capacity")

    def _check_variables(self) -> None:
        """The variables ModelService sets (the API keys', the compile cache's) are names the environment leaves
        free."""
        if self.api_keys_variable is not None:
            require(
                self.api_keys_variable not in self.environment,
                "server.api_keys_variable",
                f"{self.api_keys_variable} is also set as plain environment",
            )
        if self.compile_cache_variable is not None:
            require(
                bool(re.match(r"^[A-Z_][A-Z0-9_]*$", self.compile_cache_variable)),
                "server.compile_cache_variable",
                f"{self.compile_cache_variable!r} is not an environment variable name",
            )
            require(
                self.compile_cache_variable not in self.environment,
                "server.compile_cache_variable",
                f"{self.compile_cache_variable} is also set as plain environment: ModelService sets it",
            )

    def _check_api_key_field(self) -> None:
        """The key of the API-key secret the server reads is a key name, for a variable that receives it."""
        if self.api_key_field is not None:
            require(
                self.api_keys_variable is not None,
                "server.api_key_field",
                "is set but api_keys_variable is not: name the variable that receives the key",
            )
            require(
                bool(API_KEY_NAME.match(self.api_key_field)),
                "server.api_key_field",
                f"{self.api_key_field!r} is not a key name (1-64 letters, digits, '.', '_', '-', "
                "starting with a letter or digit)",
            )

    def contract(self, context: ServerContext) -> ServerContract:
        """A contract is its own definition: ``ModelService(server=ServerContract(...))``."""
        return self

    @property
    def sidecar_reservation(self) -> SidecarReservation:
        """(CPU units, MiB) ECS reserves beside the server container for this contract: see
        :func:`sidecar_reservation`."""
        return sidecar_reservation(self.model_source, self.metrics, self.adapter_sync is not None)

    @property
    def health_check_port(self) -> int:
        """The port the target groups check: the adapter sidecar's where adapters are served, else the server's."""
        return self.adapter_sync.ready_port if self.adapter_sync is not None else self.port

    @property
    def health_check_path(self) -> str:
        """The path the target groups check: the adapter sidecar's ``/ready`` (every registered adapter served), else
        ``readiness_path``."""
        return ADAPTER_READY_PATH if self.adapter_sync is not None else self.readiness_path

    @property
    def writable_paths(self) -> tuple[str, ...]:
        return (SCRATCH_PATH, *self.tmpfs_mib)

    @property
    def server_alarms(self) -> tuple[ServerAlarm, ...]:
        """The alarms on the server's metrics: ``alarms``, else one per scale-out signal."""
        return self.alarms if self.alarms is not None else alarms_of_signals(self.scaling_signals)

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The CloudWatch metric names this server's Prometheus metrics arrive under (the collector's)."""
        return tuple(PrometheusMetrics.cloudwatch_name(m) for m in self.metrics.metrics) if self.metrics else ()


@dataclass(frozen=True)
class ServerContext(ABC):
    """What a preset may use to build its contract for one model: the model, the environment and, through its methods,
    the images and synth warnings that need aws_cdk (``CdkServerContext`` gives them: ``ModelService`` hands a preset
    one), so a preset's module loads without aws_cdk (the sizing advisor reads the presets)."""

    scope: Construct
    """Where the preset makes its constructs (images from ECR). Required."""
    model: ModelProps
    """The model. Required."""
    timing: ServiceTimingProps
    """The environment's task timing. Required."""
    environment_name: str
    """The environment's name. Required."""
    region: str
    """The deploying region. Required."""
    model_uri: str
    """The model's S3 URI. Required."""
    instance_type: GpuInstanceType | None = None
    """The smallest type the model's tasks run on. Default: None (not known)."""
    trace_sampling_ratio: float = DEFAULT_TRACE_SAMPLING_RATIO
    """The share of requests the server traces to the task's collector (``TelemetryProps``). Default: 0.01."""

    @abstractmethod
    def warn(self, warning_id: str, message: str) -> None:
        """A synth warning on the model's service, acknowledgeable by ``warning_id``
        (``Annotations.add_warning_v2``)."""

    @abstractmethod
    def ecr_image(self, image: EcrImage, construct_id: str) -> ecs.ContainerImage:
        """``image``, an ECR repository's pinned tag, as a ContainerImage (``construct_id``: the imported
        repository's)."""

    @abstractmethod
    def registry_image(self, reference: str) -> ecs.ContainerImage:
        """A public registry's image (``repository:tag``) as a ContainerImage."""

    @abstractmethod
    def asset_image(self, directory: str, display_name: str, target: str | None = None) -> ecs.ContainerImage:
        """An image ``cdk deploy`` builds for linux/amd64 from the build context ``directory`` (its Dockerfile's stage
        ``target``; default None: the last stage)."""


def named_user(name: str) -> dict[str, str]:
    """USER and LOGNAME for a uid the image has no passwd entry for: Python's getpass.getuser() reads them before the
    passwd database, and torch's compile cache asks it for a user name at import (a KeyError without them)."""
    return {"USER": name, "LOGNAME": name}
