"""Issue 56: an environment's identity (name, name prefix, topic, logs key, log retention) is passed once, as an
``InferenceEnvironment``, to every construct that belongs to it; 0.2's keywords build the same template, and a keyword
given beside the environment is refused rather than one of the two silently winning."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from gpu_inference_constructs import (
    ConfigError,
    GpuCapacity,
    GpuCapacityProps,
    InferenceEnvironment,
    InferenceLoadBalancer,
    InferenceMonitoring,
    LoadBalancerProps,
    ModelAlarms,
    ModelBucket,
    ModelProps,
    ModelService,
    MonitoringProps,
    ResultCache,
    ServiceLogs,
    WarmPoolProps,
)

ACCOUNT, REGION = "123456789012", "eu-west-1"
KEY_ARN = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/11111111-2222-4333-8444-555555555555"
TOPIC_ARN = f"arn:aws:sns:{REGION}:{ACCOUNT}:search-pager"


class Team:
    """A team's stack with its imported parts: VPC, bucket, topic, logs key; our capacity and load balancer."""

    def __init__(self, name: str, environment: bool = True) -> None:
        """``environment``: the capacity takes the environment (as the services do), else 0.2's topic and logs_key."""
        self.stack = cdk.Stack(cdk.App(), name, env=cdk.Environment(account=ACCOUNT, region=REGION))
        stack = self.stack
        self.vpc = ec2.Vpc.from_vpc_attributes(
            stack,
            "Vpc",
            vpc_id="vpc-0a1b2c3d4e5f67890",
            vpc_cidr_block="10.20.0.0/16",
            availability_zones=["eu-west-1a", "eu-west-1b"],
            private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"],
        )
        self.bucket = s3.Bucket.from_bucket_name(stack, "Models", f"search-models-{ACCOUNT}")
        self.topic = sns.Topic.from_topic_arn(stack, "Pager", TOPIC_ARN)
        self.key = kms.Key.from_key_arn(stack, "LogsKey", KEY_ARN)
        identity: dict[str, Any] = (
            {"environment": self.environment()} if environment else {"topic": self.topic, "logs_key": self.key}
        )
        self.capacity = GpuCapacity(
            stack, "Gpus", vpc=self.vpc, props=GpuCapacityProps(instance_types=("g5.xlarge",)), **identity
        )
        self.alb = InferenceLoadBalancer(
            stack,
            "Alb",
            vpc=self.vpc,
            access_logs_bucket=self.bucket,
            props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
        )

    def environment(self, **changes) -> InferenceEnvironment:
        values: dict[str, Any] = dict(name="search", topic=self.topic, logs_key=self.key, name_prefix="search-team")
        return InferenceEnvironment(**{**values, "log_retention_days": 30, **changes})

    def service(self, construct_id: str = "Embedder", name: str = "embedder", **identity) -> ModelService:
        return ModelService(
            self.stack,
            construct_id,
            model=ModelProps(name=name, version="v3"),
            capacity=self.capacity,
            model_source=ModelBucket(self.bucket),
            route=self.alb,
            **identity,
        )

    def monitoring(self, service: ModelService, **identity) -> InferenceMonitoring:
        return InferenceMonitoring(
            self.stack,
            "Monitoring",
            model_names=[service.model.name],
            load_balancer=self.alb,
            capacity=self.capacity,
            props=MonitoringProps(),
            **identity,
        )


def template_with_the_0_2_keywords() -> Any:
    team = Team("Search", environment=False)
    with pytest.warns(DeprecationWarning, match="renamed environment="):
        service = team.service(
            environment_name="search", logs=ServiceLogs(team.key, retention_days=30, name_prefix="search-team")
        )
    ModelAlarms(
        team.stack, "Alarms", environment_name="search", service=service, topic=team.topic, props=MonitoringProps()
    )
    team.monitoring(service, environment_name="search", topic=team.topic, name_prefix="search-team", logs_key=team.key)
    return Template.from_stack(team.stack).to_json()


def template_with_the_environment() -> tuple[Any, ModelService, InferenceEnvironment]:
    team = Team("Search")
    environment = team.environment()
    service = team.service(environment=environment)
    ModelAlarms(team.stack, "Alarms", service=service, props=MonitoringProps())
    team.monitoring(service, environment=environment)
    return Template.from_stack(team.stack).to_json(), service, environment


