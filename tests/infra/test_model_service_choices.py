"""Issue 42: ModelService's choices (where tasks run, where the model comes from, how requests arrive) and its
optional knobs are types of their own; each checks its inputs, and anything else passed for one is refused naming
the key, not with jsii's TypeError."""

from __future__ import annotations

import inspect
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_s3 as s3

from gpu_inference_constructs import (
    CATALOG,
    BoundCapacity,
    BoundModelSource,
    BoundRoute,
    ClusterCapacity,
    ConfigError,
    InferenceLoadBalancer,
    ListenerRoute,
    LoadBalancerProps,
    LoadBalancerRoute,
    ModelBucket,
    ModelProps,
    ModelService,
    ModelSource,
    ServiceAccess,
    ServiceCapacity,
    ServiceLogs,
    ServiceRoute,
)
from tests.infra.test_server_contract import complete, on_cluster, stack_with_placement

KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-4333-8444-555555555555"


def test_model_service_takes_at_most_ten_keywords_and_no_image():
    parameters = inspect.signature(ModelService.__init__).parameters.values()
    keywords = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert len(keywords) <= 10, keywords
    assert "image" not in keywords
    stack, parts = stack_with_placement()
    with pytest.raises(
        ConfigError, match=r"^image: .*image= -> server=BundledServer\(image=\.\.\.\)"
    ):  # 0.2's keyword, named
        ModelService(
            stack,
            "M",
            model=ModelProps(name="mm", version="1"),
            capacity=on_cluster(stack, "g5.xlarge"),
            image=ecs.ContainerImage.from_registry("vllm/vllm-openai:v0.32.0"),  # pyright: ignore[reportCallIssue]  # image= is gone: the refusal is under test
            **parts,
        )


def test_the_choices_built_right_make_a_service():
    """The twin of the refusals below: the same parts, each of its own type, build."""
    stack, parts = stack_with_placement()
    service = ModelService(
        stack,
        "M",
        model=ModelProps(name="mm", version="1"),
        server=complete(),
        capacity=on_cluster(stack, "g5.xlarge"),
        **parts,
    )
    assert service.instance_type.name == "g5.xlarge" and service.listener_rule is not None


@pytest.mark.parametrize(
    "key, wrong, fix",
    [
        ("capacity", lambda stack, parts: on_cluster(stack, "g5.xlarge").cluster, "ClusterCapacity"),
        ("model_source", lambda stack, parts: parts["model_source"].bucket, "ModelBucket"),
        ("route", lambda stack, parts: parts["route"].listener, "ListenerRoute"),
        ("logs", lambda stack, parts: parts["logs"].key, "ServiceLogs"),
        ("access", lambda stack, parts: "allow", "ServiceAccess"),
        ("model", lambda stack, parts: {"name": "mm"}, "ModelProps"),
        ("server", lambda stack, parts: "vllm", "ServerContract"),
    ],
)
def test_a_wrong_type_for_a_choice_is_refused_naming_the_key(key, wrong, fix):
    stack, parts = stack_with_placement()
    arguments: dict[str, Any] = {
        "model": ModelProps(name="mm", version="1"),
        "server": complete(),
        "capacity": on_cluster(stack, "g5.xlarge"),
        **parts,
    }
    arguments[key] = wrong(stack, parts)
    with pytest.raises(ConfigError, match=rf"^{key}: got \w+: pass .*{fix}"):
        ModelService(stack, "M", **arguments)


def imported(stack: cdk.Stack) -> tuple[ecs.ICluster, s3.IBucket]:
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-east-1a"], private_subnet_ids=["subnet-1"]
    )
    return (
        ecs.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="c", vpc=vpc),
        s3.Bucket.from_bucket_name(stack, "Bucket", "models"),
    )


