"""What a Spot interruption notice does to one model's tasks, so the service's minimum healthy percent can let it.

With Spot draining on, the ECS agent sets the instance DRAINING; the service scheduler then stops the instance's
tasks, but only as far as the service's ``minimumHealthyPercent`` allows: at 100 % a task on a draining instance is
not stopped before its replacement is healthy (ECS developer guide, container-instance-draining). A GPU replacement
(an instance, the image, the model) takes minutes against the two-minute notice, so at 100 % the documented stop
(deregister, wait the deregistration delay, SIGTERM, the server's drain) never starts and the instance dies under
the requests it holds.

The same minimum governs every rolling deployment and every other drain (scale-in, instance refresh): below 100 % ECS
may stop a task before its replacement is healthy (ECS developer guide, deployment-type-ecs). So the low minimum is
kept only where a Spot notice can save something by it (capacity with Spot, a model that can span instances), and
never at 0, which let ECS stop a one-task model's only task first (:func:`deployment_minimum_percent`).
"""

from __future__ import annotations

import math


def tasks_on_one_instance(instance_gpus: int, task_gpus: int, min_tasks: int) -> int:
    """The most of one model's ``min_tasks`` tasks that one instance can hold: ECS spreads them across instances, but
    a fleet smaller than the model's task count puts several on one."""
    return max(1, min(min_tasks, instance_gpus // max(1, task_gpus)))


def minimum_healthy_percent(min_tasks: int, tasks_per_instance: int) -> int:
    """The highest minimum healthy percent at which ECS may stop every task of the model on one draining instance at
    once, at any desired count from ``min_tasks`` up: the tasks elsewhere keep at least this percentage healthy.

    A model of one task gets 0: its one task is on the doomed instance either way, and only a stop the scheduler may
    begin at once lets its requests finish before the instance goes."""
    doomed = min(min_tasks, max(1, tasks_per_instance))
    return 100 * (min_tasks - doomed) // min_tasks


def deployment_minimum_percent(min_tasks: int, max_tasks: int, tasks_per_instance: int, *, has_spot: bool) -> int:
    """The service's ``MinimumHealthyPercent``: on Spot capacity, :func:`minimum_healthy_percent` at the fewest tasks
    (from ``min_tasks`` up to ``max_tasks``) that span more than one instance, the first count at which a notice can
    leave a task serving; else 100 (no Spot, or no count at which a notice spares any task).

    Below that count the notice takes every task whatever the minimum, so the percentage only has to stay above 0:
    ECS rounds the tasks it keeps up (``ceil(desired x percent / 100)``), so a one-task model keeps its task until the
    replacement is healthy on each deploy, scale-in drain and instance refresh, and at two tasks may stop the doomed
    one at once. 0, what a one-task model had, stopped its only task first on every one of them."""
    if not has_spot:
        return 100
    spanning = max(min_tasks, tasks_per_instance + 1)
    if spanning > max_tasks:
        return 100
    return minimum_healthy_percent(spanning, tasks_per_instance)


def tasks_ecs_may_stop(desired: int, doomed: int, minimum_healthy_percent: int) -> int:
    """How many of the ``doomed`` tasks on a draining instance the scheduler may stop at once, before any replacement
    is healthy, with all ``desired`` tasks healthy: it keeps ``ceil(desired x minimumHealthyPercent / 100)`` running
    and healthy (ECS API DeploymentConfiguration)."""
    keep = math.ceil(desired * minimum_healthy_percent / 100)
    return min(doomed, max(0, desired - keep))
