"""The library's one public validation (issue 56): ``validate_service`` returns every problem the constructs refuse a
service for, each with the key and the message the construct raises, so an app that validates its configuration
first (stacks/config.py) cannot drift from synth."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs

from gpu_inference_constructs import (
    CATALOG,
    BundledServer,
    ConfigError,
    GpuCapacity,
    GpuCapacityProps,
    GpuShare,
    ModelProps,
    ModelService,
    NeuronServer,
    Problem,
    ServiceSchedule,
    ServiceTimingProps,
    StopTiming,
    VllmProps,
    VllmServer,
    validate_service,
)
from gpu_inference_constructs.core.instance_catalog import NON_CUDA_CATALOG
from tests.infra.test_server_contract import IMAGE, complete, on_cluster, stack_with_placement

LATE_DRAIN = StopTiming(drain_seconds=0, exit_seconds=20, longest_request_seconds=45)
SHORT_DELAY = ServiceTimingProps(deregistration_delay_seconds=30, stop_timeout_seconds=80)

# (model, server, instance type, timing): one problem each, of a different check.
ONE_PROBLEM = {
    "the task's cpu": (ModelProps(name="big", version="1", cpu=40000), BundledServer(image=IMAGE), "g5.xlarge", None),
    "the task's memory": (
        ModelProps(name="big", version="1", memory_mib=16384),
        BundledServer(image=IMAGE),
        "g5.xlarge",
        None,
    ),
    "the task's gpus": (
        ModelProps(name="llm", version="1", gpus=4, cpu=3072, memory_mib=12288),
        VllmServer(VllmProps(shared_memory_mib=4096), image=IMAGE),
        "g5.2xlarge",
        None,
    ),
    "the server's own check": (
        ModelProps(name="aa", version="1", gpus=4),
        BundledServer(image=IMAGE),
        "g5.12xlarge",
        None,
    ),
    "the accelerator": (ModelProps(name="encoder", version="1"), NeuronServer(), "g5.xlarge", None),
    "the stop timing": (ModelProps(name="mm", version="1"), complete(stop=LATE_DRAIN), "g5.xlarge", SHORT_DELAY),
}


def construct_error(model, server, instance_type, timing) -> ConfigError:
    """What ModelService raises for ``model`` on ``server`` on capacity of ``instance_type`` with ``timing``."""
    stack, parts = stack_with_placement()
    capacity = on_cluster(stack, instance_type)
    with pytest.raises(ConfigError) as raised:
        ModelService(stack, "M", model=model, server=server, capacity=capacity, timing=timing, **parts)
    return raised.value


@pytest.mark.parametrize("case", sorted(ONE_PROBLEM))
def test_the_construct_raises_word_for_word_the_problem_the_validation_returns(case):
    """The same bad input through ModelService and through validate_service (given the preset, as an app gives it):
    one problem, whose key and message are the construct's ConfigError's."""
    model, server, instance_type, timing = ONE_PROBLEM[case]
    on = CATALOG.get(instance_type) or NON_CUDA_CATALOG[instance_type]
    problems = validate_service(model, server=server, capacity=on, fleet_types=(on,), timing=timing)
    error = construct_error(model, server, instance_type, timing)
    assert len(problems) == 1, problems
    assert (error.key, error.detail, str(error)) == (problems[0].key, problems[0].detail, str(problems[0]))


def test_every_problem_is_returned_at_once_and_the_construct_lists_them_all():
    """Two bad keys, two problems (not the first); the construct's one ConfigError carries both, each on a line."""
    model = ModelProps(name="big", version="1", cpu=40000)
    server = complete(stop=LATE_DRAIN)
    problems = validate_service(
        model, server=server, capacity=CATALOG["g5.xlarge"], fleet_types=(CATALOG["g5.xlarge"],), timing=SHORT_DELAY
    )
    assert [problem.key for problem in problems] == ["models[big].cpu", "timing.deregistration_delay_seconds"]
    error = construct_error(model, server, "g5.xlarge", SHORT_DELAY)
    assert error.problems == tuple(problems)
    assert error.key == "models[big].cpu, timing.deregistration_delay_seconds"
    assert str(error).splitlines()[1:] == [f"- {problem}" for problem in problems]


def test_a_schedule_and_a_fit_are_two_problems():
    schedule = ServiceSchedule(name="day", cron="0 8 * * *", min_tasks=5)  # above the model's max_tasks
    problems = validate_service(
        ModelProps(name="big", version="1", memory_mib=16384, max_tasks=2),
        server=BundledServer(image=IMAGE),
        capacity=GpuCapacityProps(instance_types=("g5.xlarge",)),
        schedules=[schedule],
    )
    assert [problem.key for problem in problems] == ["models[big].memory_mib", "scaling.schedules[0].min_tasks"]


def test_a_group_short_of_capacity_is_the_message_gpu_capacity_raises():
    """validate_service(capacity=props, beside=...) counts a model joining a group as GpuCapacity.add_model does
    (gpu_packing.check_joins_group, the one implementation)."""
    props = GpuCapacityProps(instance_types=("g5.xlarge",), max_capacity=2)
    first = ModelProps(name="first", version="1", min_tasks=1, max_tasks=1)  # 2 instances while it deploys
    second = ModelProps(name="second", version="1", min_tasks=1, max_tasks=1)  # 3 with the other deploying
    problems = validate_service(second, server=BundledServer(image=IMAGE), capacity=props, beside=[first])
    assert [problem.key for problem in problems] == ["capacity.max_capacity"]
    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="123456789012", region="us-east-1"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=1)
    group = GpuCapacity(stack, "Gpus", vpc=vpc, cluster=ecs.Cluster(stack, "Cluster", vpc=vpc), props=props)
    group.add_model(first)
    with pytest.raises(ConfigError) as raised:
        group.add_model(second)
    assert (raised.value.key, raised.value.detail) == ("Gpus.max_capacity", problems[0].detail)


def test_shares_beside_whole_gpus_are_refused_as_the_group_refuses_them():
    props = GpuCapacityProps(instance_types=("g5.xlarge",), max_capacity=4)
    whole = ModelProps(name="whole", version="1")
    shared = ModelProps(name="shared", version="1", gpu_share=GpuShare(memory_mib=4096, max_compute_percent=20))
    problems = validate_service(shared, server=BundledServer(image=IMAGE), capacity=props, beside=[whole])
    assert [problem.key for problem in problems] == ["models[shared].gpu_share"]
    assert "in one capacity group" in problems[0].detail


def test_a_valid_service_has_no_problem():
    assert (
        validate_service(
            ModelProps(name="fine", version="1"),
            server=BundledServer(image=IMAGE),
            capacity=GpuCapacityProps(instance_types=("g5.xlarge",)),
        )
        == []
    )


def test_a_problem_is_the_key_and_the_fix_and_nests_like_an_error():
    problem = Problem("memory_mib", "too much; lower it")
    assert str(problem) == "memory_mib: too much; lower it"
    assert problem.within("models[0]") == Problem("models[0].memory_mib", "too much; lower it")
    error = ConfigError.of([problem, Problem("cpu", "too much")]).within("models[0]")
    assert error.key == "models[0].memory_mib, models[0].cpu"
    assert [str(p) for p in error.problems] == ["models[0].memory_mib: too much; lower it", "models[0].cpu: too much"]
