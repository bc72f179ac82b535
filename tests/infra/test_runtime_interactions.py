"""Every call one part of an environment makes to another at run time, and what AWS decides about it.

Each interaction is evaluated by a real policy evaluator (tests/infra/aws_policies.py) over the synthesized
identity, resource and key policies together, conditions and explicit denies included; each has a negative
twin (another account, another prefix, another cluster) that must be denied.
"""

from __future__ import annotations

import pytest

from tests.infra.aws_policies import Policy, TemplateWorld, principal
from tests.infra.conftest import ENVIRONMENTS

OTHER_ACCOUNT = "999999999999"
TLS = {"aws:SecureTransport": "true"}
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


def test_every_alarm_that_notifies_can_publish_to_the_topic_and_use_its_key(world):
    topic, key = topic_and_key(world)
    alarms = [k for k, r in world.of_type("AWS::CloudWatch::Alarm").items() if publishes_to(r, topic)]
    assert len(alarms) >= 11
    for alarm in alarms:
        context = {**TLS, "aws:SourceAccount": world.account, "aws:SourceArn": world.arn(alarm)}
        assert world.service_may("cloudwatch.amazonaws.com", "sns:Publish", topic, world.ref(topic), context), alarm
        for action in ("kms:GenerateDataKey", "kms:Decrypt"):
            assert world.service_may("cloudwatch.amazonaws.com", action, key, world.arn(key), {}), (alarm, action)


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
    assert len(rules) >= 2
    for rule in rules:
        context = {**TLS, "aws:SourceAccount": world.account, "aws:SourceArn": world.arn(rule)}
        assert world.service_may("events.amazonaws.com", "sns:Publish", topic, world.ref(topic), context), rule
        assert world.service_may("events.amazonaws.com", "kms:GenerateDataKey", key, world.arn(key), {}), rule


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
    publish = Policy("AutoScalingServiceRolePolicy", "AutoScalingServiceRolePolicy",
                     {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sns:Publish", "Resource": "*"}]})
    role = principal(f"arn:aws:iam::{world.account}:{AUTOSCALING_ROLE}", [publish])
    for configuration in world.resources[group]["Properties"].get("NotificationConfigurations", []):
        assert configuration["TopicARN"] == {"Ref": topic}
        assert world.node_may(role, "kms:GenerateDataKey", world.arn(key), {}, key), "the Auto Scaling service-linked role cannot use the topic's key: its notifications are dropped"
    routes = [
        k for k, r in world.of_type("AWS::Events::Rule").items()
        if publishes_to(r, topic)
        and r["Properties"]["EventPattern"].get("source") == ["aws.autoscaling"]
        and r["Properties"]["EventPattern"]["detail"]["AutoScalingGroupName"] == [{"Ref": group}]
    ]
    assert len(routes) == 1
    detail_types = set(world.resources[routes[0]]["Properties"]["EventPattern"]["detail-type"])
    assert detail_types == {
        "EC2 Instance Launch Successful", "EC2 Instance Launch Unsuccessful",
        "EC2 Instance Terminate Successful", "EC2 Instance Terminate Unsuccessful",
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
    assert not world.role_may(role, "ecs:RegisterContainerInstance", f"arn:aws:ecs:{world.region}:{world.account}:cluster/another-cluster", {})


# --- CloudWatch Logs -> the log keys ---------------------------------------------------------------------------


def test_cloudwatch_logs_can_use_the_logs_key_for_this_accounts_log_groups_only(world):
    key = world.only("AWS::KMS::Key", "LogsKey")
    service = f"logs.{world.region}.amazonaws.com"
    groups = [k for k, r in world.of_type("AWS::Logs::LogGroup").items() if r["Properties"].get("KmsKeyId") == {"Fn::GetAtt": [key, "Arn"]}]
    assert len(groups) == len(world.of_type("AWS::ECS::Service"))
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
    assert world.service_may(service, "kms:GenerateDataKey", key, world.arn(key), {"kms:EncryptionContext:aws:logs:arn": world.log_group_arn(group)})
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


def test_each_task_role_reads_its_own_model_prefix_and_nothing_else(world, models):
    bucket = world.only("AWS::S3::Bucket", "ModelStoreModels")
    objects = world.arn(bucket)
    for model in models:
        role = model_role(world, model, "TaskRole")
        mine = f"{objects}/models/{model}/2026-11-01/model.safetensors"
        assert world.role_may(role, "s3:GetObject", mine, TLS, bucket), model
        assert not world.role_may(role, "s3:GetObject", mine, {"aws:SecureTransport": "false"}, bucket), "the bucket denies plain HTTP"
        for other in [m for m in models if m != model] + [f"{model}x"]:
            assert not world.role_may(role, "s3:GetObject", f"{objects}/models/{other}/2026-11-01/model.safetensors", TLS, bucket), (model, other)
        assert not world.role_may(role, "s3:GetObject", f"{objects}/other/file", TLS, bucket)
        assert not world.role_may(role, "s3:PutObject", mine, TLS, bucket)
        assert world.role_may(role, "s3:ListBucket", objects, {**TLS, "s3:prefix": f"models/{model}/2026-11-01/"}, bucket)
        assert not world.role_may(role, "s3:ListBucket", objects, {**TLS, "s3:prefix": "models/"}, bucket)


def test_each_execution_role_reads_the_api_key_secret_and_no_other(world, models):
    secret = world.only("AWS::SecretsManager::Secret")
    for model in models:
        role = model_role(world, model, "TaskDefinitionExecutionRole")
        assert world.role_may(role, "secretsmanager:GetSecretValue", world.arn(secret), TLS, secret), model
        other = f"arn:aws:secretsmanager:{world.region}:{world.account}:secret:someone-elses-AbCdEf"
        assert not world.role_may(role, "secretsmanager:GetSecretValue", other, TLS)
        task_role = model_role(world, model, "TaskRole")
        assert not world.role_may(task_role, "secretsmanager:GetSecretValue", world.arn(secret), TLS, secret), "the task itself gets the keys only through ECS"
        key = world.resources[secret]["Properties"]["KmsKeyId"]["Fn::GetAtt"][0]
        through_secrets_manager = {"kms:ViaService": f"secretsmanager.{world.region}.amazonaws.com"}
        assert world.role_may(role, "kms:Decrypt", world.arn(key), through_secrets_manager, key), model
        assert not world.role_may(role, "kms:Decrypt", world.arn(key), {}, key), "only through Secrets Manager"
        assert not world.role_may(task_role, "kms:Decrypt", world.arn(key), through_secrets_manager, key)
