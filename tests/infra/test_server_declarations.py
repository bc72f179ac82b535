"""Issue 42: the server contract is the only thing scaling, alarms and the load balancer know about a server. A team's
own contract is scaled, alarmed and routed by what it declares, and the bundled server's signals come from its own
declaration, not from a code path that knows it is the bundled server."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from gpu_inference_constructs import (
    BundledScalingProps,
    BundledServer,
    BundledServerProps,
    ClusterCapacity,
    ExpressionSignal,
    InferenceLoadBalancer,
    LivenessCheck,
    LoadBalancerProps,
    ModelAlarms,
    ModelBucket,
    ModelFromS3,
    ModelProps,
    ModelService,
    MonitoringProps,
    PrometheusMetrics,
    ScalingSignal,
    ServerAlarm,
    ServerContract,
    ServerDefinition,
    ServiceLogs,
    ServiceScaling,
    StopTiming,
)
from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.core.server_signals import SERVICE_CPU
from gpu_inference_constructs.servers.bundled_signals import BUNDLED_ALARMS, bundled_scaling_signals
from gpu_inference_constructs.shared.cdk_interfaces import as_topic

IMAGE = ecs.ContainerImage.from_registry("123456789012.dkr.ecr.us-east-1.amazonaws.com/team/server:1.0.0")
BUNDLED_ONLY_POLICIES = {"QueueBacklog", "GpuUtilization", "CpuAndQueueGrowing"}
BUNDLED_ONLY_ALARMS = {"QueueDepth", "RejectedRequests", "GpuMemory", "LowGpuUtilization"}


def team_contract(**overrides) -> ServerContract:
    """A team's own server: one tracked signal, one scale-out expression, one alarm and one prediction route."""
    values = dict(
        name="ranker",
        image=IMAGE,
        command=("serve",),
        port=9000,
        readiness_path="/ready",
        liveness=LivenessCheck(("CMD", "serve", "--alive")),
        user="1000:1000",
        model_source=ModelFromS3.server_downloads(),
        stop=StopTiming(drain_seconds=30, exit_seconds=10),
        metrics=PrometheusMetrics(metrics=("ranker:inflight", "ranker:backlog")),
        scaling_signals=(
            ScalingSignal("ranker_inflight", target=4, name="TrackInflight"),
            ExpressionSignal(
                "BacklogWhileBusy",
                "IF(cpu > 70 AND backlog > 10, 1, 0)",
                {"cpu": (SERVICE_CPU, "Average"), "backlog": ("ranker_backlog", "Maximum")},
                "backlog while busy",
                maximum=1,
                evaluation_periods=3,
            ),
        ),
        alarms=(
            ServerAlarm(
                "BacklogHigh",
                "ranker_backlog",
                "Maximum",
                threshold=50,
                periods=5,
                description="backlog above {threshold} for {periods} minutes",
            ),
        ),
        prediction_routes=("/rank/{collection}",),
    )
    return ServerContract(**{**values, **overrides})


def synthesize(server) -> tuple[dict[str, Any], ModelService]:
    """A model on ``server`` behind a load balancer with a web ACL, scaled and alarmed: the template as JSON."""
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=cdk.Environment(account="123456789012", region="us-east-1"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    balancer = InferenceLoadBalancer(
        stack,
        "LoadBalancer",
        vpc=vpc,
        access_logs_bucket=s3.Bucket(stack, "Logs"),
        longest_request_seconds=30,
        props=LoadBalancerProps(allow_http=True, ingress_cidrs=("10.0.0.0/8",), waf=True),
    )
    service = ModelService(
        stack,
        "Model",
        model=ModelProps(name="ranker", version="1"),
        server=server,
        route=balancer,
        capacity=ClusterCapacity(
            ecs.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="c", vpc=vpc), "gpus", "g5.xlarge"
        ),
        model_source=ModelBucket(s3.Bucket.from_bucket_name(stack, "Bucket", "models-bucket")),
        environment="test",
        logs=ServiceLogs(
            kms.Key.from_key_arn(
                stack, "Key", "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-4333-8444-555555555555"
            )
        ),
    )
    ServiceScaling(stack, "Scaling", service=service)
    ModelAlarms(
        stack,
        "Alarms",
        environment_name="test",
        service=service,
        topic=as_topic(sns.Topic(stack, "Topic")),
        props=MonitoringProps(),
    )
    return dict(Template.from_stack(stack).to_json()), service


def policies(template: dict) -> dict[str, dict]:
    """Scaling policies by the construct ID in their logical ID (Scaling/TaskCount/Target/<id>...)."""
    return {
        logical_id: resource["Properties"]
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::ApplicationAutoScaling::ScalingPolicy"
    }