def test_cluster_capacity_checks_its_inputs():
    cluster, bucket = imported(cdk.Stack())
    assert ClusterCapacity(cluster, "gpus", "g5.xlarge").gpu_instance_type.gpus == 1
    with pytest.raises(ConfigError, match=r"^cluster: got .*ecs.ICluster"):
        ClusterCapacity(bucket, "gpus", "g5.xlarge")  # pyright: ignore[reportArgumentType]  # the refusal is under test
    with pytest.raises(ConfigError, match=r"^capacity_provider_name: '': pass the name"):
        ClusterCapacity(cluster, "", "g5.xlarge")
    with pytest.raises(ConfigError, match=r"^instance_type: "):
        ClusterCapacity(cluster, "gpus", "g5.huge")
    with pytest.raises(ConfigError, match=r"^instance_type: got int: .*name"):
        ClusterCapacity(cluster, "gpus", 5)  # pyright: ignore[reportArgumentType]  # the refusal is under test


def test_model_bucket_checks_its_inputs():
    cluster, bucket = imported(cdk.Stack())
    assert ModelBucket(bucket).prefix == "models" and ModelBucket(bucket, prefix="").prefix == ""
    with pytest.raises(ConfigError, match=r"^bucket: got .*s3.IBucket"):
        ModelBucket(cluster)  # pyright: ignore[reportArgumentType]  # the refusal is under test
    with pytest.raises(ConfigError, match=r"^prefix: 'models/\*': pass the folder"):
        ModelBucket(bucket, prefix="models/*")


def test_listener_route_checks_its_inputs():
    stack, parts = stack_with_placement()
    listener = parts["route"].listener
    assert ListenerRoute(listener, 50_000).priority == 50_000
    for bad in (0, 50_001):
        with pytest.raises(ConfigError, match=rf"^priority: {bad} .*1 to 50000"):
            ListenerRoute(listener, bad)
    for bad in ("10", True, None):
        with pytest.raises(ConfigError, match=r"^priority: .*whole number.*unique"):
            ListenerRoute(listener, bad)  # pyright: ignore[reportArgumentType]  # the refusal is under test
    with pytest.raises(ConfigError, match=r"^listener: got str: .*elbv2\.IApplicationListener"):
        ListenerRoute("arn:aws:elasticloadbalancing:...", 10)  # pyright: ignore[reportArgumentType]  # the refusal is under test
    with pytest.raises(ConfigError, match=r"^load_balancer: got .*IApplicationLoadBalancer"):
        ListenerRoute(listener, 10, load_balancer=listener)  # pyright: ignore[reportArgumentType]  # the refusal is under test


