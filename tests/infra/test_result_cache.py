"""The shared result cache (staging turns it on): encrypted with its own rotated key that ElastiCache may use,
IAM authentication only (the default user off), reachable only from the model tasks that use it (through the one
client security group they carry), each such task told where it is and allowed to connect, alarms on the topic (the
servers' failed calls as one Metrics Insights query over what they emit), its cost on the dashboard; the access
string the tasks' user gets is proven against a real Valkey server. A team's own VPC, cluster and topic attach the
same way. Many cache users: tests/infra/test_result_cache_scale.py."""

from __future__ import annotations

import asyncio
import json
import re
from typing import cast

import aws_cdk as cdk
import pytest
import valkey
import valkey.asyncio
import valkey.exceptions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from gpu_inference_constructs import (
    BundledServer,
    ClusterCapacity,
    GpuCapacity,
    GpuCapacityProps,
    InferenceLoadBalancer,
    ListenerRoute,
    LoadBalancerProps,
    ModelProps,
    ModelService,
    ModelStore,
    ModelStoreProps,
    ResultCache,
    ServiceAccess,
    ServiceLogs,
)
from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.shared.cdk_interfaces import as_role, as_topic
from gpu_inference_constructs.store.result_cache import ACCESS_STRING, ModelCacheProps, ResultCacheProps
from stacks.config import load_environment
from tests.infra.aws_policies import Policy, TemplateWorld, principal
from tests.infra.security_groups import inbound_rule_count, may_connect, rules, serverless_cache_groups, service_groups
from tests.scenarios import scenario_environment
from tests.server.valkey_server import ValkeyServer

ENV = "staging"
CACHED, UNCACHED = ("minilm", "sentiment"), "llama-13b"


@pytest.fixture(scope="module")
def world(synthesized) -> TemplateWorld:
    config = synthesized.stages[ENV].config
    return TemplateWorld(synthesized.inference_template(ENV), config.account, config.region)


def one(world: TemplateWorld, kind: str) -> tuple[str, dict]:
    (item,) = world.of_type(kind).items()
    return item


def task_role(world: TemplateWorld, model: str) -> str:
    (role,) = [k for k in world.of_type("AWS::IAM::Role") if k.startswith(f"Model{model.replace('-', '')}TaskRole")]
    return role


def container_environment(world: TemplateWorld, model: str) -> dict:
    (definition,) = [
        r
        for k, r in world.of_type("AWS::ECS::TaskDefinition").items()
        if k.startswith(f"Model{model.replace('-', '')}")
    ]
    server = definition["Properties"]["ContainerDefinitions"][0]
    return {e["Name"]: e["Value"] for e in server.get("Environment", [])}


def test_only_staging_has_a_cache(synthesized):
    for env in synthesized.stages:
        caches = TemplateWorld(synthesized.inference_template(env), "1", "r").of_type(
            "AWS::ElastiCache::ServerlessCache"
        )
        assert len(caches) == (env == ENV), env


def test_the_cache_is_valkey_in_private_subnets_encrypted_with_a_rotated_key(world, synthesized):
    _, cache = one(world, "AWS::ElastiCache::ServerlessCache")
    p = cache["Properties"]
    assert (p["Engine"], p["MajorEngineVersion"]) == ("valkey", "8")
    key_id = p["KmsKeyId"]["Ref"]
    assert world.resources[key_id]["Properties"]["EnableKeyRotation"] is True
    outputs = [subnet["Fn::GetStackOutput"]["OutputName"] for subnet in p["SubnetIds"]]
    assert len(outputs) >= 2 and all("VpcprivateSubnet" in name for name in outputs), outputs
    network = synthesized.template(ENV, "Network")["Resources"]
    private = [r for k, r in network.items() if r["Type"] == "AWS::EC2::Subnet" and "privateSubnet" in k]
    assert private and not any(r["Properties"].get("MapPublicIpOnLaunch") for r in private)
    limits = p["CacheUsageLimits"]
    assert limits["DataStorage"] == {"Maximum": 5, "Unit": "GB"} and limits["ECPUPerSecond"] == {"Maximum": 50000}


