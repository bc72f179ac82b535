"""Issue 53: an app of 0.2 meets one ConfigError per call listing every 0.2 keyword it used, each with what to write
(not Python's TypeError naming the first unknown keyword only), and a pure rename keeps working with a
DeprecationWarning. legacy_keywords.LEGACY_KEYWORDS is the one table: held here to the 0.2 API (api_0_2_0.json)
and to constructs/CHANGELOG.md. Written as a migrating team would: a plain cdk.App()."""

from __future__ import annotations

import json
import warnings
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from gpu_inference_constructs import (
    BundledServer,
    BundledServerProps,
    ConfigError,
    EcrImage,
    GpuCapacity,
    GpuCapacityProps,
    InferenceLoadBalancer,
    LoadBalancerProps,
    ModelBucket,
    ModelCacheProps,
    ModelProps,
    ModelService,
    ResultCache,
    ServiceLogs,
    TelemetryProps,
)
from gpu_inference_constructs.core.legacy_keywords import LEGACY_KEYWORDS
from gpu_inference_constructs.shared.cdk_interfaces import as_role
from tests.consumer.public_api import public_api
from tests.consumer.test_changelog_names_removals import CHANGELOG, RELEASE, removals, unlisted

ACCOUNT = "123456789012"


def team_stack(name: str) -> tuple[cdk.Stack, ec2.IVpc]:
    app = cdk.App()
    stack = cdk.Stack(app, name, env=cdk.Environment(account=ACCOUNT, region="eu-west-1"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0a1b2c3d4e5f67890",
        vpc_cidr_block="10.20.0.0/16",
        availability_zones=["eu-west-1a", "eu-west-1b"],
        private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"],
    )
    return stack, vpc


def test_the_table_holds_every_keyword_the_last_release_had_and_this_lacks_and_nothing_else():
    found = {(name, keyword) for name, keyword in removals(json.loads(RELEASE.read_text()), public_api()) if keyword}
    table = {(name, keyword) for name, keywords in LEGACY_KEYWORDS.items() for keyword in keywords}
    assert table == found


def test_every_row_of_the_table_is_in_the_changelog():
    rows: list[tuple[str, str | None]] = [
        (name, keyword) for name, keywords in LEGACY_KEYWORDS.items() for keyword in keywords
    ]
    assert unlisted(rows, CHANGELOG.read_text()) == []


def test_a_02_call_with_five_old_keywords_gets_one_config_error_naming_all_five_with_what_to_write():
    """0.2's environment_name= is a rename since issue 56's InferenceEnvironment: among others it is named too."""
    stack, vpc = team_stack("Migrated")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", f"search-models-{ACCOUNT}")
    key = kms.Key.from_key_arn(
        stack, "LogsKey", f"arn:aws:kms:eu-west-1:{ACCOUNT}:key/11111111-2222-4333-8444-555555555555"
    )
    gpus = GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps(instance_types=("g5.xlarge",)))
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=bucket,
        props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    of_02: dict[str, Any] = dict(model_bucket=bucket, models_prefix="models", logs_key=key, log_retention_days=30)
    with pytest.raises(ConfigError) as raised:
        ModelService(
            stack,
            "Embedder",
            model=ModelProps(name="embedder", version="v3"),
            environment_name="search",  # pyright: ignore[reportCallIssue]  # 0.2's keyword: the refusal is under test
            capacity=gpus,
            route=alb,
            **of_02,
        )
    error = raised.value
    assert error.key == "environment_name, model_bucket, models_prefix, logs_key, log_retention_days"
    message = str(error)
    assert "ModelService() got 5 keyword(s) of 0.2" in message
    assert "environment_name= -> environment= (an InferenceEnvironment" in message
    assert "model_bucket= -> model_source=ModelBucket(bucket, prefix=...)" in message
    assert "models_prefix= -> model_source=ModelBucket(bucket, prefix=...)" in message
    assert "logs_key= -> logs=ServiceLogs(key, retention_days=..., name_prefix=...)" in message
    assert "log_retention_days= -> logs=ServiceLogs(" in message


