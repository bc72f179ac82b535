"""A canary, linear or blue/green version whose tasks never become healthy rolls back within its start window plus
one evaluation, and one that becomes healthy within the window never does: minute by minute through each model's
synthesized never-healthy alarm (its expression, metrics, periods and M of N datapoints, as the template says),
also when the newest minute's metrics arrive late and when scaling changes the desired count mid-deployment. The
lifecycle hook that fails the same version before traffic moves is tests/infra/test_revision_hook.py."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from gpu_inference_constructs.rollout.deployment import DeploymentProps, service_options
from gpu_inference_constructs.rollout.revision_health import NEW_CAPACITY_SECONDS
from tests.infra.conftest import ENVIRONMENTS
from tests.metric_math import evaluate

MINUTE = 60


def never_healthy_alarms(template: dict) -> dict[str, dict]:
    """Alarm name -> properties of every never-healthy alarm in ``template``."""
    return {
        r["Properties"]["AlarmName"]: r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and "-never-healthy-" in str(r["Properties"].get("AlarmName", ""))
    }


def alarm_time(
    alarm: dict,
    deployment_start: int,
    healthy_at: int | None,
    desired: int,
    horizon: int = 7200,
    *,
    late: bool = False,
    new_healthy: int | None = None,
) -> int | None:
    """Seconds after ``deployment_start`` (seconds into a minute) when ``alarm`` enters ALARM, or None.

    The old task set (``desired`` healthy targets in one group) serves throughout; the new set's targets turn healthy
    in the other group at ``healthy_at`` (None: never), ``new_healthy`` of them (default ``desired``: fewer is a new
    set still scaling to a desired count that scaling raised). Each minute's datapoint takes each metric's statistic
    over that minute (DeploymentCount 2 from the start). CloudWatch evaluates the last EvaluationPeriods minutes each
    minute; ``late``: the newest minute's DeploymentCount has not arrived when it does (it counts a minute later)."""
    (expression,) = [m["Expression"] for m in alarm["Metrics"] if "Expression" in m]
    stats = {m["Id"]: m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert all(stat["Period"] == MINUTE for stat in stats.values())
    needed, periods = alarm["DatapointsToAlarm"], alarm["EvaluationPeriods"]
    assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"

    def breaching(end: int, delivered: bool) -> bool:
        values: dict[str, float | None] = {}
        for metric_id, stat in stats.items():
            name = stat["Metric"]["MetricName"]
            if name == "DeploymentCount":
                values[metric_id] = 2 if delivered else None
            elif name == "HealthyHostCount":  # Maximum over the minute: the old set in healthy_0, the new in healthy_1
                assert stat["Stat"] == "Maximum"
                up = healthy_at is not None and healthy_at < end
                values[metric_id] = desired if metric_id == "healthy_0" else ((new_healthy or desired) if up else 0)
            else:
                raise AssertionError(f"the alarm reads {name}: only DeploymentCount and HealthyHostCount are simulated")
        return evaluate(expression, values) >= 1

    delivered: list[bool] = []
    for minute in range(horizon // MINUTE):
        end = (minute + 1) * MINUTE - deployment_start
        if end <= 0:
            continue
        delivered.append(breaching(end, True))
        evaluated = delivered[-periods:]
        if late:
            evaluated = [*evaluated[:-1], breaching(end, False)]
        if sum(evaluated) >= needed:
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
            (name,) = [n for n in by_name if f"-{model.name}-never-healthy-" in n]
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
            for late in (False, True):
                assert alarm_time(alarm, offset, healthy_at=healthy_at, desired=model.min_tasks, late=late) is None, (
                    environment,
                    model.name,
                    healthy_at,
                    late,
                )


@pytest.mark.parametrize("offset", [0, 1, 30, 59])
def test_late_metrics_delay_the_rollback_by_one_minute_and_never_reset_it(alarms, offset):
    """The newest minute, evaluated before its DeploymentCount arrives, reads as not breaching (FILL(..., 0)): M of N
    lets it count a minute later. Its twin is the alarm as it was, M of M, which the late minute reset every minute."""
    for environment, model, alarm, window in alarms:
        fired = alarm_time(alarm, offset, healthy_at=None, desired=model.min_tasks, late=True)
        assert fired is not None and window < fired <= window + 2 * MINUTE, (environment, model.name, fired, window)
        in_a_row = {**alarm, "EvaluationPeriods": alarm["DatapointsToAlarm"]}
        assert alarm_time(in_a_row, offset, healthy_at=None, desired=model.min_tasks, late=True) is None


def test_scaling_mid_deployment_does_not_roll_back_a_good_release(alarms):
    """The old alarm compared healthy targets with twice the desired count: scaling from 1 to 3 while the new set has
    one task up read as short of healthy. Now a target group with no healthy target is what counts."""
    for environment, model, alarm, window in alarms:
        assert alarm_time(alarm, 0, healthy_at=window // 2, desired=3, new_healthy=1) is None, (environment, model.name)
        assert all(
            m["MetricStat"]["Metric"]["MetricName"] != "DesiredTaskCount" for m in alarm["Metrics"] if "MetricStat" in m
        )


def test_the_window_is_capacity_then_the_grace_period_in_whole_minutes(alarms):
    for environment, model, _, window in alarms:
        grace = model.health_check_grace_seconds
        assert (
            window % MINUTE == 0 and NEW_CAPACITY_SECONDS + grace <= window < NEW_CAPACITY_SECONDS + grace + MINUTE
        ), (environment, model.name)


def test_the_simulation_sees_an_alarm_that_waits_too_long_or_too_little(alarms):
    _, model, alarm, window = alarms[0]
    slow = copy.deepcopy(alarm)
    slow["DatapointsToAlarm"], slow["EvaluationPeriods"] = (
        alarm["DatapointsToAlarm"] + 3,
        alarm["EvaluationPeriods"] + 3,
    )
    fired = alarm_time(slow, 0, None, model.min_tasks)
    assert fired is not None and fired > window + MINUTE
    eager = copy.deepcopy(alarm)
    eager["DatapointsToAlarm"] = alarm["DatapointsToAlarm"] - 2
    assert alarm_time(eager, 59, healthy_at=window - 1, desired=model.min_tasks) is not None


def test_the_rollback_watches_the_never_healthy_alarm_by_name(synthesized, alarms):
    for environment, model, alarm, _ in alarms:
        template = synthesized.inference_template(environment)
        services = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::ECS::Service"]
        watched = [
            s["DeploymentConfiguration"]["Alarms"]
            for s in services
            if alarm["AlarmName"] in s["DeploymentConfiguration"]["Alarms"]["AlarmNames"]
        ]
        assert len(watched) == 1 and watched[0]["Enable"] and watched[0]["Rollback"], (environment, model.name)


def test_rolling_and_blue_green_use_the_circuit_breaker_canary_and_linear_may_not():
    assert DeploymentProps("rolling").uses_circuit_breaker and DeploymentProps("blue_green").uses_circuit_breaker
    assert not DeploymentProps("canary").uses_circuit_breaker and not DeploymentProps("linear").uses_circuit_breaker
    options = service_options(DeploymentProps("blue_green"))
    assert options["circuit_breaker"] is not None
    from gpu_inference_constructs.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^circuit_breaker: .*remove it for canary"):
        DeploymentProps("canary", circuit_breaker=True)


def test_the_capacity_allowance_covers_the_timelines_new_instance_phases(synthesized):
    """NEW_CAPACITY_SECONDS is what the advisor's timeline gives a new instance before its task starts: the capacity
    provider's reaction, launch and boot, agent registration and the image pull (without images in the AMI)."""
    from gpu_inference_constructs.sizing.timeline import LATEST_STARTUP, timeline

    config = synthesized.stages["prod"].config
    capacity = dataclasses.replace(config.capacity, machine_image_ids=None)
    phases = {
        p.name: p.seconds
        for p in timeline(
            config.server_config(config.models[0]).bundled.scaling,
            capacity,
            weights_bytes=10**9,
            storage="gp3",
            new_instance=True,
            startup=LATEST_STARTUP,
        )
    }
    new_capacity = sum(
        phases[name] for name in ("capacity-provider reaction", "instance launch", "agent registration", "image pull")
    )
    assert new_capacity <= NEW_CAPACITY_SECONDS < new_capacity + MINUTE, phases
