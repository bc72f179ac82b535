"""Issue 52.4: a resource with a fixed physical name cannot be replaced in place. A logical-ID change is a replacement
(CloudFormation creates the new resource before it deletes the old one), so a fixed ``AlarmName`` kept across the
change fails the update ("already exists"). The never-healthy alarm's name carries its logical ID, so the name changes
with it; every other fixed-name alarm keeps the logical ID it has (fixed_names.lock.json, which records them: a new
alarm is added with ``python -m tests.infra.test_fixed_names``; a changed logical ID fails here)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

from tests.infra.conftest import ENVIRONMENTS

LOCK = Path(__file__).with_name("fixed_names.lock.json")


def fixed_alarm_names(template: dict) -> dict[str, str]:
    """AlarmName -> logical ID of each alarm in ``template`` whose name is written as a fixed string."""
    return {
        r["Properties"]["AlarmName"]: logical_id
        for logical_id, r in template["Resources"].items()
        if r["Type"] == "AWS::CloudWatch::Alarm" and isinstance(r["Properties"].get("AlarmName"), str)
    }


def pinned(synthesized) -> dict[str, dict[str, str]]:
    """``environment/stack`` -> the fixed-name alarms whose logical IDs are pinned (all but those carrying theirs)."""
    found: dict[str, dict[str, str]] = {}
    for environment in ENVIRONMENTS:
        for stack in synthesized.stack_ids(environment):
            names = {
                name: logical_id
                for name, logical_id in fixed_alarm_names(synthesized.template(environment, stack)).items()
                if not name.endswith(f"-{logical_id}")
            }
            if names:
                found[f"{environment}/{stack}"] = names
    return found


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_the_never_healthy_alarms_name_changes_with_its_logical_id(synthesized, environment):
    stage = synthesized.stages[environment]
    shifting = [model for model in stage.config.models if model.deployment.shifts_traffic]
    seen = 0
    for stack in synthesized.stack_ids(environment):
        for name, logical_id in fixed_alarm_names(synthesized.template(environment, stack)).items():
            if "-never-healthy" in name:
                assert name.endswith(f"-never-healthy-{logical_id}"), (environment, stack, name, logical_id)
                seen += 1
    assert seen == len(shifting), (environment, seen, [m.name for m in shifting])


def moved(locked: dict[str, dict[str, str]], now: dict[str, dict[str, str]]) -> dict[str, tuple[str, str]]:
    """``where: name`` -> (locked, current) logical ID of each locked name still present under another logical ID."""
    return {
        f"{where}: {name}": (logical_id, now[where][name])
        for where, names in locked.items()
        for name, logical_id in names.items()
        if name in now.get(where, {}) and now[where][name] != logical_id
    }


@pytest.fixture(scope="module")
def current(synthesized) -> dict[str, dict[str, str]]:
    return pinned(synthesized)


def test_every_other_fixed_name_keeps_its_logical_id(current):
    """A pinned name whose logical ID moved would be replaced under the same name, which CloudFormation refuses."""
    locked = json.loads(LOCK.read_text())
    changed = moved(locked, current)
    assert not changed, (
        f"fixed-name alarms whose logical IDs changed (locked, now): {changed}; keep their construct IDs"
    )
    unlocked = {
        f"{where}: {name}" for where, names in current.items() for name in names if name not in locked.get(where, {})
    }
    assert not unlocked, (
        f"fixed-name alarms not pinned yet: {sorted(unlocked)}; run python -m tests.infra.test_fixed_names"
    )


def test_the_pin_sees_a_moved_logical_id(current):
    """The twin: a construct ID renamed under one pinned alarm (its logical ID changes, its name does not)."""
    where, names = next(iter(current.items()))
    name = next(iter(names))
    renamed = {**current, where: {**names, name: names[name] + "Renamed"}}
    assert moved(current, renamed) == {f"{where}: {name}": (names[name], names[name] + "Renamed")}


def main() -> None:
    """Write the lock from a synthesis of the tests' environments: existing entries stay as they are."""
    from tests.conftest import scenario_context, synthesize

    with tempfile.TemporaryDirectory() as outdir:
        now = pinned(synthesize(scenario_context(), Path(outdir)))
    locked = json.loads(LOCK.read_text()) if LOCK.exists() else {}
    for where, names in now.items():
        locked[where] = {**names, **locked.get(where, {})}
    LOCK.write_text(json.dumps(locked, indent=2, sort_keys=True) + "\n")
    print(f"{LOCK}: {sum(len(names) for names in locked.values())} names", file=sys.stderr)


if __name__ == "__main__":
    main()