def test_props_of_02_name_every_moved_keyword_too():
    with pytest.raises(
        ConfigError,
        match=r"^gpu_utilization_percent, queue_depth_scale_out: .*"
        r"BundledScalingProps\(gpu_utilization_percent=.*BundledScalingProps\(queue_depth_scale_out=",
    ):
        from gpu_inference_constructs import ModelScalingProps

        of_02: dict[str, Any] = {"gpu_utilization_percent": 80, "queue_depth_scale_out": 8}
        ModelScalingProps(**of_02)


def test_a_pure_rename_keeps_working_with_a_deprecation_warning_and_the_same_template():
    def capacity(keyword: str) -> str:
        stack, vpc = team_stack("Renamed")
        topic: dict[str, Any] = {
            keyword: sns.Topic.from_topic_arn(stack, "Pager", f"arn:aws:sns:eu-west-1:{ACCOUNT}:search-pager")
        }
        GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps(instance_types=("g5.xlarge",)), **topic)
        return json.dumps(Template.from_stack(stack).to_json(), sort_keys=True)

    with pytest.warns(
        DeprecationWarning, match=r"notification_topic=\.\.\.\) is renamed topic=\.\.\..*refused after 0\.3"
    ):
        old = capacity("notification_topic")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = capacity("topic")
    assert old == new


def test_a_rename_beside_its_new_keyword_is_refused_naming_both():
    stack, vpc = team_stack("Both")
    topic = sns.Topic.from_topic_arn(stack, "Pager", f"arn:aws:sns:eu-west-1:{ACCOUNT}:search-pager")
    of_02: dict[str, Any] = {"notification_topic": topic}
    with pytest.raises(ConfigError, match=r"^notification_topic: .*notification_topic= -> topic="):
        GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps(instance_types=("g5.xlarge",)), topic=topic, **of_02)


def test_the_changelogs_attach_row_connects_the_cache_the_shared_cache_check_looks_for():
    """The CHANGELOG's replacement for 0.2's attach: ``cache.attach(container=..., task_role=..., service=...,
    props=...)``. It registers the cache, so a bundled model with shared_cache enabled synthesizes."""
    stack, vpc = team_stack("Cached")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", f"search-models-{ACCOUNT}")
    key = kms.Key.from_key_arn(
        stack, "LogsKey", f"arn:aws:kms:eu-west-1:{ACCOUNT}:key/11111111-2222-4333-8444-555555555555"
    )
    topic = sns.Topic.from_topic_arn(stack, "Pager", f"arn:aws:sns:eu-west-1:{ACCOUNT}:search-pager")
    gpus = GpuCapacity(stack, "Gpus", vpc=vpc, topic=topic, props=GpuCapacityProps(instance_types=("g5.xlarge",)))
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=bucket,
        props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    model = ModelService(
        stack,
        "Embedder",
        model=ModelProps(name="embedder", version="v3"),
        environment="search",
        server=BundledServer(BundledServerProps(shared_cache=ModelCacheProps(enabled=True))),
        capacity=gpus,
        model_source=ModelBucket(bucket),
        route=alb,
        logs=ServiceLogs(
            key,
            telemetry=TelemetryProps(
                collector_image=EcrImage(repository="mirror/cloudwatch-agent", tag="1.300059.0b1207")
            ),
        ),
    )
    cache = ResultCache(
        stack,
        "Cache",
        name="search-results",
        vpc=vpc,
        topic=topic,
        subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
    )
    cache.attach(
        container=model.container,
        task_role=as_role(model.task_role),
        service=model.service,
        props=ModelCacheProps(enabled=True),
    )
    assert model.result_cache is cache
    assert "SHARED_CACHE_ENDPOINT" in json.dumps(Template.from_stack(stack).to_json())  # synth: the check passes


def test_the_renamed_attribute_of_02_still_reads_with_a_deprecation_warning():
    stack, vpc = team_stack("Attribute")
    gpus = GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps(instance_types=("g5.xlarge",)))
    with pytest.warns(DeprecationWarning, match=r"GpuCapacity\.notification_topic is renamed GpuCapacity\.topic"):
        assert gpus.notification_topic is gpus.topic
