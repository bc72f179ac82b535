"""Rollout settings: invalid combinations fail at synth naming the key and the fix; defaults are explicit."""

import copy

import pytest

import gpu_inference_constructs.core.model_props
from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.core.settings import from_dict
from gpu_inference_constructs.rollout.deployment import ALARM_MINUTES, DeploymentProps
from stacks.config import load_environment
from tests.scenarios import scenario_environments

CONTEXT = scenario_environments()

BAD_DEPLOYMENTS = [
    ({"strategy": "canary", "circuit_breaker": True}, r"^circuit_breaker: .*remove it for canary"),
    ({"strategy": "linear", "circuit_breaker": True}, r"^circuit_breaker: .*remove it for linear"),
    ({"strategy": "canary", "bake_minutes": 1441}, r"^bake_minutes: 1441 .*3 to 1440"),
    ({"strategy": "canary", "step_bake_minutes": 2}, r"^step_bake_minutes: 2 .*3 to 1440"),
    ({"strategy": "blue_green", "bake_minutes": 0}, r"^bake_minutes: 0 .*3 to 1440"),
    ({"strategy": "linear", "step_percent": 2.0}, r"^step_percent: 2.0 .*3.0 to 100.0 for linear"),
    ({"strategy": "canary", "step_percent": 0.05}, r"^step_percent: 0.05 .*0.1 to 100.0 for canary"),
    ({"strategy": "canary", "step_percent": 12.34}, r"^step_percent: 12.34 .*multiple of 0.1"),
    (
        {"strategy": "linear", "step_percent": 3.0, "step_bake_minutes": 60},
        r"^step_bake_minutes: .*1990 minutes.*33 hours",
    ),
    ({"strategy": "canary", "rollback_alarms": []}, r"^rollback_alarms: .*canary.*list alarm_names"),
    ({"strategy": "linear", "rollback_alarms": [], "alarm_names": []}, r"^rollback_alarms: .*linear.*list alarm_names"),
    ({"strategy": "canary", "rollback_alarms": ["p99"]}, r"^rollback_alarms: \['p99'\] .*use any of"),
    ({"strategy": "rolling", "step_percent": 10.0}, r"^step_percent: .*remove step_percent.*canary"),
    ({"strategy": "blue_green", "step_bake_minutes": 5}, r"^step_bake_minutes: .*remove step_bake_minutes.*canary"),
    ({"strategy": "rolling", "bake_minutes": 10}, r"^bake_minutes: .*remove bake_minutes.*canary"),
    ({"strategy": "canary", "alarm_names": ["a", "a"]}, r"^alarm_names: .*twice"),
    ({"strategy": "canary", "alarm_names": [""]}, r"^alarm_names\[0\]: .*1 to 255"),
    ({"strategy": "gradual"}, r"^strategy: 'gradual' .*use one of"),
]


