"""What ECS will do when a new model version goes out, per strategy, read from the synthesized templates.

One app holds the prod environment four times, once per strategy (synthesized once for the module), and the
real dev and prod environments come from the session's synthesis.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import aws_cdk as cdk
import pytest

from gpu_inference_constructs.core.service_timing import SPOT_STOP_SECONDS
from gpu_inference_constructs.rollout.deployment import ALARM_MINUTES, DeploymentProps
from gpu_inference_constructs.shared.acknowledgements import default_child
from stacks.config import load_environment
from tests.conftest import ROOT, scenario_context
from tests.infra.test_server_contract import on_cluster
from tests.scenarios import scenario_environment

STRATEGIES = {
    "rolling": {"strategy": "rolling", "alarm_names": ["team-slo-burn"]},
    "canary": {
        "strategy": "canary",
        "step_percent": 5.0,
        "step_bake_minutes": 12,
        "bake_minutes": 7,
        "alarm_names": ["team-slo-burn"],
    },
    "linear": {
        "strategy": "linear",
        "step_percent": 20.0,
        "step_bake_minutes": 4,
        "bake_minutes": 6,
        "alarm_names": ["team-slo-burn"],
    },
    "blue-green": {"strategy": "blue_green", "bake_minutes": 9, "alarm_names": ["team-slo-burn"]},
}


def prod_with(deployment: dict, models=None) -> dict:
    data = scenario_environment("prod")
    data["deployment"] = deployment
    if models is not None:
        data["models"] = models
    return data


def synthesize(environments: dict[str, dict]) -> dict[str, list[dict]]:
    """Environment name -> its stacks' templates."""
    from stacks.stage import InferenceStage

    app = cdk.App(context=scenario_context())
    stages = {name: InferenceStage(app, load_environment(name, data)) for name, data in environments.items()}
    app.synth()
    return {name: [stack.template for stack in stage.synth().stacks] for name, stage in stages.items()}


@pytest.fixture(scope="module")
def strategies():
    """prod once per strategy; only the canary keeps both models (the listener-rule test reorders them)."""
    first_model = scenario_environment("prod")["models"][:1]
    return synthesize(
        {
            name: prod_with(deployment, None if name == "canary" else first_model)
            for name, deployment in STRATEGIES.items()
        }
    )


class ModelView:
    """One model's service and what it references, inside the stack that holds its service."""

    def __init__(self, template: dict, service_id: str) -> None:
        self.resources = template["Resources"]
        self.service = self.resources[service_id]["Properties"]
        (self.binding,) = self.service["LoadBalancers"]
        self.primary_id = self.binding["TargetGroupArn"]["Ref"]
        advanced = self.binding.get("AdvancedConfiguration")
        self.alternate_id = advanced["AlternateTargetGroupArn"]["Ref"] if advanced else None
        self.advanced = advanced
        self.rules = {
            key: r["Properties"]
            for key, r in self.resources.items()
            if r["Type"] == "AWS::ElasticLoadBalancingV2::ListenerRule"
            and self.primary_id in json.dumps(r["Properties"]["Actions"])
        }

    @property
    def target_group_ids(self) -> list[str]:
        return [self.primary_id] + ([self.alternate_id] if self.alternate_id else [])

    def target_group(self, logical_id: str) -> dict:
        return self.resources[logical_id]["Properties"]

    def alarms_named_by_service(self) -> list[dict]:
        refs = [
            name["Ref"]
            for name in self.service["DeploymentConfiguration"]["Alarms"]["AlarmNames"]
            if isinstance(name, dict)
        ]
        return [self.resources[ref]["Properties"] for ref in refs]


def models(templates: list[dict]) -> dict[str, ModelView]:
    views = {}
    for template in templates:
        for key, resource in template["Resources"].items():
            if resource["Type"] == "AWS::ECS::Service":
                task = template["Resources"][resource["Properties"]["TaskDefinition"]["Ref"]]["Properties"]
                (server,) = [c for c in task["ContainerDefinitions"] if c["Name"] == "server"]
                options = server["LogConfiguration"]["Options"]  # awslogs, or FireLens's cloudwatch_logs output
                name = (options.get("awslogs-stream-prefix") or options["log_stream_prefix"]).split("/")[
                    0
                ]  # <model>/<version>
                views[name] = ModelView(template, key)
    return views


