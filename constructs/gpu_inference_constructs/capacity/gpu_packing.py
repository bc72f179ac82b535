"""Whether a fleet's instances hold the tasks of the models that share their GPUs (NVIDIA MPS).

ECS places a shared task on a GPU with its share's memory free, and the task's CPU and memory on the instance (ECS API
reference, NvidiaMpsAllocation); a GPU's memory is what the agent registers, its total less the driver's reserve, and
the MPS server's own context comes out of it too (gpu_share.shareable_memory_mib). How capacity-provider managed scaling
counts GPU memory is not documented, so the group's ``max_capacity`` is checked here by packing the tasks, as the
deployment at peak runs them: every model at ``max_tasks`` and the one with the largest surge deploying
(deployment_capacity.py), first-fit decreasing by GPU memory onto instances of the group's smallest type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.deployment_capacity import ServiceDeployment, check_group_holds_deployment_at_peak, deploying_at_peak
from ..core.errors import require
from ..core.gpu_share import (
    MPS_CAPABILITY,
    MPS_MIN_AGENT_VERSION,
    GpuShare,
    shareable_memory_mib,
    smallest_shareable_memory_mib,
)
from ..core.instance_catalog import GpuInstanceType
from ..core.model_props import AGENT_RESERVED_CPU, ModelProps, service_deployment


@dataclass(frozen=True)
class SharedTask:
    """One task of a model on a share: its GPU memory, CPU units and memory."""

    model: str
    share: GpuShare
    cpu: int
    memory_mib: int


@dataclass
class _Instance:
    gpu_free: list[int]
    cpu_free: int
    memory_free: int

    def place(self, task: SharedTask) -> bool:
        if task.cpu > self.cpu_free or task.memory_mib > self.memory_free:
            return False
        for index, free in enumerate(self.gpu_free):
            if task.share.memory_mib <= free:
                self.gpu_free[index] -= task.share.memory_mib
                self.cpu_free -= task.cpu
                self.memory_free -= task.memory_mib
                return True
        return False


def instances_for(
    tasks: Sequence[SharedTask], instance_type: GpuInstanceType, gpu_memory_mib: int | None = None
) -> int:
    """Instances of ``instance_type`` that hold ``tasks``, packed first-fit decreasing by GPU memory; each GPU offers
    ``gpu_memory_mib`` (default: the type's shareable memory, what ECS registers less the MPS server's context)."""
    gpu = gpu_memory_mib or shareable_memory_mib(instance_type.gpu_model, instance_type.gpu_memory_gib)
    instances: list[_Instance] = []
    for task in sorted(tasks, key=lambda t: (t.share.memory_mib, t.cpu, t.memory_mib), reverse=True):
        if not any(instance.place(task) for instance in instances):
            instance = _Instance(
                [gpu] * instance_type.gpus,
                instance_type.task_cpu_limit_units - AGENT_RESERVED_CPU,
                instance_type.task_memory_limit_mib,
            )
            require(
                instance.place(task),
                f"models[{task.model}]",
                f"one task ({task.share.memory_mib} MiB of GPU memory, {task.cpu} CPU units, {task.memory_mib} MiB) "
                f"does not fit an empty {instance_type.name}; shrink its gpu_share, cpu or memory_mib",
            )
            instances.append(instance)
    return len(instances)


@dataclass(frozen=True)
class SharedService:
    """A model on a share as the capacity check sees it: its deployment counts and one task's shape."""

    deployment: ServiceDeployment
    task: SharedTask


def check_one_kind(shared: list[str], whole: list[str], key: str) -> None:
    """A capacity group holds models on shares or models on whole GPUs, never both: a GPU in MPS mode takes only MPS
    containers (ECS API reference, GpuSharingMode)."""
    require(
        not (shared and whole),
        key,
        f"{', '.join(shared)} on shares and {', '.join(whole)} on whole GPUs in one capacity group: a GPU in MPS mode "
        "takes only shared containers; put the shared models in a capacity group of their own (capacity_groups in "
        "cdk.json; another GpuCapacity in your own app)",
    )


