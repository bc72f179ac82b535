"""Whether the GPU group can hold the services while one of them deploys at its peak.

A deployment starts new tasks before it stops old ones: ECS runs up to ``maximumPercent`` of a service's
desired count (rounded down) during a rolling deployment, and a blue/green one runs a full second set.
Every task needs its own GPU, so a group sized to the sum of the services' ``max_tasks`` stalls any
deployment started at peak: the new tasks wait for GPUs that never come.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import require


@dataclass(frozen=True)
class ServiceDeployment:
    """One service as a deployment sees it: its peak task count and the tasks it runs while deploying at that peak
    (``DeploymentProps.peak_tasks``; for a rolling deployment see :meth:`rolling`)."""

    name: str
    max_tasks: int
    tasks_during_deployment: int

    @classmethod
    def rolling(cls, name: str, max_tasks: int, maximum_percent: int) -> ServiceDeployment:
        """ECS's ceiling on running tasks while it replaces them: floor(max_tasks x maximumPercent / 100)."""
        return cls(name, max_tasks, max_tasks * maximum_percent // 100)

    @property
    def percent(self) -> int:
        return round(100 * self.tasks_during_deployment / self.max_tasks)


def deploying_at_peak(services: Sequence[ServiceDeployment]) -> ServiceDeployment:
    """The service whose deployment adds the most tasks (stacks deploy one at a time)."""
    return max(services, key=lambda s: s.tasks_during_deployment - s.max_tasks)


def tasks_for_deployment_at_peak(services: Sequence[ServiceDeployment]) -> int:
    """Tasks running when every service is at ``max_tasks`` and the one with the largest surge deploys."""
    deploying = deploying_at_peak(services)
    return sum(s.max_tasks for s in services) - deploying.max_tasks + deploying.tasks_during_deployment


def instances_for_deployment_at_peak(
    services: Sequence[ServiceDeployment], gpus_per_instance: int
) -> tuple[int, ServiceDeployment]:
    """Instances needed for :func:`tasks_for_deployment_at_peak` (one GPU per task), and the deploying service."""
    return math.ceil(tasks_for_deployment_at_peak(services) / gpus_per_instance), deploying_at_peak(services)


def check_group_holds_deployment_at_peak(
    max_capacity: int, gpus_per_instance: int, services: Sequence[ServiceDeployment], key: str = "capacity.max_capacity"
) -> None:
    needed, deploying = instances_for_deployment_at_peak(services, gpus_per_instance)
    peak = sum(s.max_tasks for s in services)
    require(
        max_capacity >= needed,
        key,
        f"{max_capacity} instances cannot hold a deployment at peak: the models' max_tasks add up to {peak} tasks, "
        f"and deploying {deploying.name!r} runs up to {deploying.tasks_during_deployment} of its tasks "
        f"({deploying.percent}% of {deploying.max_tasks}), so "
        f"{peak - deploying.max_tasks + deploying.tasks_during_deployment} GPUs = {needed} instances of "
        f"{gpus_per_instance} GPU are needed; raise max_capacity to at least {needed} or lower max_tasks",
    )