def test_load_balancer_route_checks_its_inputs():
    stack, parts = stack_with_placement()
    vpc = ec2.Vpc(stack, "AlbVpc", max_azs=2)
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=s3.Bucket(stack, "Logs"),
        props=LoadBalancerProps(allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    assert LoadBalancerRoute(alb).priority is None and LoadBalancerRoute(alb, priority=7).priority == 7
    with pytest.raises(ConfigError, match=r"^priority: 0 .*1 to 50000"):
        LoadBalancerRoute(alb, priority=0)
    with pytest.raises(ConfigError, match=r"^load_balancer: got \w+: .*InferenceLoadBalancer.*ListenerRoute"):
        LoadBalancerRoute(parts["route"].listener)  # pyright: ignore[reportArgumentType]  # the refusal is under test


def test_service_logs_and_access_check_their_inputs():
    stack, parts = stack_with_placement()
    key = parts["logs"].key
    assert ServiceLogs(key, retention_days=30, name_prefix="team-a").retention_days == 30
    with pytest.raises(ConfigError, match=r"^retention_days: 31 .*retention period"):
        ServiceLogs(key, retention_days=31)
    with pytest.raises(ConfigError, match=r"^name_prefix: 'Team_A': .*2-32 lowercase"):
        ServiceLogs(key, name_prefix="Team_A")
    with pytest.raises(ConfigError, match=r"^key: got str: .*kms\.IKey"):
        ServiceLogs(KEY_ARN)  # pyright: ignore[reportArgumentType]  # the refusal is under test
    assert ServiceAccess(allow_unauthenticated=True).allow_unauthenticated
    with pytest.raises(ConfigError, match=r"^allow_unauthenticated: 'yes': True or False"):
        ServiceAccess(allow_unauthenticated="yes")  # pyright: ignore[reportArgumentType]  # the refusal is under test
    with pytest.raises(ConfigError, match=r"^api_keys_secret: got str: .*secretsmanager\.ISecret"):
        ServiceAccess(api_keys_secret="team/api-keys")  # pyright: ignore[reportArgumentType]  # the refusal is under test
    with pytest.raises(ConfigError, match=r"^subnets: got list: .*ec2\.SubnetSelection"):
        ServiceAccess(subnets=["subnet-1"])  # pyright: ignore[reportArgumentType]  # the refusal is under test


def test_the_open_types_factories_build_the_built_in_choices():
    stack, parts = stack_with_placement()
    cluster, bucket, listener = (
        on_cluster(stack, "g5.xlarge").cluster,
        parts["model_source"].bucket,
        parts["route"].listener,
    )
    assert ServiceCapacity.from_capacity_provider(cluster, "gpus", "g5.xlarge", has_spot=False) == ClusterCapacity(
        cluster, "gpus", "g5.xlarge", has_spot=False
    )
    assert ModelSource.from_bucket(bucket, "serving") == ModelBucket(bucket, "serving")
    assert ServiceRoute.from_listener(listener, 10) == ListenerRoute(listener, 10)
    bound = ClusterCapacity(cluster, "gpus", "g5.xlarge").bind(stack)
    assert bound.capacity_provider_names == ["gpus"] and bound.fleet == (CATALOG["g5.xlarge"],)
    assert bound.group is None and bound.has_spot


def test_what_a_teams_bind_returns_is_checked_naming_the_key():
    stack, parts = stack_with_placement()
    cluster, bucket, listener = (
        on_cluster(stack, "g5.xlarge").cluster,
        parts["model_source"].bucket,
        parts["route"].listener,
    )
    gpus = ecs.CapacityProviderStrategy(capacity_provider="gpus", weight=1)
    assert BoundCapacity(cluster, [gpus], CATALOG["g5.xlarge"]).capacity_provider_names == ["gpus"]
    with pytest.raises(ConfigError, match=r"^capacity\.capacity_provider_strategies: \(\): pass at least one"):
        BoundCapacity(cluster, (), CATALOG["g5.xlarge"])
    spot = ecs.CapacityProviderStrategy(capacity_provider="spot", base=1, weight=3)
    for wrong in (
        (spot, ecs.CapacityProviderStrategy(capacity_provider="od", base=1)),
        (ecs.CapacityProviderStrategy(capacity_provider="gpus"),),
    ):
        with pytest.raises(ConfigError, match=r"^capacity\.capacity_provider_strategies: ECS takes a base on one"):
            BoundCapacity(cluster, wrong, CATALOG["g5.xlarge"])
    with pytest.raises(ConfigError, match=r"^capacity\.instance_type: pass catalog entries"):
        BoundCapacity(cluster, (gpus,), "g5.xlarge")  # pyright: ignore[reportArgumentType]  # the refusal is under test
    with pytest.raises(ConfigError, match=r"^capacity\.cluster: got str"):
        BoundCapacity("team-gpu", (gpus,), CATALOG["g5.xlarge"])  # pyright: ignore[reportArgumentType]  # under test
    with pytest.raises(ConfigError, match=r"^model_source\.prefix: 'a b': pass the folder"):
        BoundModelSource(bucket, "a b")
    with pytest.raises(ConfigError, match=r"^route\.priority: 0 .*1 to 50000"):
        BoundRoute(listener, 0)
    with pytest.raises(ConfigError, match=r"^route\.conditions: .*ListenerCondition"):
        BoundRoute(listener, 5, conditions=("ranker.example.com",))  # pyright: ignore[reportArgumentType]  # under test
    with pytest.raises(ConfigError, match=r"^route\.priority: is None: a rule on a listener needs a priority"):
        BoundRoute(listener).add_rule(stack, None)  # pyright: ignore[reportArgumentType]  # refused before the rule is read
