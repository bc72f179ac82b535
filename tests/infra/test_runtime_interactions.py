"""Every call one part of an environment makes to another at run time, and what AWS decides about it.

Each interaction is evaluated by a real policy evaluator (tests/infra/aws_policies.py) over the synthesized
identity, resource and key policies together, conditions and explicit denies included; each has a negative
twin (another account, another prefix, another cluster) that must be denied.
"""

from __future__ import annotations

import json

import pytest
from moto.events.models import EventPattern
from moto.events.utils import EventMessageType

from gpu_inference_constructs.capacity.group_events import GROUP_EVENT_TYPES
from tests.infra.aws_policies import Policy, TemplateWorld, principal
from tests.infra.conftest import ENVIRONMENTS

OTHER_ACCOUNT = "999999999999"
TLS = {"aws:SecureTransport": "true"}
TOPIC_CONTEXT = "kms:EncryptionContext:aws:sns:topicArn"
# Elastic Load Balancing's log-delivery account per region (ELB user guide, "Enable access logs": attach a policy).
ELB_ACCOUNTS = {"us-east-1": "127311923021", "us-west-2": "797873946194"}
AUTOSCALING_ROLE = "role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"


@pytest.fixture(scope="module", params=ENVIRONMENTS)
def world(request, synthesized) -> TemplateWorld:
    config = synthesized.stages[request.param].config
    return TemplateWorld(synthesized.inference_template(request.param), config.account, config.region)


@pytest.fixture(scope="module", params=ENVIRONMENTS)
def network_world(request, synthesized) -> TemplateWorld:
    config = synthesized.stages[request.param].config
    return TemplateWorld(synthesized.template(request.param, "Network"), config.account, config.region)


