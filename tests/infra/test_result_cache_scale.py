"""The shared cache with as many users as an environment may hold (issue 40, defect 3).

The cache's alarm once summed one metric per cache-using model (a metric-math alarm takes at most 10: synth failed
with TooManyMetricsInMathExpression at eleven), and its security group gained one inbound rule per model (60 by
default). Now the alarm is one Metrics Insights query and every user carries one client group the cache admits once.

Two environments like staging (canary deployments, the cache on, every model our server's): the largest the config
accepts (MAX_LOAD_BALANCERS load balancers, each full to its default quotas: 1,000 models), its shared stack whole and
the first and last model's stack on each load balancer; and one with a model more than a security group's default
inbound rules, synthesized whole as `cdk synth` builds it, cdk-nag on. Every model's task interface there is proven to
reach the cache by EC2's rules (tests/infra/security_groups.py).
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from cdk_nag import AwsSolutionsChecks

from gpu_inference_constructs.core.errors import ConfigError
from stacks.config import MAX_LOAD_BALANCERS, EnvironmentConfig, load_environment, quota_use
from stacks.inference_stack import InferenceStack
from stacks.model_stack import ModelStack, model_stack_id
from stacks.network_stack import NetworkStack
from stacks.stage import InferenceStage
from tests.conftest import merge_templates, scenario_context
from tests.infra.security_groups import inbound_rule_count, may_connect, serverless_cache_groups, service_groups
from tests.scenarios import scenario_environment

# About 25 s of a core (2026-12, 2 shared cores), asserting no time: make test runs this module in its background run.
pytestmark = pytest.mark.background

INBOUND_RULES_PER_GROUP = 60  # Amazon VPC quota, default (docs/aws-facts.md)
METRICS_PER_ALARM = 10  # CloudWatch: a metric-math alarm, hard limit (docs/aws-facts.md)
BASE = "staging"  # the environment with the cache; canary deployments take two target groups a model


def cache_environment(count: int, per_load_balancer: int) -> dict:
    """``BASE`` serving ``count`` copies of its first model (ours, with its shared_cache settings),
    ``per_load_balancer`` on each load balancer in turn, each with its own listener priority there; no vLLM model, no
    capacity group."""
    data = scenario_environment(BASE)
    data.pop("capacity_groups", None)
    template = {**data["models"][0], "min_tasks": 1, "max_tasks": 4}
    data["models"] = [
        {
            **template,
            "name": f"model-{index:04d}",
            "load_balancer": 1 + index // per_load_balancer,
            "listener_priority": 1 + index % per_load_balancer,
        }
        for index in range(count)
    ]
    data["scaling"]["schedules"] = []
    data["capacity"]["max_capacity"] = 8 * count + 4  # canary deployments run a second set of tasks at peak
    return data


def models_per_load_balancer() -> int:
    """The most of ``BASE``'s first model one load balancer holds within its default quotas (rules, target groups,
    targets at peak), as the config checks them."""
    config = load_environment(BASE, cache_environment(1, 1))
    model, quotas = config.models[0], config.load_balancer.quotas
    count = 1
    while True:
        try:
            quotas.check(**quota_use([model] * (count + 1)))
        except ConfigError:
            return count
        count += 1


PER_LOAD_BALANCER = models_per_load_balancer()
MOST = MAX_LOAD_BALANCERS * PER_LOAD_BALANCER
CROWDED = INBOUND_RULES_PER_GROUP + 1


def test_the_largest_environment_is_the_most_the_config_accepts():
    """MOST models load; one more on any load balancer, or a load balancer more, is refused."""
    config = load_environment("many", cache_environment(MOST, PER_LOAD_BALANCER))
    assert len(config.models) == MOST == 1000 and all(config.uses_cache(m) for m in config.models)
    fuller = cache_environment(MOST, PER_LOAD_BALANCER)
    fuller["models"].append({**fuller["models"][0], "name": "one-more", "listener_priority": 999})
    with pytest.raises(ConfigError, match=r"models\[1000\]\.load_balancer: on load balancer 1, .*quota"):
        load_environment("many", fuller)
    fuller["models"][-1]["load_balancer"] = MAX_LOAD_BALANCERS + 1
    with pytest.raises(ConfigError, match=rf"models\[1000\]\.load_balancer: {MAX_LOAD_BALANCERS + 1} .*out of range"):
        load_environment("many", fuller)


def sample(config: EnvironmentConfig) -> list:
    """The first and the last model on each load balancer."""
    groups = config.load_balancer_groups().values()
    return [model for models in groups for model in {models[0].name: models[0], models[-1].name: models[-1]}.values()]


@pytest.fixture(scope="module")
def largest(tmp_path_factory) -> tuple[EnvironmentConfig, dict, list[str]]:
    """(config, the shared and sampled model stacks merged, the sampled models): the stage as InferenceStage builds it,
    cdk-nag on, with the model stacks of ``sample`` only (a thousand would take minutes; each is built alike)."""
    config = load_environment("many", cache_environment(MOST, PER_LOAD_BALANCER))
    context = {k: v for k, v in scenario_context().items() if k != "environments"}
    app = cdk.App(context=context, outdir=str(tmp_path_factory.mktemp("largest")))
    env = cdk.Environment(account=config.account, region=config.region)
    stage = cdk.Stage(app, config.stage_name, env=env)
    stage.node.set_context(
        f"availability-zones:account={config.account}:region={config.region}", list(config.network.availability_zones)
    )
    cdk.Validations.of(stage).add_plugins(AwsSolutionsChecks(stage))
    network = NetworkStack(stage, "Network", props=config.network, env=env)
    shared = InferenceStack(stage, "Inference", config=config, network=network.network, env=env)
    models = sample(config)
    for model in models:
        ModelStack(
            stage,
            model_stack_id(model.name),
            config=config,
            model=model,
            shared=shared,
            network=network.network,
            env=env,
        )
    app.synth()
    templates = {
        stack.stack_name: stack.template for stack in stage.synth().stacks if not stack.stack_name.endswith("-Network")
    }
    return config, merge_templates(templates), [m.name for m in models]


@pytest.fixture(scope="module")
def crowded(tmp_path_factory) -> tuple[EnvironmentConfig, dict]:
    """(config, every stack but the Network merged) of CROWDED cache users, synthesized whole, cdk-nag on."""
    config = load_environment("crowded", cache_environment(CROWDED, PER_LOAD_BALANCER))
    context = {k: v for k, v in scenario_context().items() if k != "environments"}
    app = cdk.App(context=context, outdir=str(tmp_path_factory.mktemp("crowded")))
    stage = InferenceStage(app, config)
    app.synth()
    templates = {
        stack.stack_name: stack.template for stack in stage.synth().stacks if not stack.stack_name.endswith("-Network")
    }
    return config, merge_templates(templates)


def alarm_metric_count(properties: dict) -> int:
    """What CloudWatch counts against a math alarm's 10: its MetricStat queries, and one for a Metrics Insights
    query."""
    queries = properties.get("Metrics", [])
    return sum(1 for q in queries if "MetricStat" in q or q.get("Expression", "").lstrip().upper().startswith("SELECT"))


def cache_groups(resources: dict) -> list[str]:
    (cache,) = [k for k, r in resources.items() if r["Type"] == "AWS::ElastiCache::ServerlessCache"]
    return serverless_cache_groups(resources, cache)


def service_of(resources: dict, model: str) -> str:
    (service,) = [
        k
        for k, r in resources.items()
        if r["Type"] == "AWS::ECS::Service" and k.startswith(f"Model{model.replace('-', '')}Service")
    ]
    return service


@pytest.mark.parametrize("environment", ["largest", "crowded"])
def test_every_alarm_stays_within_cloudwatchs_ten_metrics(environment, request):
    merged = request.getfixturevalue(environment)[1]
    alarms = {k: r["Properties"] for k, r in merged["Resources"].items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    worst = max(alarms, key=lambda k: alarm_metric_count(alarms[k]))
    assert alarm_metric_count(alarms[worst]) <= METRICS_PER_ALARM, worst
    (cache_alarm,) = [p for k, p in alarms.items() if k.startswith("ResultCacheConnectionFailuresAlarm")]
    (query,) = cache_alarm["Metrics"]
    assert query["Expression"].startswith("SELECT SUM(SharedCacheErrors) FROM SCHEMA(")
    assert (
        cache_alarm["TreatMissingData"] == "notBreaching"
        and cache_alarm["AlarmActions"] == cache_alarm["OKActions"] != []
    )


@pytest.mark.parametrize("environment", ["largest", "crowded"])
def test_the_cache_admits_its_users_with_one_inbound_rule(environment, request):
    merged = request.getfixturevalue(environment)[1]
    (group,) = cache_groups(merged["Resources"])
    assert inbound_rule_count(merged["Resources"], group) == 1


def test_every_models_tasks_reach_the_cache_in_an_environment_past_the_rule_quota(crowded):
    config, merged = crowded
    resources = merged["Resources"]
    assert len(config.models) == CROWDED > INBOUND_RULES_PER_GROUP
    targets = cache_groups(resources)
    for model in config.models:
        groups = service_groups(resources, service_of(resources, model.name))
        assert may_connect(resources, groups, targets, 6379), model.name


def test_the_first_and_last_model_on_every_load_balancer_reach_the_cache_in_the_largest_environment(largest):
    config, merged, models = largest
    resources = merged["Resources"]
    assert len(models) == 2 * MAX_LOAD_BALANCERS
    targets = cache_groups(resources)
    for model in models:
        groups = service_groups(resources, service_of(resources, model))
        assert may_connect(resources, groups, targets, 6379), model