@pytest.mark.parametrize("environment", list(STRATEGIES))
def test_each_strategy_is_written_with_its_steps_and_explicit_bake_times(strategies, environment):
    kwargs: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in STRATEGIES[environment].items()}
    props = DeploymentProps(**kwargs)
    for view in models(strategies[environment]).values():
        config = view.service["DeploymentConfiguration"]
        if props.strategy == "rolling":
            assert "Strategy" not in config or config["Strategy"] == "ROLLING"
            assert config["DeploymentCircuitBreaker"] == {"Enable": True, "Rollback": True}
            assert "BakeTimeInMinutes" not in config and view.advanced is None
            continue
        assert (
            config["Strategy"] == {"canary": "CANARY", "linear": "LINEAR", "blue_green": "BLUE_GREEN"}[props.strategy]
        )
        assert config["BakeTimeInMinutes"] == props.bake_minutes
        # The guide documents the circuit breaker for blue/green; canary and linear rely on the never-healthy alarm.
        assert ("DeploymentCircuitBreaker" in config) == (props.strategy == "blue_green")
        if props.strategy == "canary":
            assert config["CanaryConfiguration"] == {
                "CanaryPercent": props.step_percent,
                "CanaryBakeTimeInMinutes": props.step_bake_minutes,
            }
        if props.strategy == "linear":
            assert config["LinearConfiguration"] == {
                "StepPercent": props.step_percent,
                "StepBakeTimeInMinutes": props.step_bake_minutes,
            }
        # A Spot notice may stop a doomed task at once (tests/infra/test_spot_timeline.py); both sets run to the bake's
        # end.
        assert config["MaximumPercent"] == 200 and config["MinimumHealthyPercent"] < 100


@pytest.mark.parametrize("environment", list(STRATEGIES))
def test_every_strategy_rolls_back_on_the_models_alarms_and_the_users(strategies, environment):
    for name, view in models(strategies[environment]).items():
        alarms = view.service["DeploymentConfiguration"]["Alarms"]
        assert (alarms["Enable"], alarms["Rollback"]) == (True, True)
        assert "team-slo-burn" in alarms["AlarmNames"]
        rollback = view.alarms_named_by_service()
        assert len(rollback) == 2
        watched = {
            dimension["Value"]["Fn::GetAtt"][0]
            for alarm in rollback
            for metric in alarm["Metrics"]
            if "MetricStat" in metric
            for dimension in metric["MetricStat"]["Metric"]["Dimensions"]
            if dimension["Name"] == "TargetGroup"
        }
        assert watched == set(view.target_group_ids), f"{name}: rollback alarms must watch every target group"
        names = {
            m["MetricStat"]["Metric"]["MetricName"] for alarm in rollback for m in alarm["Metrics"] if "MetricStat" in m
        }
        assert names == {"HTTPCode_Target_5XX_Count", "RequestCount", "TargetResponseTime"}
        for alarm in rollback:
            assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (ALARM_MINUTES, ALARM_MINUTES)
            assert alarm["TreatMissingData"] == "notBreaching"
        thresholds = sorted(alarm["Threshold"] for alarm in rollback)
        prod = scenario_environment("prod")
        model = next(m for m in prod["models"] if m["name"] == name)
        # The model's own latency goal, twice over; the environment's 5xx threshold.
        assert thresholds == sorted(
            [prod["monitoring"]["target_5xx_percent"], 2 * model["scaling"]["latency_p95_ms"] / 1000]
        )


