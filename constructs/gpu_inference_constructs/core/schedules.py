"""Scheduled scaling: cron expressions and time zones checked at synth, not at deploy."""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass

from .cron_expressions import aws_cron, crontab_cron
from .errors import ConfigError, require


def check_time_zone(name: str, key: str) -> None:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            key, f"{name!r} is not an IANA time zone (e.g. 'UTC', 'Europe/Berlin', 'America/New_York')"
        ) from None


@dataclass(frozen=True)
class ServiceSchedule:
    """At ``cron`` (in ``time_zone``) set every model's task range; an omitted bound restores the model's own."""

    name: str
    """The schedule's name: 1-64 letters, digits or '-'. Required."""
    cron: str
    """When it applies: a cron expression, 5 fields as crontab (``0 19 * * MON-FRI``) or AWS's 6
    (``0 19 ? * MON-FRI *``); kept as the 6-field form Application Auto Scaling's scheduled actions read
    (cron_expressions.py). Required."""
    time_zone: str = "UTC"
    """The IANA time zone ``cron`` reads in. Default: "UTC"."""
    min_tasks: int | None = None
    """Every model's minimum tasks from ``cron`` on; 0 only with ``max_tasks`` 0 (the service off). Default: None (the
    model's own ``min_tasks``)."""
    max_tasks: int | None = None
    """Every model's maximum tasks from ``cron`` on; 0 turns the service off. Default: None (the model's own
    ``max_tasks``)."""

    def __post_init__(self) -> None:
        require(
            bool(re.match(r"^[A-Za-z0-9-]{1,64}$", self.name)), "name", f"{self.name!r}: use letters, digits and '-'"
        )
        object.__setattr__(self, "cron", aws_cron(self.cron, "cron"))
        check_time_zone(self.time_zone, "time_zone")
        for key in ("min_tasks", "max_tasks"):
            value = getattr(self, key)
            require(value is None or value >= 0, key, f"{value} must be 0 or more")
        if self.min_tasks is not None and self.max_tasks is not None:
            require(
                self.min_tasks <= self.max_tasks,
                "min_tasks",
                f"{self.min_tasks} is greater than max_tasks {self.max_tasks}",
            )
        if self.max_tasks == 0:
            require(
                self.min_tasks == 0,
                "min_tasks",
                "set min_tasks: 0 too: a schedule with max_tasks 0 turns the service off",
            )
        if self.min_tasks == 0:
            require(
                self.max_tasks == 0,
                "min_tasks",
                f"0 with max_tasks {'inherited' if self.max_tasks is None else self.max_tasks}: {STRANDED}; "
                "set min_tasks to at least 1, or max_tasks: 0 to turn the service off",
            )

    def task_range(self, model_min_tasks: int, model_max_tasks: int) -> tuple[int, int]:
        """The (min, max) this schedule sets for a model whose own range is ``model_min_tasks``..``model_max_tasks``."""
        low = model_min_tasks if self.min_tasks is None else self.min_tasks
        high = model_max_tasks if self.max_tasks is None else self.max_tasks
        return low, high


# Why no task range may have a minimum of 0 unless it is an off period (maximum 0 too).
STRANDED = (
    "a service at 0 tasks has no requests per target, latency, CPU or GPU data, and target tracking does "
    "nothing on missing data, so nothing would ever start a task again"
)


def check_model_task_range(min_tasks: int, max_tasks: int) -> None:
    """A model's own range must serve: it is in force from each deploy until a schedule changes it."""
    require(
        min_tasks >= 1,
        "min_tasks",
        f"{min_tasks} with max_tasks {max_tasks}: {STRANDED}; set min_tasks to at least 1 "
        "(a schedule with min_tasks 0 and max_tasks 0 turns the service off for nights and weekends)",
    )


def check_schedule_task_ranges(
    model_name: str, model_min_tasks: int, model_max_tasks: int, schedules: Sequence[ServiceSchedule]
) -> None:
    """Every range a schedule sets for this model serves (min >= 1) or is off (max 0, min 0), and min <= max.

    With the model's own range serving too, a schedule that ends an off period always brings a task back.
    """
    for index, schedule in enumerate(schedules):
        low, high = schedule.task_range(model_min_tasks, model_max_tasks)
        require(
            low <= high,
            f"scaling.schedules[{index}].min_tasks",
            f"{low} is greater than max_tasks {high} for model {model_name!r} (its own range is "
            f"{model_min_tasks}-{model_max_tasks})",
        )
        require(
            low >= 1 or high == 0,
            f"scaling.schedules[{index}].min_tasks",
            f"{low} with max_tasks {high} for model {model_name!r}: {STRANDED}",
        )


@dataclass(frozen=True)
class CapacityPrewarm:
    """At ``cron`` (in ``time_zone``) raise the GPU group's minimum, a floor for the day's peak.

    Only the minimum: ECS managed scaling owns the group's desired capacity.
    """

    name: str
    """The prewarm's name: 1-64 letters, digits or '-' (its scheduled action is ``Prewarm-<name>``). Required."""
    cron: str
    """When it applies: a cron expression, 5 fields as crontab (``0 7 * * MON-FRI``) or AWS's 6 (``0 7 ? * MON-FRI *``);
    kept as the 5-field form EC2 Auto Scaling's scheduled actions read (cron_expressions.py). Required."""
    min_capacity: int
    """The group's minimum instances from ``cron`` on, 0 or more and at most the group's ``max_capacity``. Required."""
    time_zone: str = "UTC"
    """The IANA time zone ``cron`` reads in. Default: "UTC"."""

    def __post_init__(self) -> None:
        require(
            bool(re.match(r"^[A-Za-z0-9-]{1,64}$", self.name)), "name", f"{self.name!r}: use letters, digits and '-'"
        )
        object.__setattr__(self, "cron", crontab_cron(self.cron, "cron"))
        check_time_zone(self.time_zone, "time_zone")
        require(self.min_capacity >= 0, "min_capacity", f"{self.min_capacity} must be 0 or more")
