"""A model pool (dev's ``tenants``: a models[] entry with a ``pool`` block) synthesizes to one service and one
listener rule whatever its registry holds: the same template with 50 registered models as with 1,000. Its task role
reads only ``pools/<pool>/``, its models run no code of their own, its alarms are on pool metrics (the pool is the
only dimension, so their number never grows with the models), and per-model figures are a saved Logs Insights query
and a Contributor Insights rule away."""

from __future__ import annotations

import copy
import json

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template

from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.core.pool_props import PoolProps
from gpu_inference_constructs.core.service_timing import SPOT_STOP_SECONDS
from gpu_inference_constructs.servers.bundled import BundledServerProps
from gpu_inference_constructs.servers.pool import POOL_METRICS, PoolServer
from gpu_inference_constructs.service.pool_queries import top_models_rule_body
from gpu_inference_constructs.task_telemetry.telemetry import OTLP_HTTP_ADDRESS, OTLP_HTTP_ENDPOINT
from inference_server.facts import EXIT_GRACE_S
from inference_server.front.shared_cache import config_from_settings
from inference_server.pool.pool_settings import PoolSettings, load_pool_settings
from stacks.config import load_environment
from stacks.model_entry import pool_of_entry, split_model_entry
from stacks.stage import InferenceStage
from tests.conftest import metric_stats, scenario_context, single_metric
from tests.scenarios import scenario_environments

POOL = "tenants"
STACK = f"Model-{POOL}"


def dev_with_registered(count: int) -> dict:
    """The tests' dev environment, its pool listing ``count`` registered models."""
    dev = copy.deepcopy(scenario_environments()["dev"])
    (pool,) = [m for m in dev["models"] if m["name"] == POOL]
    pool["pool"]["registered_models"] = [f"tenant-{index:04d}" for index in range(count)]
    return dev


def pool_template(dev: dict, outdir) -> dict:
    context = {k: v for k, v in scenario_context().items() if k != "environments"}
    app = cdk.App(context=context, outdir=str(outdir))
    stage = InferenceStage(app, load_environment("dev", dev))
    app.synth()
    (stack,) = [s for s in stage.synth().stacks if s.hierarchical_id.endswith(STACK)]
    return stack.template


@pytest.fixture(scope="module")
def fifty(tmp_path_factory) -> dict:
    dev = scenario_environments()["dev"]
    (pool,) = [m for m in dev["models"] if m["name"] == POOL]
    assert len(pool["pool"]["registered_models"]) >= 50  # the environment's own pool registers 50
    return pool_template(dev, tmp_path_factory.mktemp("fifty"))


@pytest.fixture(scope="module")
def template(fifty) -> Template:
    return Template.from_json(fifty)


def test_fifty_and_a_thousand_registered_models_synthesize_the_same_pool(fifty, tmp_path_factory):
    thousand = pool_template(dev_with_registered(1000), tmp_path_factory.mktemp("thousand"))
    assert thousand == fifty
    assert "tenant-" not in json.dumps(fifty)  # no model of the pool is a resource, a dimension or a name


def test_a_pool_is_one_service_and_one_listener_rule(template):
    template.resource_count_is("AWS::ECS::Service", 1)
    template.resource_count_is("AWS::ElasticLoadBalancingV2::ListenerRule", 1)
    template.resource_count_is("AWS::ElasticLoadBalancingV2::TargetGroup", 1)
    template.has_resource_properties(
        "AWS::ElasticLoadBalancingV2::ListenerRule",
        {
            "Conditions": [
                {
                    "Field": "path-pattern",
                    "PathPatternConfig": {
                        "Values": [f"/{POOL}/predict*", f"/{POOL}/v1/*", f"/{POOL}/v2*", f"/{POOL}/models/*"]
                    },
                }
            ]
        },
    )


def server_environment(template: Template) -> dict:
    (definition,) = template.find_resources("AWS::ECS::TaskDefinition").values()
    server = next(c for c in definition["Properties"]["ContainerDefinitions"] if c["Name"] == "server")
    return {e["Name"]: e["Value"] for e in server["Environment"]}


