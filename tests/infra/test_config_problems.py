"""A cdk.json with several mistakes is refused once, naming every one at its cdk.json key with the library's fix
(issue 56): the app checks each model through the library's validate_service, the checks ModelService and the
capacity groups run at synth, and maps their keys onto cdk.json's."""

from __future__ import annotations

import pytest

from gpu_inference_constructs import ConfigError
from stacks.config import load_environment
from tests.scenarios import scenario_environment


def refused(name: str, data: dict) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        load_environment(name, data)
    return raised.value


def test_two_models_too_big_for_their_instances_are_two_problems_at_their_cdk_json_keys():
    data = scenario_environment("staging")
    data["models"][0]["memory_mib"] = 65536
    data["models"][2]["cpu"] = 99999
    error = refused("staging", data)
    assert [problem.key for problem in error.problems] == ["models[0].memory_mib", "models[2].cpu"]
    assert error.key == "environment 'staging': models[0].memory_mib, models[2].cpu"
    first, second = error.problems
    assert "does not fit on g4dn.xlarge" in first.detail or "does not fit on g5.xlarge" in first.detail
    assert first.detail.endswith("(it runs on capacity; place it in a capacity group of a larger shape)")
    assert second.detail.endswith("(it runs on capacity_groups.llm)")
    assert str(error).splitlines()[1:] == [f"- {problem}" for problem in error.problems]


def test_a_server_key_and_the_services_timing_are_named_where_cdk_json_has_them():
    """The vLLM block's own check nests in the model's entry; ModelService's timing is cdk.json's ``service``."""
    data = scenario_environment("staging")
    data["models"][2]["vllm"]["shared_memory_mib"] = 163840  # its memory_mib
    data["service"] = {"deregistration_delay_seconds": 20, "stop_timeout_seconds": 30}  # the drain is 70 s
    problems = refused("staging", data).problems
    assert [problem.key for problem in problems] == ["service.stop_timeout_seconds", "models[2].vllm.shared_memory_mib"]
    assert "raise stop_timeout_seconds to 85" in problems[0].detail  # one environment key: the first model's problem
    assert problems[0].detail.endswith("(models[minilm])")


def test_a_group_short_of_capacity_is_one_problem_for_the_whole_group():
    """The group check runs as each model joins (as GpuCapacity counts them); the app reports the group once, with
    what all of its models need."""
    data = scenario_environment("dev")
    for model in data["models"]:
        model["max_tasks"] = 8
    data["capacity"]["max_capacity"] = 2
    error = refused("dev", data)
    capacity = [problem for problem in error.problems if problem.key == "capacity.max_capacity"]
    assert len(capacity) == 1, error.problems
    assert "max_tasks add up to 32 tasks" in capacity[0].detail


def test_one_mistake_is_the_message_it_always_was():
    data = scenario_environment("dev")
    data["models"][1]["cpu"] = 99999
    error = refused("dev", data)
    assert [problem.key for problem in error.problems] == ["models[1].cpu"]
    assert str(error) == f"environment 'dev': {error.problems[0]}"
