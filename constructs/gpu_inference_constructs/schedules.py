"""Scheduled scaling: cron expressions and time zones checked at synth, not at deploy."""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from typing import Optional

from .errors import ConfigError, require

_FIELD = re.compile(r"^[0-9A-Za-z*?/,\-LW#]+$")


def check_cron(expression: str, fields: int, key: str) -> None:
    """Application Auto Scaling cron has 6 fields (min hour day month weekday year); EC2 Auto Scaling has 5."""
    parts = expression.split()
    example = "0 19 ? * MON-FRI *" if fields == 6 else "0 7 * * MON-FRI"
    require(
        len(parts) == fields and all(_FIELD.match(part) for part in parts),
        key,
        f"{expression!r} is not a {fields}-field cron expression (e.g. {example!r})",
    )
    _check_range(parts[0], 0, 59, key, "minute")
    _check_range(parts[1], 0, 23, key, "hour")
    if fields == 6:
        require(
            (parts[2] == "?") != (parts[4] == "?"),
            key,
            f"{expression!r}: exactly one of day-of-month and day-of-week must be '?'",
        )


def _check_range(part: str, low: int, high: int, key: str, name: str) -> None:
    for number in re.findall(r"\d+", part.split("/")[0]):
        require(low <= int(number) <= high, key, f"{name} {number} is out of range {low}-{high}")


def check_time_zone(name: str, key: str) -> None:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError(key, f"{name!r} is not an IANA time zone (e.g. 'UTC', 'Europe/Berlin', 'America/New_York')") from None


@dataclass(frozen=True)
class ServiceSchedule:
    """At ``cron`` (6 fields, in ``time_zone``) set every model's task range; an omitted bound restores the model's own."""

    name: str
    cron: str
    time_zone: str = "UTC"
    min_tasks: Optional[int] = None
    max_tasks: Optional[int] = None

    def __post_init__(self) -> None:
        require(bool(re.match(r"^[A-Za-z0-9-]{1,64}$", self.name)), "name", f"{self.name!r}: use letters, digits and '-'")
        check_cron(self.cron, 6, "cron")
        check_time_zone(self.time_zone, "time_zone")
        for key in ("min_tasks", "max_tasks"):
            value = getattr(self, key)
            require(value is None or value >= 0, key, f"{value} must be 0 or more")
        if self.min_tasks is not None and self.max_tasks is not None:
            require(self.min_tasks <= self.max_tasks, "min_tasks", f"{self.min_tasks} is greater than max_tasks {self.max_tasks}")


@dataclass(frozen=True)
class CapacityPrewarm:
    """At ``cron`` (5 fields, in ``time_zone``) raise the GPU group's minimum, a floor for the day's peak.

    Only the minimum: ECS managed scaling owns the group's desired capacity.
    """

    name: str
    cron: str
    min_capacity: int
    time_zone: str = "UTC"

    def __post_init__(self) -> None:
        require(bool(re.match(r"^[A-Za-z0-9-]{1,64}$", self.name)), "name", f"{self.name!r}: use letters, digits and '-'")
        check_cron(self.cron, 5, "cron")
        check_time_zone(self.time_zone, "time_zone")
        require(self.min_capacity >= 0, "min_capacity", f"{self.min_capacity} must be 0 or more")
