"""vLLM reading its weights straight from S3 (``VllmProps(weights="stream")``), in a team's own app: a bare
``cdk.App()``, an imported VPC and bucket, cdk-nag's AwsSolutions checks.

What vLLM will do with the task definition is proven against the template: the S3 URI in its command is one its task
role may read and list, the streamer's region comes from the environment (awsvpc tasks cannot reach instance
metadata), nothing is copied first, and the scratch volume is handed to vLLM's user before it starts.
"""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from cdk_nag import AwsSolutionsChecks

from gpu_inference_constructs import (
    ConfigError,
    EcrImage,
    GpuCapacity,
    GpuCapacityProps,
    InferenceLoadBalancer,
    LoadBalancerProps,
    ModelBucket,
    ModelProps,
    ModelService,
    ServiceLogs,
    VllmProps,
    VllmServer,
)
from gpu_inference_constructs.core.server_contract import (
    FETCHER_CPU,
    FETCHER_MEMORY_MIB,
    PrometheusMetrics,
)
from gpu_inference_constructs.servers.vllm import VLLM_METRICS
from tests.infra.aws_policies import TemplateWorld

ACCOUNT, REGION = "123456789012", "eu-west-1"
BUCKET = f"chat-weights-{ACCOUNT}"
TLS = {"aws:SecureTransport": "true"}
IMAGE = EcrImage(repository="mirror/vllm-openai", tag="v0.32.0")