def task_containers(template: Template) -> dict[str, dict]:
    (definition,) = template.find_resources("AWS::ECS::TaskDefinition").values()
    return {c["Name"]: c for c in definition["Properties"]["ContainerDefinitions"]}


def text(value) -> str:
    """A template string, an Fn::Join's tokens read as a placeholder."""
    if isinstance(value, dict):
        delimiter, parts = value["Fn::Join"]
        return delimiter.join(part if isinstance(part, str) else "TOKEN" for part in parts)
    return value


def pool_settings(template: Template, **resolved: str) -> PoolSettings:
    """The pool server's settings as the task's environment configures them (what python -m inference_server reads);
    ``resolved``: variables whose value is a token at synth, as the task will see them."""
    environment = {name: text(value) for name, value in server_environment(template).items()}
    return load_pool_settings({**environment, **resolved})


def test_the_pool_server_drains_and_exits_within_the_tasks_stop_timeout_inside_the_spot_notice(template):
    """The server's own bound (DRAIN_TIMEOUT_S, then EXIT_GRACE_S: inference_server/pool/__main__.py, a load in
    progress not waited for) fits the container's stopTimeout, and with the target group's deregistration delay the
    Spot notice; its keep-alive outlasts the load balancer's idle timeout. The pool's server read no drain setting
    before: uvicorn's 30 s graceful shutdown, then a wait for any load."""
    settings = pool_settings(template)
    stop = task_containers(template)["server"]["StopTimeout"]
    assert settings.drain_timeout_s + EXIT_GRACE_S <= stop
    (group,) = template.find_resources("AWS::ElasticLoadBalancingV2::TargetGroup").values()
    attributes = {a["Key"]: a["Value"] for a in group["Properties"]["TargetGroupAttributes"]}
    assert int(attributes["deregistration_delay.timeout_seconds"]) + stop <= SPOT_STOP_SECONDS
    assert settings.keep_alive_s == float(server_environment(template)["KEEP_ALIVE_S"])


def test_the_pool_server_sends_its_request_spans_to_the_tasks_collector(template):
    """As for a model service: the collector sidecar's OTLP receiver on the loopback, traces to X-Ray, and the pool's
    server configured to send there (it read no OTLP setting before, so it traced nothing)."""
    settings = pool_settings(template)
    assert settings.traces_endpoint == f"{OTLP_HTTP_ENDPOINT}/v1/traces"
    assert (settings.trace_service[0], settings.trace_attributes) == (POOL, {"pool.name": POOL})
    collector = task_containers(template)["metrics-collector"]
    otel = json.loads(text({e["Name"]: e["Value"] for e in collector["Environment"]}["AOT_CONFIG_CONTENT"]))
    assert otel["receivers"]["otlp"]["protocols"]["http"] == {"endpoint": OTLP_HTTP_ADDRESS}
    assert otel["service"]["pipelines"]["traces"]["exporters"] == ["awsxray"]


