"""A Spot notice, walked against each environment's synthesized templates: the ECS agent sees the notice (within
SPOT_DETECTION_SECONDS: it polls the instance metadata once a second, then sets the instance DRAINING), the scheduler
stops the doomed tasks at once (the service's MinimumHealthyPercent lets it at every desired count the model can run
at), the load balancer deregisters each target and lets its requests finish for the deregistration delay, ECS sends
SIGTERM, the server drains and exits before SIGKILL (the container's StopTimeout), all before EC2 reclaims the instance
120 s after the notice. A target that fails without draining is out of the load balancer within seconds. Where the
notice takes every task of the model (one task; all on one instance) no minimum keeps it serving; there the minimum
keeps deploys and other drains replacements-first (tests/infra/test_minimum_healthy_percent.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpu_inference_constructs.core.model_props import ModelProps
from gpu_inference_constructs.core.service_timing import SPOT_DETECTION_SECONDS, SPOT_NOTICE_SECONDS
from gpu_inference_constructs.service.spot_draining import (
    minimum_healthy_percent,
    tasks_ecs_may_stop,
    tasks_on_one_instance,
)
from gpu_inference_constructs.shared.acknowledgements import default_child
from tests.infra.conftest import ENVIRONMENTS


@dataclass(frozen=True)
class TaskTiming:
    """One model's numbers, read from its service's, target groups' and container's template properties and its
    server's own stop timing (what it does after SIGTERM)."""

    minimum_healthy_percent: int
    deregistration_delay: int
    stop_timeout: int
    drain: int
    exit: int


def walk(timing: TaskTiming, desired: int, doomed: int) -> list[tuple[int, str]]:
    """(second after the notice, event) until the task is gone; raises AssertionError where the notice strands it."""
    may_stop = tasks_ecs_may_stop(desired, doomed, timing.minimum_healthy_percent)
    assert may_stop == doomed, (
        f"at {desired} desired, ECS may stop {may_stop} of the {doomed} tasks on the draining "
        f"instance before replacements are healthy (MinimumHealthyPercent "
        f"{timing.minimum_healthy_percent}): the rest die with the instance"
    )
    seen = SPOT_DETECTION_SECONDS
    sigterm = seen + timing.deregistration_delay
    exited = sigterm + min(timing.drain + timing.exit, timing.stop_timeout)
    events = [
        (0, "notice"),
        (seen, "the agent has seen it and set the instance DRAINING; the scheduler stops its tasks"),
        (seen, "targets deregistered: no new requests, those in flight finish"),
        (sigterm, "SIGTERM after the deregistration delay"),
        (sigterm + timing.drain, "the server's drain ends"),
        (exited, "the server exits"),
        (sigterm + timing.stop_timeout, "SIGKILL bound (StopTimeout)"),
    ]
    assert timing.drain + timing.exit <= timing.stop_timeout, "ECS would SIGKILL the server mid-drain"
    assert sigterm + timing.stop_timeout <= SPOT_NOTICE_SECONDS, events
    return events


def timings(synthesized, environment: str) -> list[tuple[ModelProps, TaskTiming, list[int], int]]:
    """(model, its timing, the desired counts it can run at, the instance's GPUs) for each model of ``environment``."""
    stage = synthesized.stages[environment]
    template = synthesized.inference_template(environment)
    resources = template["Resources"]
    found = []
    for model in stage.config.models:
        stack = stage.model_stacks[model.name]
        service = stack.service
        properties = resources[stack.get_logical_id(default_child(service.service))]["Properties"]
        groups = [resources[binding["TargetGroupArn"]["Ref"]]["Properties"] for binding in properties["LoadBalancers"]]
        delays = {
            int(a["Value"])
            for g in groups
            for a in g["TargetGroupAttributes"]
            if a["Key"] == "deregistration_delay.timeout_seconds"
        }
        (delay,) = delays
        (container,) = [
            c
            for c in resources[properties["TaskDefinition"]["Ref"]]["Properties"]["ContainerDefinitions"]
            if c["Name"] == "server"
        ]
        stop = service.contract.stop
        timing = TaskTiming(
            properties["DeploymentConfiguration"]["MinimumHealthyPercent"],
            delay,
            container["StopTimeout"],
            stop.drain_seconds,
            stop.exit_seconds,
        )
        lows = [
            max(1, schedule.task_range(model.min_tasks, model.max_tasks)[0])
            for schedule in stage.config.scaling.schedules
        ]
        found.append(
            (model, timing, list(range(min([model.min_tasks, *lows]), model.max_tasks + 1)), service.instance_type.gpus)
        )
    return found


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_a_spot_notice_stops_every_models_doomed_tasks_and_they_drain_before_the_instance_goes(
    synthesized, environment
):
    for model, timing, desired_counts, instance_gpus in timings(synthesized, environment):
        for desired in desired_counts:
            doomed = tasks_on_one_instance(instance_gpus, model.gpus, desired)
            if doomed == desired:  # the notice ends service whatever the minimum; deploys and drains keep a task
                assert timing.minimum_healthy_percent > 0, (environment, model.name, desired)
                continue
            events = walk(timing, desired, doomed)
            assert events[-1][0] <= SPOT_NOTICE_SECONDS, (environment, model.name, events)


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_a_failing_target_leaves_the_load_balancer_within_seconds(synthesized, environment):
    resources = synthesized.inference_template(environment)["Resources"]
    for group in [
        r["Properties"] for r in resources.values() if r["Type"] == "AWS::ElasticLoadBalancingV2::TargetGroup"
    ]:
        assert group["HealthCheckIntervalSeconds"] * group["UnhealthyThresholdCount"] <= 15


def test_the_walk_finds_a_service_that_holds_its_doomed_task():
    """The twin: MinimumHealthyPercent 100, as every service had, strands the task at any desired count."""
    held = TaskTiming(100, 20, 90, 70, 15)
    for desired in (1, 2, 4):
        with pytest.raises(AssertionError, match="ECS may stop 0"):
            walk(held, desired, 1)


def test_the_walk_finds_a_stop_that_outlasts_the_notice():
    with pytest.raises(AssertionError):
        walk(TaskTiming(0, 40, 90, 70, 15), 1, 1)
    # staging's llama-13b as it was: 80 s of deregistration delay + a 40 s stop used the whole 120 s notice and left
    # nothing for the agent to see it.
    with pytest.raises(AssertionError):
        walk(TaskTiming(0, 80, 40, 25, 15), 1, 1)
    with pytest.raises(AssertionError, match="mid-drain"):
        walk(TaskTiming(0, 20, 60, 70, 15), 1, 1)


@pytest.mark.parametrize(
    ("min_tasks", "per_instance", "percent"),
    [(1, 1, 0), (2, 1, 50), (3, 1, 66), (4, 1, 75), (4, 4, 0), (4, 2, 50), (10, 1, 90)],
)
def test_the_minimum_healthy_percent_by_hand(min_tasks, per_instance, percent):
    assert minimum_healthy_percent(min_tasks, per_instance) == percent
    for desired in range(min_tasks, 3 * min_tasks + 1):
        doomed = min(desired, per_instance)
        assert tasks_ecs_may_stop(desired, doomed, percent) == doomed
