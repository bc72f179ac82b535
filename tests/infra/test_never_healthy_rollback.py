"""A canary, linear or blue/green version whose tasks never become healthy rolls back within its start window plus
one evaluation, and one that becomes healthy within the window never does: minute by minute through each model's
synthesized never-healthy alarm (its expression, metrics, periods and datapoints, as the template says)."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from gpu_inference_constructs.deployment import DeploymentProps, service_options
from gpu_inference_constructs.revision_health import NEW_CAPACITY_SECONDS
from tests.infra.conftest import ENVIRONMENTS
from tests.metric_math import evaluate

MINUTE = 60


def never_healthy_alarms(template: dict) -> dict[str, dict]:
    """Alarm name -> properties of every never-healthy alarm in ``template``."""
    return {r["Properties"]["AlarmName"]: r["Properties"] for r in template["Resources"].values()
            if r["Type"] == "AWS::CloudWatch::Alarm" and str(r["Properties"].get("AlarmName", "")).endswith("-never-healthy")}


def alarm_time(alarm: dict, deployment_start: int, healthy_at: int | None, desired: int, horizon: int = 7200) -> int | None:
    """Seconds after ``deployment_start`` (seconds into a minute) when ``alarm`` enters ALARM, or None.

    The old task set (``desired`` healthy targets in one group) serves throughout; the new set's targets turn healthy
    in the other group at ``healthy_at`` (None: never). Each minute's datapoint takes each metric's statistic over that
    minute (DeploymentCount 2 from the start, DesiredTaskCount ``desired``)."""
    (expression,) = [m["Expression"] for m in alarm["Metrics"] if "Expression" in m]
    stats = {m["Id"]: m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert all(stat["Period"] == MINUTE for stat in stats.values())
    needed = alarm["DatapointsToAlarm"]
    assert alarm["EvaluationPeriods"] == needed and alarm["Threshold"] == 1
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    breaching = 0
    for minute in range(horizon // MINUTE):
        end = (minute + 1) * MINUTE - deployment_start
        if end <= 0:
            continue
        new_healthy = healthy_at is not None and healthy_at < end
        values = {}
        for metric_id, stat in stats.items():
            name = stat["Metric"]["MetricName"]
            if name == "DeploymentCount":
                values[metric_id] = 2
            elif name == "DesiredTaskCount":
                values[metric_id] = desired
            elif name == "HealthyHostCount":  # Maximum over the minute: the old set in healthy_0, the new in healthy_1
                assert stat["Stat"] == "Maximum"
                values[metric_id] = desired if metric_id == "healthy_0" else (desired if new_healthy else 0)
        breaching = breaching + 1 if evaluate(expression, values) >= 1 else 0
        if breaching >= needed:
            return end
    return None


@pytest.fixture(scope="module")
def alarms(synthesized):
    """(environment, model, its alarm, its start window) for every model that shifts traffic."""
    found = []
    for environment in ENVIRONMENTS:
        stage = synthesized.stages[environment]
        template = synthesized.inference_template(environment)
        by_name = never_healthy_alarms(template)
        for model in stage.config.models:
            service = stage.model_stacks[model.name].service
            if not model.deployment.shifts_traffic:
                assert service.never_healthy_alarm is None
                continue
            (name,) = [n for n in by_name if n.endswith(f"-{model.name}-never-healthy")]
            found.append((environment, model, by_name[name], service.never_healthy_alarm.start_window_seconds))
    assert {environment for environment, *_ in found} >= {"staging", "prod"}
    return found


@pytest.mark.parametrize("offset", [0, 1, 30, 59])
def test_a_version_that_never_becomes_healthy_rolls_back_within_its_start_window_plus_one_evaluation(alarms, offset):
    for environment, model, alarm, window in alarms:
        fired = alarm_time(alarm, offset, healthy_at=None, desired=model.min_tasks)
        assert fired is not None and window < fired <= window + MINUTE, (environment, model.name, fired, window)


@pytest.mark.parametrize("offset", [0, 1, 30, 59])
def test_a_version_healthy_within_its_start_window_never_rolls_back(alarms, offset):
    for environment, model, alarm, window in alarms:
        for healthy_at in (window - 1, window // 2, 10):
            assert alarm_time(alarm, offset, healthy_at=healthy_at, desired=model.min_tasks) is None, (environment, model.name, healthy_at)


def test_the_window_is_capacity_then_the_grace_period_in_whole_minutes(alarms):
    for environment, model, _, window in alarms:
        grace = model.health_check_grace_seconds
        assert window % MINUTE == 0 and NEW_CAPACITY_SECONDS + grace <= window < NEW_CAPACITY_SECONDS + grace + MINUTE, (environment, model.name)


def test_the_simulation_sees_an_alarm_that_waits_too_long_or_too_little(alarms):
    _, model, alarm, window = alarms[0]
    late = copy.deepcopy(alarm)
    late["DatapointsToAlarm"] = late["EvaluationPeriods"] = alarm["DatapointsToAlarm"] + 3
    assert alarm_time(late, 0, None, model.min_tasks) > window + MINUTE
    eager = copy.deepcopy(alarm)
    eager["DatapointsToAlarm"] = eager["EvaluationPeriods"] = alarm["DatapointsToAlarm"] - 2
    assert alarm_time(eager, 59, healthy_at=window - 1, desired=model.min_tasks) is not None


def test_the_rollback_watches_the_never_healthy_alarm_by_name(synthesized, alarms):
    for environment, model, alarm, _ in alarms:
        template = synthesized.inference_template(environment)
        services = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::ECS::Service"]
        watched = [s["DeploymentConfiguration"]["Alarms"] for s in services if alarm["AlarmName"] in s["DeploymentConfiguration"]["Alarms"]["AlarmNames"]]
        assert len(watched) == 1 and watched[0]["Enable"] and watched[0]["Rollback"], (environment, model.name)


def test_rolling_and_blue_green_use_the_circuit_breaker_canary_and_linear_may_not():
    assert DeploymentProps("rolling").uses_circuit_breaker and DeploymentProps("blue_green").uses_circuit_breaker
    assert not DeploymentProps("canary").uses_circuit_breaker and not DeploymentProps("linear").uses_circuit_breaker
    options = service_options(DeploymentProps("blue_green"))
    assert options["circuit_breaker"] is not None
    from gpu_inference_constructs.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^circuit_breaker: .*remove it for canary"):
        DeploymentProps("canary", circuit_breaker=True)


def test_the_capacity_allowance_covers_the_timelines_new_instance_phases(synthesized):
    """NEW_CAPACITY_SECONDS is what the advisor's timeline gives a new instance before its task starts: the capacity
    provider's reaction, launch and boot, agent registration and the image pull (without images in the AMI)."""
    from gpu_inference_constructs.sizing.timeline import LATEST_STARTUP, timeline

    config = synthesized.stages["prod"].config
    capacity = dataclasses.replace(config.capacity, machine_image_ids=None)
    phases = {p.name: p.seconds for p in timeline(config.server_config(config.models[0]).bundled.scaling, capacity, weights_bytes=10**9, storage="gp3",
                                                   new_instance=True, startup=LATEST_STARTUP)}
    new_capacity = sum(phases[name] for name in ("capacity-provider reaction", "instance launch", "agent registration", "image pull"))
    assert new_capacity <= NEW_CAPACITY_SECONDS < new_capacity + MINUTE, phases
