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
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from . import metric_names
from .errors import ConfigError, require, require_range

if TYPE_CHECKING:
    from .model_service import ModelProps, ServiceTimingProps

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
    so nothing is fetched from a model hub.
    """

    mode: Literal["server_downloads", "copy_to_scratch"]
    uri_variable: str = "MODEL_URI"
    local_path: str = f"{SCRATCH_PATH}/model"
    fetcher_image: ecs.ContainerImage | None = None  # default: DEFAULT_FETCHER_IMAGE (the AWS CLI)

    def __post_init__(self) -> None:
        require(self.mode in ("server_downloads", "copy_to_scratch"), "model_source.mode", f"{self.mode!r}: use 'server_downloads' or 'copy_to_scratch'")
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
        require(value > 0, f"scaling_signals[{self.metric}]", f"{value} must be greater than 0")
        if self.maximum is not None:
            require(value < self.maximum, f"scaling_signals[{self.metric}]", f"{value} can never be passed: the metric is at most {self.maximum}")


SPOT_NOTICE_SECONDS = 120
# The bundled server (inference_image/inference_server): SIGTERM -> every HTTP worker finishes its accepted requests
# for at most DRAIN_TIMEOUT_S (settings.py, default 70), then the supervisor gives what is left WORKER_STOP_GRACE_S
# (supervisor.py, 15) before it kills it and exits. tests/infra/test_server_contract.py reads both from the server.
BUNDLED_DEFAULT_DRAIN_SECONDS = 70
BUNDLED_EXIT_SECONDS = 15


# vLLM 0.32 (vllm/engine/arg_utils.py, config/vllm.py): ``--shutdown-timeout N`` (default 0). On SIGTERM the API
# server stops the engine with that timeout: 0 aborts every running request; N > 0 rejects new requests and lets the
# running ones finish for up to N s, then aborts the rest and stops the engine processes.
VLLM_EXIT_SECONDS = 20
VLLM_LONGEST_GENERATION_SECONDS = 80


def vllm_drain_seconds(longest_generation_seconds: int) -> int:
    """vLLM's ``--shutdown-timeout``: what the Spot notice leaves after a deregistration delay of
    ``longest_generation_seconds`` and vLLM's exit."""
    high = SPOT_NOTICE_SECONDS - VLLM_EXIT_SECONDS
    require_range(longest_generation_seconds, 1, high, "longest_generation_seconds",
                  hint=f" (the deregistration delay, then vLLM's drain and {VLLM_EXIT_SECONDS} s exit, fit the "
                       f"{SPOT_NOTICE_SECONDS} s Spot notice; bound longer generations with max_tokens)")
    return high - longest_generation_seconds


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
    def bundled(cls, drain_timeout_seconds: int = BUNDLED_DEFAULT_DRAIN_SECONDS, request_timeout_seconds: int | None = None) -> StopTiming:
        """This repository's server: drains for ``DRAIN_TIMEOUT_S`` (default 70 s, its settings.py default), then its
        supervisor kills what is left after 15 s more and exits; no request runs past ``REQUEST_TIMEOUT_S``."""
        return cls(drain_timeout_seconds, BUNDLED_EXIT_SECONDS, request_timeout_seconds)

    @classmethod
    def vllm(cls, longest_generation_seconds: int = VLLM_LONGEST_GENERATION_SECONDS) -> StopTiming:
        """vLLM's OpenAI server (``vllm serve``) with ``--shutdown-timeout`` :func:`vllm_drain_seconds`: a generation up to
        ``longest_generation_seconds`` (default 80) long finishes when its task stops. The ALB keeps it running through
        the deregistration delay (``longest_generation_seconds``: AWS documents in-flight requests completing then);
        on SIGTERM vLLM refuses new requests and drains running ones for the rest of the Spot notice (20 s by default;
        without the flag, vLLM 0.32's default 0 aborts them at once), then the API server, engine core and
        tensor-parallel workers stop (``VLLM_EXIT_SECONDS``, 20 s budget). A generation still running when the drain
        ends is cut, and vLLM 0.32 then waits on its open response until SIGKILL at ``stopTimeout`` (seen in
        ``make e2e-vllm`` with ``--shutdown-timeout 0``), which the budget already allows for."""
        return cls(vllm_drain_seconds(longest_generation_seconds), VLLM_EXIT_SECONDS,
                   longest_request_seconds=longest_generation_seconds, deregistration_delay_seconds=longest_generation_seconds)

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
    name: str = "custom"

    def __post_init__(self) -> None:
        needs = {
            "image": "the container image (ecs.ContainerImage)",
            "command": "the command that starts the server, e.g. ('vllm', 'serve', ...): the template must say what runs",
            "port": "the TCP port the server listens on (target group, security group and health checks use it)",
            "readiness_path": "the HTTP path that answers 200 once the server can serve (the target group's health check)",
            "liveness": "a cheap container health check (LivenessCheck) so ECS replaces a wedged container",
            "user": "the uid[:gid] the server runs as (not root)",
            "model_source": "how the model gets from S3 to the server (ModelFromS3.server_downloads() or .copy_to_scratch())",
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
        if self.api_keys_variable is not None:
            require(self.api_keys_variable not in self.environment, "server.api_keys_variable", f"{self.api_keys_variable} is also set as plain environment")
        if self.api_key_field is not None:
            require(self.api_keys_variable is not None, "server.api_key_field", "is set but api_keys_variable is not: name the variable that receives the key")
            require(bool(API_KEY_NAME.match(self.api_key_field)), "server.api_key_field",
                    f"{self.api_key_field!r} is not a key name (1-64 letters, digits, '.', '_', '-', starting with a letter or digit)")

    def contract(self, context: ServerContext) -> ServerContract:
        """A contract is its own definition: ``ModelService(server=ServerContract(...))``."""
        return self

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


class ServerDefinition(Protocol):
    """Anything ``ModelService`` accepts as ``server``: a preset, or a ServerContract."""

    def contract(self, context: ServerContext) -> ServerContract: ...


# ---- preset: this repository's server -------------------------------------------------------

BUNDLED_PORT = 8080
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
MAX_BUNDLED_WORKERS = 256  # the server refuses more (inference_server.settings: WORKERS)


def bundled_environment_keys() -> tuple[str, ...]:
    """Variables the bundled preset sets from the model's own keys (ModelProps.environment may not)."""
    return (
        "PORT", "MODEL_NAME", "MODEL_VERSION", "MODEL_URI", "MODEL_TASK", "MODEL_CACHE_DIR", "DEPLOYMENT_ENV",
        "MAX_BATCH_SIZE", "MAX_BATCH_WAIT_MS", "MAX_QUEUE_SIZE", "MAX_SEQUENCE_LENGTH", "REQUEST_TIMEOUT_S",
        "DRAIN_TIMEOUT_S", "KEEP_ALIVE_S", "RESULT_CACHE_SIZE", "COMPILE", "MODEL_RUNTIME", "REQUIRE_MANIFEST", "API_KEYS", "DOCS",
        "AWS_DEFAULT_REGION", "HOME", "TMPDIR",
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


# The bundled server's Docker build context (Dockerfile, requirements, the inference_server package), shipped in this
# package's wheel: in the repository a link to inference_image/, so both build the same asset (the same hash).
SERVER_IMAGE_DIRECTORY = Path(__file__).parent / "server_image"


def bundled_server_image() -> ecs.ContainerImage:
    """The bundled server's image, built for linux/amd64 by ``cdk deploy`` (a Docker image asset; synth needs no
    Docker) from the build context this package ships: ``pip install`` is all a team needs."""
    return ecs.ContainerImage.from_asset(str(SERVER_IMAGE_DIRECTORY), platform=ecr_assets.Platform.LINUX_AMD64,
                                         display_name="gpu-inference-server")


@dataclass(frozen=True)
class BundledServer:
    """This repository's server (inference_image/): one GPU, port 8080, ``/ready``, uid 10001,
    downloads and verifies its model itself, emits the library's EMF metrics, runs
    :func:`bundled_workers` HTTP workers for the model's ``cpu``, or ``environment["WORKERS"]`` when the model sets
    it (a whole number from 1 to 256; see :func:`bundled_workers_for`). ``image`` defaults to
    :func:`bundled_server_image` (built by ``cdk deploy`` from the package's own copy of inference_image/); pass
    your ECR copy of it where the deploying machine has no Docker."""

    image: ecs.ContainerImage = field(default_factory=bundled_server_image)

    def contract(self, context: ServerContext) -> ServerContract:
        model, timing = context.model, context.timing
        require(model.gpus == 1, "gpus", f"{model.gpus}: the bundled server uses one GPU per task; run more tasks, or serve with vLLM (vllm) for tensor parallelism")
        require(model.vllm is None, "vllm", "is set but the server is the bundled one")
        environment = {
            **model.environment,
            "PORT": str(BUNDLED_PORT),
            "MODEL_NAME": model.name,
            "MODEL_VERSION": model.version,
            "MODEL_URI": context.model_uri,
            "MODEL_TASK": model.task,
            "MODEL_CACHE_DIR": f"{SCRATCH_PATH}/model-cache",
            "REQUIRE_MANIFEST": "true",
            "DEPLOYMENT_ENV": context.environment_name,
            "MAX_BATCH_SIZE": str(model.max_batch_size),
            "MAX_BATCH_WAIT_MS": str(model.max_batch_wait_ms),
            "MAX_QUEUE_SIZE": str(model.max_queue_size),
            "MAX_SEQUENCE_LENGTH": str(model.max_sequence_length),
            "REQUEST_TIMEOUT_S": str(model.request_timeout_seconds),
            "DRAIN_TIMEOUT_S": str(timing.drain_timeout_seconds),
            "KEEP_ALIVE_S": str(timing.keep_alive_seconds),
            "RESULT_CACHE_SIZE": str(model.result_cache_size),
            "COMPILE": "true" if model.compile else "false",
            **({"MODEL_RUNTIME": model.runtime} if model.runtime != "eager" else {}),
            "DOCS": "true" if model.api_docs else "false",
            "WORKERS": str(bundled_workers_for(model.environment, model.cpu)),
            "AWS_DEFAULT_REGION": context.region,
            "HOME": f"{SCRATCH_PATH}/home",
            "TMPDIR": f"{SCRATCH_PATH}/tmp",
        }
        return ServerContract(
            name="bundled",
            image=self.image,
            command=BUNDLED_COMMAND,
            port=BUNDLED_PORT,
            readiness_path=BUNDLED_READINESS_PATH,
            # /health answers as soon as the server listens, while the model loads (/ready answers 503 "loading").
            liveness=LivenessCheck(command=BUNDLED_LIVENESS, passes_while_loading=True),
            user=BUNDLED_USER,
            model_source=ModelFromS3.server_downloads("MODEL_URI"),
            environment=environment,
            api_keys_variable="API_KEYS",
            public_paths=BUNDLED_PUBLIC_PATHS + (BUNDLED_DOCS_PATHS if model.api_docs else ()),
            bundled_metrics=True,
            serves_at_root=False,
            keep_alive_seconds=timing.keep_alive_seconds,
            stop=StopTiming.bundled(timing.drain_timeout_seconds, model.request_timeout_seconds),
        )


# ---- preset: vLLM ----------------------------------------------------------------------------

VLLM_MAX_DEFAULT_SHM_MIB = 16384
VLLM_METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")


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


@dataclass(frozen=True)
class VllmProps:
    """vLLM's OpenAI-compatible server (``vllm serve``) for one model.

    The weights are copied from the model's S3 prefix into ``/scratch/model`` by an init container
    before vLLM starts, and vLLM serves that directory (``--model``); ``--tensor-parallel-size`` is
    the model's ``gpus``. Defaults: ``served_model_name`` the model's name; ``max_model_len`` 4096;
    ``gpu_memory_utilization`` 0.90; ``max_num_seqs`` 64; ``dtype`` auto; ``shared_memory_mib`` None: half the
    model's ``memory_mib``, at most 16384 (NCCL and the engine's worker processes use /dev/shm, which counts against
    the task's memory, so the default always fits the model's default 12288 MiB); port 8000; readiness ``/health``.
    ``longest_generation_seconds`` (default 80, at most 100): the longest generation that still finishes when its task
    stops (scale-in, deployment, Spot): it is the deregistration delay of the model's target groups, and vLLM's
    ``--shutdown-timeout`` gets the rest of the 2-minute Spot notice after it and vLLM's 20 s exit (20 s by default),
    the container's ``stopTimeout`` that drain plus the exit (40 s). See :meth:`StopTiming.vllm`.
    Scaling: hold ``target_running_requests_per_task`` (default 3/4 of ``max_num_seqs``) running
    requests per task; add tasks when more than ``waiting_requests_scale_out`` requests wait or the
    KV cache is more than ``kv_cache_scale_out_percent`` full. ``image``: a mirror in your ECR of
    ``vllm/vllm-openai`` (no public registry is reachable from private subnets without NAT);
    ``fetcher_image`` and ``collector_image``: ECR mirrors of DEFAULT_FETCHER_IMAGE and
    DEFAULT_COLLECTOR_IMAGE (default: those public images).
    ``api_key_name`` (default ``default``, the key the shared stack generates): vLLM takes exactly one literal key
    (``VLLM_API_KEY``), so it gets only the key of this name from the API-key secret. Rotating it: add the new key
    under a new name, set ``api_key_name`` to it and deploy; while the deployment replaces the tasks, old tasks
    accept only the old key and new ones only the new (README, "API keys").
    """

    image: EcrImage | None = None
    served_model_name: str = ""
    max_model_len: int = 4096
    gpu_memory_utilization: float = 0.90
    max_num_seqs: int = 64
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = "auto"
    shared_memory_mib: int | None = None
    port: int = 8000
    extra_args: tuple[str, ...] = ()
    target_running_requests_per_task: int | None = None
    waiting_requests_scale_out: int = 4
    kv_cache_scale_out_percent: int = 90
    fetcher_image: EcrImage | None = None
    collector_image: EcrImage | None = None
    longest_generation_seconds: int = VLLM_LONGEST_GENERATION_SECONDS
    api_key_name: str = DEFAULT_API_KEY_NAME

    def __post_init__(self) -> None:
        vllm_drain_seconds(self.longest_generation_seconds)
        require(bool(API_KEY_NAME.match(self.api_key_name)), "api_key_name",
                f"{self.api_key_name!r} is not a key name in the API-key secret (1-64 letters, digits, '.', '_', '-', starting with a letter or digit)")
        if self.served_model_name:
            require(bool(re.match(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$", self.served_model_name)), "served_model_name", f"{self.served_model_name!r}: letters, digits, '.', '_', '-', '/'")
        require_range(self.max_model_len, 128, 1_048_576, "max_model_len")
        require(0.1 <= self.gpu_memory_utilization <= 0.98, "gpu_memory_utilization", f"{self.gpu_memory_utilization} is out of range; a fraction from 0.1 to 0.98 (leave room for CUDA graphs and the runtime)")
        require_range(self.max_num_seqs, 1, 4096, "max_num_seqs")
        if self.shared_memory_mib is not None:
            require_range(self.shared_memory_mib, 1024, 262_144, "shared_memory_mib", hint=" (vLLM with tensor parallelism needs gigabytes of /dev/shm)")
        require_range(self.port, 1024, 65535, "port")
        owned = ("--model", "--port", "--host", "--tensor-parallel-size", "--served-model-name", "--max-model-len", "--gpu-memory-utilization", "--max-num-seqs", "--dtype", "--api-key", "--download-dir", "--shutdown-timeout")
        for index, arg in enumerate(self.extra_args):
            require(arg.split("=")[0] not in owned, f"extra_args[{index}]", f"{arg!r} is set from its own key; set that key instead")
        if self.target_running_requests_per_task is not None:
            require_range(self.target_running_requests_per_task, 1, self.max_num_seqs, "target_running_requests_per_task", hint=" (at most max_num_seqs)")
        require_range(self.waiting_requests_scale_out, 1, 100_000, "waiting_requests_scale_out")
        require_range(self.kv_cache_scale_out_percent, 10, 100, "kv_cache_scale_out_percent")

    def shared_memory_for(self, memory_mib: int) -> int:
        """/dev/shm in MiB for a server container of ``memory_mib``: the setting, else half of it, at most 16384."""
        return self.shared_memory_mib if self.shared_memory_mib is not None else min(VLLM_MAX_DEFAULT_SHM_MIB, memory_mib // 2)

    @property
    def running_target(self) -> int:
        return self.target_running_requests_per_task or max(1, (self.max_num_seqs * 3) // 4)


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


def vllm_liveness(port: int) -> LivenessCheck:
    """vLLM opens its port only once the weights are loaded: :func:`port_liveness` on ``/health``."""
    return port_liveness(port, "/health")


@dataclass(frozen=True)
class VllmServer:
    """The vLLM preset. ``props`` defaults to the model's ``vllm`` settings, else VllmProps().
    ``image`` overrides ``props.image`` (for example the team's own build); ``user`` defaults to
    1000:1000; ``fetcher_image`` and ``collector_image`` default to the pinned public AWS CLI and
    CloudWatch agent images."""

    props: VllmProps | None = None
    image: ecs.ContainerImage | None = None
    user: str = "1000:1000"
    fetcher_image: ecs.ContainerImage | None = None
    collector_image: ecs.ContainerImage | None = None

    def contract(self, context: ServerContext) -> ServerContract:
        model = context.model
        props = self.props or model.vllm or VllmProps()
        image = self.image
        if image is None and props.image is not None:
            image = props.image.container_image(context.scope, "VllmImage")
        if image is None:
            raise ConfigError("vllm.image", "is missing: give the ECR repository and tag of your vllm/vllm-openai mirror, or pass image= to VllmServer")
        fetcher_image = self.fetcher_image or (props.fetcher_image.container_image(context.scope, "FetcherImage") if props.fetcher_image else None)
        collector_image = self.collector_image or (props.collector_image.container_image(context.scope, "CollectorImage") if props.collector_image else None)
        model_path = f"{SCRATCH_PATH}/model"
        command = (
            "vllm", "serve", model_path,
            "--host", "0.0.0.0",
            "--port", str(props.port),
            "--served-model-name", props.served_model_name or model.name,
            "--tensor-parallel-size", str(model.gpus),
            "--max-model-len", str(props.max_model_len),
            "--gpu-memory-utilization", f"{props.gpu_memory_utilization:g}",
            "--max-num-seqs", str(props.max_num_seqs),
            "--dtype", props.dtype,
            "--shutdown-timeout", str(vllm_drain_seconds(props.longest_generation_seconds)),
            # Its /docs, /redoc and /openapi.json answer without the key: off (the listener forwards only /v1/* anyway).
            "--disable-fastapi-docs",
            *props.extra_args,
        )
        waiting, kv_cache = (PrometheusMetrics.cloudwatch_name(m) for m in VLLM_METRICS[1:])
        running = PrometheusMetrics.cloudwatch_name(VLLM_METRICS[0])
        return ServerContract(
            name="vllm",
            image=image,
            command=command,
            port=props.port,
            readiness_path="/health",
            # vLLM's --api-key guards /v1 only: /invocations, /pooling, /score, /rerank, /tokenize and its control
            # routes answer without a key (docs.vllm.ai, "Security"). Clients reach the OpenAI API and nothing else.
            public_paths=("/v1/*",),
            liveness=vllm_liveness(props.port),
            user=self.user,
            model_source=ModelFromS3.copy_to_scratch(model_path, fetcher_image=fetcher_image),
            shared_memory_mib=props.shared_memory_for(model.memory_mib),
            tmpfs_mib={"/tmp": 2048},
            environment={
                **model.environment,
                "HOME": f"{SCRATCH_PATH}/home",
                "XDG_CACHE_HOME": f"{SCRATCH_PATH}/cache",
                "VLLM_CACHE_ROOT": f"{SCRATCH_PATH}/cache/vllm",
                "HF_HOME": f"{SCRATCH_PATH}/cache/huggingface",
                # Never reach a model hub: the weights are already on the scratch volume.
                "HF_HUB_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                # Above the ALB idle timeout, or the ALB reuses connections vLLM closed (502s).
                "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(context.timing.keep_alive_seconds),
                "AWS_DEFAULT_REGION": context.region,
            },
            # vLLM takes one literal key: the one of this name in the secret's JSON object (see VllmProps).
            api_keys_variable="VLLM_API_KEY",
            api_key_field=props.api_key_name,
            keep_alive_seconds=context.timing.keep_alive_seconds,
            stop=StopTiming.vllm(props.longest_generation_seconds),
            metrics=PrometheusMetrics(metrics=VLLM_METRICS, collector_image=collector_image),
            scaling_signals=(
                ScalingSignal(running, target=props.running_target),
                ScalingSignal(waiting, statistic="Maximum", scale_out_above=props.waiting_requests_scale_out),
                # vllm:kv_cache_usage_perc is a fraction, 0 to 1.
                ScalingSignal(kv_cache, statistic="Maximum", scale_out_above=props.kv_cache_scale_out_percent / 100, maximum=1),
            ),
        )


def server_for(model: ModelProps, image: ecs.ContainerImage | None) -> BundledServer | VllmServer:
    """The preset a model's config names: vLLM when ``model.vllm`` is set, else the bundled server."""
    if model.vllm is not None:
        return VllmServer(props=model.vllm)
    if image is None:
        raise ConfigError("image", "is missing: the bundled server needs the image built from inference_image/")
    return BundledServer(image)


def collector_config(contract: ServerContract, *, environment_name: str, model_name: str, region: str, log_group_name: str) -> dict[str, str]:
    """The CloudWatch agent's two configurations, as the environment variables it reads them from."""
    metrics = contract.metrics
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
