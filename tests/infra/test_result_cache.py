"""The shared result cache (staging turns it on): encrypted with its own rotated key that ElastiCache may use,
IAM authentication only (the default user off), reachable only from the model tasks that use it, each such task
told where it is and allowed to connect, alarms on the topic, its cost on the dashboard; the access string the
tasks' user gets is proven against a real Valkey server."""

from __future__ import annotations

import asyncio

import pytest
import valkey
import valkey.asyncio
import valkey.exceptions

from gpu_inference_constructs.errors import ConfigError
from gpu_inference_constructs.result_cache import ACCESS_STRING, ModelCacheProps, ResultCacheProps
from stacks.config import load_environment
from tests.infra.aws_policies import Policy, TemplateWorld, principal
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
    (definition,) = [r for k, r in world.of_type("AWS::ECS::TaskDefinition").items()
                     if k.startswith(f"Model{model.replace('-', '')}")]
    server = definition["Properties"]["ContainerDefinitions"][0]
    return {e["Name"]: e["Value"] for e in server.get("Environment", [])}


def test_only_staging_has_a_cache(synthesized):
    for env in synthesized.stages:
        caches = TemplateWorld(synthesized.inference_template(env), "1", "r").of_type("AWS::ElastiCache::ServerlessCache")
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
    deployer = principal(f"arn:aws:iam::{world.account}:role/cdk-deploy",
                         [Policy("admin", "admin", {"Version": "2012-10-17", "Statement": [
                             {"Effect": "Allow", "Action": "*", "Resource": "*"}]})])
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


def test_only_the_cached_models_tasks_reach_the_cache(world):
    _, cache = one(world, "AWS::ElastiCache::ServerlessCache")
    (cache_group,) = [ref["Fn::GetAtt"][0] for ref in cache["Properties"]["SecurityGroupIds"]]
    properties = world.resources[cache_group]["Properties"]
    assert "SecurityGroupIngress" not in properties
    assert properties["SecurityGroupEgress"][0]["CidrIp"] == "255.255.255.255/32"  # CDK's "no egress" rule
    ingress = [r["Properties"] for r in world.of_type("AWS::EC2::SecurityGroupIngress").values()
               if r["Properties"]["GroupId"] == {"Fn::GetAtt": [cache_group, "GroupId"]}]
    sources = sorted(rule["SourceSecurityGroupId"]["Fn::GetAtt"][0] for rule in ingress)
    assert [s[:len("Model") + len(m)] for s, m in zip(sources, CACHED, strict=False)] == [f"Model{m}" for m in CACHED]
    assert all((rule["FromPort"], rule["ToPort"], rule["IpProtocol"]) == (6379, 6380, "tcp") for rule in ingress)
    assert not any("CidrIp" in rule or "CidrIpv6" in rule for rule in ingress)


def test_each_cached_model_is_told_where_the_cache_is_and_may_connect(world):
    cache_id, _ = one(world, "AWS::ElastiCache::ServerlessCache")
    cache_arn = world.resolve({"Fn::GetAtt": [cache_id, "ARN"]})  # a ServerlessCache's attribute is ARN, not Arn
    user_id = [k for k, r in world.of_type("AWS::ElastiCache::User").items()
               if r["Properties"]["UserName"] != "default"][0]
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
    alarms = {r["Properties"].get("MetricName") or "math": r["Properties"] for r in world.of_type("AWS::CloudWatch::Alarm").values()
              if "cache" in r["Properties"].get("AlarmDescription", "").lower()}
    assert {"Evictions", "BytesUsedForCache", "SuccessfulReadRequestLatency", "ThrottledCmds", "math"} <= set(alarms)
    for alarm in alarms.values():
        assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": topic}]
    _, dashboard = one(world, "AWS::CloudWatch::Dashboard")
    body = str(dashboard["Properties"]["DashboardBody"])
    assert "Result cache cost" in body and "ElastiCacheProcessingUnits" in body


@pytest.mark.parametrize("change, key", [
    (lambda e: e["models"][0].update(shared_cache={"ttl_seconds": 60}) or e.pop("cache"), "models[0].shared_cache"),
    (lambda e: e["models"][2].update(shared_cache={"enabled": True}), "models[2].shared_cache"),  # vLLM has no shared cache
    (lambda e: e["models"][0].update(shared_cache={"ttl_seconds": 0}), "ttl_seconds"),
    (lambda e: e["cache"].update(max_data_storage_gb=0), "cache.max_data_storage_gb"),
    (lambda e: e["cache"].update(major_engine_version="6"), "cache.major_engine_version"),
])
def test_bad_cache_configuration_names_the_key(change, key):

    environment = scenario_environment(ENV)
    change(environment)
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        load_environment(ENV, environment)


def test_props_defaults():
    assert ModelCacheProps() == ModelCacheProps(enabled=None, ttl_seconds=3600, max_value_bytes=65536)
    assert ResultCacheProps().snapshot_retention_days == 0


def test_the_tasks_access_string_runs_the_servers_client_and_nothing_else(tmp_path):
    """The user's ACL in a real Valkey: the server's lookups and stores work, other keys and commands are refused."""
    from inference_server.shared_cache import SharedCache, SharedCacheConfig

    server = ValkeyServer(tmp_path).start()
    try:
        admin = server.client()
        admin.execute_command("ACL", "SETUSER", "tasks", "reset", *ACCESS_STRING.split(), ">secret-token")
        admin.set("other", "x")
        config = SharedCacheConfig(host="127.0.0.1", port=server.port, tls=False)

        async def run():
            import inference_server.shared_cache as sc

            def connect_as_tasks(c):
                return valkey.asyncio.Valkey(host=c.host, port=c.port, username="tasks", password="secret-token",
                                             socket_timeout=2)

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
        for refused in (lambda: tasks.get("other"), lambda: tasks.flushall(), lambda: tasks.keys("*"),
                        lambda: tasks.delete("ic:a")):
            with pytest.raises(valkey.exceptions.NoPermissionError):
                refused()
    finally:
        server.stop()
