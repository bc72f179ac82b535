"""A week of each environment's scheduled actions, as Application Auto Scaling and EC2 Auto Scaling apply them.

Read from the synthesized templates (not the config), stepped minute by minute in each action's time zone:
no service may ever sit in a range with a minimum of 0 and a maximum above 0 (at 0 tasks nothing produces the
data target tracking needs, so it would stay at 0), every off period must end, and the GPU group's bounds must
hold every service's floor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.infra.conftest import ENVIRONMENTS

START = datetime(2026, 12, 7, tzinfo=UTC)  # a Monday
WEEK_MINUTES = 7 * 24 * 60
DAY_NAMES = {name: number for number, name in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"], start=1
    )
}


def field_matches(field: str, value: int, names: dict, low: int, high: int) -> bool:
    """One cron field (``*``, ``?``, ``5``, ``1-5``, ``MON-FRI``, ``0/15``, lists) against ``value``."""
    for part in field.split(","):
        base, _, step = part.partition("/")
        if base in ("*", "?"):
            first, last = low, high
        else:
            ends = [int(names.get(end.upper(), end)) for end in base.split("-")]
            first, last = ends[0], ends[-1] if len(ends) > 1 else (high if step else ends[0])
        if first <= value <= last and (value - first) % int(step or 1) == 0:
            return True
    return False


def cron_matches(expression: str, moment: datetime) -> bool:
    """Application Auto Scaling's 6-field cron (weekdays 1-7 = SUN-SAT) or EC2 Auto Scaling's 5-field one (0-6)."""
    fields = expression.split()
    minute, hour, day, month, weekday = fields[:5]
    aws_weekdays = len(fields) == 6
    sunday_first = (moment.isoweekday() % 7) + (1 if aws_weekdays else 0)
    names = {k: v + (1 if aws_weekdays else 0) for k, v in DAY_NAMES.items()}
    return (
        field_matches(minute, moment.minute, {}, 0, 59)
        and field_matches(hour, moment.hour, {}, 0, 23)
        and field_matches(day, moment.day, {}, 1, 31)
        and field_matches(month, moment.month, MONTH_NAMES, 1, 12)
        and field_matches(weekday, sunday_first, names, 1 if aws_weekdays else 0, 7 if aws_weekdays else 6)
        and (len(fields) < 6 or field_matches(fields[5], moment.year, {}, 1970, 2199))
    )


@dataclass
class Action:
    cron: str
    zone: ZoneInfo
    minimum: int | None
    maximum: int | None

    def due(self, moment: datetime) -> bool:
        return cron_matches(self.cron, moment.astimezone(self.zone))


def cron_of(schedule: str) -> str:
    """The expression in Application Auto Scaling's ``cron(...)`` schedule."""
    match = re.fullmatch(r"cron\((.*)\)", schedule)
    assert match is not None, schedule
    return match.group(1)


def service_targets(template: dict) -> dict[str, tuple[tuple[int, int], list[Action]]]:
    """Each ECS service's scalable target: its deployed (min, max) and its scheduled actions."""
    targets = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::ApplicationAutoScaling::ScalableTarget":
            continue
        properties = resource["Properties"]
        actions = [
            Action(
                cron_of(action["Schedule"]),
                ZoneInfo(action.get("Timezone", "UTC")),
                action["ScalableTargetAction"].get("MinCapacity"),
                action["ScalableTargetAction"].get("MaxCapacity"),
            )
            for action in properties.get("ScheduledActions", [])
        ]
        targets[logical_id] = ((properties["MinCapacity"], properties["MaxCapacity"]), actions)
    return targets


def group_schedule(template: dict, prefix: str = "GpuCapacityAutoScalingGroup") -> tuple[tuple[int, int], list[Action]]:
    """The (min, max) and scheduled actions of the GPU group whose logical ID starts with ``prefix``
    (the environment's ``capacity``; a capacity group's is ``GpuCapacity<group>AutoScalingGroup``)."""
    (group_id,) = [
        k
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::AutoScaling::AutoScalingGroup" and k.startswith(prefix)
    ]
    group = template["Resources"][group_id]
    actions = [
        Action(
            r["Properties"]["Recurrence"],
            ZoneInfo(r["Properties"].get("TimeZone", "UTC")),
            r["Properties"].get("MinSize"),
            r["Properties"].get("MaxSize"),
        )
        for r in template["Resources"].values()
        if r["Type"] == "AWS::AutoScaling::ScheduledAction"
        and r["Properties"]["AutoScalingGroupName"] == {"Ref": group_id}
    ]
    return (int(group["Properties"]["MinSize"]), int(group["Properties"]["MaxSize"])), actions