@pytest.fixture(scope="module")
def both() -> tuple[dict, dict, ModelService, InferenceEnvironment]:
    once, service, environment = template_with_the_environment()
    return template_with_the_0_2_keywords(), once, service, environment


TASK_STARTS_LOGS = "MonitoringTaskStartsLogs5F13D460"


def test_the_environment_given_once_builds_the_template_the_0_2_keywords_build(both):
    """But for one fix: 0.2's InferenceMonitoring had no retention keyword, so its task-start function kept its logs
    90 days whatever the environment's retention; the environment's reaches it now."""
    legacy, once, _, _ = both
    retention = legacy["Resources"][TASK_STARTS_LOGS]["Properties"]
    assert retention["RetentionInDays"] == 90
    retention["RetentionInDays"] = 30
    assert json.dumps(once, sort_keys=True) == json.dumps(legacy, sort_keys=True)


def test_the_environments_retention_reaches_every_log_group_it_makes_the_functions_too(both):
    _, once, _, _ = both
    groups = {k: r["Properties"] for k, r in once["Resources"].items() if r["Type"] == "AWS::Logs::LogGroup"}
    assert TASK_STARTS_LOGS in groups and len(groups) >= 2
    assert {k: g["RetentionInDays"] for k, g in groups.items()} == dict.fromkeys(groups, 30)
    team = Team("Warm")
    warm = GpuCapacity(
        team.stack,
        "WarmGpus",
        vpc=team.vpc,
        props=GpuCapacityProps(instance_types=("g5.xlarge",), on_demand_base_capacity=1, warm_pool=WarmPoolProps()),
        environment=team.environment(log_retention_days=14),
    )
    assert warm.warm_pool_launches is not None
    (group,) = [
        r["Properties"]
        for k, r in Template.from_stack(team.stack).to_json()["Resources"].items()
        if r["Type"] == "AWS::Logs::LogGroup" and k.startswith("WarmGpus")
    ]
    assert group["RetentionInDays"] == 14 and group["KmsKeyId"] == KEY_ARN


def test_each_part_of_the_identity_reaches_what_it_names(both):
    """The name, prefix and retention name and keep the log group; the key encrypts it; the topic gets the alarms."""
    _, once, service, environment = both
    assert service.environment is environment and service.environment_name == "search"
    assert service.name_prefix == "search-team"
    (group,) = [
        r
        for r in once["Resources"].values()
        if r["Type"] == "AWS::Logs::LogGroup" and r["Properties"].get("LogGroupName") == "/search-team/search/embedder"
    ]
    assert group["Properties"]["RetentionInDays"] == 30 and group["Properties"]["KmsKeyId"] == KEY_ARN
    alarms = [r["Properties"] for r in once["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    paging = [a for a in alarms if a.get("AlarmName", "").startswith("search-team-search-embedder-")]
    assert paging and all(a["AlarmActions"] == [TOPIC_ARN] for a in paging)


def test_a_keyword_beside_the_environment_is_refused_naming_it():
    team = Team("Twice")
    environment = team.environment()
    with pytest.raises(ConfigError) as raised:
        team.service("A", "alpha", environment=environment, environment_name="search")
    assert raised.value.key == "environment_name" and "environment=" in raised.value.detail
    with pytest.raises(ConfigError) as raised:
        team.service("D", "delta", environment=environment.name, logs=ServiceLogs())
    assert raised.value.key == "environment" and "logs=ServiceLogs(key)" in raised.value.detail
    with pytest.raises(ConfigError) as raised:
        team.service("B", "beta", environment=environment, logs=ServiceLogs(team.key))
    assert raised.value.key == "logs.key"
    service = team.service("C", "gamma", environment=environment, logs=ServiceLogs())
    with pytest.raises(ConfigError) as raised:
        ModelAlarms(team.stack, "Alarms", service=service, topic=team.topic, props=MonitoringProps())
    assert raised.value.key == "topic"
    with pytest.raises(ConfigError) as raised:
        team.monitoring(service, environment=environment, logs_key=team.key)
    assert raised.value.key == "logs_key"
    with pytest.raises(ConfigError) as raised:
        GpuCapacity(team.stack, "More", vpc=team.vpc, environment=environment, topic=team.topic)
    assert raised.value.key == "topic"


def test_without_the_environment_the_missing_part_is_named():
    team = Team("Missing")
    with pytest.raises(ConfigError) as raised:
        team.service("A", "alpha", environment="search", logs=ServiceLogs())
    assert raised.value.key == "environment" and "InferenceEnvironment" in raised.value.detail
    with pytest.raises(ConfigError) as raised:
        team.service("B", "beta", logs=ServiceLogs(team.key))
    assert raised.value.key == "environment" and "name as environment=" in raised.value.detail
    service = team.service("C", "gamma", environment="search", logs=ServiceLogs(team.key))
    with pytest.raises(ConfigError) as raised:
        ModelAlarms(team.stack, "Alarms", service=service, environment_name="search", props=MonitoringProps())
    assert raised.value.key == "environment" and "topic=" in raised.value.detail


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"name": "no spaces"}, "environment.name"),
        ({"name_prefix": "Team"}, "name_prefix"),
        ({"log_retention_days": 31}, "environment.log_retention_days"),
        ({"topic": TOPIC_ARN}, "environment.topic"),
        ({"logs_key": KEY_ARN}, "environment.logs_key"),
    ],
)
def test_the_environment_checks_its_own_parts(changes, key):
    stack = cdk.Stack()
    values: dict[str, Any] = dict(
        name="search",
        topic=sns.Topic.from_topic_arn(stack, "Pager", TOPIC_ARN),
        logs_key=kms.Key.from_key_arn(stack, "LogsKey", KEY_ARN),
    )
    assert InferenceEnvironment(**values).log_retention_days == 90
    with pytest.raises(ConfigError) as raised:
        InferenceEnvironment(**{**values, **changes})
    assert raised.value.key == key