def shared_service(model: ModelProps) -> SharedService:
    """``model`` (on a share) as the capacity check counts it."""
    assert model.gpu_share is not None  # only models on a share are packed
    return SharedService(
        service_deployment(model), SharedTask(model.name, model.gpu_share, model.cpu, model.memory_mib)
    )


def tasks_at_peak(services: Sequence[SharedService]) -> list[SharedTask]:
    """Every model at ``max_tasks`` and the one with the largest surge running its deployment's count."""
    deploying = deploying_at_peak([s.deployment for s in services])
    return [
        s.task
        for s in services
        for _ in range(s.deployment.tasks_during_deployment if s.deployment is deploying else s.deployment.max_tasks)
    ]


def check_shared_group_holds_deployment_at_peak(
    max_capacity: int,
    instance_types: Sequence[GpuInstanceType],
    services: Sequence[SharedService],
    key: str = "capacity.max_capacity",
) -> int:
    """Refuse a group of ``max_capacity`` instances that cannot hold the shared services deploying at peak; returns
    the instances they need. Packed onto the smallest of ``instance_types`` with the smallest GPU among them: the
    group may launch any of them."""
    instance_type = min(instance_types, key=lambda t: (t.memory_gib, t.vcpus))
    gpu = smallest_shareable_memory_mib(instance_types)
    needed = instances_for(tasks_at_peak(services), instance_type, gpu)
    deploying = deploying_at_peak([s.deployment for s in services])
    peak = sum(s.deployment.max_tasks for s in services)
    require(
        max_capacity >= needed,
        key,
        f"{max_capacity} instances cannot hold the shared-GPU models deploying at peak: their max_tasks add up to "
        f"{peak} tasks and deploying {deploying.name!r} runs {deploying.tasks_during_deployment}; packed by GPU "
        f"memory, CPU and memory onto {instance_type.name} ({instance_type.gpus} x {gpu} MiB of GPU memory each shares "
        f"may use: what ECS registers less the MPS server) they need {needed}; raise max_capacity to at least "
        f"{needed}, shrink the shares or lower max_tasks",
    )
    return needed


def check_joins_group(
    model: ModelProps,
    max_capacity: int,
    instance_types: Sequence[GpuInstanceType],
    whole: Sequence[ServiceDeployment],
    shared: Sequence[SharedService],
    key: str,
) -> ServiceDeployment | SharedService:
    """``model`` joins a capacity group of at most ``max_capacity`` instances of ``instance_types`` that already runs
    ``whole`` (services on whole GPUs or devices, counted in them) and ``shared`` (services on GPU shares): one kind
    per group (:func:`check_one_kind`) and room for a deployment at peak (``key``: the group's max_capacity). Returns
    what the group counts for the model."""
    on_share = model.gpu_share is not None
    check_one_kind(
        [s.deployment.name for s in shared] + ([model.name] if on_share else []),
        [s.name for s in whole] + ([] if on_share else [model.name]),
        f"models[{model.name}].gpu_share",
    )
    if not on_share:
        service = service_deployment(model, in_gpus=True)
        smallest = min(instance_types, key=lambda t: (t.memory_gib, t.vcpus))  # the type every task must fit
        check_group_holds_deployment_at_peak(max_capacity, smallest.gpus, [*whole, service], key=key)
        return service
    joined = shared_service(model)
    check_shared_group_holds_deployment_at_peak(max_capacity, instance_types, [*shared, joined], key=key)
    return joined


def mps_prerequisites_warning(model: str, why: str) -> str:
    """What a shared model needs of capacity the library does not build (``why`` says whose it is)."""
    return (
        f"models[{model}] runs on a GPU share and {why}: its tasks are placed only on instances with the attribute "
        f"{MPS_CAPABILITY}, which the ECS agent ({MPS_MIN_AGENT_VERSION} or later) advertises only when "
        "/usr/bin/nvidia-cuda-mps-control is installed and nvidia-mps.service is enabled (the ECS-optimized AL2023 "
        "GPU AMI ships both); build the AMI from it, or check with aws ecs list-attributes --target-type "
        f"container-instance --attribute-name {MPS_CAPABILITY} before deploying, or the tasks stay unplaced"
    )