def simulate(initial: tuple[int, int], actions: list[Action], weeks: int = 2):
    """(minute, min, max) after each minute, from a deploy at START; the first week settles the schedule's cycle."""
    low, high = initial
    for minute in range(weeks * WEEK_MINUTES):
        moment = START + timedelta(minutes=minute)
        for action in actions:
            if action.due(moment):
                low = action.minimum if action.minimum is not None else low
                high = action.maximum if action.maximum is not None else high
        yield minute, low, high


@pytest.fixture(scope="module", params=ENVIRONMENTS)
def environment(request, synthesized):
    return synthesized.stages[request.param].config, synthesized.inference_template(request.param)


def test_the_cron_reader_knows_both_week_numberings():
    monday_7 = datetime(2026, 12, 7, 7, 0)
    assert cron_matches("0 7 ? * MON-FRI *", monday_7) and cron_matches("0 7 ? * 2-6 *", monday_7)
    assert cron_matches("0 7 * * MON-FRI", monday_7) and cron_matches("0 7 * * 1-5", monday_7)
    assert not cron_matches("0 7 ? * MON-FRI *", datetime(2026, 12, 12, 7, 0))  # a Saturday
    assert cron_matches("0/15 * ? * * *", datetime(2026, 12, 12, 7, 45)) and not cron_matches(
        "0/15 * ? * * *", datetime(2026, 12, 12, 7, 50)
    )


def test_no_service_is_ever_left_where_no_signal_can_bring_it_back(environment):
    config, template = environment
    targets = service_targets(template)
    assert len(targets) == len(config.models)
    for target, (initial, actions) in targets.items():
        stranded = [
            (START + timedelta(minutes=m)).isoformat()
            for m, low, high in simulate(initial, actions)
            if low < 1 and high > 0
        ]
        assert stranded == [], (
            f"{target}: at 0 tasks with room to serve, from {stranded[:1]} ({len(stranded)} minutes a fortnight)"
        )


def test_every_off_period_ends_and_the_service_serves_on_weekday_afternoons(environment):
    config, template = environment
    for target, (initial, actions) in service_targets(template).items():
        second_week = [(m, low, high) for m, low, high in simulate(initial, actions) if m >= WEEK_MINUTES]
        serving = [m for m, _, high in second_week if high > 0]
        assert serving, f"{target} never serves"
        longest, current = 0, 0
        for _, _, high in second_week + second_week:  # twice round, so an off period across the week's end counts whole
            current = current + 1 if high == 0 else 0
            longest = max(longest, current)
        assert longest <= 3 * 24 * 60, (
            f"{target} stays off for {longest} minutes at a stretch: an off period that does not end"
        )
        for day in range(5):  # Monday to Friday, 14:00 UTC (afternoon in Europe, morning in America)
            minute = WEEK_MINUTES + day * 24 * 60 + 14 * 60
            assert second_week[minute - WEEK_MINUTES][1] >= 1, f"{target} is not serving on weekday {day} at 14:00 UTC"


def test_dev_really_is_off_on_nights_and_weekends(synthesized):
    template = synthesized.inference_template("dev")
    for target, (initial, actions) in service_targets(template).items():
        states = {m: (low, high) for m, low, high in simulate(initial, actions)}
        saturday_noon = WEEK_MINUTES + 5 * 24 * 60 + 12 * 60
        assert states[saturday_noon] == (0, 0), target


def test_the_gpu_group_holds_every_services_floor_all_week(environment):
    """The group's maximum covers the sum of the services' minimums at every minute, and its bounds stay ordered."""
    config, template = environment
    targets = service_targets(template)
    placement = config.model_placement()
    for group in ["", *config.capacity_groups]:
        logical = group.replace("-", "")
        models = [m for m in config.models if placement.get(m.name, "") == group]
        prefixes = tuple(f"Model{m.name.replace('-', '')}Service" for m in models)
        placed = [
            (target, m.gpus)
            for m in models
            for target in [targets[k] for k in targets if k.startswith(f"Model{m.name.replace('-', '')}Service")]
        ]
        assert len(placed) == len(models) and all(
            k.startswith(prefixes) for k in targets if any(k.startswith(p) for p in prefixes)
        )
        group_initial, group_actions = group_schedule(template, f"GpuCapacity{logical}AutoScalingGroup")
        service_runs = [list(simulate(initial, actions)) for (initial, actions), _ in placed]
        gpus_per_instance = config.group_capacity(group).smallest_instance_type().gpus
        for (minute, group_min, group_max), *services in zip(
            simulate(group_initial, group_actions), *service_runs, strict=False
        ):
            floor = sum(
                low * gpus for (_, low, _), (_, gpus) in zip(services, placed, strict=False)
            )  # a 4-GPU task takes four GPUs
            assert group_min <= group_max, minute
            assert floor <= group_max * gpus_per_instance, (
                f"at minute {minute} the services' floor of {floor} GPUs exceeds the group's {group_max} x "
                f"{gpus_per_instance} GPUs"
            )
