"""Issue 53: fifteen shared-GPU models in one stack failed with aws-cdk-lib's TooManyResourcesInStack ("511 is greater
than allowed maximum of 500", resource types only), and nothing in the library said what the repository's app does
(a stack per model). The library counts a stack's resources when the app synthesizes and names the largest parts and
the fix; ``stacks_per_model`` makes that fix one call. Written as the team wrote it: a plain cdk.App()."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns

from gpu_inference_constructs import (
    MAX_STACK_RESOURCES,
    BundledServer,
    BundledServerProps,
    EcrImage,
    GpuCapacity,
    GpuCapacityProps,
    GpuShare,
    InferenceLoadBalancer,
    InferenceMonitoring,
    InferenceNetwork,
    LoadBalancerProps,
    ModelAlarms,
    ModelBucket,
    ModelProps,
    ModelService,
    MonitoringProps,
    NetworkProps,
    ServiceLogs,
    ServiceScaling,
    TelemetryProps,
    WarmPoolProps,
    stacks_per_model,
)

ENV = cdk.Environment(account="123456789012", region="us-east-1")
NAMES = [f"{kind}-{i:02d}" for kind, count in (("classifier", 8), ("embedder", 7)) for i in range(1, count + 1)]

# The library's network has no NAT: the collector comes from the team's ECR mirror.
MIRRORED = TelemetryProps(collector_image=EcrImage(repository="mirror/aws-otel-collector", tag="v0.49.0"))


def shared_parts(stack: cdk.Stack) -> dict:
    network = InferenceNetwork(stack, "Network", props=NetworkProps(availability_zone_ids=("use1-az1", "use1-az2")))
    vpc = network.vpc
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "small-models-123456789012")
    gpus = GpuCapacity(
        stack,
        "SharedGpus",
        vpc=vpc,
        subnets=network.private_subnets,
        topic=sns.Topic.from_topic_arn(stack, "Pager", "arn:aws:sns:us-east-1:123456789012:pager"),
        props=GpuCapacityProps(instance_types=("g4dn.xlarge",), max_capacity=8, warm_pool=WarmPoolProps()),
    )
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=bucket,
        props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    key = kms.Key.from_key_arn(
        stack, "LogsKey", "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-4333-8444-555555555555"
    )
    InferenceMonitoring(
        stack,
        "Monitoring",
        environment_name="prod",
        model_names=NAMES,
        load_balancer=alb,
        capacity=gpus,
        topic=sns.Topic.from_topic_arn(stack, "Oncall", "arn:aws:sns:us-east-1:123456789012:pager"),
        props=MonitoringProps(),
    )
    return {"gpus": gpus, "alb": alb, "bucket": bucket, "key": key}


def add_model(stack: cdk.Stack, name: str, parts: dict) -> None:
    task = "text-classification" if name.startswith("classifier") else "text-embedding"
    service = ModelService(
        stack,
        name,
        model=ModelProps(
            name=name,
            version="1",
            cpu=256,
            memory_mib=1280,
            max_tasks=2,
            gpu_share=GpuShare(memory_mib=768, max_compute_percent=3),
        ),
        server=BundledServer(BundledServerProps(task=task)),
        capacity=parts["gpus"],
        model_source=ModelBucket(parts["bucket"]),
        route=parts["alb"],
        logs=ServiceLogs(parts["key"], telemetry=MIRRORED),
        environment="prod",
    )
    ServiceScaling(stack, f"{name}-scaling", service=service)
    ModelAlarms(
        stack,
        f"{name}-alarms",
        environment_name="prod",
        service=service,
        topic=sns.Topic.from_topic_arn(stack, f"{name}-pager", "arn:aws:sns:us-east-1:123456789012:pager"),
        props=MonitoringProps(),
    )


def test_fifteen_models_in_one_stack_fail_naming_the_count_the_largest_parts_and_the_fix():
    app = cdk.App()
    stack = cdk.Stack(app, "SmallModels", env=ENV)
    parts = shared_parts(stack)
    for name in NAMES:
        add_model(stack, name, parts)
    with pytest.raises(
        Exception,
        match=rf"stack SmallModels declares \d+ resources, more than CloudFormation's "
        rf"{MAX_STACK_RESOURCES} a stack .*the most: Network \d+, classifier-01 \d+.*stacks_per_model",
    ):
        app.synth()


def test_fifteen_models_a_stack_each_synthesize_each_stack_far_below_the_limit():
    app = cdk.App()
    shared = cdk.Stack(app, "SmallModelsShared", env=ENV)
    parts = shared_parts(shared)
    stacks = stacks_per_model(app, NAMES, id_prefix="SmallModel", env=ENV)
    assert list(stacks) == NAMES and stacks["embedder-07"].node.id == "SmallModel-embedder-07"
    for name, stack in stacks.items():
        add_model(stack, name, parts)
    assembly = app.synth()
    counts = {
        stack.stack_name: len(assembly.get_stack_by_name(stack.stack_name).template["Resources"])
        for stack in [shared, *stacks.values()]
    }
    assert max(counts.values()) < MAX_STACK_RESOURCES / 4, counts


def test_a_stack_near_the_limit_is_a_warning_and_one_past_it_an_error_before_cdks_own():
    from gpu_inference_constructs.service.stack_limits import watch_stack_resources

    def stack_of(count: int) -> tuple[cdk.App, cdk.Stack]:
        app = cdk.App()
        stack = cdk.Stack(app, "Near", env=ENV)
        for index in range(count):
            sns.CfnTopic(stack, f"Topic{index}")
        watch_stack_resources(stack)
        return app, stack

    app, stack = stack_of(420)
    app.synth()
    warnings = [entry.data for entry in stack.node.metadata if entry.type == "aws:cdk:warning"]
    assert any(
        "420 of CloudFormation's 500" in str(warning) and "stacks_per_model" in str(warning) for warning in warnings
    )
    app, _ = stack_of(501)
    with pytest.raises(Exception, match=r"\[Near\] stack Near declares 501 resources.*stacks_per_model"):
        app.synth()
