"""Issue 42, one name per concept: the app's EnvironmentConfig calls the task's stop timings ``timing``, as
ModelService does, while cdk.json keeps its ``service`` section; errors name what cdk.json says."""

import copy

import pytest

from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.core.service_timing import ServiceTimingProps
from stacks.config import load_environment
from tests.scenarios import scenario_environment

BASE = scenario_environment("dev")


def test_cdk_json_service_is_the_configs_timing():
    data = copy.deepcopy(BASE)
    data["service"] = {"deregistration_delay_seconds": 15, "stop_timeout_seconds": 90}
    config = load_environment("dev", data)
    assert config.timing == ServiceTimingProps(deregistration_delay_seconds=15, stop_timeout_seconds=90)


def test_errors_in_the_service_section_name_it_as_cdk_json_does():
    data = copy.deepcopy(BASE)
    data["service"] = {"stop_timeout_seconds": 1}
    with pytest.raises(ConfigError, match=r"^environment 'dev': service\.stop_timeout_seconds: 1 .*allowed"):
        load_environment("dev", data)
    data["service"] = {"drain_seconds": 10}
    with pytest.raises(ConfigError, match=r"^environment 'dev': service\.drain_seconds: unknown key"):
        load_environment("dev", data)


def test_the_field_name_in_cdk_json_is_refused_naming_the_key_and_unknown_keys_list_cdk_json_names():
    data = copy.deepcopy(BASE)
    data["timing"] = {"stop_timeout_seconds": 90}
    with pytest.raises(ConfigError, match=r"^environment 'dev': timing: unknown key.*names it 'service'"):
        load_environment("dev", data)
    data = copy.deepcopy(BASE)
    data["colour"] = "blue"
    with pytest.raises(ConfigError) as error:
        load_environment("dev", data)
    allowed = error.value.detail.split(": ", 1)[1].split(", ")
    assert "service" in allowed and "timing" not in allowed and allowed == sorted(allowed)
