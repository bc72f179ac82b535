"""Issue 56: a team's own capacity and route, written as a team would in a plain cdk.App() with imported parts and no
change to the library. The capacity subclasses ServiceCapacity: its tasks go on the team's own two capacity providers
(an On-Demand base, Spot above it); the route subclasses ServiceRoute: a rule on the team's own ALB listener that
matches the model's host name as well as its path. The service uses both as it uses the library's own."""

from __future__ import annotations

import dataclasses
import fnmatch

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from constructs import Construct

from gpu_inference_constructs import (
    CATALOG,
    BoundCapacity,
    BoundModelSource,
    BoundRoute,
    ConfigError,
    ModelPool,
    ModelProps,
    ModelService,
    ModelSource,
    ServiceAccess,
    ServiceCapacity,
    ServiceLogs,
    ServiceRoute,
)
from tests.infra.team_parts import LISTENER_ARN, TeamParts, imported_team_parts

KEY_ARN = "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-3333-4444-555555555555"
HOST = "ranker.search.example.com"


@dataclasses.dataclass(frozen=True)
class TeamCapacity(ServiceCapacity):
    """The team's cluster: one task On-Demand, the rest three to one on Spot, on g5.xlarge or g5.2xlarge."""

    cluster: ecs.ICluster

    def bind(self, service: Construct) -> BoundCapacity:
        return BoundCapacity(
            self.cluster,
            (
                ecs.CapacityProviderStrategy(capacity_provider="team-on-demand", base=1, weight=1),
                ecs.CapacityProviderStrategy(capacity_provider="team-spot", weight=3),
            ),
            CATALOG["g5.xlarge"],
            fleet_types=(CATALOG["g5.xlarge"], CATALOG["g5.2xlarge"]),
            has_spot=True,
        )


@dataclasses.dataclass(frozen=True)
class HostRoute(ServiceRoute):
    """A rule on the team's shared listener for one host name: its other hosts keep their own rules."""

    listener: elbv2.IApplicationListener
    host: str
    priority: int

    def bind(self, service: Construct) -> BoundRoute:
        return BoundRoute(
            self.listener,
            self.priority,
            conditions=(elbv2.ListenerCondition.host_headers([self.host]),),
        )


@dataclasses.dataclass(frozen=True)
class TeamArtifacts(ModelSource):
    """The team's artifact bucket, whose models sit under ``serving/``."""

    bucket: s3.IBucket

    def bind(self, service: Construct) -> BoundModelSource:
        return BoundModelSource(self.bucket, "serving")


def team_stack() -> tuple[cdk.Stack, TeamParts]:
    app = cdk.App()
    stack = cdk.Stack(app, "Team", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    return stack, imported_team_parts(stack)


def team_model(
    stack: cdk.Stack, team: TeamParts, name: str = "ranker", capacity=None, route=None, host: str = HOST
) -> ModelService:
    """One model as the team writes it: its capacity, its route, its bucket; nothing of the library's built."""
    return ModelService(
        stack,
        name.title(),
        model=ModelProps(name=name, version="3", min_tasks=2, max_tasks=4),
        environment="team",
        capacity=capacity or TeamCapacity(team.cluster),
        model_source=TeamArtifacts(s3.Bucket.from_bucket_name(stack, f"{name}-artifacts", "team-artifacts")),
        route=route or HostRoute(team.listener, host, 7),
        logs=ServiceLogs(kms.Key.from_key_arn(stack, f"{name}-key", KEY_ARN)),
        access=ServiceAccess(allow_unauthenticated=True),
    )


@pytest.fixture(scope="module")
def synthesized() -> tuple[cdk.Stack, ModelService, dict]:
    stack, team = team_stack()
    service = team_model(stack, team)
    return stack, service, dict(Template.from_stack(stack).to_json())


def resources(template: dict, kind: str) -> list[dict]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == kind]


def test_the_service_runs_on_the_teams_capacity_providers(synthesized):
    _, service, template = synthesized
    (ecs_service,) = resources(template, "AWS::ECS::Service")
    assert ecs_service["Cluster"] == "team-gpu"
    assert ecs_service["CapacityProviderStrategy"] == [
        {"Base": 1, "CapacityProvider": "team-on-demand", "Weight": 1},
        {"CapacityProvider": "team-spot", "Weight": 3},
    ]
    # Spot is declared: two tasks that may share a Spot-doomed instance get a minimum ECS can drain at once.
    assert ecs_service["DeploymentConfiguration"]["MinimumHealthyPercent"] < 100
    assert service.instance_type.name == "g5.xlarge" and service.capacity_group is None


def test_the_teams_capacity_is_not_the_librarys_so_synth_says_what_it_must_run(synthesized):
    stack, _, _ = synthesized
    warnings = [
        str(entry.data)
        for c in stack.node.find_all()
        for entry in c.node.metadata
        if entry.type == "aws:cdk:warning" and "cluster-capacity-ami" in str(entry.data)
    ]
    assert len(warnings) == 1 and "TeamCapacity's provider 'team-on-demand', 'team-spot'" in warnings[0]


def matches(rule: dict, host: str, path: str) -> bool:
    """An ALB rule's conditions as ALB evaluates them: every condition must match (AND), any of a condition's values
    (OR); host names without regard to case, paths with it; ``*`` and ``?`` as wildcards."""
    for condition in rule["Conditions"]:
        field = condition["Field"]
        values = condition.get("HostHeaderConfig", condition.get("PathPatternConfig", {})).get("Values", [])
        if field == "host-header" and not any(fnmatch.fnmatch(host.lower(), v.lower()) for v in values):
            return False
        if field == "path-pattern" and not any(fnmatch.fnmatchcase(path, v) for v in values):
            return False
    return True


