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

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from . import metric_names
from .errors import ConfigError, require, require_range
from .instance_catalog import GpuInstanceType
from .model_props import ModelProps
from .server_facts import server as server_facts
from .service_timing import SPOT_NOTICE_SECONDS, ServiceTimingProps

SCRATCH_PATH = "/scratch"
ROOT_USERS = frozenset({"0", "root"})
USER = re.compile(r"^[0-9]+(:[0-9]+)?$")
PATH = re.compile(r"^/[A-Za-z0-9._/-]*$")
PUBLIC_PATH = re.compile(r"^/[A-Za-z0-9._/*?-]*$")
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
FETCH_CONTAINERS = 2


@dataclass(frozen=True)
class LivenessCheck:
    """The container health check: cheap, local, never the model. ECS replaces a container that fails it.

    ``command`` is Docker's form: ``("CMD", "prog", "arg", ...)`` or ``("CMD-SHELL", "a shell line")``.
    Defaults: every 15 s, 5 s timeout, 3 retries; the start period follows the model's load time (at most 300 s,
    the ECS maximum). ``passes_while_loading``: the check passes while the model loads (readiness is the target
    group's job); when False, synth refuses a model whose ``expected_load_seconds`` exceeds the start period plus
    the retries, since ECS would replace the container mid-load, in a loop.
    """

    command: tuple[str, ...]
    interval_seconds: int = 15
    timeout_seconds: int = 5
    retries: int = 3
    passes_while_loading: bool = False

    def start_window_seconds(self, start_period_seconds: int) -> int:
        """How long a container that never passes survives: the start period, then ``retries`` failed checks."""
        return start_period_seconds + self.retries * self.interval_seconds

    def __post_init__(self) -> None:
        require(
            len(self.command) >= 2 and self.command[0] in ("CMD", "CMD-SHELL"),
            "liveness.command",
            f"{list(self.command)} must start with 'CMD' or 'CMD-SHELL' followed by the check, e.g. ('CMD', 'curl', '-f', 'http://127.0.0.1:8000/health')",
        )
        require_range(self.interval_seconds, 5, 300, "liveness.interval_seconds")
        require_range(self.timeout_seconds, 2, 60, "liveness.timeout_seconds")
        require(self.timeout_seconds < self.interval_seconds, "liveness.timeout_seconds", f"{self.timeout_seconds} must be below interval_seconds ({self.interval_seconds})")
        require_range(self.retries, 1, 10, "liveness.retries")


@dataclass(frozen=True)
class ModelFromS3:
    """How the model's files get from the model bucket to the server.

    ``server_downloads``: the server reads the model's S3 URI from ``uri_variable`` (ModelService
    sets it unless the contract's environment already does) and fetches it itself (our server does, and verifies
    the manifest). ``copy_to_scratch``: an init container copies the model's S3 prefix into ``local_path`` (under
    the scratch volume), checks the files against the SHA256SUMS that publish wrote (a prefix without a manifest
    is copied unverified, and its log says so) and exits; the server container starts only after it succeeded,
    so nothing is fetched from a model hub. ``server_streams``: the server reads the weights straight from S3 into
    memory (vLLM's Run:ai Model Streamer) with the model's S3 URI in ``uri_variable`` too; nothing is copied and
    nothing checks publish's digests, and an init container hands the scratch volume (caches, home) to the server's
    user, as for ``copy_to_scratch``.
    """

    mode: Literal["server_downloads", "copy_to_scratch", "server_streams"]
    uri_variable: str = "MODEL_URI"
    local_path: str = f"{SCRATCH_PATH}/model"
    fetcher_image: ecs.ContainerImage | None = None  # default: DEFAULT_FETCHER_IMAGE (the AWS CLI)

    def __post_init__(self) -> None:
        require(self.mode in ("server_downloads", "copy_to_scratch", "server_streams"), "model_source.mode",
                f"{self.mode!r}: use 'server_downloads', 'copy_to_scratch' or 'server_streams'")
        require(bool(re.match(r"^[A-Z_][A-Z0-9_]*$", self.uri_variable)), "model_source.uri_variable", f"{self.uri_variable!r} is not an environment variable name")
        require(
            self.local_path.startswith(SCRATCH_PATH + "/") and bool(PATH.match(self.local_path)),
            "model_source.local_path",
            f"{self.local_path!r} must be a path under the scratch volume {SCRATCH_PATH}/ (the only place the task can write)",
        )

    @classmethod
    def server_downloads(cls, uri_variable: str = "MODEL_URI") -> ModelFromS3:
        return cls("server_downloads", uri_variable=uri_variable)

    @classmethod
    def copy_to_scratch(cls, local_path: str = f"{SCRATCH_PATH}/model", fetcher_image: ecs.ContainerImage | None = None) -> ModelFromS3:
        return cls("copy_to_scratch", local_path=local_path, fetcher_image=fetcher_image)

    @classmethod
    def server_streams(cls, uri_variable: str = "MODEL_URI", fetcher_image: ecs.ContainerImage | None = None) -> ModelFromS3:
        return cls("server_streams", uri_variable=uri_variable, fetcher_image=fetcher_image)

    @property
    def server_reads_s3(self) -> bool:
        """The server itself reads the model from S3 (its URI in ``uri_variable``)."""
        return self.mode != "copy_to_scratch"

    @property
    def init_containers(self) -> int:
        """The init containers ModelService adds: the scratch owner, and for a copy the fetcher."""
        return {"server_downloads": 0, "server_streams": 1, "copy_to_scratch": FETCH_CONTAINERS}[self.mode]