def test_elasticache_may_use_the_key(world):
    """ElastiCache encrypts with grants made by the principal that creates the cache (the deployment role): the
    key policy must leave that to IAM, which an administrator's policy then allows."""
    _, cache = one(world, "AWS::ElastiCache::ServerlessCache")
    key_id = cache["Properties"]["KmsKeyId"]["Ref"]
    deployer = principal(
        f"arn:aws:iam::{world.account}:role/cdk-deploy",
        [
            Policy(
                "admin",
                "admin",
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]},
            )
        ],
    )
    via = {"kms:ViaService": f"elasticache.{world.region}.amazonaws.com"}
    for action in ("kms:CreateGrant", "kms:DescribeKey", "kms:Decrypt", "kms:GenerateDataKey"):
        assert world.node_may(deployer, action, world.arn(key_id), via, resource_id=key_id), action
    outsider = principal("arn:aws:iam::999999999999:role/outsider", [])
    assert not world.node_may(outsider, "kms:Decrypt", world.arn(key_id), via, resource_id=key_id)


def test_authentication_is_iam_and_the_default_user_is_off(world):
    users = {r["Properties"]["UserName"]: r["Properties"] for r in world.of_type("AWS::ElastiCache::User").values()}
    assert set(users) == {"default", f"{ENV}-results-tasks"}
    assert users["default"]["AccessString"].startswith("off ")
    tasks = users[f"{ENV}-results-tasks"]
    assert tasks["AuthenticationMode"] == {"Type": "iam"} and tasks["UserId"] == tasks["UserName"]
    _, group = one(world, "AWS::ElastiCache::UserGroup")
    _, cache = one(world, "AWS::ElastiCache::ServerlessCache")
    assert cache["Properties"]["UserGroupId"] == {"Ref": one(world, "AWS::ElastiCache::UserGroup")[0]}
    assert len(group["Properties"]["UserIds"]) == 2


def model_service(world: TemplateWorld, model: str) -> str:
    (service,) = [
        k for k in world.of_type("AWS::ECS::Service") if k.startswith(f"Model{model.replace('-', '')}Service")
    ]
    return service


def cache_path(world: TemplateWorld) -> tuple[list[str], str]:
    """The cache's interface groups and the one client group its own group admits."""
    cache_id, _ = one(world, "AWS::ElastiCache::ServerlessCache")
    (cache_group,) = serverless_cache_groups(world.resources, cache_id)
    (client,) = [
        k
        for k, r in world.of_type("AWS::EC2::SecurityGroup").items()
        if r["Properties"]["GroupDescription"].startswith(f"{ENV}-results result cache clients")
    ]
    return [cache_group], client


def test_only_the_cached_models_tasks_reach_the_cache(world):
    """What EC2 decides (tests/infra/security_groups.py): each cached model's task interface carries the cache's client
    group, which the cache's group admits on 6379-6380 (its one inbound rule); the vLLM model's tasks, the load
    balancer and the client group towards anything else are refused."""
    cache_groups, client = cache_path(world)
    (cache_group,) = cache_groups
    assert inbound_rule_count(world.resources, cache_group) == 1
    (rule,) = rules(world.resources)[cache_group]["ingress"]
    assert rule["SourceSecurityGroupId"] == {"Fn::GetAtt": [client, "GroupId"]}
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 6379, 6380)
    assert (
        world.resources[cache_group]["Properties"]["SecurityGroupEgress"][0]["CidrIp"] == "255.255.255.255/32"
    )  # CDK's "no egress"
    for model in CACHED:
        groups = service_groups(world.resources, model_service(world, model))
        assert client in groups and len(groups) == 2, (model, groups)  # its own group and the client group
        for port in (6379, 6380):  # the endpoint and the reader endpoint
            assert may_connect(world.resources, groups, cache_groups, port), (model, port)
        assert not may_connect(world.resources, [g for g in groups if g != client], cache_groups, 6379), model
    uncached = service_groups(world.resources, model_service(world, UNCACHED))
    assert client not in uncached and not may_connect(world.resources, uncached, cache_groups, 6379)
    balancer = world.only("AWS::EC2::SecurityGroup", "LoadBalancerSecurityGroup")
    assert not may_connect(world.resources, [balancer], cache_groups, 6379)
    # The client group adds nothing but the cache: no inbound rule (the load balancer's reaches the tasks' own group),
    # and no egress elsewhere (EC2 would give a group created without an inline egress rule its allow-all default).
    assert inbound_rule_count(world.resources, client) == 0
    assert not may_connect(world.resources, [client], [], 443, target_ip="52.94.0.10")
    assert not may_connect(world.resources, [client], [], 6379, target_ip="10.20.0.10")