def test_a_pool_in_an_environment_with_the_shared_cache_is_its_client(tmp_path):
    """dev with staging's cache block: the pool's task gets the cache's SHARED_CACHE_* variables (and may connect), and
    its server reads them (a pool's use_cache was refused before: its server read no cache)."""
    dev = dev_with_registered(50)
    dev["cache"] = copy.deepcopy(scenario_environments()["staging"]["cache"])
    cached = Template.from_json(pool_template(dev, tmp_path))
    environment = server_environment(cached)
    assert environment["SHARED_CACHE_TLS"] == "true" and "SHARED_CACHE_ENDPOINT" in environment
    assert text(environment["SHARED_CACHE_ENDPOINT"]) == "TOKEN:TOKEN"  # the cache's address and port
    settings = pool_settings(cached, SHARED_CACHE_ENDPOINT="cache.example:6379")
    config = config_from_settings(settings, {"AWS_REGION": "us-east-1"})
    assert config is not None and config.iam_user == text(environment["SHARED_CACHE_IAM_USER"])
    statements = [
        statement
        for policy in cached.find_resources("AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert any(statement["Action"] == "elasticache:Connect" for statement in statements)


def test_the_server_runs_as_the_pool_on_its_store_prefix_with_artifact_code_off(template):
    environment = server_environment(template)
    assert environment["POOL_NAME"] == POOL
    assert environment["ALLOW_ARTIFACT_CODE"] == "false"
    assert environment["POOL_REGISTRY_POLL_SECONDS"] == "10"
    assert environment["POOL_GPU_MEMORY_MIB"] == "5120"
    assert environment["POOL_HOST_MEMORY_MIB"] == "3072"
    store = environment["MODEL_STORE_URI"]["Fn::Join"][1]
    assert store[0] == "s3://" and store[-1] == f"/pools/{POOL}/"


def server_port(template: Template) -> int:
    (definition,) = template.find_resources("AWS::ECS::TaskDefinition").values()
    server = next(c for c in definition["Properties"]["ContainerDefinitions"] if c["Name"] == "server")
    return server["PortMappings"][0]["ContainerPort"]


def test_the_pools_tasks_register_as_a_records_in_a_namespace_of_their_own(template):
    namespace = f"{POOL}.dev.gpu-inference.internal"
    template.resource_count_is("AWS::ServiceDiscovery::PrivateDnsNamespace", 1)
    (namespace_id,) = template.find_resources(
        "AWS::ServiceDiscovery::PrivateDnsNamespace", {"Properties": {"Name": namespace, "Vpc": Match.any_value()}}
    )
    (registry_id,) = template.find_resources(
        "AWS::ServiceDiscovery::Service",
        {
            "Properties": {
                "Name": "tasks",
                "NamespaceId": {"Fn::GetAtt": [namespace_id, "Id"]},
                # Every task's address in one answer (up to eight), re-read by the servers every 5 s.
                "DnsConfig": {"DnsRecords": [{"Type": "A", "TTL": 10}], "RoutingPolicy": "MULTIVALUE"},
            }
        },
    )
    template.has_resource_properties(
        "AWS::ECS::Service", {"ServiceRegistries": [{"RegistryArn": {"Fn::GetAtt": [registry_id, "Arn"]}}]}
    )
    assert server_environment(template)["POOL_PEER_DNS_NAME"] == f"tasks.{namespace}"


def test_the_tasks_admit_each_other_on_the_server_port_only(template):
    port = server_port(template)
    (group_id,) = template.find_resources("AWS::EC2::SecurityGroup", {"Properties": {"VpcId": Match.any_value()}})
    itself = {"Fn::GetAtt": [group_id, "GroupId"]}
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress",
        {"GroupId": itself, "SourceSecurityGroupId": itself, "IpProtocol": "tcp", "FromPort": port, "ToPort": port},
    )
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupEgress",
        {
            "GroupId": itself,
            "DestinationSecurityGroupId": itself,
            "IpProtocol": "tcp",
            "FromPort": port,
            "ToPort": port,
        },
    )
    peer_rules = [
        rule["Properties"]
        for kind in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
        for rule in template.find_resources(kind).values()
        if itself
        in (rule["Properties"].get("SourceSecurityGroupId"), rule["Properties"].get("DestinationSecurityGroupId"))
    ]
    assert len(peer_rules) == 2 and all(r["FromPort"] == r["ToPort"] == port for r in peer_rules)


def test_the_task_role_reads_only_its_pools_prefix(template):
    policies = template.find_resources(
        "AWS::IAM::Policy", {"Properties": {"Roles": [{"Ref": Match.string_like_regexp("TaskRole")}]}}
    )
    (policy,) = policies.values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    s3 = [
        s
        for s in statements
        if any(str(a).startswith("s3:") for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))
    ]
    assert {s["Action"] for s in s3} == {"s3:GetObject", "s3:ListBucket"}
    (get,) = [s for s in s3 if s["Action"] == "s3:GetObject"]
    assert get["Resource"]["Fn::Join"][1][-1] == f"/pools/{POOL}/*"
    (listing,) = [s for s in s3 if s["Action"] == "s3:ListBucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": [f"pools/{POOL}/", f"pools/{POOL}/*"]}}