def result_cache(team: Team, construct_id: str = "Results", **identity) -> ResultCache:
    subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
    return ResultCache(team.stack, construct_id, vpc=team.vpc, subnets=subnets, **identity)


def test_a_result_cache_takes_the_environment_once_and_builds_what_its_keywords_build():
    keywords = Team("Cache")
    cache = result_cache(keywords, name="search-results", topic=keywords.topic)
    cache.add_connection_failure_alarm(keywords.stack, "search", keywords.topic)
    once = Team("Cache")
    environment = once.environment()
    from_environment = result_cache(once, environment=environment)
    from_environment.add_connection_failure_alarm(once.stack)
    templates = [Template.from_stack(team.stack).to_json() for team in (keywords, once)]
    assert json.dumps(templates[0], sort_keys=True) == json.dumps(templates[1], sort_keys=True)
    assert from_environment.inference_environment is environment and from_environment.cache_name == "search-results"
    alarms = [r["Properties"] for r in templates[1]["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    failures = next(a for a in alarms if "Metrics" in a)
    assert failures["Metrics"][0]["Expression"].endswith("WHERE Environment = 'search'")
    assert all(a["AlarmActions"] == [TOPIC_ARN] for a in alarms)


def test_a_result_caches_identity_beside_its_environment_or_missing_without_one_is_refused_by_key():
    team = Team("CacheMistakes")
    with pytest.raises(ConfigError, match=r"^topic: .*beside environment="):
        result_cache(team, environment=team.environment(), topic=team.topic)
    with pytest.raises(ConfigError, match=r"^environment: .*topic="):
        result_cache(team, "NoTopic", name="search-results")
    with pytest.raises(ConfigError, match=r"^name: 'Prod_EU-results'.*name="):
        result_cache(team, "BadName", environment=team.environment(name="Prod_EU"))
    cache = result_cache(team, "Given", environment=team.environment())
    with pytest.raises(ConfigError, match=r"^environment_name: .*beside environment="):
        cache.add_connection_failure_alarm(team.stack, "search")
    bare = result_cache(team, "Bare", name="bare-results", topic=team.topic)
    with pytest.raises(ConfigError, match=r"^environment: .*environment_name="):
        bare.add_connection_failure_alarm(team.stack)