def test_the_tasks_keep_what_their_own_group_gives_them(world, synthesized):
    """The client group is added beside the task's own group, not instead: the load balancer (its egress is to the
    VPC's CIDR) still reaches the server's port and the task still reaches HTTPS (VPC endpoints, S3)."""
    balancer = world.only("AWS::EC2::SecurityGroup", "LoadBalancerSecurityGroup")
    (to_vpc,) = {json.dumps(r["CidrIp"], sort_keys=True) for r in rules(world.resources)[balancer]["egress"]}
    cidrs = {to_vpc: synthesized.stages[ENV].config.network.vpc_cidr}
    for model in CACHED:
        groups = service_groups(world.resources, model_service(world, model))
        assert may_connect(world.resources, [balancer], groups, 8080, target_ip="10.20.1.5", cidrs=cidrs), model
        assert not may_connect(world.resources, [balancer], groups, 8080, target_ip="10.99.1.5", cidrs=cidrs), model
        assert may_connect(world.resources, groups, [], 443, target_ip="52.94.0.10"), model


def test_each_cached_model_is_told_where_the_cache_is_and_may_connect(world):
    cache_id, _ = one(world, "AWS::ElastiCache::ServerlessCache")
    cache_arn = world.resolve({"Fn::GetAtt": [cache_id, "ARN"]})  # a ServerlessCache's attribute is ARN, not Arn
    user_id = [
        k for k, r in world.of_type("AWS::ElastiCache::User").items() if r["Properties"]["UserName"] != "default"
    ][0]
    for model in CACHED:
        env = container_environment(world, model)
        assert env["SHARED_CACHE_IAM_USER"] == f"{ENV}-results-tasks" and env["SHARED_CACHE_NAME"] == f"{ENV}-results"
        assert (env["SHARED_CACHE_TLS"], env["SHARED_CACHE_CLUSTER"]) == ("true", "true")
        role = task_role(world, model)
        assert world.role_may(role, "elasticache:Connect", cache_arn, {}), model
        assert world.role_may(role, "elasticache:Connect", world.arn(user_id), {}), model
        assert not world.role_may(role, "elasticache:DeleteServerlessCache", cache_arn, {})
    assert container_environment(world, "minilm")["SHARED_CACHE_TTL_S"] == "86400"
    assert container_environment(world, "minilm")["SHARED_CACHE_MAX_VALUE_BYTES"] == "16384"
    assert container_environment(world, "sentiment")["SHARED_CACHE_TTL_S"] == "3600"
    assert not any(k.startswith("SHARED_CACHE") for k in container_environment(world, UNCACHED))
    assert not world.role_may(task_role(world, UNCACHED), "elasticache:Connect", cache_arn, {})


def test_alarms_reach_the_topic_and_the_cost_is_on_the_dashboard(world):
    topic = world.only("AWS::SNS::Topic")
    alarms = {
        r["Properties"].get("MetricName") or "math": r["Properties"]
        for r in world.of_type("AWS::CloudWatch::Alarm").values()
        if "cache" in r["Properties"].get("AlarmDescription", "").lower()
    }
    assert {"Evictions", "BytesUsedForCache", "SuccessfulReadRequestLatency", "ThrottledCmds", "math"} <= set(alarms)
    for alarm in alarms.values():
        assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": topic}]
    _, dashboard = one(world, "AWS::CloudWatch::Dashboard")
    body = str(dashboard["Properties"]["DashboardBody"])
    assert "Result cache cost" in body and "ElastiCacheProcessingUnits" in body


QUERY = re.compile(r"""^SELECT SUM\((\w+)\) FROM SCHEMA\("([^"]+)", (\w+), (\w+)\) WHERE (\w+) = '([^']*)'$""")