@pytest.mark.parametrize(("deployment", "message"), BAD_DEPLOYMENTS, ids=[str(d) for d, _ in BAD_DEPLOYMENTS])
def test_invalid_deployment_is_refused_naming_the_key(deployment, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(DeploymentProps, deployment)


def test_bad_model_deployment_names_the_environment_and_model():
    data = copy.deepcopy(CONTEXT["prod"])
    data["models"][1]["deployment"] = {"strategy": "canary", "circuit_breaker": True}
    with pytest.raises(
        ConfigError, match=r"^environment 'prod': models\[1\]\.deployment\.circuit_breaker: .*remove it"
    ):
        load_environment("prod", data)


def test_bad_environment_deployment_names_the_environment():
    data = copy.deepcopy(CONTEXT["prod"])
    data["deployment"] = {"strategy": "blue_green", "bake_minutes": 2000}
    with pytest.raises(ConfigError, match=r"^environment 'prod': .*deployment\.bake_minutes: 2000 .*3 to 1440"):
        load_environment("prod", data)


def test_dev_rolls_and_prod_canaries_by_default():
    dev, prod = load_environment("dev", CONTEXT["dev"]), load_environment("prod", CONTEXT["prod"])
    assert {m.deployment.strategy for m in dev.models} == {"rolling"}
    assert all(m.deployment.uses_circuit_breaker for m in dev.models)
    assert {m.deployment.strategy for m in prod.models} == {"canary"}


def test_a_model_deployment_replaces_the_environment_default_whole():
    data = copy.deepcopy(CONTEXT["prod"])
    data["deployment"] = {"strategy": "canary", "step_percent": 5.0}
    data["models"][0]["deployment"] = {"strategy": "blue_green", "bake_minutes": 20}
    config = load_environment("prod", data)
    assert config.models[0].deployment == DeploymentProps(strategy="blue_green", bake_minutes=20)
    assert config.models[1].deployment == DeploymentProps(strategy="canary", step_percent=5.0)


@pytest.mark.parametrize("strategy", ["canary", "linear", "blue_green"])
def test_every_traffic_shifting_default_bakes_long_enough_for_the_alarms(strategy):
    props = DeploymentProps(strategy=strategy)
    assert props.final_bake is not None  # every traffic-shifting strategy has a default bake
    assert props.final_bake >= ALARM_MINUTES
    assert props.uses_circuit_breaker == (strategy == "blue_green")  # the guide names the breaker for blue/green only
    if strategy != "blue_green":
        assert props.step_bake is not None
        assert props.step_bake >= ALARM_MINUTES


@pytest.mark.parametrize(
    ("percent", "steps"),
    [(10.0, 9), (11.0, 9), (25.0, 3), (33.3, 3), (100.0, 0), (3.0, 33)],
)
def test_linear_steps_are_counted_as_cloudformation_counts_them(percent, steps):
    assert DeploymentProps(strategy="linear", step_percent=percent, step_bake_minutes=3).traffic_steps == steps


@pytest.mark.parametrize("strategy", ["canary", "linear", "blue_green"])
def test_a_traffic_shifting_deployment_peaks_at_twice_the_tasks_whatever_rolling_allows(strategy):
    """A traffic-shifting deployment starts a whole second set behind the alternate target group; a rolling one runs
    up to its maximum percent. Below 200 % the two differ, so the traffic-shifting count cannot come from the rolling
    one."""
    assert DeploymentProps(strategy=strategy).peak_tasks(6, max_healthy_percent=150) == 12
    assert DeploymentProps(strategy=strategy).peak_tasks(6, max_healthy_percent=100) == 12
    assert DeploymentProps(strategy="rolling").peak_tasks(6, max_healthy_percent=150) == 9
    assert DeploymentProps(strategy="rolling").peak_tasks(6, max_healthy_percent=200) == 12


def test_props_built_in_python_are_checked_too():
    with pytest.raises(ConfigError, match=r"^strategy: 'gradual' .*use one of"):
        DeploymentProps(strategy="gradual")  # pyright: ignore[reportArgumentType]  # deliberately not a Strategy: the runtime check is under test


@pytest.mark.parametrize("strategy", ["canary", "linear", "blue_green"])
def test_the_capacity_check_counts_the_second_target_groups_tasks(strategy, monkeypatch):
    """While a traffic-shifting deployment runs, the old set keeps all its tasks behind one target group and a full new
    set starts behind the other: the group must hold every model at max_tasks plus the deploying model's again. With
    rolling deployments capped at 150 % (not the 200 % the services use), rolling and traffic-shifting need different
    room, so a check that counted a canary like a rolling deployment fails here."""
    monkeypatch.setattr(gpu_inference_constructs.core.model_props, "ROLLING_MAX_HEALTHY_PERCENT", 150)
    data = copy.deepcopy(CONTEXT["prod"])
    data["models"][1]["max_tasks"] = 5
    peak = sum(m["max_tasks"] for m in data["models"])  # 12 + 5
    data["deployment"] = {"strategy": "rolling"}
    data["capacity"]["max_capacity"] = peak + 6  # rolling: 150 % of minilm's 12 tasks is 18, 6 more
    load_environment("prod", data)
    data["deployment"] = {"strategy": strategy}
    with pytest.raises(ConfigError, match=r"capacity\.max_capacity: 23 instances .*'minilm' runs up to 24"):
        load_environment("prod", data)
    data["capacity"]["max_capacity"] = peak + 12  # one GPU per instance: the larger model deploys 12 more tasks
    load_environment("prod", data)
    data["capacity"]["max_capacity"] = peak + 11
    with pytest.raises(ConfigError, match=r"capacity\.max_capacity: 28 instances"):
        load_environment("prod", data)
