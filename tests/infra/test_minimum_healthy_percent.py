"""Issue 52.2: ECS applies a service's MinimumHealthyPercent to every rolling deployment and every container-instance
drain (scale-in, instance refresh, Spot), keeping ``ceil(desired x percent / 100)`` tasks running and healthy
(ECS API DeploymentConfiguration). A one-task model at 0 goes dark on each of them for its whole load time; so the low
minimum a Spot notice needs is kept only where the capacity has Spot and the model can span instances, never at 0, and
capacity without Spot starts replacements first (100)."""

from __future__ import annotations

import math

import pytest
from aws_cdk.assertions import Template

from gpu_inference_constructs import ModelProps, ModelService
from gpu_inference_constructs.core.capacity_props import GpuCapacityProps, launches_spot
from gpu_inference_constructs.service.spot_draining import deployment_minimum_percent, tasks_ecs_may_stop
from gpu_inference_constructs.shared.acknowledgements import default_child
from tests.infra.conftest import ENVIRONMENTS
from tests.infra.test_server_contract import complete, on_cluster, stack_with_placement


def serving_during_a_drain_or_deploy(desired: int, percent: int) -> int:
    """Tasks ECS keeps running and healthy while it replaces the others (ECS API DeploymentConfiguration)."""
    return math.ceil(desired * percent / 100)


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_no_model_goes_dark_on_a_deploy_or_a_drain_that_a_spot_notice_does_not_force(synthesized, environment):
    """dev's and staging's one-task models had 0: each deploy stopped the only task before its replacement loaded."""
    stage = synthesized.stages[environment]
    resources = synthesized.inference_template(environment)["Resources"]
    for model in stage.config.models:
        service = stage.model_stacks[model.name].service
        percent = resources[stage.model_stacks[model.name].get_logical_id(default_child(service.service))][
            "Properties"
        ]["DeploymentConfiguration"]["MinimumHealthyPercent"]
        lows = [
            max(1, schedule.task_range(model.min_tasks, model.max_tasks)[0])
            for schedule in stage.config.scaling.schedules
        ]
        for desired in range(min([model.min_tasks, *lows]), model.max_tasks + 1):
            assert serving_during_a_drain_or_deploy(desired, percent) >= 1, (environment, model.name, desired, percent)


@pytest.mark.parametrize(
    ("has_spot", "min_tasks", "percent"),
    [(False, 1, 100), (False, 2, 100), (False, 4, 100), (True, 1, 50), (True, 2, 50), (True, 4, 75)],
)
def test_a_service_on_capacity_without_spot_starts_replacements_first(has_spot, min_tasks, percent):
    """The capacity is asked (``has_spot``): a team's own On-Demand capacity provider says False."""
    stack, parts = stack_with_placement()
    capacity = on_cluster(stack, "g5.xlarge")
    if not has_spot:
        capacity = type(capacity)(
            capacity.cluster, capacity.capacity_provider_name, capacity.instance_type, has_spot=False
        )
    service = ModelService(
        stack,
        "M",
        model=ModelProps(name="mm", version="1", min_tasks=min_tasks, max_tasks=8),
        server=complete(),
        capacity=capacity,
        **parts,
    )
    assert service.minimum_healthy_percent == percent
    (properties,) = Template.from_stack(stack).find_resources("AWS::ECS::Service").values()
    assert properties["Properties"]["DeploymentConfiguration"]["MinimumHealthyPercent"] == percent


def test_a_schedule_down_to_one_task_lowers_nothing():
    stack, parts = stack_with_placement()
    service = ModelService(
        stack,
        "M",
        model=ModelProps(name="mm", version="1", min_tasks=2, max_tasks=8),
        server=complete(),
        capacity=on_cluster(stack, "g5.xlarge"),
        **parts,
    )
    service.allow_draining_down_to(1)
    assert service.minimum_healthy_percent == 50


def test_a_groups_spot_is_its_instances_distribution():
    assert launches_spot(GpuCapacityProps())
    assert launches_spot(
        GpuCapacityProps(on_demand_base_capacity=1, on_demand_percentage_above_base=25, max_capacity=36)
    )
    assert not launches_spot(GpuCapacityProps(on_demand_percentage_above_base=100))
    assert not launches_spot(GpuCapacityProps(on_demand_base_capacity=8, max_capacity=8))


@pytest.mark.parametrize(
    ("min_tasks", "max_tasks", "per_instance", "has_spot", "percent"),
    [
        (1, 4, 1, True, 50),
        (4, 8, 4, True, 20),  # from the first count that spans two instances; one task kept below it
        (2, 8, 1, True, 50),
        (3, 8, 1, True, 66),
        (4, 8, 2, True, 50),  # the rest serve while the doomed tasks drain
        (1, 1, 1, True, 100),
        (4, 4, 4, True, 100),  # never on two instances: a notice spares nothing
        (1, 4, 1, False, 100),
        (4, 8, 1, False, 100),  # no Spot notice to make room for
    ],
)
def test_the_deployment_minimum_by_hand(min_tasks, max_tasks, per_instance, has_spot, percent):
    assert deployment_minimum_percent(min_tasks, max_tasks, per_instance, has_spot=has_spot) == percent
    for desired in range(min_tasks, max_tasks + 1):
        doomed = min(desired, per_instance)
        assert serving_during_a_drain_or_deploy(desired, percent) >= 1
        if has_spot and doomed < desired:
            assert tasks_ecs_may_stop(desired, doomed, percent) == doomed
