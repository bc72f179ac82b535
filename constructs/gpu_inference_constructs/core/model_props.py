"""One model, whatever server runs it: its name and version, what a task reserves, how many tasks, how it scales,
deploys, rolls back and pages. The server's own settings are its preset's props (``BundledServerProps``,
``VllmProps``, ``TritonProps``, ``TgiProps``) or a ``ServerContract``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .deployment_capacity import ServiceDeployment
from .deployment_props import DeploymentProps, RollbackProps, RollbackThresholds
from .errors import ConfigError, require, require_range
from .gpu_share import GpuShare, smallest_shareable_memory_mib
from .instance_catalog import GpuInstanceType
from .latency_alarms import LatencyAlarmProps, LatencyAlarmThresholds
from .legacy_keywords import with_legacy_keywords
from .neuron_placement import check_neuron_task
from .scaling_props import ModelScalingProps
from .schedules import check_model_task_range
from .target_optimizer_props import AGENT_CPU, AGENT_MEMORY_MIB, TargetOptimizerProps
from .task_size import SidecarReservation, reservation_of

MODEL_NAME = re.compile(r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$")
MODEL_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# A rolling deployment starts the new tasks before it stops the old: up to twice the tasks.
ROLLING_MAX_HEALTHY_PERCENT = 200
# What ECS keeps back on every instance for the agent and daemons.
AGENT_RESERVED_CPU = 512


@with_legacy_keywords("ModelProps")
@dataclass(frozen=True)
class ModelProps:
    """One model and how its service runs, for any server."""

    name: str
    """URL-safe: 2-40 lowercase letters, digits and '-'. It becomes the path ``/<name>/`` and the S3 prefix."""
    version: str
    """Which of the model's published versions to serve: ``<models_prefix>/<name>/<version>/`` in the model bucket."""
    cpu: int = 3072
    """CPU units (1024 = one vCPU) the server container reserves per task. Default: 3072."""
    memory_mib: int = 12288
    """MiB the server container reserves per task (its ``/dev/shm`` counts against it). Default: 12288."""
    gpus: int = 1
    """Whole GPUs per task, the one place they are set (vLLM and TGI shard over them); on a Neuron type, its Neuron
    devices, which must be all of the instance's (neuron_placement.py). Default: 1."""
    gpu_share: GpuShare | None = None
    """A share of one GPU (NVIDIA MPS: its GPU memory and, optionally, a compute limit) instead of whole GPUs; the
    model's capacity group then holds only models on shares. Default: None (``gpus`` whole GPUs)."""
    min_tasks: int = 1
    """Fewest tasks scaling keeps. Default: 1."""
    max_tasks: int = 4
    """Most tasks scaling starts. Default: 4."""
    expected_load_seconds: int = 180
    """How long download, load and warm-up take: the health-check grace period follows it. Default: 180."""
    environment: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for the server container; those its preset sets from its own keys are refused.
    Default: none."""
    scaling: ModelScalingProps = field(default_factory=ModelScalingProps)
    """Requests per task, cooldowns and the latency goal (``scaling.latency_p95_ms``). Default: ModelScalingProps()."""
    deployment: DeploymentProps = field(default_factory=DeploymentProps)
    """How a new version goes out (rolling, canary, linear, blue/green). Default: rolling."""
    rollback: RollbackProps = field(default_factory=RollbackProps)
    """Where a deployment rolls back. Default: multiples of ``scaling.latency_p95_ms`` (never below it)."""
    alarms: LatencyAlarmProps = field(default_factory=LatencyAlarmProps)
    """Where its latency alarms page. Default: multiples of ``scaling.latency_p95_ms`` (never below it)."""
    target_optimizer: TargetOptimizerProps | None = None
    """ALB Target Optimizer: the load balancer sends a task at most ``max_concurrency`` requests at once, through
    AWS's target-control agent beside the server, for a server that cannot shed load itself (Triton, SGLang, your
    own). Default: None (off; the target group and task as without it)."""

    def __post_init__(self) -> None:
        require(
            bool(MODEL_NAME.match(self.name)),
            "name",
            f"{self.name!r} is not URL-safe; use 2-40 lowercase letters, digits and '-', starting with a letter (it "
            f"becomes the path /{self.name}/)",
        )
        require(
            bool(MODEL_VERSION.match(self.version)),
            "version",
            f"{self.version!r}: use letters, digits, '.', '_' or '-' (it becomes an S3 prefix)",
        )
        require(256 <= self.cpu, "cpu", f"{self.cpu} CPU units is too small; at least 256 (1024 = one vCPU)")
        require(512 <= self.memory_mib, "memory_mib", f"{self.memory_mib} MiB is too small; at least 512")
        require_range(self.max_tasks, 1, 100, "max_tasks")
        require(
            self.min_tasks <= self.max_tasks,
            "min_tasks",
            f"{self.min_tasks} must be between 1 and max_tasks ({self.max_tasks})",
        )
        check_model_task_range(self.min_tasks, self.max_tasks)
        require_range(self.expected_load_seconds, 10, 3000, "expected_load_seconds")
        require_range(
            self.gpus,
            1,
            12,
            "gpus",
            hint=" (GPUs per task, a 12xlarge type has 4; Neuron devices, an inf2.48xlarge has 12)",
        )
        require(
            self.gpu_share is None or self.gpus == 1,
            "gpus",
            f"{self.gpus} whole GPUs and a gpu_share: a share is of one GPU (one CUDA process); remove gpu_share for "
            "tensor parallelism over whole GPUs, or leave gpus out",
        )
        require(
            self.target_optimizer is None or isinstance(self.target_optimizer, TargetOptimizerProps),
            "target_optimizer",
            f"got {type(self.target_optimizer).__name__}: pass a TargetOptimizerProps, or None",
        )
        self.rollback_thresholds()
        self.latency_alarm_thresholds()

    def rollback_thresholds(
        self, target_5xx_percent: float = RollbackThresholds.target_5xx_percent
    ) -> RollbackThresholds:
        """Where this model's rollback alarms trip: ``rollback``, else derived from its own latency goal."""
        try:
            return self.rollback.thresholds(self.scaling.latency_p95_ms, target_5xx_percent)
        except ConfigError as error:
            raise error.within("rollback") from None

    def latency_alarm_thresholds(self) -> LatencyAlarmThresholds:
        """Where this model's paging latency alarms trip: ``alarms``, else derived from its own latency goal."""
        try:
            return self.alarms.thresholds(self.scaling.latency_p95_ms)
        except ConfigError as error:
            raise error.within("alarms") from None

    def check_reserved_environment(self, reserved: tuple[str, ...], server: str) -> None:
        """``environment`` sets none of the variables the server's preset sets from its own keys."""
        clashing = sorted(set(self.environment) & set(reserved))
        require(
            not clashing,
            "environment",
            f"{clashing} are set by the {server} preset from its own keys; set those keys instead",
        )

    def check_fits(
        self, instance_type: GpuInstanceType, sidecars: tuple[int, int], all_types: tuple[GpuInstanceType, ...] = ()
    ) -> None:
        """A task of this model, its server and the ``sidecars`` (CPU units, MiB) its server adds, fits
        ``instance_type`` (the fleet's smallest), and its GPU share fits the smallest GPU of ``all_types`` (default:
        that type's). The target-control agent counts as one more sidecar."""
        beside = reservation_of(sidecars)
        if self.target_optimizer is not None:
            beside = beside.plus("target-control agent", AGENT_CPU, AGENT_MEMORY_MIB)
        cpu, memory = beside
        if instance_type.neuron:
            check_neuron_task(
                instance_type,
                devices=self.gpus,
                gpu_share=self.gpu_share,
                cpu=self.cpu + cpu,
                memory_mib=self.memory_mib + memory,
                sidecars=(cpu, memory),
            )
        try:
            check_task_fits(instance_type, gpus=self.gpus, cpu=self.cpu + cpu, memory_mib=self.memory_mib + memory)
        except ConfigError as error:
            raise ConfigError(
                error.key, error.detail + self._value_to_write(error.key, instance_type, beside)
            ) from None
        if self.gpu_share is not None:
            types = all_types or (instance_type,)
            gpu = smallest_shareable_memory_mib(types)
            require(
                self.gpu_share.memory_mib <= gpu,
                "gpu_share.memory_mib",
                f"{self.gpu_share.memory_mib} MiB is more than the smallest GPU of {', '.join(t.name for t in types)} "
                f"offers its shares ({gpu} MiB: what ECS registers less the MPS server's context): a share is of one "
                f"GPU; give at most {gpu}, or whole GPUs (remove gpu_share)",
            )

    def _value_to_write(self, key: str, instance_type: GpuInstanceType, beside: SidecarReservation) -> str:
        """For a task too large on ``key`` (cpu or memory_mib): the most this model may reserve there beside the
        sidecars, and what each of them takes."""
        if key == "memory_mib":
            limit, own, index, unit = instance_type.task_memory_limit_mib, self.memory_mib, 2, "MiB"
        elif key == "cpu":
            limit, own, index, unit = instance_type.task_cpu_limit_units - AGENT_RESERVED_CPU, self.cpu, 1, "CPU units"
        else:
            return ""
        room = limit - beside[index - 1]
        write = (
            f"write {key}: {room} at most"
            if room > 0
            else f"the sidecars alone take all of it: use an instance type with more than {limit} {unit} for tasks"
        )
        return f": {write} (you wrote {own}; the sidecars take {beside[index - 1]} {unit}: {beside.described(index)})"

    @property
    def health_check_grace_seconds(self) -> int:
        """Download, verify, load and warm up take ``expected_load_seconds``; allow half again plus a minute."""
        return math.ceil(self.expected_load_seconds * 1.5) + 60