@pytest.mark.parametrize("environment", ["canary", "linear", "blue-green"])
def test_one_weighted_rule_per_model_and_ecs_holds_the_alternate_target_group(strategies, environment):
    for view in models(strategies[environment]).values():
        (rule,) = view.rules.values()
        (action,) = rule["Actions"]
        assert action["Type"] == "forward" and "TargetGroupArn" not in action
        assert action["ForwardConfig"]["TargetGroups"] == [
            {"TargetGroupArn": {"Ref": view.primary_id}, "Weight": 100},
            {"TargetGroupArn": {"Ref": view.alternate_id}, "Weight": 0},
        ]
        (rule_id,) = view.rules
        assert view.advanced["ProductionListenerRule"] == {"Ref": rule_id}
        role = view.resources[view.advanced["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
        (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Principal"] == {"Service": "ecs.amazonaws.com"}
        assert "AmazonECSInfrastructureRolePolicyForLoadBalancers" in json.dumps(role["ManagedPolicyArns"])


@pytest.mark.parametrize("environment", list(STRATEGIES))
def test_both_target_groups_check_readiness_and_drain_within_the_spot_budget(strategies, environment):
    for view in models(strategies[environment]).values():
        groups = [view.target_group(logical_id) for logical_id in view.target_group_ids]
        assert len(groups) == (1 if environment == "rolling" else 2)
        shapes = {
            json.dumps(
                {
                    k: g.get(k)
                    for k in (
                        "HealthCheckPath",
                        "HealthCheckPort",
                        "Matcher",
                        "Port",
                        "Protocol",
                        "TargetType",
                        "HealthyThresholdCount",
                        "UnhealthyThresholdCount",
                        "TargetGroupAttributes",
                    )
                },
                sort_keys=True,
            )
            for g in groups
        }
        assert len(shapes) == 1, "the alternate target group must be the primary's twin"
        assert groups[0]["HealthCheckPath"] == "/ready"
        attributes = {a["Key"]: a["Value"] for a in groups[0]["TargetGroupAttributes"]}
        task = view.resources[view.service["TaskDefinition"]["Ref"]]["Properties"]
        (container,) = [c for c in task["ContainerDefinitions"] if c["Name"] == "server"]
        assert int(attributes["deregistration_delay.timeout_seconds"]) + container["StopTimeout"] <= SPOT_STOP_SECONDS
        # One grace period for the service covers tasks registering in either target group.
        assert view.service["HealthCheckGracePeriodSeconds"] > 0


def test_dev_rolls_and_prod_canaries_in_the_real_environments(synthesized):
    def views(environment):
        return models([t for (env, _), t in synthesized.templates.items() if env == environment])

    for view in views("dev").values():
        config = view.service["DeploymentConfiguration"]
        assert config["DeploymentCircuitBreaker"] == {"Enable": True, "Rollback": True} and config["Alarms"]["Rollback"]
        assert view.alternate_id is None
    for view in views("prod").values():
        config = view.service["DeploymentConfiguration"]
        assert config["Strategy"] == "CANARY" and view.alternate_id is not None
        assert (
            config["BakeTimeInMinutes"] >= ALARM_MINUTES
            and config["CanaryConfiguration"]["CanaryBakeTimeInMinutes"] >= ALARM_MINUTES
        )


def rules_by_model(templates: list[dict]) -> dict[str, dict]:
    """Model name -> (the rule's logical id, its properties) as CloudFormation would compare them on update."""
    found = {}
    for template in templates:
        for name, view in models([template]).items():
            ((rule_id, rule),) = view.rules.items()
            found[name] = (rule_id, rule)
    return found


def test_a_later_deploy_leaves_the_listener_rule_untouched(strategies):
    """aws/aws-cdk#36649: CloudFormation writes a rule's weights back to the template's (100 / 0) whenever the rule's
    template changes, even while ECS is shifting traffic or after it made the alternate target group production.
    So nothing a release changes may reach the rule: not the version, the rollout settings or the strategy, and
    not other models coming, going or moving in the list."""
    base = prod_with(STRATEGIES["canary"])  # what the module fixture synthesized as "canary"
    release = copy.deepcopy(base)
    release["deployment"] = {"strategy": "linear", "step_percent": 10.0, "step_bake_minutes": 3, "bake_minutes": 30}
    newcomer = {**copy.deepcopy(base["models"][0]), "name": "reranker"}
    release["models"] = [newcomer] + [dict(m, version="2027-01-15", min_tasks=3) for m in reversed(base["models"])]
    release["capacity"] = {
        **base["capacity"],
        "max_capacity": 48,
    }  # room for the newcomer while one model deploys at peak
    before, after = rules_by_model(strategies["canary"]), rules_by_model(synthesize({"canary": release})["canary"])
    assert set(before) < set(after)
    for name, rule in before.items():
        assert after[name] == rule, f"{name}: a release changed the listener rule, which would reset its weights"
    priorities = [rule["Priority"] for _, rule in after.values()]
    assert len(set(priorities)) == len(priorities)


def test_the_deploy_instructions_never_revert_drift():
    """`cdk deploy --revert-drift` (aws-cdk-cli#1127) sets drifted resources back to the template: for a listener rule
    whose weights ECS shifted, that sends production traffic to the target group without tasks."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    readme_commands = "\n".join(re.findall(r"```(?:bash|sh)\n(.*?)```", "\n".join(p.read_text() for p in pages), re.S))
    assert "cdk deploy" in readme_commands
    for commands in (readme_commands, (ROOT / "Makefile").read_text()):
        assert "--revert-drift" not in commands


def test_the_readme_library_examples_synthesize_a_canary_in_a_plain_app():
    """constructs/README.md's canary example, run as written in a bare app of its own (no context: no feature flags, no
    environments, no stacks/ code); tests/consumer runs it under cdk.json's flags and cdk-nag too."""
    from tests.consumer.test_readme_examples import ran

    template = ran("canary")[1]["template"]
    (canary,) = [
        ModelView(template, key)
        for key, r in template["Resources"].items()
        if r["Type"] == "AWS::ECS::Service" and "Ranker" in key
    ]
    config = canary.service["DeploymentConfiguration"]
    assert config["Strategy"] == "CANARY" and config["CanaryConfiguration"] == {
        "CanaryPercent": 10,
        "CanaryBakeTimeInMinutes": 10,
    }
    # the built-in 5xx and latency alarms, the never-healthy alarm and the team's own
    assert len(config["Alarms"]["AlarmNames"]) == 4 and canary.alternate_id is not None


# Two valid model names whose derived listener-rule priorities collide (sha256 of the name, mod 50000, plus 1).
COLLIDING = ("model-221", "model-242")
COLLIDING_PRIORITY = 1441


def route_priorities(*models: tuple[str, int | None]) -> dict[str, int]:
    """Model name -> its rule's priority, with the models added to one load balancer in this order."""
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk import aws_elasticloadbalancingv2 as elbv2

    from gpu_inference_constructs import InferenceLoadBalancer, LoadBalancerProps, ModelStore, ModelStoreProps

    stack = cdk.Stack(cdk.App(), "Team", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0a1b2c3d4e5f67890",
        vpc_cidr_block="10.0.0.0/16",
        availability_zones=["eu-west-1a"],
        public_subnet_ids=["subnet-0aaaaaaaaaaaaaaa1"],
    )
    balancer = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        props=LoadBalancerProps(allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
        access_logs_bucket=ModelStore(stack, "Models", props=ModelStoreProps()).access_logs_bucket,
    )
    priorities = {}
    for name, priority in models:
        target_group = elbv2.ApplicationTargetGroup(
            stack, f"Tg-{name}", vpc=vpc, port=8080, target_type=elbv2.TargetType.IP
        )
        priorities[name] = default_child(
            balancer.add_model_route(name, target_group, priority=priority), elbv2.CfnListenerRule
        ).priority
    return priorities


def test_two_models_whose_names_give_one_priority_are_an_error_naming_both():
    """Taking the next free priority instead would make one model's rule depend on the other: removing or reordering
    models would then move it, rewrite the rule and reset its weights (aws/aws-cdk#36649)."""
    from gpu_inference_constructs.core.errors import ConfigError
    from gpu_inference_constructs.routing.load_balancer import priority_from_name

    assert {priority_from_name(name) for name in COLLIDING} == {COLLIDING_PRIORITY}
    first, second = COLLIDING
    with pytest.raises(
        ConfigError,
        match=rf"models\[{second}\]\.listener_priority: .*{COLLIDING_PRIORITY} of '{second}'.*'{first}''s: "
        r"set listener_priority",
    ):
        route_priorities((first, None), (second, None))
    with pytest.raises(
        ConfigError, match=rf"models\[{second}\]\.listener_priority: .*priority 7 of '{second}'.*'{first}''s"
    ):
        route_priorities((first, 7), (second, 7))


def test_a_models_priority_never_depends_on_the_other_models():
    first, second = COLLIDING
    alone = route_priorities((first, None))
    assert alone == {first: COLLIDING_PRIORITY}
    assert (
        route_priorities((first, None), (second, 7))
        == route_priorities((second, 7), (first, None))
        == {**alone, second: 7}
    )


def test_the_config_names_both_colliding_models_and_the_keys_to_set():
    first, second = COLLIDING
    base = prod_with(STRATEGIES["canary"])
    models: list[dict[str, Any]] = [dict(base["models"][0], name=first), dict(base["models"][1], name=second)]
    with pytest.raises(
        Exception,
        match=rf"^environment 'prod': models\[1\]\.listener_priority: .*'{second}'.*'{first}''s: "
        r"set models\[0\]\.listener_priority or models\[1\]\.listener_priority",
    ):
        load_environment("prod", prod_with(STRATEGIES["canary"], models))
    models[1]["listener_priority"] = COLLIDING_PRIORITY + 1
    config = load_environment("prod", prod_with(STRATEGIES["canary"], models))
    assert [config.server_config(m).listener_priority for m in config.models] == [None, COLLIDING_PRIORITY + 1]
    models[0]["listener_priority"] = COLLIDING_PRIORITY + 1
    with pytest.raises(Exception, match=r"models\[1\]\.listener_priority: .*1442 of 'model-242' .*set "):
        load_environment("prod", prod_with(STRATEGIES["canary"], models))


def test_switching_between_rolling_and_a_traffic_shifting_strategy_rewrites_the_rule(strategies):
    """The one rollout change that does reach the rule: rolling forwards to one target group, canary, linear and
    blue/green forward weighted to two. Same rule (logical id, priority, paths), another action, so CloudFormation
    rewrites it; docs/deploying.md says when that is safe and how to make it so."""
    (rolling_id, rolling), (canary_id, canary) = (
        rules_by_model(strategies[name])["minilm"] for name in ("rolling", "canary")
    )
    assert rolling_id == canary_id
    assert (rolling["Priority"], rolling["Conditions"]) == (canary["Priority"], canary["Conditions"])
    ((plain,), (weighted,)) = rolling["Actions"], canary["Actions"]
    assert "TargetGroupArn" in plain and "ForwardConfig" not in plain
    assert [group["Weight"] for group in weighted["ForwardConfig"]["TargetGroups"]] == [100, 0]


def rollback_thresholds_in(templates: list[dict]) -> dict[str, dict[str, float]]:
    """Model name -> {metric name -> threshold} of the alarms its service rolls back on."""
    found = {}
    for name, view in models(templates).items():
        found[name] = {
            next(
                m["MetricStat"]["Metric"]["MetricName"]
                for m in alarm["Metrics"]
                if "MetricStat" in m and m["MetricStat"]["Metric"]["MetricName"] != "RequestCount"
            ): alarm["Threshold"]
            for alarm in view.alarms_named_by_service()
        }
    return found


def test_rollback_thresholds_follow_each_models_own_latency_goal(synthesized):
    """staging canaries an encoder (p95 goal 250 ms) and vLLM's llama-13b (20 s): one environment-wide p95 would roll
    back every llama release. Each model's rollback p95 is twice its own scaling goal."""
    staging = rollback_thresholds_in([t for (env, _), t in synthesized.templates.items() if env == "staging"])
    assert staging["llama-13b"] == {"TargetResponseTime": 40.0, "HTTPCode_Target_5XX_Count": 1.0}
    assert staging["minilm"] == {"TargetResponseTime": 0.5, "HTTPCode_Target_5XX_Count": 1.0}


def test_a_models_rollback_block_overrides_the_derived_thresholds():
    data = scenario_environment("staging")
    llama = next(m for m in data["models"] if m["name"] == "llama-13b")
    llama["rollback"] = {"latency_p95_ms": 30000, "target_5xx_percent": 2.5}
    config = load_environment("staging", data)
    thresholds = {m.name: config.rollback_thresholds_for(m) for m in config.models}
    assert (thresholds["llama-13b"].latency_p95_ms, thresholds["llama-13b"].target_5xx_percent) == (30000, 2.5)
    assert (thresholds["minilm"].latency_p95_ms, thresholds["minilm"].target_5xx_percent) == (500, 1.0)


@pytest.mark.parametrize(
    ("rollback", "message"),
    [
        (
            {"latency_p95_ms": 500},
            r"^environment 'staging': models\[2\]\.rollback\.latency_p95_ms: 500 .*set at least 20000",
        ),
        ({"latency_p95_ms": 0}, r"models\[2\]\.rollback\.latency_p95_ms: 0 .*1 to 120000"),
        ({"target_5xx_percent": 0}, r"models\[2\]\.rollback\.target_5xx_percent: 0.0 .*above 0, at most 100"),
    ],
)
def test_a_rollback_threshold_the_model_would_trip_in_normal_service_is_refused(rollback, message):
    from gpu_inference_constructs.core.errors import ConfigError

    data = scenario_environment("staging")
    data["models"][2]["rollback"] = rollback
    assert data["models"][2]["name"] == "llama-13b"
    with pytest.raises(ConfigError, match=message):
        load_environment("staging", data)


def test_the_library_derives_rollback_thresholds_from_the_model_and_checks_explicit_ones():
    from gpu_inference_constructs import ModelProps, ModelScalingProps, RollbackThresholds
    from gpu_inference_constructs.core.errors import ConfigError

    model = ModelProps(name="llm", version="1", scaling=ModelScalingProps(latency_p95_ms=20_000))
    assert model.rollback_thresholds() == RollbackThresholds(latency_p95_ms=40_000, target_5xx_percent=1.0)
    with pytest.raises(ConfigError, match=r"^rollback_thresholds\.latency_p95_ms: 500 .*set at least 20000"):
        RollbackThresholds(latency_p95_ms=500).check_above_scaling(20_000, "rollback_thresholds.latency_p95_ms")


def test_a_model_service_refuses_explicit_rollback_thresholds_below_its_models_goal():
    from aws_cdk import aws_cloudwatch as cloudwatch

    from gpu_inference_constructs import BundledServer, ModelProps, ModelScalingProps, ModelService, RollbackThresholds
    from gpu_inference_constructs.core.errors import ConfigError
    from tests.infra.test_server_contract import IMAGE, stack_with_placement

    stack, parts = stack_with_placement()
    model = ModelProps(name="slow", version="1", scaling=ModelScalingProps(latency_p95_ms=2_000))
    with pytest.raises(ConfigError, match=r"^rollback_thresholds\.latency_p95_ms: 1999 .*set at least 2000"):
        ModelService(
            stack,
            "Low",
            model=model,
            server=BundledServer(image=IMAGE),
            capacity=on_cluster(stack, "g5.xlarge"),
            rollback_thresholds=RollbackThresholds(latency_p95_ms=1999),
            **parts,
        )
    service = ModelService(
        stack,
        "AtGoal",
        model=model,
        server=BundledServer(image=IMAGE),
        capacity=on_cluster(stack, "g5.xlarge"),
        rollback_thresholds=RollbackThresholds(latency_p95_ms=2_000),
        **parts,
    )
    assert default_child(service.rollback_alarms.alarms["latency_p95"], cloudwatch.CfnAlarm).threshold == 2.0


@pytest.mark.parametrize(
    "resource_type", ["AWS::ElasticLoadBalancingV2::ListenerRule", "AWS::ApplicationAutoScaling::ScalableTarget"]
)
def test_no_listener_rule_or_scalable_target_carries_the_stage_tags(synthesized, resource_type):
    """A tag change would update the rule, which rewrites its forward weights (aws/aws-cdk#36649), or the scalable
    target, which registers the template's MinCapacity again (dropping prod's scheduled business-hours floor until
    the next scheduled action). Both carried every stage tag before; other resources still carry them."""
    rules, tagged = [], []
    for (environment, stack), template in synthesized.templates.items():
        for logical_id, resource in template["Resources"].items():
            if resource["Type"] == resource_type:
                rules.append(logical_id)
                if resource["Properties"].get("Tags"):
                    tagged.append(f"{environment}/{stack}/{logical_id}")
            elif resource["Type"] == "AWS::ElasticLoadBalancingV2::TargetGroup":
                assert {"Key": "project", "Value": "gpu-inference"} in resource["Properties"]["Tags"]
    assert len(rules) >= 8 and tagged == []