def topic_and_key(world: TemplateWorld) -> tuple[str, str]:
    topic = world.only("AWS::SNS::Topic")
    key = world.resources[topic]["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    return topic, key


def publishes_to(resource: dict, topic: str) -> bool:
    properties = resource["Properties"]
    actions = properties.get("AlarmActions", []) + properties.get("OKActions", [])
    targets = [t["Arn"] for t in properties.get("Targets", [])]
    return {"Ref": topic} in actions + targets


# --- Alarms, EventBridge and Auto Scaling -> the encrypted topic --------------------------------------------


# Alarms that intentionally notify nobody, each recognised by what it is wired to (not by its name), with the reason.
SILENT_ALARMS = {
    "step scaling": "its only actions are step scaling policies (a scale-out signal: the bundled server's latency, GPU "
    "or growing queue, vLLM's waiting requests or KV cache): it fires at every routine scale-out; what deserves a "
    "notification (tasks below desired, latency, 5xx, vLLM signals high for 15 minutes) has its own alarm",
    "deployment rollback": "ECS reads its state during a deployment and rolls the deployment back (deployment alarms); "
    "an alarm that notifies the topic reads the same metrics, so the condition is notified once",
    "composite child": "a child of a composite alarm that notifies the topic; the composite is the one notification",
    "never-healthy rollback": "ECS reads it by name during a deployment and rolls back a version whose tasks never "
    "become healthy; the rolled-back deployment reaches the topic through the cluster's ECS deployment "
    "event rule (test_a_rolled_back_deployment_of_this_clusters_services_reaches_the_topic)",
}


def alarm_metrics(properties: dict) -> frozenset:
    """(namespace, metric, statistic, dimensions) of every metric an alarm reads."""
    if "MetricName" in properties:
        statistic = properties.get("ExtendedStatistic") or properties.get("Statistic")
        return frozenset(
            {
                (
                    properties["Namespace"],
                    properties["MetricName"],
                    statistic,
                    json.dumps(properties.get("Dimensions", []), sort_keys=True),
                )
            }
        )
    return frozenset(
        (
            m["MetricStat"]["Metric"]["Namespace"],
            m["MetricStat"]["Metric"]["MetricName"],
            m["MetricStat"]["Stat"],
            json.dumps(m["MetricStat"]["Metric"].get("Dimensions", []), sort_keys=True),
        )
        for m in properties["Metrics"]
        if "MetricStat" in m
    )


def notifying_alarms(world: TemplateWorld, topic: str) -> list[str]:
    return [k for k, r in world.of_type("AWS::CloudWatch::Alarm").items() if publishes_to(r, topic)]


def why_silent(world: TemplateWorld, alarm: str, topic: str) -> str | None:
    """The SILENT_ALARMS key that applies to ``alarm``, or None."""
    properties = world.resources[alarm]["Properties"]
    actions = properties.get("AlarmActions", [])
    others = properties.get("OKActions", []) + properties.get("InsufficientDataActions", [])
    if (
        actions
        and not others
        and all(
            list(a) == ["Ref"]
            and world.resources.get(a["Ref"], {}).get("Type") == "AWS::ApplicationAutoScaling::ScalingPolicy"
            for a in actions
        )
    ):
        return "step scaling"
    if actions or others:
        return None
    deployment_alarms = [
        name
        for service in world.of_type("AWS::ECS::Service").values()
        for name in service["Properties"].get("DeploymentConfiguration", {}).get("Alarms", {}).get("AlarmNames", [])
    ]
    if (
        str(properties.get("AlarmName", "")).endswith(f"-never-healthy-{alarm}")
        and properties["AlarmName"] in deployment_alarms
    ):
        return "never-healthy rollback"
    if {"Ref": alarm} in deployment_alarms:
        reads = alarm_metrics(properties)
        if any(alarm_metrics(world.resources[n]["Properties"]) == reads for n in notifying_alarms(world, topic)):
            return "deployment rollback"
        return None
    for composite in world.of_type("AWS::CloudWatch::CompositeAlarm").values():
        if publishes_to(composite, topic) and world.ref(alarm) in json.dumps(
            world.resolve(composite["Properties"]["AlarmRule"])
        ):
            return "composite child"
    return None


@pytest.fixture
def environment(world, synthesized) -> str:
    return next(name for name, stage in synthesized.stages.items() if stage.config.account == world.account)


def test_every_alarm_of_every_stack_notifies_the_topic_or_is_silent_for_a_listed_reason(
    world, environment, synthesized
):
    """Every alarm, in the shared stack and in each model's stack: it notifies the topic both ways (ALARM and OK) and
    is enabled, or it is one of SILENT_ALARMS. A new alarm wired to nothing fails here."""
    topic, _ = topic_and_key(world)
    seen = set()
    for stack in synthesized.stack_ids(environment):
        template = synthesized.template(environment, stack)
        alarms = [
            k
            for k, r in template["Resources"].items()
            if r["Type"] in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")
        ]
        if stack == "Network":
            assert alarms == [], "the Network stack is outside the merged template; prove its alarms here too"
            continue
        assert alarms, f"{environment}/{stack} has no alarms"
        notifying = 0
        for alarm in alarms:
            properties = world.resources[alarm]["Properties"]
            if publishes_to(world.resources[alarm], topic):
                assert properties["AlarmActions"] == [{"Ref": topic}] and properties["OKActions"] == [{"Ref": topic}], (
                    alarm
                )
                assert properties.get("ActionsEnabled", True), alarm
                notifying += 1
            else:
                reason = why_silent(world, alarm, topic)
                assert reason in SILENT_ALARMS, (
                    f"{environment}/{stack} {alarm} notifies nobody and is none of {sorted(SILENT_ALARMS)}: give it "
                    "the topic as alarm and OK action, or add its kind, with the reason, to SILENT_ALARMS"
                )
            seen.add(alarm)
        assert notifying, f"{environment}/{stack}: no alarm of this stack notifies the topic"
    assert seen == set(world.of_type("AWS::CloudWatch::Alarm")) | set(world.of_type("AWS::CloudWatch::CompositeAlarm"))


def sns_key_context(world: TemplateWorld, topic: str) -> dict:
    """What SNS puts in its KMS requests for a message to ``topic``: the topic's ARN as encryption context."""
    return {TOPIC_CONTEXT: world.ref(topic)}


def test_every_alarm_that_notifies_can_publish_to_the_topic_and_use_its_key(world):
    topic, key = topic_and_key(world)
    alarms = notifying_alarms(world, topic)  # every other alarm is silent for a listed reason (test below)
    assert alarms
    for alarm in alarms:
        source = {"aws:SourceAccount": world.account, "aws:SourceArn": world.arn(alarm)}
        assert world.service_may(
            "cloudwatch.amazonaws.com", "sns:Publish", topic, world.ref(topic), {**TLS, **source}
        ), alarm
        for action in ("kms:GenerateDataKey", "kms:Decrypt"):
            assert world.service_may(
                "cloudwatch.amazonaws.com", action, key, world.arn(key), {**source, **sns_key_context(world, topic)}
            ), (alarm, action)


def test_alarms_of_another_account_or_over_plain_http_cannot_publish(world):
    topic, _ = topic_and_key(world)
    alarm = f"arn:aws:cloudwatch:{world.region}:{OTHER_ACCOUNT}:alarm:theirs"
    other = {**TLS, "aws:SourceAccount": OTHER_ACCOUNT, "aws:SourceArn": alarm}
    assert not world.service_may("cloudwatch.amazonaws.com", "sns:Publish", topic, world.ref(topic), other)
    spoofed = {**TLS, "aws:SourceAccount": world.account, "aws:SourceArn": alarm}
    assert not world.service_may("cloudwatch.amazonaws.com", "sns:Publish", topic, world.ref(topic), spoofed)
    ours = world.arn(next(iter(world.of_type("AWS::CloudWatch::Alarm"))))
    plain = {"aws:SecureTransport": "false", "aws:SourceAccount": world.account, "aws:SourceArn": ours}
    assert not world.service_may("cloudwatch.amazonaws.com", "sns:Publish", topic, world.ref(topic), plain)


def test_every_eventbridge_rule_that_notifies_can_publish_and_use_the_key(world):
    topic, key = topic_and_key(world)
    rules = [k for k, r in world.of_type("AWS::Events::Rule").items() if publishes_to(r, topic)]
    assert len(rules) == 2 + len(world.of_type("AWS::AutoScaling::AutoScalingGroup")), (
        "Spot warnings, deployment rollbacks, and each group's events"
    )
    for rule in rules:
        context = {**TLS, "aws:SourceAccount": world.account, "aws:SourceArn": world.arn(rule)}
        assert world.service_may("events.amazonaws.com", "sns:Publish", topic, world.ref(topic), context), rule
        for action in ("kms:GenerateDataKey", "kms:Decrypt"):
            # SNS passes EventBridge's calls to KMS without aws:SourceAccount / aws:SourceArn (SNS developer guide).
            assert world.service_may(
                "events.amazonaws.com", action, key, world.arn(key), sns_key_context(world, topic)
            ), (rule, action)


def test_eventbridge_rules_of_another_account_cannot_publish(world):
    """The topic policy names this account's rules: another account's rule (or one that claims this account but
    is not of it, or any call without a source) is denied; a rule of this account in another region too."""
    topic, _ = topic_and_key(world)
    theirs = f"arn:aws:events:{world.region}:{OTHER_ACCOUNT}:rule/theirs"
    for context in (
        {"aws:SourceAccount": OTHER_ACCOUNT, "aws:SourceArn": theirs},
        {"aws:SourceAccount": world.account, "aws:SourceArn": theirs},
        {
            "aws:SourceAccount": world.account,
            "aws:SourceArn": f"arn:aws:events:eu-central-1:{world.account}:rule/ours-elsewhere",
        },
        {},
    ):
        assert not world.service_may(
            "events.amazonaws.com", "sns:Publish", topic, world.ref(topic), {**TLS, **context}
        ), context
    ours = f"arn:aws:events:{world.region}:{world.account}:rule/ours"
    plain = {"aws:SecureTransport": "false", "aws:SourceAccount": world.account, "aws:SourceArn": ours}
    assert not world.service_may("events.amazonaws.com", "sns:Publish", topic, world.ref(topic), plain)


def test_the_topic_key_serves_this_accounts_alarms_and_topics_only(world):
    """CloudWatch -> key: another account's alarm, an alarm that is not of this account, or a message to another
    account's topic is denied. EventBridge -> key: only for messages to this account's topics. No other service."""
    topic, key = topic_and_key(world)
    ours = {
        "aws:SourceAccount": world.account,
        "aws:SourceArn": world.arn(next(iter(world.of_type("AWS::CloudWatch::Alarm")))),
    }
    their_alarm = f"arn:aws:cloudwatch:{world.region}:{OTHER_ACCOUNT}:alarm:theirs"
    their_topic = {TOPIC_CONTEXT: f"arn:aws:sns:{world.region}:{OTHER_ACCOUNT}:theirs"}
    for action in ("kms:GenerateDataKey", "kms:Decrypt"):
        for context in (
            {"aws:SourceAccount": OTHER_ACCOUNT, "aws:SourceArn": their_alarm, **sns_key_context(world, topic)},
            {"aws:SourceAccount": world.account, "aws:SourceArn": their_alarm, **sns_key_context(world, topic)},
            {**ours, **their_topic},
            ours,
            sns_key_context(world, topic),
        ):
            assert not world.service_may("cloudwatch.amazonaws.com", action, key, world.arn(key), context), (
                action,
                context,
            )
        for context in (their_topic, {TOPIC_CONTEXT: f"arn:aws:sns:eu-central-1:{world.account}:elsewhere"}, {}):
            assert not world.service_may("events.amazonaws.com", action, key, world.arn(key), context), (
                action,
                context,
            )
        assert not world.service_may("s3.amazonaws.com", action, key, world.arn(key), sns_key_context(world, topic))


def test_the_group_event_rules_match_their_own_group_only(world):
    """Each group's rule, run through an EventBridge pattern matcher (moto's implementation of EventBridge's
    content filtering): its own group's launches and terminations match; the same events from another group
    in the account, and other Auto Scaling events of its own group, do not."""
    topic, _ = topic_and_key(world)
    groups = world.of_type("AWS::AutoScaling::AutoScalingGroup")
    for group in groups:
        (rule,) = [
            r
            for r in world.of_type("AWS::Events::Rule").values()
            if publishes_to(r, topic)
            and r["Properties"]["EventPattern"].get("source") == ["aws.autoscaling"]
            and r["Properties"]["EventPattern"]["detail"]["AutoScalingGroupName"] == [{"Ref": group}]
        ]
        pattern = EventPattern.load(json.dumps(world.resolve(rule["Properties"]["EventPattern"])))
        for detail_type in GROUP_EVENT_TYPES:
            assert pattern.matches_event(autoscaling_event(world, world.ref(group), detail_type)), (group, detail_type)
            assert not pattern.matches_event(autoscaling_event(world, "someone-elses-group", detail_type)), (
                group,
                detail_type,
            )
            for other in groups:
                if other != group:
                    assert not pattern.matches_event(autoscaling_event(world, world.ref(other), detail_type)), (
                        group,
                        other,
                    )
        assert not pattern.matches_event(
            autoscaling_event(world, world.ref(group), "EC2 Instance-launch Lifecycle Action")
        )
        ec2: EventMessageType = {
            **autoscaling_event(world, world.ref(group), GROUP_EVENT_TYPES[0]),
            "source": "aws.ec2",
        }
        assert not pattern.matches_event(ec2)


def autoscaling_event(world: TemplateWorld, group_name: str, detail_type: str) -> EventMessageType:
    """An EC2 Auto Scaling event as EventBridge delivers it (EC2 Auto Scaling user guide, "Event reference")."""
    return {
        "version": "0",
        "id": "12345678-1234-1234-1234-123456789012",
        "detail-type": detail_type,
        "source": "aws.autoscaling",
        "account": world.account,
        "time": "2026-12-03T10:00:00Z",
        "region": world.region,
        "resources": [
            f"arn:aws:autoscaling:{world.region}:{world.account}:autoScalingGroup:1234:autoScalingGroupName/{group_name}",
            f"arn:aws:ec2:{world.region}:{world.account}:instance/i-0123456789abcdef0",
        ],
        "detail": {
            "StatusCode": "InProgress",
            "AutoScalingGroupName": group_name,
            "EC2InstanceId": "i-0123456789abcdef0",
            "Cause": "At 2026-12-03T10:00:00Z an instance was started in response to a difference between desired and "
            "actual capacity",
        },
    }


def deployment_event(
    world: TemplateWorld, cluster: str, event_name: str, reason: str, service: str = "Model-minilm-Service"
) -> EventMessageType:
    """An "ECS Deployment State Change" event as EventBridge delivers it (ECS developer guide,
    ecs_service_deployment_events): its one resource is the service's ARN, which names the cluster."""
    return {
        "version": "0",
        "id": "ddca6449-b258-46c0-8653-e0e3a6example",
        "detail-type": "ECS Deployment State Change",
        "source": "aws.ecs",
        "account": world.account,
        "time": "2026-12-03T10:00:00Z",
        "region": world.region,
        "resources": [f"arn:aws:ecs:{world.region}:{world.account}:service/{cluster}/{service}"],
        "detail": {
            "eventType": "ERROR" if event_name.endswith("FAILED") else "INFO",
            "eventName": event_name,
            "deploymentId": "ecs-svc/1234567890123456789",
            "updatedAt": "2026-12-03T10:00:00Z",
            "reason": reason,
        },
    }


ROLLED_BACK = [
    ("SERVICE_DEPLOYMENT_FAILED", "ECS deployment circuit breaker: task failed to start."),
    ("SERVICE_DEPLOYMENT_FAILED", "ECS deployment alarms: gpu-inference-prod-minilm-rollback in ALARM."),
    (
        "SERVICE_DEPLOYMENT_IN_PROGRESS",
        "ECS deployment circuit breaker: rolling back to deploymentId ecs-svc/9876543210987654321.",
    ),
    ("SERVICE_DEPLOYMENT_IN_PROGRESS", "Rollback of service deployment to the previous service revision in progress."),
]
ROUTINE = [
    ("SERVICE_DEPLOYMENT_IN_PROGRESS", "ECS deployment ecs-svc/1234567890123456789 in progress."),
    ("SERVICE_DEPLOYMENT_COMPLETED", "ECS deployment ecs-svc/1234567890123456789 completed."),
]


def test_a_rolled_back_deployment_of_this_clusters_services_reaches_the_topic(world):
    """A deployment that ECS fails or rolls back (circuit breaker, rollback alarms, any strategy) is delivered to the
    topic: the rule's pattern, run through EventBridge's matcher (moto's), matches the failure and rollback events of
    this cluster's services and not another cluster's, nor a routine start or completion; and the topic and its key
    let this very rule publish."""
    topic, key = topic_and_key(world)
    (rule,) = [
        k
        for k, r in world.of_type("AWS::Events::Rule").items()
        if publishes_to(r, topic)
        and r["Properties"]["EventPattern"].get("detail-type") == ["ECS Deployment State Change"]
    ]
    pattern = EventPattern.load(json.dumps(world.resolve(world.resources[rule]["Properties"]["EventPattern"])))
    cluster = world.ref(world.only("AWS::ECS::Cluster"))
    for event_name, reason in ROLLED_BACK:
        assert pattern.matches_event(deployment_event(world, cluster, event_name, reason)), (event_name, reason)
        assert not pattern.matches_event(deployment_event(world, "another-cluster", event_name, reason)), (
            event_name,
            reason,
        )
        assert not pattern.matches_event(deployment_event(world, f"{cluster}x", event_name, reason)), (
            "a cluster whose name starts like ours"
        )
        other_account = deployment_event(world, cluster, event_name, reason)
        assert "resources" in other_account  # deployment_event always names the service
        other_account["resources"] = [r.replace(world.account, OTHER_ACCOUNT) for r in other_account["resources"]]
        assert not pattern.matches_event(other_account)
    for event_name, reason in ROUTINE:
        assert not pattern.matches_event(deployment_event(world, cluster, event_name, reason)), (event_name, reason)
    context = {**TLS, "aws:SourceAccount": world.account, "aws:SourceArn": world.arn(rule)}
    assert world.service_may("events.amazonaws.com", "sns:Publish", topic, world.ref(topic), context)
    for action in ("kms:GenerateDataKey", "kms:Decrypt"):
        assert world.service_may("events.amazonaws.com", action, key, world.arn(key), sns_key_context(world, topic)), (
            action
        )


def test_auto_scaling_group_events_reach_the_topic(world):
    """Launches and terminations of the GPU group, failed ones too, get to the topic by a route AWS allows.

    The group's own notification configuration would publish with the Auto Scaling service-linked role, which
    needs the key policy (it has no KMS permissions of its own); an EventBridge rule for the group publishes
    as events.amazonaws.com."""
    topic, key = topic_and_key(world)
    for group in world.of_type("AWS::AutoScaling::AutoScalingGroup"):  # the capacity and every capacity group
        assert_group_events_reach(world, group, topic, key)


def assert_group_events_reach(world, group: str, topic: str, key: str) -> None:
    # The service-linked role's managed policy allows sns:Publish but no KMS action on customer keys.
    publish = Policy(
        "AutoScalingServiceRolePolicy",
        "AutoScalingServiceRolePolicy",
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sns:Publish", "Resource": "*"}]},
    )
    role = principal(f"arn:aws:iam::{world.account}:{AUTOSCALING_ROLE}", [publish])
    for configuration in world.resources[group]["Properties"].get("NotificationConfigurations", []):
        assert configuration["TopicARN"] == {"Ref": topic}
        assert world.node_may(role, "kms:GenerateDataKey", world.arn(key), {}, key), (
            "the Auto Scaling service-linked role cannot use the topic's key: its notifications are dropped"
        )
    routes = [
        k
        for k, r in world.of_type("AWS::Events::Rule").items()
        if publishes_to(r, topic)
        and r["Properties"]["EventPattern"].get("source") == ["aws.autoscaling"]
        and r["Properties"]["EventPattern"]["detail"]["AutoScalingGroupName"] == [{"Ref": group}]
    ]
    assert len(routes) == 1
    detail_types = set(world.resources[routes[0]]["Properties"]["EventPattern"]["detail-type"])
    assert detail_types == {
        "EC2 Instance Launch Successful",
        "EC2 Instance Launch Unsuccessful",
        "EC2 Instance Terminate Successful",
        "EC2 Instance Terminate Unsuccessful",
    }


# --- The ECS agent on the GPU instances ----------------------------------------------------------------------


def instance_role(world: TemplateWorld) -> str:
    return world.only("AWS::IAM::Role", "GpuCapacityInstanceRole")


def test_the_ecs_agent_can_register_and_drain_its_instance_in_this_cluster_only(world):
    role, cluster = instance_role(world), world.only("AWS::ECS::Cluster")
    name = world.ref(cluster)
    ours = f"arn:aws:ecs:{world.region}:{world.account}:container-instance/{name}/0123456789abcdef"
    theirs = f"arn:aws:ecs:{world.region}:{world.account}:container-instance/another-cluster/0123456789abcdef"
    assert world.role_may(role, "ecs:UpdateContainerInstancesState", ours, {})
    assert not world.role_may(role, "ecs:UpdateContainerInstancesState", theirs, {})
    assert world.role_may(role, "ecs:RegisterContainerInstance", world.arn(cluster), {})
    assert not world.role_may(
        role, "ecs:RegisterContainerInstance", f"arn:aws:ecs:{world.region}:{world.account}:cluster/another-cluster", {}
    )


# --- CloudWatch Logs -> the log keys ---------------------------------------------------------------------------


def test_cloudwatch_logs_can_use_the_logs_key_for_this_accounts_log_groups_only(world):
    key = world.only("AWS::KMS::Key", "LogsKey")
    service = f"logs.{world.region}.amazonaws.com"
    groups = [
        k
        for k, r in world.of_type("AWS::Logs::LogGroup").items()
        if r["Properties"].get("KmsKeyId") == {"Fn::GetAtt": [key, "Arn"]}
    ]
    # each model's, its never-healthy hook's (canary, linear, blue/green), the task-start function's, and (with a warm
    # pool, prod) the launch function's
    hooks = [
        s
        for s in world.of_type("AWS::ECS::Service").values()
        if s["Properties"]["DeploymentConfiguration"].get("LifecycleHooks")
    ]
    assert len(groups) == len(world.of_type("AWS::ECS::Service")) + len(hooks) + 1 + len(
        world.of_type("AWS::AutoScaling::WarmPool")
    )
    for group in groups:
        context = {"kms:EncryptionContext:aws:logs:arn": world.log_group_arn(group)}
        for action in ("kms:GenerateDataKey", "kms:Encrypt", "kms:Decrypt"):
            assert world.service_may(service, action, key, world.arn(key), context), (group, action)
    foreign = {"kms:EncryptionContext:aws:logs:arn": f"arn:aws:logs:{world.region}:{OTHER_ACCOUNT}:log-group:theirs"}
    assert not world.service_may(service, "kms:GenerateDataKey", key, world.arn(key), foreign)


def test_cloudwatch_logs_can_use_the_flow_log_key_for_this_accounts_log_groups_only(network_world):
    world = network_world
    key = world.only("AWS::KMS::Key")
    (group,) = world.of_type("AWS::Logs::LogGroup")
    service = f"logs.{world.region}.amazonaws.com"
    assert world.service_may(
        service,
        "kms:GenerateDataKey",
        key,
        world.arn(key),
        {"kms:EncryptionContext:aws:logs:arn": world.log_group_arn(group)},
    )
    foreign = {"kms:EncryptionContext:aws:logs:arn": f"arn:aws:logs:{world.region}:{OTHER_ACCOUNT}:log-group:theirs"}
    assert not world.service_may(service, "kms:GenerateDataKey", key, world.arn(key), foreign)


# --- The load balancer -> the access-log bucket ------------------------------------------------------------------


def test_the_load_balancer_can_write_access_logs_under_its_prefix_for_this_account_only(world):
    (balancer,) = world.of_type("AWS::ElasticLoadBalancingV2::LoadBalancer").values()
    attributes = {a["Key"]: a["Value"] for a in balancer["Properties"]["LoadBalancerAttributes"]}
    bucket = attributes["access_logs.s3.bucket"]["Ref"]
    prefix = attributes["access_logs.s3.prefix"]
    elb = ELB_ACCOUNTS[world.region]
    key = f"{prefix}/AWSLogs/{world.account}/elasticloadbalancing/{world.region}/2026/12/03/file.log.gz"
    assert world.other_account_may(elb, "s3:PutObject", bucket, f"{world.arn(bucket)}/{key}", TLS)
    foreign = f"{prefix}/AWSLogs/{OTHER_ACCOUNT}/elasticloadbalancing/{world.region}/file.log.gz"
    assert not world.other_account_may(elb, "s3:PutObject", bucket, f"{world.arn(bucket)}/{foreign}", TLS)
    assert not world.other_account_may(OTHER_ACCOUNT, "s3:PutObject", bucket, f"{world.arn(bucket)}/{key}", TLS)


# --- Each model's roles ---------------------------------------------------------------------------------------------


def model_role(world: TemplateWorld, model: str, kind: str) -> str:
    return world.only("AWS::IAM::Role", f"Model{model.replace('-', '')}{kind}")


@pytest.fixture
def models(world, synthesized):
    environment = next(name for name, stage in synthesized.stages.items() if stage.config.account == world.account)
    return [m.name for m in synthesized.stages[environment].config.models]


@pytest.fixture
def pools(world, synthesized):
    """The environment's model pools (models[] entries with a pool block)."""
    environment = next(name for name, stage in synthesized.stages.items() if stage.config.account == world.account)
    config = synthesized.stages[environment].config
    return [m.name for m in config.models if config.server_config(m).pool is not None]


def test_each_task_role_reads_its_own_model_prefix_and_nothing_else(world, models, pools):
    bucket = world.only("AWS::S3::Bucket", "ModelStoreModels")
    objects = world.arn(bucket)
    for model in (m for m in models if m not in pools):
        role = model_role(world, model, "TaskRole")
        mine = f"{objects}/models/{model}/2026-11-01/model.safetensors"
        assert world.role_may(role, "s3:GetObject", mine, TLS, bucket), model
        assert not world.role_may(role, "s3:GetObject", mine, {"aws:SecureTransport": "false"}, bucket), (
            "the bucket denies plain HTTP"
        )
        for other in [m for m in models if m != model] + [f"{model}x"]:
            assert not world.role_may(
                role, "s3:GetObject", f"{objects}/models/{other}/2026-11-01/model.safetensors", TLS, bucket
            ), (model, other)
        assert not world.role_may(role, "s3:GetObject", f"{objects}/other/file", TLS, bucket)
        assert not world.role_may(role, "s3:PutObject", mine, TLS, bucket)
        assert world.role_may(
            role, "s3:ListBucket", objects, {**TLS, "s3:prefix": f"models/{model}/2026-11-01/"}, bucket
        )
        assert not world.role_may(role, "s3:ListBucket", objects, {**TLS, "s3:prefix": "models/"}, bucket)
        for pool in pools:
            assert not world.role_may(role, "s3:GetObject", f"{objects}/pools/{pool}/registry.json", TLS, bucket), (
                model,
                pool,
            )


def test_a_pools_task_role_reads_its_registry_and_models_and_nothing_else(world, models, pools):
    """A pool's tasks read ``pools/<pool>/registry.json`` and every model under ``pools/<pool>/models/``; no model
    service's files, no other pool's, and they write nothing there."""
    bucket = world.only("AWS::S3::Bucket", "ModelStoreModels")
    objects = world.arn(bucket)
    for pool in pools:
        role = model_role(world, pool, "TaskRole")
        registry, weights = (
            f"{objects}/pools/{pool}/registry.json",
            f"{objects}/pools/{pool}/models/tenant-001/3/model.safetensors",
        )
        assert world.role_may(role, "s3:GetObject", registry, TLS, bucket), pool
        assert world.role_may(role, "s3:GetObject", weights, TLS, bucket), pool
        assert not world.role_may(role, "s3:PutObject", registry, TLS, bucket)
        assert not world.role_may(role, "s3:GetObject", f"{objects}/pools/{pool}x/registry.json", TLS, bucket)
        for model in (m for m in models if m != pool):
            assert not world.role_may(
                role, "s3:GetObject", f"{objects}/models/{model}/2026-11-01/model.safetensors", TLS, bucket
            )
        assert not world.role_may(role, "s3:GetObject", f"{objects}/models/{pool}/pool/model.safetensors", TLS, bucket)
        assert world.role_may(role, "s3:ListBucket", objects, {**TLS, "s3:prefix": f"pools/{pool}/models/"}, bucket)
        assert not world.role_may(role, "s3:ListBucket", objects, {**TLS, "s3:prefix": "pools/"}, bucket)


def adapter_tasks(world: TemplateWorld) -> dict[str, str]:
    """Model name -> task role of each task definition with an ``adapter-sync`` sidecar (its registry's folder)."""
    found = {}
    for task in world.of_type("AWS::ECS::TaskDefinition").values():
        for container in task["Properties"]["ContainerDefinitions"]:
            if container["Name"] == "adapter-sync":
                environment = {e["Name"]: world.resolve(e["Value"]) for e in container["Environment"]}
                model = environment["ADAPTER_REGISTRY_URI"].split("/adapters/")[1].split("/")[0]
                found[model] = task["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0]
    return found


def test_a_task_with_lora_adapters_reads_its_models_adapters_and_registry_and_nothing_else(world, synthesized):
    """The sidecar's reads through the task role and the model store's bucket policy together (TLS only); staging's
    llama-13b serves adapters, the other environments none."""
    bucket = world.only("AWS::S3::Bucket", "ModelStoreModels")
    objects = world.arn(bucket)
    tasks = adapter_tasks(world)
    with_lora = "staging" if world.account == synthesized.stages["staging"].config.account else None
    assert (sorted(tasks) == ["llama-13b"]) if with_lora else not tasks
    for model, role in tasks.items():
        registry = f"{objects}/adapters/{model}/registry.json"
        weights = f"{objects}/adapters/{model}/customer-007/2/adapter_model.safetensors"
        assert world.role_may(role, "s3:GetObject", registry, TLS, bucket)
        assert world.role_may(role, "s3:GetObject", weights, TLS, bucket)
        assert not world.role_may(role, "s3:GetObject", registry, {"aws:SecureTransport": "false"}, bucket)
        assert not world.role_may(role, "s3:PutObject", registry, TLS, bucket)
        assert not world.role_may(role, "s3:GetObject", f"{objects}/adapters/{model}x/registry.json", TLS, bucket)
        assert world.role_may(role, "s3:ListBucket", objects, {**TLS, "s3:prefix": f"adapters/{model}/a/1/"}, bucket)
        assert not world.role_may(role, "s3:ListBucket", objects, {**TLS, "s3:prefix": "adapters/"}, bucket)


def test_each_execution_role_reads_the_api_key_secret_and_no_other(world, models):
    secret = world.only("AWS::SecretsManager::Secret")
    for model in models:
        role = model_role(world, model, "TaskDefinitionExecutionRole")
        assert world.role_may(role, "secretsmanager:GetSecretValue", world.arn(secret), TLS, secret), model
        other = f"arn:aws:secretsmanager:{world.region}:{world.account}:secret:someone-elses-AbCdEf"
        assert not world.role_may(role, "secretsmanager:GetSecretValue", other, TLS)
        task_role = model_role(world, model, "TaskRole")
        assert not world.role_may(task_role, "secretsmanager:GetSecretValue", world.arn(secret), TLS, secret), (
            "the task itself gets the keys only through ECS"
        )
        key = world.resources[secret]["Properties"]["KmsKeyId"]["Fn::GetAtt"][0]
        through_secrets_manager = {"kms:ViaService": f"secretsmanager.{world.region}.amazonaws.com"}
        assert world.role_may(role, "kms:Decrypt", world.arn(key), through_secrets_manager, key), model
        assert not world.role_may(role, "kms:Decrypt", world.arn(key), {}, key), "only through Secrets Manager"
        assert not world.role_may(task_role, "kms:Decrypt", world.arn(key), through_secrets_manager, key)