def connection_alarm(world: TemplateWorld) -> tuple[str, dict]:
    (item,) = [
        (k, r["Properties"])
        for k, r in world.of_type("AWS::CloudWatch::Alarm").items()
        if k.startswith("ResultCacheConnectionFailuresAlarm")
    ]
    return item


def test_the_servers_failed_calls_alarm_is_one_query_over_exactly_what_they_emit(world):
    """One Metrics Insights query, however many models use the cache (a metric-math alarm takes at most 10 metrics):
    its metric, namespace, dimension set and environment are those of the EMF document the server writes (its own
    emf.document) with the DEPLOYMENT_ENV each cached model's task is given, so CloudWatch matches it at run time."""
    from inference_server import emf
    from inference_server import facts as server_names

    _, alarm = connection_alarm(world)
    (query,) = alarm["Metrics"]
    assert "MetricStat" not in query and query["ReturnData"] is True
    parsed = QUERY.match(query["Expression"])
    assert parsed is not None, query["Expression"]
    metric, namespace, *dimensions, where_key, where_value = parsed.groups()
    for model in CACHED:
        environment = container_environment(world, model)["DEPLOYMENT_ENV"]
        document = emf.document(environment, model, {server_names.SHARED_CACHE_ERRORS: 3})
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == namespace
        (dimension_set,) = directive["Dimensions"]
        assert sorted(dimension_set) == sorted(dimensions), "SCHEMA matches only metrics with exactly these dimensions"
        assert metric in [d["Name"] for d in directive["Metrics"]] and document[metric] == 3
        assert "StorageResolution" not in directive["Metrics"][0], (
            "Metrics Insights reads high-resolution data per minute"
        )
        assert document[where_key] == where_value == ENV, model


def test_the_failed_calls_alarm_fits_metrics_insights_and_is_quiet_without_data(world):
    """Metrics Insights alarms need a period and evaluate the last 3 hours only; no data (no model attached, or every
    call succeeding) is not an alarm."""
    _, alarm = connection_alarm(world)
    (query,) = alarm["Metrics"]
    assert query["Period"] == 60 and alarm["EvaluationPeriods"] * query["Period"] <= 3 * 3600
    assert alarm["TreatMissingData"] == "notBreaching"
    assert (alarm["Threshold"], alarm["EvaluationPeriods"], alarm["ComparisonOperator"]) == (
        ResultCacheProps().errors_alarm_per_minute,
        3,
        "GreaterThanOrEqualToThreshold",
    )


