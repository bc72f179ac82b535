"""One cron grammar for every schedule: a 5-field crontab line (minute hour day-of-month month day-of-week, weekdays
0-6 from Sunday) or AWS's 6-field form (minute hour day-of-month month day-of-week year, weekdays 1-7 from Sunday,
one of the two days ``?``), each turned into the form its service takes where the meaning is one: Application
Auto Scaling's scheduled actions read the 6-field form (Application Auto Scaling API, ScheduledAction.Schedule),
EC2 Auto Scaling's the 5-field crontab form (EC2 Auto Scaling API, PutScheduledUpdateGroupAction.Recurrence)."""

from __future__ import annotations

import re

from .errors import require

_FIELD = re.compile(r"^[0-9A-Za-z*?/,\-LW#]+$")
_NUMERIC_DAYS = re.compile(r"^[0-9,\-]+$")
AWS_EXAMPLE = "0 19 ? * MON-FRI *"
CRONTAB_EXAMPLE = "0 19 * * MON-FRI"
NAMES_FIX = "write the days as names (MON-FRI; FRI,SAT,SUN), which both forms read alike"


def aws_cron(expression: str, key: str) -> str:
    """``expression`` (either form) as Application Auto Scaling's 6-field cron, checked."""
    parts = _fields(expression, key)
    if len(parts) == 5:
        minute, hour, day, month, weekday = (part.replace("?", "*") for part in parts)
        require(
            day == "*" or weekday == "*",
            key,
            f"{expression!r} names both a day of the month and a day of the week, which crontab reads as either "
            f"and AWS's 6-field form cannot say: keep one (the other '*'), or give two schedules",
        )
        if weekday == "*":
            parts = [minute, hour, day, month, "?", "*"]
        else:
            parts = [minute, hour, "?", month, _shift_days(weekday, 1, expression, key), "*"]
    require(
        (parts[2] == "?") != (parts[4] == "?"),
        key,
        f"{expression!r}: exactly one of day-of-month and day-of-week must be '?' (e.g. {AWS_EXAMPLE!r})",
    )
    return " ".join(parts)


def crontab_cron(expression: str, key: str) -> str:
    """``expression`` (either form) as EC2 Auto Scaling's 5-field crontab recurrence, checked."""
    parts = _fields(expression, key)
    if len(parts) == 6:
        minute, hour, day, month, weekday, year = parts
        require(
            year == "*",
            key,
            f"{expression!r} names a year ({year}), which an EC2 Auto Scaling recurrence cannot: "
            "use '*' and bound the schedule otherwise",
        )
        require(
            (day == "?") != (weekday == "?"),
            key,
            f"{expression!r}: exactly one of day-of-month and day-of-week must be '?' (e.g. {AWS_EXAMPLE!r}), "
            f"or write the 5-field crontab form (e.g. {CRONTAB_EXAMPLE!r})",
        )
        weekday = "*" if weekday == "?" else _shift_days(weekday, -1, expression, key)
        parts = [minute, hour, day, month, weekday]
    parts = [part.replace("?", "*") for part in parts]
    require(
        not any(mark in part for part in parts[2:] for mark in "LW#"),
        key,
        f"{expression!r} uses L, W or #, which an EC2 Auto Scaling recurrence (crontab) cannot read",
    )
    return " ".join(parts)


def _fields(expression: str, key: str) -> list[str]:
    parts = expression.split() if isinstance(expression, str) else []
    require(
        len(parts) in (5, 6) and all(_FIELD.match(part) for part in parts),
        key,
        f"{expression!r} is not a cron expression: 5 fields as crontab (e.g. {CRONTAB_EXAMPLE!r}) or AWS's 6 "
        f"(e.g. {AWS_EXAMPLE!r})",
    )
    _check_range(parts[0], 0, 59, key, "minute")
    _check_range(parts[1], 0, 23, key, "hour")
    return parts


def _check_range(part: str, low: int, high: int, key: str, name: str) -> None:
    for number in re.findall(r"\d+", part.split("/")[0]):
        require(low <= int(number) <= high, key, f"{name} {number} is out of range {low}-{high}")


def _shift_days(weekday: str, step: int, expression: str, key: str) -> str:
    """Numbered weekdays from one form's numbering to the other's (crontab 0-6 or 7 from Sunday, AWS 1-7 from
    Sunday); names and ``*`` unchanged. A numbered field this cannot move one to one is refused, naming the names."""
    if not any(character.isdigit() for character in weekday):
        return weekday
    require(
        bool(_NUMERIC_DAYS.match(weekday)), key, f"{expression!r}: its numbered day-of-week {weekday!r}: {NAMES_FIX}"
    )
    moved = []
    for item in weekday.split(","):
        days = [int(day) for day in item.split("-")]
        require(
            all((0 <= day <= 7) if step > 0 else (1 <= day <= 7) for day in days),
            key,
            f"{expression!r}: day-of-week {item} is out of range ({'0-7' if step > 0 else '1-7'})",
        )
        shifted = [(day % 7) + 1 if step > 0 else day - 1 for day in days]
        require(shifted == sorted(shifted), key, f"{expression!r}: the day range {item} wraps past Sunday: {NAMES_FIX}")
        moved.append("-".join(str(day) for day in shifted))
    return ",".join(moved)