def test_the_rule_on_the_teams_listener_takes_only_the_models_host_and_paths(synthesized):
    _, _, template = synthesized
    (rule,) = resources(template, "AWS::ElasticLoadBalancingV2::ListenerRule")
    assert rule["ListenerArn"] == LISTENER_ARN and rule["Priority"] == 7
    assert {c["Field"] for c in rule["Conditions"]} == {"host-header", "path-pattern"}
    assert matches(rule, HOST, "/ranker/predict") and matches(rule, HOST.upper(), "/ranker/v1/embeddings")
    assert not matches(rule, "other.search.example.com", "/ranker/predict")
    assert not matches(rule, HOST, "/other/predict")
    assert rule["Actions"][0]["Type"] == "forward"


def test_the_teams_listener_reaches_the_tasks(synthesized):
    _, service, template = synthesized
    assert any(
        i["SourceSecurityGroupId"] == "sg-0123456789abcdef0" and i["FromPort"] == service.contract.port
        for i in resources(template, "AWS::EC2::SecurityGroupIngress")
    )


def test_the_teams_model_source_is_read_under_its_prefix(synthesized):
    _, _, template = synthesized
    statements = [s for p in resources(template, "AWS::IAM::Policy") for s in p["PolicyDocument"]["Statement"]]
    reads = [s for s in statements if s["Action"] == "s3:GetObject"]
    assert reads and all("serving/ranker/" in str(s["Resource"]) for s in reads)


def test_a_priority_the_teams_route_shares_with_another_model_on_the_listener_is_refused():
    stack, team = team_stack()
    team_model(stack, team)
    with pytest.raises(ConfigError, match=r"^route\.priority: 7 is already 'ranker'"):
        team_model(stack, team, "search", host="search.example.com")


def test_a_choice_whose_bind_returns_something_else_is_refused_naming_the_key():
    class Sloppy(ServiceCapacity):
        def bind(self, service: Construct):  # pyright: ignore[reportIncompatibleMethodOverride]  # under test
            return "team-gpu"

    class Unfinished(ServiceRoute):
        pass

    stack, team = team_stack()
    with pytest.raises(ConfigError, match=r"^capacity: Sloppy\.bind returned str: return a BoundCapacity"):
        team_model(stack, team, capacity=Sloppy())
    with pytest.raises(NotImplementedError, match=r"Unfinished\.bind: return a BoundRoute"):
        team_model(stack, team, "other", route=Unfinished())


def test_a_route_whose_conditions_pass_albs_five_values_is_refused_at_synth():
    """The bundled server's three path patterns and three host names: six match values, where ALB takes five."""
    stack, team = team_stack()

    @dataclasses.dataclass(frozen=True)
    class ThreeHosts(ServiceRoute):
        def bind(self, service: Construct) -> BoundRoute:
            hosts = ["a.search.example.com", "b.search.example.com", "c.search.example.com"]
            return BoundRoute(team.listener, 8, conditions=(elbv2.ListenerCondition.host_headers(hosts),))

    with pytest.raises(ConfigError, match=r"^route\.conditions: 6 match values .*3 path patterns.*at most 5"):
        team_model(stack, team, route=ThreeHosts())


@pytest.mark.parametrize(
    "conditions, field",
    [
        ((elbv2.ListenerCondition.path_patterns(["/v3/*"]),), "path-pattern"),
        (
            (
                elbv2.ListenerCondition.host_headers(["a.search.example.com"]),
                elbv2.ListenerCondition.host_headers(["b.search.example.com"]),
            ),
            "host-header",
        ),
    ],
)
def test_a_second_condition_of_a_kind_alb_takes_once_is_refused_at_synth(conditions, field):
    stack, team = team_stack()

    @dataclasses.dataclass(frozen=True)
    class Doubled(ServiceRoute):
        def bind(self, service: Construct) -> BoundRoute:
            return BoundRoute(team.listener, 8, conditions=conditions)

    with pytest.raises(ConfigError, match=rf"^route\.conditions: {field}: an ALB rule takes one condition of each"):
        team_model(stack, team, route=Doubled())


def test_a_pool_on_the_teams_model_source_reads_the_pools_folder_of_its_bucket():
    stack, team = team_stack()
    ModelPool(
        stack,
        "Pool",
        model=ModelProps(name="tenants", version="1"),
        environment="team",
        capacity=TeamCapacity(team.cluster),
        model_store=TeamArtifacts(s3.Bucket.from_bucket_name(stack, "Artifacts", "team-artifacts")),
        route=HostRoute(team.listener, HOST, 9),
        logs=ServiceLogs(kms.Key.from_key_arn(stack, "Key", KEY_ARN)),
        access=ServiceAccess(allow_unauthenticated=True),
    )
    template = dict(Template.from_stack(stack).to_json())
    statements = [s for p in resources(template, "AWS::IAM::Policy") for s in p["PolicyDocument"]["Statement"]]
    reads = [str(s["Resource"]) for s in statements if s["Action"] == "s3:GetObject"]
    assert reads and all("pools/tenants/" in r and "serving" not in r for r in reads)
