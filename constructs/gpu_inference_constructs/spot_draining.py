"""What a Spot interruption notice does to one model's tasks, so the service's minimum healthy percent can let it.

With Spot draining on, the ECS agent sets the instance DRAINING; the service scheduler then stops the instance's
tasks, but only as far as the service's ``minimumHealthyPercent`` allows: at 100 % a task on a draining instance is
not stopped before its replacement is healthy (ECS developer guide, container-instance-draining). A GPU replacement
(an instance, the image, the model) takes minutes against the two-minute notice, so at 100 % the documented stop
(deregister, wait the deregistration delay, SIGTERM, the server's drain) never starts and the instance dies under
the requests it holds.
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


def tasks_ecs_may_stop(desired: int, doomed: int, minimum_healthy_percent: int) -> int:
    """How many of the ``doomed`` tasks on a draining instance the scheduler may stop at once, before any replacement
    is healthy, with all ``desired`` tasks healthy: it keeps ``ceil(desired x minimumHealthyPercent / 100)`` running
    and healthy (ECS API DeploymentConfiguration)."""
    keep = math.ceil(desired * minimum_healthy_percent / 100)
    return min(doomed, max(0, desired - keep))