def test_the_failed_calls_alarm_can_publish_to_the_encrypted_topic(world):
    """Both ways (ALARM and OK), and SNS and its key let CloudWatch publish for this alarm (not for another
    account's)."""
    topic = world.only("AWS::SNS::Topic")
    key = world.resources[topic]["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    alarm_id, alarm = connection_alarm(world)
    assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": topic}] and alarm.get("ActionsEnabled", True)
    source = {"aws:SourceAccount": world.account, "aws:SourceArn": world.arn(alarm_id)}
    assert world.service_may(
        "cloudwatch.amazonaws.com", "sns:Publish", topic, world.ref(topic), {"aws:SecureTransport": "true", **source}
    )
    assert world.service_may(
        "cloudwatch.amazonaws.com",
        "kms:GenerateDataKey",
        key,
        world.arn(key),
        {**source, "kms:EncryptionContext:aws:sns:topicArn": world.ref(topic)},
    )
    theirs = {
        "aws:SecureTransport": "true",
        "aws:SourceAccount": "999999999999",
        "aws:SourceArn": f"arn:aws:cloudwatch:{world.region}:999999999999:alarm:theirs",
    }
    assert not world.service_may("cloudwatch.amazonaws.com", "sns:Publish", topic, world.ref(topic), theirs)


@pytest.mark.parametrize(
    "change, key, fix",
    [
        (
            lambda e: e["models"][0].update(shared_cache={"ttl_seconds": 60}) or e.pop("cache"),
            r"models\[0\]\.shared_cache",
            "add a `cache` block",
        ),
        (
            lambda e: e["models"][2].update(shared_cache={"enabled": True}),
            r"models\[2\]\.shared_cache",
            "remove it",
        ),  # vLLM has no shared cache
        (
            lambda e: e["models"][0].update(shared_cache={"ttl_seconds": 0}),
            r"models\[0\]\.shared_cache\.ttl_seconds",
            "2592000",
        ),
        (lambda e: e["cache"].update(max_data_storage_gb=0), r"cache\.max_data_storage_gb", "1-5000"),
        (lambda e: e["cache"].update(major_engine_version="6"), r"cache\.major_engine_version", "'7' or '8'"),
    ],
)
def test_bad_cache_configuration_names_the_key(change, key, fix):

    environment = scenario_environment(ENV)
    change(environment)
    with pytest.raises(ConfigError, match=rf"^environment '{ENV}': {key}: .*{fix}"):
        load_environment(ENV, environment)


def test_props_defaults():
    assert ModelCacheProps() == ModelCacheProps(enabled=None, ttl_seconds=3600, max_value_bytes=65536)
    assert ResultCacheProps().snapshot_retention_days == 0


def test_the_tasks_access_string_runs_the_servers_client_and_nothing_else(tmp_path):
    """The user's ACL in a real Valkey: the server's lookups and stores work, other keys and commands are refused."""
    from inference_server.front.shared_cache import SharedCache, SharedCacheConfig

    server = ValkeyServer(tmp_path).start()
    try:
        admin = server.client()
        admin.execute_command("ACL", "SETUSER", "tasks", "reset", *ACCESS_STRING.split(), ">secret-token")
        admin.set("other", "x")
        config = SharedCacheConfig(host="127.0.0.1", port=server.port, tls=False)

        async def run():
            import inference_server.front.shared_cache as sc

            def connect_as_tasks(c):
                return valkey.asyncio.Valkey(
                    host=c.host, port=c.port, username="tasks", password="secret-token", socket_timeout=2
                )

            cache = SharedCache(config, client_factory=connect_as_tasks)
            assert await cache.connected()
            cache.store_many([("ic:a", {"v": 1})])
            await cache.flush()
            found = await cache.get_many(["ic:a", "ic:b"])
            await cache.close()
            assert sc.CLOSED == cache.circuit.state
            return found

        assert asyncio.run(run()) == [{"v": 1}, None]
        tasks = valkey.Valkey(host="127.0.0.1", port=server.port, username="tasks", password="secret-token")
        for refused in (
            lambda: tasks.get("other"),
            lambda: tasks.flushall(),
            lambda: tasks.keys("*"),
            lambda: tasks.delete("ic:a"),
        ):
            with pytest.raises(valkey.exceptions.NoPermissionError):
                refused()
    finally:
        server.stop()


# --- The library on its own: a team's imported VPC, cluster and topic --------------------------------------------

ACCOUNT = "123456789012"


def team_app(services: int = 1):
    """A team's stack in eu-west-1: its own VPC and ECS cluster (imported), its own pager topic and logs key, GPU
    capacity on that cluster, the cache, and ``services`` bundled-server models attached to it."""
    app = cdk.App()
    stack = cdk.Stack(app, "Search", env=cdk.Environment(account=ACCOUNT, region="eu-west-1"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0a1b2c3d4e5f67890",
        vpc_cidr_block="10.20.0.0/16",
        availability_zones=["eu-west-1a", "eu-west-1b"],
        private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"],
    )
    cluster = ecs.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="search-platform", vpc=vpc)
    topic = sns.Topic.from_topic_arn(stack, "Pager", f"arn:aws:sns:eu-west-1:{ACCOUNT}:search-pager")
    logs_key = kms.Key.from_key_arn(
        stack, "LogsKey", f"arn:aws:kms:eu-west-1:{ACCOUNT}:key/11111111-2222-4333-8444-555555555555"
    )
    gpus = GpuCapacity(
        stack,
        "Gpus",
        vpc=vpc,
        cluster=cluster,
        topic=topic,
        props=GpuCapacityProps(instance_types=("g5.xlarge", "g6.xlarge"), max_capacity=16),
    )
    store = ModelStore(stack, "Models", props=ModelStoreProps())
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=store.access_logs_bucket,
        props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    cache = ResultCache(
        stack,
        "Cache",
        name="search-results",
        vpc=vpc,
        subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
        topic=topic,
    )
    cache.add_connection_failure_alarm(stack, "search", topic)
    models = []
    for index in range(services):
        model = ModelService(
            stack,
            f"Embedder{index}",
            model=ModelProps(name=f"embedder-{index}", version="v3"),
            server=BundledServer(
                image=ecs.ContainerImage.from_registry(f"{ACCOUNT}.dkr.ecr.eu-west-1.amazonaws.com/search/server:1.4")
            ),
            capacity=gpus,
            model_source=store,
            route=alb,
            logs=ServiceLogs(logs_key),
            environment="search",
        )
        model.use_cache(cache)  # the one step (issue 43)
        models.append(model)
    return app, stack, cache, models, vpc


def logical_id(stack: cdk.Stack, resource: Construct) -> str:
    return stack.get_logical_id(cast(cdk.CfnElement, resource.node.default_child))


def test_a_teams_imported_vpc_and_cluster_reach_the_cache_through_the_client_group():
    app, stack, cache, models, _ = team_app(services=2)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    template = app.synth().get_stack_by_name(stack.stack_name).template
    resources = template["Resources"]
    (cache_id,) = [k for k, r in resources.items() if r["Type"] == "AWS::ElastiCache::ServerlessCache"]
    cache_groups = serverless_cache_groups(resources, cache_id)
    client = logical_id(stack, cache.client_security_group)
    assert inbound_rule_count(resources, cache_groups[0]) == 1
    for model in models:
        service = logical_id(stack, model.service)
        groups = service_groups(resources, service)
        assert groups == [logical_id(stack, model.security_group), client]
        assert may_connect(resources, groups, cache_groups, 6379)
    # The subnets are the team's: the cache sits in the ones it named.
    assert resources[cache_id]["Properties"]["SubnetIds"] == ["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"]
    alarm = next(r["Properties"] for k, r in resources.items() if k.startswith("ResultCacheConnectionFailuresAlarm"))
    assert alarm["Metrics"][0]["Expression"].endswith("WHERE Environment = 'search'")
    assert alarm["AlarmActions"] == [f"arn:aws:sns:eu-west-1:{ACCOUNT}:search-pager"]


def test_attaching_twice_adds_the_client_group_once_and_a_second_cache_is_refused():
    app, stack, cache, (model,), vpc = team_app()
    cache.attach(container=model.container, task_role=as_role(model.task_role), service=model.service)
    other = ResultCache(
        stack,
        "Other",
        name="other-results",
        vpc=vpc,
        subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
        topic=sns.Topic.from_topic_arn(stack, "OtherPager", f"arn:aws:sns:eu-west-1:{ACCOUNT}:other"),
    )
    with pytest.raises(ConfigError, match=r"^service: .*another ResultCache.*one cache"):
        other.attach(container=model.container, task_role=as_role(model.task_role), service=model.service)
    template = app.synth().get_stack_by_name(stack.stack_name).template
    service = template["Resources"][logical_id(stack, model.service)]
    groups = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]["SecurityGroups"]
    assert len(groups) == 2