def team_app(gpus: int, instance_type: str, **props) -> tuple[cdk.App, dict]:
    """The team's stack with one vLLM model on ``gpus`` GPUs; ``props``: VllmProps beside the image."""
    app = cdk.App()
    stack = cdk.Stack(app, "Chat", env=cdk.Environment(account=ACCOUNT, region=REGION))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0a1b2c3d4e5f67890",
        vpc_cidr_block="10.20.0.0/16",
        availability_zones=["eu-west-1a", "eu-west-1b"],
        private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"],
    )
    bucket = s3.Bucket.from_bucket_name(stack, "Weights", BUCKET)
    topic = sns.Topic.from_topic_arn(stack, "Pager", f"arn:aws:sns:{REGION}:{ACCOUNT}:chat-pager")
    capacity = GpuCapacity(
        stack, "Gpus", vpc=vpc, topic=topic, props=GpuCapacityProps(instance_types=(instance_type,), max_capacity=2)
    )
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=bucket,
        longest_request_seconds=80,
        props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    memory = 163840 if gpus > 1 else 24576
    ModelService(
        stack,
        "Llama",
        model=ModelProps(
            name="llama",
            version="2026-12-01",
            gpus=gpus,
            cpu=3072 * gpus,
            memory_mib=memory,
            min_tasks=1,
            max_tasks=1,
            expected_load_seconds=600,
        ),
        server=VllmServer(VllmProps(image=IMAGE, **props)),
        capacity=capacity,
        model_source=ModelBucket(bucket),
        route=alb,
        environment="chat",
        logs=ServiceLogs(
            kms.Key.from_key_arn(
                stack, "LogsKey", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/11111111-2222-4333-8444-555555555555"
            )
        ),
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, app.synth().get_stack_by_name(stack.stack_name).template


@pytest.fixture(scope="module")
def one_gpu() -> dict:
    return team_app(1, "g6e.xlarge", weights="stream")[1]


@pytest.fixture(scope="module")
def four_gpus() -> dict:
    return team_app(4, "g5.12xlarge", weights="stream")[1]


def containers(template: dict) -> dict:
    (task,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    return {c["Name"]: c for c in task["Properties"]["ContainerDefinitions"]}


def resolved_command(world: TemplateWorld, template: dict) -> list[str]:
    """What the container runs: its entry point, then its command (the image's own entry point never applies)."""
    server = containers(template)["server"]
    return [world.resolve(part) for part in [*server["EntryPoint"], *server["Command"]]]


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_vllm_serves_the_models_s3_uri_with_the_streaming_loader(one_gpu):
    world = TemplateWorld(one_gpu, ACCOUNT, REGION)
    command = resolved_command(world, one_gpu)
    assert command[:3] == ["vllm", "serve", f"s3://{BUCKET}/models/llama/2026-12-01/"]
    assert flag(command, "--load-format") == "runai_streamer"
    assert flag(command, "--served-model-name") == "llama"  # clients never see the bucket
    assert "--model-loader-extra-config" not in command  # one GPU: one reader


def test_on_several_gpus_each_rank_streams_its_share(four_gpus):
    command = resolved_command(TemplateWorld(four_gpus, ACCOUNT, REGION), four_gpus)
    assert flag(command, "--tensor-parallel-size") == "4"
    assert json.loads(flag(command, "--model-loader-extra-config")) == {"distributed": True}


def test_nothing_is_copied_and_scratch_belongs_to_vllms_user_before_it_starts(one_gpu):
    by_name = containers(one_gpu)
    assert set(by_name) == {"server", "scratch-owner", "metrics-collector"}
    owner = by_name["scratch-owner"]
    assert owner["Essential"] is False and "chown" in owner["Command"][0]
    assert (
        {e["Name"]: e["Value"] for e in owner["Environment"]}["SERVER_USER"] == by_name["server"]["User"] == "1000:1000"
    )
    assert by_name["server"]["DependsOn"] == [{"ContainerName": "scratch-owner", "Condition": "SUCCESS"}]


def test_the_streamer_takes_its_region_from_the_environment_and_a_bounded_buffer(one_gpu):
    world = TemplateWorld(one_gpu, ACCOUNT, REGION)
    environment = {e["Name"]: world.resolve(e["Value"]) for e in containers(one_gpu)["server"]["Environment"]}
    assert environment["AWS_REGION"] == environment["AWS_DEFAULT_REGION"] == REGION
    assert environment["AWS_EC2_METADATA_DISABLED"] == "true"
    assert environment["RUNAI_STREAMER_MEMORY_LIMIT"] == str(4096 * 1024 * 1024)
    assert environment["MODEL_URI"] == f"s3://{BUCKET}/models/llama/2026-12-01/"
    assert environment["HF_HUB_OFFLINE"] == "1"


def test_the_task_role_may_read_and_list_the_uri_in_vllms_command_and_nothing_else(one_gpu):
    world = TemplateWorld(one_gpu, ACCOUNT, REGION)
    uri = resolved_command(world, one_gpu)[2]
    key = uri.removeprefix(f"s3://{BUCKET}/")
    (role,) = [logical_id for logical_id in world.of_type("AWS::IAM::Role") if logical_id.startswith("LlamaTaskRole")]
    objects = f"arn:aws:s3:::{BUCKET}"
    for name in ("model-00001-of-00003.safetensors", "config.json", "tokenizer.json"):
        assert world.role_may(role, "s3:GetObject", f"{objects}/{key}{name}", TLS), name
    assert world.role_may(role, "s3:ListBucket", objects, {**TLS, "s3:prefix": key})
    assert not world.role_may(role, "s3:GetObject", f"{objects}/models/other/2026-12-01/model.safetensors", TLS)
    assert not world.role_may(role, "s3:ListBucket", objects, {**TLS, "s3:prefix": "models/"})
    assert not world.role_may(role, "s3:PutObject", f"{objects}/{key}model.safetensors", TLS)


def test_the_scratch_owner_is_counted_in_the_tasks_size():
    streamed = VllmServer(VllmProps(image=IMAGE, weights="stream"))
    copied = VllmServer(VllmProps(image=IMAGE))
    collector = PrometheusMetrics(metrics=VLLM_METRICS)
    assert streamed.sidecar_reservation == (
        FETCHER_CPU + collector.collector_cpu,
        FETCHER_MEMORY_MIB + collector.collector_memory_mib,
    )
    assert copied.sidecar_reservation == (
        2 * FETCHER_CPU + collector.collector_cpu,
        2 * FETCHER_MEMORY_MIB + collector.collector_memory_mib,
    )


@pytest.mark.parametrize(
    "props, key",
    [
        (dict(extra_args=("--load-format=safetensors",)), "extra_args[0]"),
        (dict(extra_args=("--model-loader-extra-config", "{}")), "extra_args[0]"),
        (dict(weights="copied"), "weights"),
        (dict(stream_buffer_mib=512), "stream_buffer_mib"),
        (dict(stream_concurrency=0), "stream_concurrency"),
        (dict(weights="copy", stream_buffer_mib=8192), "stream_buffer_mib"),
        (dict(weights="copy", stream_concurrency=8), "stream_concurrency"),
    ],
)
def test_streaming_settings_that_cannot_work_are_refused_with_their_key(props, key):
    with pytest.raises(ConfigError) as raised:
        VllmProps(image=IMAGE, **{"weights": "stream", **props})
    assert raised.value.key == key


def test_a_buffer_per_gpu_process_that_does_not_fit_beside_shared_memory_is_refused():
    model = ModelProps(name="llama", version="2026-12-01", gpus=4, cpu=12288, memory_mib=40960)
    fits = VllmServer(VllmProps(image=IMAGE, weights="stream", shared_memory_mib=16384, stream_buffer_mib=4096))
    fits.check(model)  # 16384 + 4 x 4096 < 40960
    with pytest.raises(ConfigError) as raised:  # 16384 + 4 x 8192 > 40960, though 16384 + 8192 fits
        VllmServer(VllmProps(image=IMAGE, weights="stream", shared_memory_mib=16384, stream_buffer_mib=8192)).check(
            model
        )
    assert raised.value.key == "vllm.stream_buffer_mib" and "4 x 8192 MiB" in str(raised.value)


def test_the_streamers_concurrency_joins_the_loader_config():
    _, template = team_app(4, "g5.12xlarge", weights="stream", stream_concurrency=32)
    command = resolved_command(TemplateWorld(template, ACCOUNT, REGION), template)
    assert json.loads(flag(command, "--model-loader-extra-config")) == {"concurrency": 32, "distributed": True}


def test_the_streamers_environment_is_reserved_only_when_streaming():
    model = ModelProps(
        name="llama", version="2026-12-01", cpu=3072, memory_mib=24576, environment={"AWS_REGION": "us-west-2"}
    )
    VllmServer(VllmProps(image=IMAGE)).check(model)
    with pytest.raises(ConfigError) as raised:
        VllmServer(VllmProps(image=IMAGE, weights="stream")).check(model)
    assert "AWS_REGION" in str(raised.value)


def test_copying_stays_the_default_with_the_fetch_and_its_check():
    _, template = team_app(1, "g6e.xlarge")
    by_name = containers(template)
    assert {"scratch-owner", "model-fetch"} <= set(by_name)
    assert by_name["server"]["DependsOn"] == [{"ContainerName": "model-fetch", "Condition": "SUCCESS"}]
    assert [*by_name["server"]["EntryPoint"], by_name["server"]["Command"][0]] == ["vllm", "serve", "/scratch/model"]
    assert "--load-format" not in by_name["server"]["Command"]