def test_the_pool_alarms_read_pool_metrics_with_the_pool_as_the_only_model_dimension(template):
    alarms = [a["Properties"] for a in template.find_resources("AWS::CloudWatch::Alarm").values()]
    pool_alarms = {stats[0][1]: a for a in alarms if len(stats := metric_stats(a)) == 1 and stats[0][1] in POOL_METRICS}
    assert sorted(pool_alarms) == sorted(POOL_METRICS)
    for properties in pool_alarms.values():
        dimensions = single_metric(properties)[3]
        assert {d["Name"]: d["Value"] for d in dimensions} == {"Environment": "dev", "ModelName": POOL}
        assert properties["AlarmActions"]  # they page, as every model alarm does
    assert pool_alarms["PoolHitRate"]["ComparisonOperator"] == "LessThanThreshold"
    assert pool_alarms["PoolFailedLoads"]["Threshold"] == 1 and pool_alarms["PoolFailedLoads"]["EvaluationPeriods"] == 1
    assert single_metric(pool_alarms["PoolLoadTime"])[2] == "p95"


def test_the_pool_scales_on_its_aggregate_load(template):
    policies = template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy")
    assert policies  # the bundled server's signals, per service: every model of the pool together
    assert "tenant-" not in json.dumps(policies)


def test_per_model_figures_are_a_saved_query_and_a_contributor_insights_rule(template):
    template.resource_count_is("AWS::Logs::QueryDefinition", 2)
    template.has_resource_properties(
        "AWS::Logs::QueryDefinition",
        {
            "Name": f"gpu-inference/dev/{POOL}/top-models",
            "QueryString": Match.string_like_regexp(r"stats sum\(PoolModelRequests\).* by PoolModel"),
            "LogGroupNames": [{"Ref": Match.string_like_regexp("Logs")}],
        },
    )
    (rule,) = template.find_resources("AWS::CloudWatch::InsightRule").values()
    assert rule["Properties"]["RuleState"] == "ENABLED"
    body = "".join(
        part if isinstance(part, str) else "LOG_GROUP" for part in rule["Properties"]["RuleBody"]["Fn::Join"][1]
    )
    assert json.loads(body) == top_models_rule_body("LOG_GROUP")
    assert json.loads(body)["Contribution"]["Keys"] == ["$.PoolModel"]


def test_a_pool_block_beside_another_servers_block_is_refused():
    with pytest.raises(ConfigError) as error:
        split_model_entry({"name": "p", "version": "1", "pool": {}, "vllm": {"model_id": "x"}}, "models[0]")
    assert error.value.key == "models[0].vllm" and "pool" in error.value.detail


def test_a_pool_entry_needs_no_version_and_its_block_is_checked():
    model, props = split_model_entry({"name": "p1", "pool": {}, "task": "text-embedding"}, "models[0]")
    assert model["version"] == "pool" and isinstance(props, BundledServerProps)
    with pytest.raises(ConfigError) as error:
        pool_of_entry({"pool": {"registered_models": ["ok-model", "Not_A_Name"]}}, "models[4]")
    assert error.value.key == "models[4].pool.registered_models[1]"


@pytest.mark.parametrize(
    ("props", "key"),
    [
        (BundledServerProps(runtime="compile"), "runtime"),
        (BundledServerProps(result_cache_size=10), "result_cache_size"),
    ],
)
def test_a_pool_refuses_per_model_artifacts_and_a_shared_result_cache(props, key):
    with pytest.raises(ConfigError) as error:
        PoolServer(props=props, pool=PoolProps())
    assert error.value.key == key


def test_a_pools_variables_are_not_set_by_hand():
    from gpu_inference_constructs.core.model_props import ModelProps

    with pytest.raises(ConfigError) as error:
        PoolServer().check(ModelProps(name="p1", version="pool", environment={"ALLOW_ARTIFACT_CODE": "true"}))
    assert error.value.key == "environment" and "ALLOW_ARTIFACT_CODE" in error.value.detail