def test_a_service_whose_tasks_have_no_interface_of_their_own_is_refused_naming_the_fix():
    app, stack, cache, _, vpc = team_app(services=0)
    definition = ecs.Ec2TaskDefinition(stack, "Bridge", network_mode=ecs.NetworkMode.BRIDGE)
    container = definition.add_container(
        "app",
        image=ecs.ContainerImage.from_registry("public.ecr.aws/docker/library/busybox:1.37"),
        memory_limit_mib=256,
    )
    cluster = ecs.Cluster.from_cluster_attributes(stack, "BridgeCluster", cluster_name="search-platform", vpc=vpc)
    service = ecs.Ec2Service(stack, "BridgeService", cluster=cluster, task_definition=definition)
    with pytest.raises(ConfigError, match=r"^service: .*awsvpc.*client_security_group"):
        cache.attach(container=container, task_role=definition.task_role, service=service)


def test_a_model_told_to_use_the_cache_that_none_connects_fails_synth_naming_use_cache():
    """Issue 43: shared_cache.enabled true and no ResultCache connected synthesized, and the tasks never learned of a
    cache. Now synth fails naming the construct to add and the call."""
    from gpu_inference_constructs import BundledServerProps
    from gpu_inference_constructs.store.result_cache import ModelCacheProps

    app, stack, cache, _, _ = team_app(services=0)
    store = ModelStore(stack, "Models2", props=ModelStoreProps())
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "V2", vpc_id="vpc-0a1b2c3d4e5f67891", availability_zones=["eu-west-1a"], private_subnet_ids=["subnet-1"]
    )
    cluster = ecs.Cluster.from_cluster_attributes(stack, "C2", cluster_name="search-platform", vpc=vpc)
    listener = elbv2.ApplicationListener.from_application_listener_attributes(
        stack,
        "L2",
        listener_arn=f"arn:aws:elasticloadbalancing:eu-west-1:{ACCOUNT}:listener/app/x/0123456789abcdef/0123456789abcdef",
        security_group=ec2.SecurityGroup.from_security_group_id(stack, "S2", "sg-0123456789abcdef1"),
    )
    server = BundledServer(
        props=BundledServerProps(shared_cache=ModelCacheProps(enabled=True)),
        image=ecs.ContainerImage.from_registry(f"{ACCOUNT}.dkr.ecr.eu-west-1.amazonaws.com/search/server:1.4"),
    )
    model = ModelService(
        stack,
        "Cached",
        model=ModelProps(name="cached", version="1"),
        server=server,
        capacity=ClusterCapacity(cluster, "gpus", "g5.xlarge"),
        model_source=store,
        route=ListenerRoute(listener, 3),
        access=ServiceAccess(allow_unauthenticated=True),
        environment="search",
        logs=ServiceLogs(
            kms.Key.from_key_arn(
                stack, "K2", f"arn:aws:kms:eu-west-1:{ACCOUNT}:key/11111111-2222-4333-8444-555555555556"
            )
        ),
    )
    with pytest.raises(Exception, match=r"models\[cached\]\.shared_cache\.enabled .*use_cache"):
        app.synth()
    model.use_cache(cache)
    app.synth()  # connected: synthesizes