def alarm_names(template: dict) -> set[str]:
    return {
        r["Properties"]["AlarmName"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and isinstance(r["Properties"].get("AlarmName"), str)
    }


def prediction_regexes(template: dict) -> list[str]:
    (acl,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::WAFv2::WebACL"]
    (body,) = [rule for rule in acl["Properties"]["Rules"] if rule["Name"] == "BodyRulesOffPredictions"]
    (_, predictions) = body["Statement"]["AndStatement"]["Statements"]
    return [
        s["RegexMatchStatement"]["RegexString"]
        for s in predictions["NotStatement"]["Statement"]["OrStatement"]["Statements"]
    ]


def test_a_teams_own_contract_is_scaled_alarmed_and_routed_by_what_it_declares():
    template, _ = synthesize(team_contract())
    found = policies(template)
    ids = " ".join(found)
    assert "TrackInflight" in ids and "BacklogWhileBusy" in ids
    assert not any(name in ids for name in BUNDLED_ONLY_POLICIES), "no bundled-only signal for another server"
    tracked = next(p for i, p in found.items() if "TrackInflight" in i)
    specification = tracked["TargetTrackingScalingPolicyConfiguration"]
    assert (
        specification["TargetValue"] == 4
        and specification["CustomizedMetricSpecification"]["MetricName"] == "ranker_inflight"
    )
    assert "RequestsPerTarget" not in ids, "a signal with a target scales in: no requests-per-target tracking"
    rendered = json.dumps(template)
    assert "IF(cpu > 70 AND backlog > 10, 1, 0)" in rendered
    names = alarm_names(template)
    assert any(name.endswith("ranker-BacklogHigh") for name in names)
    assert not any(name.endswith(f"ranker-{alarm}") for name in names for alarm in BUNDLED_ONLY_ALARMS)
    assert "backlog above 50 for 5 minutes" in rendered
    assert "^/[^/]+/rank/[^/]+$" in prediction_regexes(template), "the web ACL keeps its body rules off the route"


def test_without_declared_alarms_each_scale_out_signal_gets_a_not_keeping_up_alarm():
    contract = team_contract(
        alarms=None, scaling_signals=(ScalingSignal("ranker_backlog", "Maximum", scale_out_above=20),)
    )
    assert [alarm.name for alarm in contract.server_alarms] == ["ranker_backlog"]
    template, _ = synthesize(contract)
    assert any(name.endswith("ranker-ranker_backlog") for name in alarm_names(template))
    assert "RequestsPerTarget" in " ".join(policies(template)), "scale-out signals alone cannot scale in"


def test_the_bundled_servers_signals_and_alarms_come_from_its_own_declaration():
    props = BundledServerProps(scaling=BundledScalingProps(queue_depth_scale_out=40, cpu_percent=60))
    template, service = synthesize(BundledServer(props, image=IMAGE))
    assert service.contract.scaling_signals == bundled_scaling_signals(props.scaling, props.max_queue_size)
    assert service.contract.alarms == BUNDLED_ALARMS
    rendered = json.dumps(template)
    assert "IF(cpu > 60 AND DIFF(queue) > 0, 1, 0)" in rendered
    (queue,) = [r["Properties"] for i, r in template["Resources"].items() if "QueueBacklogUpperAlarm" in i]
    (stat,) = [m["MetricStat"] for m in queue["Metrics"]]
    assert (queue["Threshold"], stat["Period"], stat["Metric"]["MetricName"]) == (40, 10, "QueueDepth")


def test_a_bundled_contract_without_its_declarations_gets_no_bundled_signals():
    """The twin: the same server with its declarations taken out scales on requests and latency only, so the bundled
    signals above came from the declaration, not from knowing the server."""
    bundled = BundledServer(image=IMAGE)

    class Undeclared(ServerDefinition):
        def contract(self, context):
            return dataclasses.replace(bundled.contract(context), scaling_signals=(), alarms=())

    template, _ = synthesize(Undeclared())
    ids = " ".join(policies(template))
    assert not any(name in ids for name in BUNDLED_ONLY_POLICIES) and "RequestsPerTarget" in ids
    assert not any(name.endswith(f"ranker-{alarm}") for name in alarm_names(template) for alarm in BUNDLED_ONLY_ALARMS)


def test_declarations_are_checked():
    with pytest.raises(ConfigError, match=r"server.alarms\[Backlog\].*exactly one of threshold"):
        ServerAlarm("Backlog", "m", "Maximum", description="d")
    with pytest.raises(ConfigError, match=r"scaling_signals\[m\].period_seconds.*allowed 10, 20, 30"):
        ScalingSignal("m", scale_out_above=1, period_seconds=45)
    with pytest.raises(ConfigError, match=r"server.prediction_routes.*absolute URL path"):
        team_contract(prediction_routes=("rank",))
    with pytest.raises(ConfigError, match=r"scaling.queue_depth_scale_out.*max_queue_size"):
        BundledServerProps(max_queue_size=16)
    alarm = ServerAlarm("Backlog", "m", "Maximum", threshold_setting="no_such_setting", description="d")
    with pytest.raises(ConfigError, match=r"threshold_setting.*not a field of MonitoringProps"):
        alarm.resolved(MonitoringProps())