def service_deployment(model: ModelProps, *, in_gpus: bool = False) -> ServiceDeployment:
    """``model`` at ``max_tasks`` and while it deploys at that peak, counted in tasks (load balancer targets) or,
    ``in_gpus``, in GPUs (what a capacity group must hold: a task takes ``gpus`` of them)."""
    per_task = model.gpus if in_gpus else 1
    peak = model.deployment.peak_tasks(model.max_tasks, ROLLING_MAX_HEALTHY_PERCENT)
    return ServiceDeployment(model.name, model.max_tasks * per_task, peak * per_task)


def check_task_fits(instance_type: GpuInstanceType, *, gpus: int, cpu: int, memory_mib: int) -> None:
    """A task reserving ``gpus``, ``cpu`` units and ``memory_mib`` in all fits one ``instance_type``."""
    require(
        gpus <= instance_type.gpus,
        "gpus",
        f"{gpus} GPUs per task do not fit on {instance_type.name} ({instance_type.gpus} GPU); use a type with "
        f"{gpus} or more GPUs (the 12xlarge types have 4) for this model's capacity",
    )
    require(
        memory_mib <= instance_type.task_memory_limit_mib,
        "memory_mib",
        f"{memory_mib} MiB does not fit on {instance_type.name} ({instance_type.memory_gib} GiB; at most "
        f"{instance_type.task_memory_limit_mib} MiB leaves room for the OS and ECS agent)",
    )
    require(
        cpu <= instance_type.task_cpu_limit_units - AGENT_RESERVED_CPU,
        "cpu",
        f"{cpu} CPU units does not fit on {instance_type.name} ({instance_type.vcpus} vCPU = "
        f"{instance_type.task_cpu_limit_units} units; keep {AGENT_RESERVED_CPU} for the agent and daemons)",
    )