def test_use_cache_refuses_a_server_without_a_cache_client():
    from gpu_inference_constructs import VllmProps, VllmServer

    _, stack, cache, _, _ = team_app(services=0)
    store = ModelStore(stack, "Models3", props=ModelStoreProps())
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "V3", vpc_id="vpc-0a1b2c3d4e5f67892", availability_zones=["eu-west-1a"], private_subnet_ids=["subnet-2"]
    )
    listener = elbv2.ApplicationListener.from_application_listener_attributes(
        stack,
        "L3",
        listener_arn=f"arn:aws:elasticloadbalancing:eu-west-1:{ACCOUNT}:listener/app/y/0123456789abcdef/0123456789abcdef",
        security_group=ec2.SecurityGroup.from_security_group_id(stack, "S3", "sg-0123456789abcdef2"),
    )
    model = ModelService(
        stack,
        "Llm",
        model=ModelProps(name="llm", version="1", cpu=12288, memory_mib=49152, gpus=4),
        server=VllmServer(VllmProps(), image=ecs.ContainerImage.from_registry("vllm/vllm-openai:v0.32.0")),
        capacity=ClusterCapacity(
            ecs.Cluster.from_cluster_attributes(stack, "C3", cluster_name="llm", vpc=vpc), "gpus", "g5.12xlarge"
        ),
        model_source=store,
        route=ListenerRoute(listener, 4),
        access=ServiceAccess(allow_unauthenticated=True),
        environment="search",
        logs=ServiceLogs(
            kms.Key.from_key_arn(
                stack, "K3", f"arn:aws:kms:eu-west-1:{ACCOUNT}:key/11111111-2222-4333-8444-555555555557"
            )
        ),
    )
    with pytest.raises(ConfigError, match=r"^server: .*BundledServer"):
        model.use_cache(cache)


def test_an_environment_name_a_query_cannot_quote_is_refused():
    app, stack, cache, _, _ = team_app(services=0)
    with pytest.raises(ConfigError, match=r"^environment_name: .*use letters, digits"):
        cache.add_connection_failure_alarm(stack, "prod' OR ModelName = 'x", as_topic(sns.Topic(stack, "Topic")))