@dataclass(frozen=True)
class PrometheusMetrics:
    """The server exposes Prometheus metrics; a CloudWatch agent sidecar scrapes ``path`` on the
    server's port every ``scrape_interval_seconds`` and writes the ``metrics`` listed (names as the
    server exposes them; on ``port``, default the server's own) to CloudWatch through the model's log group (EMF), in namespace
    ``GpuInference`` with the model's Environment and ModelName dimensions. Names are imported
    with ':' replaced by '_' (``vllm:num_requests_waiting`` becomes ``vllm_num_requests_waiting``).
    """

    metrics: tuple[str, ...]
    path: str = "/metrics"
    port: int | None = None  # default: the server's port (Triton serves metrics on its own, 8002)
    scrape_interval_seconds: int = 15
    collector_image: ecs.ContainerImage | None = None  # default: DEFAULT_COLLECTOR_IMAGE (CloudWatch agent)
    collector_cpu: int = 256
    collector_memory_mib: int = 256

    def __post_init__(self) -> None:
        require(bool(self.metrics), "metrics.metrics", "list the Prometheus metrics to bring into CloudWatch (scaling and alarms use them)")
        for index, name in enumerate(self.metrics):
            require(bool(re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", name)), f"metrics.metrics[{index}]", f"{name!r} is not a Prometheus metric name")
        require(bool(PATH.match(self.path)), "metrics.path", f"{self.path!r} is not an absolute URL path")
        if self.port is not None:
            require_range(self.port, 1024, 65535, "metrics.port")
        require_range(self.scrape_interval_seconds, 5, 300, "metrics.scrape_interval_seconds")
        require_range(self.collector_cpu, 64, 4096, "metrics.collector_cpu")
        require_range(self.collector_memory_mib, 128, 8192, "metrics.collector_memory_mib")

    @staticmethod
    def cloudwatch_name(prometheus_name: str) -> str:
        return prometheus_name.replace(":", "_")


@dataclass(frozen=True)
class ScalingSignal:
    """One metric (in namespace ``GpuInference``, this model's dimensions) that drives the task count.

    Set exactly one of ``target`` (target tracking holds the per-task ``statistic`` at it; scales in
    too) and ``scale_out_above`` (a step policy adds one task above it and two above twice it, when the
    metric can reach twice it: ``maximum``, the most it can be, such as 1 for a fraction).
    """

    metric: str
    statistic: str = "Average"
    target: float | None = None
    scale_out_above: float | None = None
    maximum: float | None = None

    def __post_init__(self) -> None:
        require((self.target is None) != (self.scale_out_above is None), f"scaling_signals[{self.metric}]", "set exactly one of target and scale_out_above")
        value = self.target if self.target is not None else self.scale_out_above
        assert value is not None  # exactly one of them is set (checked above)
        require(value > 0, f"scaling_signals[{self.metric}]", f"{value} must be greater than 0")
        if self.maximum is not None:
            require(value < self.maximum, f"scaling_signals[{self.metric}]", f"{value} can never be passed: the metric is at most {self.maximum}")


# The bundled server (inference_image/inference_server): SIGTERM -> every HTTP worker finishes its accepted requests
# for at most DRAIN_TIMEOUT_S (default 70), then the supervisor gives what is left 15 s before it kills it and exits:
# the server's own facts (inference_server/facts.py).
BUNDLED_DEFAULT_DRAIN_SECONDS: int = server_facts.DRAIN_TIMEOUT_S
BUNDLED_EXIT_SECONDS: int = server_facts.EXIT_GRACE_S


# vLLM 0.32 (vllm/engine/arg_utils.py, config/vllm.py): ``--shutdown-timeout N`` (default 0). On SIGTERM the API
# server stops the engine with that timeout: 0 aborts every running request; N > 0 rejects new requests and lets the
# running ones finish for up to N s, then aborts the rest and stops the engine processes.
VLLM_EXIT_SECONDS = 20
VLLM_LONGEST_REQUEST_SECONDS = 80


def drain_after_delay(longest_request_seconds: int, exit_seconds: int, server: str) -> int:
    """What the Spot notice leaves ``server`` to drain after SIGTERM, after a deregistration delay of
    ``longest_request_seconds`` (the longest generation finishes within it) and its ``exit_seconds``."""
    high = SPOT_NOTICE_SECONDS - exit_seconds
    require_range(longest_request_seconds, 1, high, "longest_request_seconds",
                  hint=f" (the deregistration delay, then {server}'s drain and {exit_seconds} s exit, fit the "
                       f"{SPOT_NOTICE_SECONDS} s Spot notice; bound longer generations with max_tokens)")
    return high - longest_request_seconds


def vllm_drain_seconds(longest_request_seconds: int) -> int:
    """vLLM's ``--shutdown-timeout``: what the Spot notice leaves after a deregistration delay of
    ``longest_request_seconds`` and vLLM's exit."""
    return drain_after_delay(longest_request_seconds, VLLM_EXIT_SECONDS, "vLLM")


@dataclass(frozen=True)
class StopTiming:
    """What a server does between ECS's SIGTERM and its exit, so the task's timing can leave it the time.

    When ECS stops a task (scale-in, deployment, Spot interruption) the target is first deregistered from the
    load balancer: no new requests, and in-flight ones get the target group's deregistration delay to finish.
    Then ECS sends SIGTERM, and SIGKILL after the container's ``stopTimeout``. So:

    - ``drain_seconds``: after SIGTERM, the longest the server keeps finishing requests it had accepted
      (its own drain timeout; 0 for a server that aborts them, whose requests must finish in the deregistration delay).
    - ``exit_seconds``: after draining, the longest it takes to stop its processes and release the GPU.
    - ``longest_request_seconds`` (default None: unknown): the longest one request may run (the server's own
      request timeout). When given, the deregistration delay plus ``drain_seconds`` must cover it.
    - ``deregistration_delay_seconds`` (default None: the environment's ``ServiceTimingProps``): the delay this
      server's requests need. When given, the model's target groups use it and the container's ``stopTimeout`` is
      ``drain_seconds + exit_seconds``, whatever the environment's timing (a server with minutes-long requests
      cannot share an encoder's 20 s delay and 90 s stop timeout within the Spot notice).

    ``ModelService`` checks at construction that ``drain_seconds + exit_seconds`` fits the task's ``stopTimeout``
    and, after the deregistration delay, the 2-minute Spot notice. Presets: :meth:`bundled` (this repository's
    server), :meth:`vllm`, :meth:`tgi`, :meth:`triton`.
    """

    drain_seconds: int
    exit_seconds: int
    longest_request_seconds: int | None = None
    deregistration_delay_seconds: int | None = None

    def __post_init__(self) -> None:
        require_range(self.drain_seconds, 0, SPOT_NOTICE_SECONDS, "server.stop.drain_seconds")
        require_range(self.exit_seconds, 1, SPOT_NOTICE_SECONDS, "server.stop.exit_seconds")
        if self.longest_request_seconds is not None:
            require_range(self.longest_request_seconds, 1, 3600, "server.stop.longest_request_seconds")
        if self.deregistration_delay_seconds is not None:
            require_range(self.deregistration_delay_seconds, 0, SPOT_NOTICE_SECONDS, "server.stop.deregistration_delay_seconds")

    def task_timing(self, deregistration_delay_seconds: int, stop_timeout_seconds: int) -> tuple[int, int]:
        """(deregistration delay, stopTimeout) of the task: the server's own when it names a delay, else the given ones."""
        if self.deregistration_delay_seconds is None:
            return deregistration_delay_seconds, stop_timeout_seconds
        return self.deregistration_delay_seconds, self.seconds_after_sigterm

    def checked_task_timing(self, deregistration_delay_seconds: int, stop_timeout_seconds: int, server: str) -> tuple[int, int]:
        """:meth:`task_timing` for the environment's delay and stop timeout, refused (:meth:`check_fits`) unless
        ``server`` drains and exits within it: what ModelService builds and what the app's config checks early."""
        delay, stop_timeout = self.task_timing(deregistration_delay_seconds, stop_timeout_seconds)
        self.check_fits(stop_timeout_seconds=stop_timeout, deregistration_delay_seconds=delay, server=server)
        return delay, stop_timeout

    @property
    def seconds_after_sigterm(self) -> int:
        """The most the server may take from SIGTERM to exit."""
        return self.drain_seconds + self.exit_seconds

    def check_fits(self, *, stop_timeout_seconds: int, deregistration_delay_seconds: int, server: str = "the server") -> None:
        """The server exits before SIGKILL, inside the Spot notice, and its requests finish before it stops serving."""
        need = self.seconds_after_sigterm
        require(
            deregistration_delay_seconds + need <= SPOT_NOTICE_SECONDS,
            "deregistration_delay_seconds",
            f"{deregistration_delay_seconds} s of deregistration delay + the {need} s {server} needs after SIGTERM "
            f"(drain {self.drain_seconds} + exit {self.exit_seconds}) = {deregistration_delay_seconds + need} s exceeds the "
            f"{SPOT_NOTICE_SECONDS} s Spot interruption notice; shorten the delay or the server's drain",
        )
        require(
            need <= stop_timeout_seconds,
            "stop_timeout_seconds",
            f"{stop_timeout_seconds} s is shorter than the {need} s {server} needs after SIGTERM (drain {self.drain_seconds} "
            f"+ exit {self.exit_seconds}): ECS would SIGKILL it mid-drain; raise stop_timeout_seconds to {need} or shorten the drain",
        )
        if self.longest_request_seconds is not None:
            window = deregistration_delay_seconds + self.drain_seconds
            require(
                window >= self.longest_request_seconds,
                "deregistration_delay_seconds",
                f"{deregistration_delay_seconds} s of deregistration delay + {self.drain_seconds} s of drain = {window} s is "
                f"shorter than the longest request {server} serves ({self.longest_request_seconds} s): requests in flight "
                f"when the task stops would be cut; raise deregistration_delay_seconds to {self.longest_request_seconds - self.drain_seconds}",
            )

    @classmethod
    def bundled(cls, drain_seconds: int = BUNDLED_DEFAULT_DRAIN_SECONDS, request_timeout_seconds: int | None = None) -> StopTiming:
        """This repository's server: drains for ``DRAIN_TIMEOUT_S`` (default 70 s, its settings.py default), then its
        supervisor kills what is left after 15 s more and exits; no request runs past ``REQUEST_TIMEOUT_S``."""
        return cls(drain_seconds, BUNDLED_EXIT_SECONDS, request_timeout_seconds)

    @classmethod
    def vllm(cls, longest_request_seconds: int = VLLM_LONGEST_REQUEST_SECONDS) -> StopTiming:
        """vLLM's OpenAI server (``vllm serve``) with ``--shutdown-timeout`` :func:`vllm_drain_seconds`: a generation up to
        ``longest_request_seconds`` (default 80) long finishes when its task stops. The ALB keeps it running through
        the deregistration delay (``longest_request_seconds``: AWS documents in-flight requests completing then);
        on SIGTERM vLLM refuses new requests and drains running ones for the rest of the Spot notice (20 s by default;
        without the flag, vLLM 0.32's default 0 aborts them at once), then the API server, engine core and
        tensor-parallel workers stop (``VLLM_EXIT_SECONDS``, 20 s budget). A generation still running when the drain
        ends is cut, and vLLM 0.32 then waits on its open response until SIGKILL at ``stopTimeout`` (seen in
        ``make e2e-vllm`` with ``--shutdown-timeout 0``), which the budget already allows for."""
        return cls.after_delay(longest_request_seconds, VLLM_EXIT_SECONDS, "vLLM")

    @classmethod
    def after_delay(cls, longest_request_seconds: int, exit_seconds: int, server: str) -> StopTiming:
        """An LLM server whose longest generation finishes within its own deregistration delay (that long), then
        drains for what the Spot notice leaves (:func:`drain_after_delay`) and exits within ``exit_seconds``."""
        return cls(drain_after_delay(longest_request_seconds, exit_seconds, server), exit_seconds,
                   longest_request_seconds=longest_request_seconds, deregistration_delay_seconds=longest_request_seconds)

    @classmethod
    def tgi(cls, longest_request_seconds: int = 60) -> StopTiming:
        """Hugging Face TGI (``text-generation-launcher``): on SIGTERM its router stops taking requests and finishes
        the running ones (the launcher waits up to 90 s for it), then the launcher stops the shards. The drain lasts as
        long as the longest generation, so say it: ``longest_request_seconds`` (default 60; bound it with
        ``--max-new-tokens``); shards: 20 s."""
        return cls(longest_request_seconds, 20, longest_request_seconds)

    @classmethod
    def triton(cls, exit_timeout_seconds: int = 30) -> StopTiming:
        """NVIDIA Triton: on SIGTERM it waits for in-flight inferences up to ``--exit-timeout-secs`` (default 30; pass
        the same value in the command), then unloads its models (10 s)."""
        return cls(exit_timeout_seconds, 10)


def sidecar_reservation(model_source: ModelFromS3, metrics: PrometheusMetrics | None) -> tuple[int, int]:
    """(CPU units, MiB) of the containers beside the server: the init containers that prepare scratch and copy a
    model to it, and the metrics collector. The one calculation of a task's size, for the constructs and the app's config alike."""
    cpu, memory = model_source.init_containers * FETCHER_CPU, model_source.init_containers * FETCHER_MEMORY_MIB
    if metrics is not None:
        cpu, memory = cpu + metrics.collector_cpu, memory + metrics.collector_memory_mib
    return cpu, memory


def require_props(server: object, expected: type) -> None:
    """A preset's first argument is its props: an image given there (the 0.1 form ``BundledServer(image)``) is named."""
    props = getattr(server, "props", None)
    require(isinstance(props, expected), "server.props",
            f"{type(props).__name__} is not {expected.__name__}: {type(server).__name__}'s first argument is its props; "
            "pass an image as image=")


# Flags whose value the contract states elsewhere: (flags, the contract's field, how to read it off the contract).
PORT_FLAGS = ("--port", "--http-port")
METRICS_PORT_FLAGS = ("--metrics-port", "--prometheus-port")
EXIT_TIMEOUT_FLAGS = ("--exit-timeout-secs",)


def command_flag(command: Sequence[str], flags: Sequence[str]) -> str | None:
    """The value the last of ``flags`` gets in ``command`` (``--flag value`` or ``--flag=value``), or None."""
    found = None
    for index, arg in enumerate(command):
        name, equals, value = arg.partition("=")
        if name in flags:
            found = value if equals else (command[index + 1] if index + 1 < len(command) else "")
    return found


def check_command(contract: ServerContract) -> None:
    """What the command says agrees with the contract: the port the target group checks, the port the metrics
    sidecar scrapes, and the drain the stop timing budgets (a contradiction would synthesize a service that never
    passes its health check, scrapes nothing, or is killed mid-drain)."""
    def agree(flags: Sequence[str], expected: int | None, key: str, fix: str) -> None:
        said = command_flag(contract.command, flags)
        if said is None or expected is None or cdk.Token.is_unresolved(said):
            return
        require(said == str(expected), key,
                f"{expected} but the {contract.name} server's command says {next(a for a in contract.command if a.split('=')[0] in flags).split('=')[0]} {said}: {fix}")

    agree(PORT_FLAGS, contract.port, "server.port", "set port to the port the command listens on, or change the command")
    metrics_port = (contract.metrics.port or contract.port) if contract.metrics is not None else None
    agree(METRICS_PORT_FLAGS, metrics_port, "server.metrics.port",
          "set PrometheusMetrics(port=...) to the port the command serves metrics on (default: the server's port)")
    agree(EXIT_TIMEOUT_FLAGS, contract.stop.drain_seconds, "server.stop.drain_seconds",
          "the server drains for as long as its --exit-timeout-secs: use StopTiming.triton(<that value>), or change the flag")


@dataclass(frozen=True, kw_only=True)
class ServerContract:
    """Everything the infrastructure needs to know about a model server container.

    Keyword-only. Required (Python refuses a contract without one): ``image``, ``command``, ``port``,
    ``readiness_path``, ``liveness``, ``user`` (never root), ``model_source``, ``stop`` (a
    :class:`StopTiming`: how long the server needs after SIGTERM; presets for vLLM, TGI and Triton).
    GPUs per task are the model's (``ModelProps.gpus``), never the contract's. What the command says is
    cross-checked (:func:`check_command`): ``--port``/``--http-port`` against ``port``, ``--metrics-port``/
    ``--prometheus-port`` against ``metrics.port``, ``--exit-timeout-secs`` against ``stop.drain_seconds``.
    Defaults: Docker's 64 MiB ``/dev/shm`` (``shared_memory_mib`` to raise it);
    read-only root filesystem with the task-scoped scratch volume at ``/scratch`` writable, plus
    ``tmpfs_mib`` paths (path -> size); no environment or secrets; ``api_keys_variable`` None (the
    environment's API-key secret is not injected); no Prometheus sidecar (``metrics``);
    ``bundled_metrics`` False (the server does not emit this library's EMF metrics); no extra
    ``scaling_signals`` (requests per target and ALB latency still apply); ``serves_at_root`` True:
    the listener rule rewrites ``/<model>/<path>`` to ``/<path>`` (an ALB url-rewrite transform), so
    a server that knows nothing of the prefix answers ``/<model>/v1/completions`` at ``/v1/completions``;
    ``public_paths`` () (everything under ``/<model>/`` reaches the server): else the ALB path patterns, below the
    model's prefix, that clients may reach (at most 5 patterns with at most 5 wildcards, an ALB rule's limits;
    ``*`` and ``?`` as the ALB reads them; each, with the prefix, at most 128 characters), and every other path
    gets the listener's 404. A server that guards only some of its routes with its key (vLLM: ``/v1`` only) must
    list just those. ``api_key_field`` None: the whole API-key secret reaches ``api_keys_variable`` (the bundled
    server parses its JSON object of names to keys); else only the key of that name in it (ECS's JSON-key
    reference), for a server that takes one literal key (vLLM). ``keep_alive_seconds`` (default None: unknown, a synth warning) is
    how long the server keeps an idle HTTP connection open, which must exceed the load balancer's idle timeout
    (``ModelService`` refuses one that does not); ``stop.longest_request_seconds`` must fit inside that idle timeout.
    ``queue_capacity`` (default None: unknown) is the most requests one task queues: a scale-out threshold on the
    queue above it could never trip, and is refused. ``compile_cache_variable`` (default None) names the variable in
    which a server that compiles at start (torch.compile) finds where to keep its compile cache between tasks:
    ``ModelService`` sets it to ``s3://<bucket>/<models prefix>/<name>/.compile-cache/<version>/`` and lets the task
    role create objects there (with ``If-None-Match: *``, never replacing one), the only place in the bucket it may
    write. ``single_cuda_process`` (default False: not known) says the server uses the GPU from one process only,
    which a model on a GPU share (``ModelProps.gpu_share``, NVIDIA MPS) needs: AWS advises a whole GPU for a
    container that runs more than one CUDA process, so ``ModelService`` refuses a share for a server that does not
    say so.
    """

    image: ecs.ContainerImage
    command: tuple[str, ...]
    port: int
    readiness_path: str
    liveness: LivenessCheck
    user: str
    model_source: ModelFromS3
    stop: StopTiming
    entry_point: tuple[str, ...] | None = None
    shared_memory_mib: int | None = None
    tmpfs_mib: Mapping[str, int] = field(default_factory=dict)
    read_only_root_filesystem: bool = True
    environment: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, ecs.Secret] = field(default_factory=dict)
    api_keys_variable: str | None = None
    api_key_field: str | None = None
    metrics: PrometheusMetrics | None = None
    bundled_metrics: bool = False
    scaling_signals: tuple[ScalingSignal, ...] = ()
    serves_at_root: bool = True
    public_paths: tuple[str, ...] = ()
    keep_alive_seconds: int | None = None
    queue_capacity: int | None = None
    compile_cache_variable: str | None = None
    single_cuda_process: bool = False
    name: str = "custom"

    def __post_init__(self) -> None:
        needs = {
            "image": "the container image (ecs.ContainerImage)",
            "command": "the command that starts the server, e.g. ('vllm', 'serve', ...): the template must say what runs",
            "port": "the TCP port the server listens on (target group, security group and health checks use it)",
            "readiness_path": "the HTTP path that answers 200 once the server can serve (the target group's health check)",
            "liveness": "a cheap container health check (LivenessCheck) so ECS replaces a wedged container",
            "user": "the uid[:gid] the server runs as (not root)",
            "model_source": "how the model gets from S3 to the server (ModelFromS3.server_downloads(), .copy_to_scratch() or .server_streams())",
            "stop": "how long the server needs after SIGTERM to drain and exit (StopTiming, e.g. StopTiming.vllm(), .tgi(), .triton()), "
                    "checked against the task's stop timeout and the deregistration delay",
        }
        missing = [name for name in needs if getattr(self, name) is None or getattr(self, name) == () or getattr(self, name) == ""]
        if missing:
            raise ConfigError(
                f"server.{missing[0]}",
                f"the {self.name} server contract is incomplete; missing: "
                + "; ".join(f"{name} ({needs[name]})" for name in missing),
            )
        require_range(self.port, 1024, 65535, "server.port", hint=" (unprivileged ports only: the container runs as non-root)")
        require(
            self.readiness_path.startswith("/") and bool(PATH.match(self.readiness_path.split("?")[0])),
            "server.readiness_path",
            f"{self.readiness_path!r} must be an absolute URL path such as '/health'",
        )
        require(
            bool(USER.match(self.user)) and self.user.split(":")[0] not in ROOT_USERS,
            "server.user",
            f"{self.user!r}: give a numeric non-root uid or uid:gid such as '1000:1000' (ECS cannot check a name exists in the image)",
        )
        check_command(self)
        if self.shared_memory_mib is not None:
            require_range(self.shared_memory_mib, 64, 262_144, "server.shared_memory_mib")
        for path, size in self.tmpfs_mib.items():
            require(bool(PATH.match(path)) and not path.startswith(SCRATCH_PATH), f"server.tmpfs_mib[{path}]", "must be an absolute path outside the scratch volume")
            require_range(size, 1, 65_536, f"server.tmpfs_mib[{path}]")
        clashing = sorted(set(self.environment) & set(self.secrets))
        require(not clashing, "server.environment", f"{clashing} are set both as plain environment and as secrets")
        require(len(self.public_paths) <= MAX_RULE_CONDITION_VALUES, "server.public_paths",
                f"{len(self.public_paths)} patterns; a listener rule holds at most {MAX_RULE_CONDITION_VALUES} condition values")
        wildcards = sum(pattern.count("*") + pattern.count("?") for pattern in self.public_paths)
        require(wildcards <= MAX_RULE_CONDITION_WILDCARDS, "server.public_paths",
                f"{wildcards} wildcards ('*', '?') in {list(self.public_paths)}; a listener rule allows at most {MAX_RULE_CONDITION_WILDCARDS}")
        for pattern in self.public_paths:
            require(bool(PUBLIC_PATH.match(pattern)), "server.public_paths",
                    f"{pattern!r} must be an absolute URL path pattern such as '/v1/*'")
        if self.keep_alive_seconds is not None:
            require_range(self.keep_alive_seconds, 1, 86_400, "server.keep_alive_seconds")
        if self.queue_capacity is not None:
            require_range(self.queue_capacity, 1, 1_000_000, "server.queue_capacity")
        if self.api_keys_variable is not None:
            require(self.api_keys_variable not in self.environment, "server.api_keys_variable", f"{self.api_keys_variable} is also set as plain environment")
        if self.compile_cache_variable is not None:
            require(bool(re.match(r"^[A-Z_][A-Z0-9_]*$", self.compile_cache_variable)), "server.compile_cache_variable",
                    f"{self.compile_cache_variable!r} is not an environment variable name")
            require(self.compile_cache_variable not in self.environment, "server.compile_cache_variable",
                    f"{self.compile_cache_variable} is also set as plain environment: ModelService sets it")
        if self.api_key_field is not None:
            require(self.api_keys_variable is not None, "server.api_key_field", "is set but api_keys_variable is not: name the variable that receives the key")
            require(bool(API_KEY_NAME.match(self.api_key_field)), "server.api_key_field",
                    f"{self.api_key_field!r} is not a key name (1-64 letters, digits, '.', '_', '-', starting with a letter or digit)")

    def contract(self, context: ServerContext) -> ServerContract:
        """A contract is its own definition: ``ModelService(server=ServerContract(...))``."""
        return self

    @property
    def sidecar_reservation(self) -> tuple[int, int]:
        """(CPU units, MiB) ECS reserves beside the server container for this contract: see :func:`sidecar_reservation`."""
        return sidecar_reservation(self.model_source, self.metrics)

    @property
    def writable_paths(self) -> tuple[str, ...]:
        return (SCRATCH_PATH, *self.tmpfs_mib)

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The CloudWatch metric names this server's metrics arrive under."""
        return tuple(PrometheusMetrics.cloudwatch_name(m) for m in self.metrics.metrics) if self.metrics else ()


@dataclass(frozen=True)
class ServerContext:
    """What a preset may use to build its contract for one model."""

    scope: Construct
    model: ModelProps
    timing: ServiceTimingProps
    environment_name: str
    region: str
    model_uri: str
    instance_type: GpuInstanceType | None = None
    """The smallest type the model's tasks run on (None where not known)."""


class ServerDefinition(Protocol):
    """Anything ``ModelService`` accepts as ``server``: a preset, or a ServerContract."""

    def contract(self, context: ServerContext) -> ServerContract: ...


@dataclass(frozen=True)
class EcrImage:
    """An image in an ECR repository of the deploying account and region (a mirror of a public image)."""

    repository: str
    tag: str

    def __post_init__(self) -> None:
        require(bool(re.match(r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*$", self.repository)), "repository", f"{self.repository!r} is not an ECR repository name")
        require(bool(re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", self.tag)) and self.tag != "latest", "tag", f"{self.tag!r}: pin an exact tag (not 'latest')")

    def container_image(self, scope: Construct, construct_id: str) -> ecs.ContainerImage:
        repository = ecr.Repository.from_repository_name(scope, construct_id, self.repository)
        return ecs.ContainerImage.from_ecr_repository(repository, self.tag)


def named_user(name: str) -> dict[str, str]:
    """USER and LOGNAME for a uid the image has no passwd entry for: Python's getpass.getuser() reads them before the
    passwd database, and torch's compile cache asks it for a user name at import (a KeyError without them)."""
    return {"USER": name, "LOGNAME": name}


def port_liveness(port: int, path: str) -> LivenessCheck:
    """Passes while nothing listens on ``port`` (the server is still loading, which takes minutes for a large model,
    past ECS's 300 s start period); once it listens, ``path`` must answer 200 within 4 s."""
    script = (
        "import socket, sys, urllib.request\n"
        "probe = socket.socket()\n"
        "probe.settimeout(2)\n"
        f"loading = probe.connect_ex(('127.0.0.1', {port})) != 0\n"
        "probe.close()\n"
        f"sys.exit(0) if loading else urllib.request.urlopen('http://127.0.0.1:{port}{path}', timeout=4)\n"
    )
    return LivenessCheck(command=("CMD", "python3", "-c", script), passes_while_loading=True)


def collector_config(contract: ServerContract, *, environment_name: str, model_name: str, region: str, log_group_name: str) -> dict[str, str]:
    """The CloudWatch agent's two configurations, as the environment variables it reads them from."""
    metrics = contract.metrics
    if metrics is None:
        raise ConfigError("server.metrics", f"is not set: the {contract.name} server contract exports no Prometheus metrics to collect")
    names = [PrometheusMetrics.cloudwatch_name(m) for m in metrics.metrics]
    prometheus = {
        "global": {"scrape_interval": f"{metrics.scrape_interval_seconds}s", "scrape_timeout": f"{max(2, metrics.scrape_interval_seconds // 2)}s"},
        "scrape_configs": [
            {
                "job_name": "model-server",
                "metrics_path": metrics.path,
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{metrics.port or contract.port}"],
                        "labels": {metric_names.DIMENSION_ENVIRONMENT: environment_name, metric_names.DIMENSION_MODEL: model_name},
                    }
                ],
                # One literal rename per metric: CloudFormation would read a "${1}" group reference as its own syntax.
                "metric_relabel_configs": [
                    {"source_labels": ["__name__"], "regex": re.escape(name), "target_label": "__name__", "replacement": PrometheusMetrics.cloudwatch_name(name)}
                    for name in metrics.metrics
                    if ":" in name
                ],
            }
        ],
    }
    agent = {
        "agent": {"region": region},
        "logs": {
            "metrics_collected": {
                "prometheus": {
                    "log_group_name": log_group_name,
                    "prometheus_config_path": "env:PROMETHEUS_CONFIG_CONTENT",
                    "emf_processor": {
                        "metric_namespace": metric_names.NAMESPACE,
                        "metric_declaration": [
                            {
                                "source_labels": ["job"],
                                "label_matcher": "^model-server$",
                                "dimensions": [[metric_names.DIMENSION_ENVIRONMENT, metric_names.DIMENSION_MODEL]],
                                "metric_selectors": [f"^{name}$" for name in names],
                            }
                        ],
                    },
                }
            },
            "force_flush_interval": 5,
        },
    }
    return {"PROMETHEUS_CONFIG_CONTENT": _yaml_of(prometheus), "CW_CONFIG_CONTENT": json.dumps(agent, sort_keys=True)}


def _yaml_of(value: object) -> str:
    """Prometheus reads YAML, and JSON is YAML: one line, no YAML library needed."""
    return json.dumps(value, sort_keys=True)
