"""The bundled server with ``runtime="compile"``, in a team's own app (a bare ``cdk.App()``, an imported VPC, the
library's ModelStore, cdk-nag's AwsSolutions checks): the task is told where its compile cache lives, and AWS will
let it read there and create an archive there (never replace one), with the bucket's policy evaluated beside the
role's, and write nowhere else."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from cdk_nag import AwsSolutionsChecks

from gpu_inference_constructs import (
    BundledServer,
    BundledServerProps,
    GpuCapacity,
    GpuCapacityProps,
    InferenceLoadBalancer,
    LoadBalancerProps,
    ModelBucket,
    ModelProps,
    ModelService,
    ModelStore,
    ModelStoreProps,
    ServiceLogs,
)
from tests.infra.aws_policies import TemplateWorld

ACCOUNT, REGION = "123456789012", "eu-west-1"
TLS = {"aws:SecureTransport": "true"}


def team_app(runtime: str) -> tuple[dict, TemplateWorld, str]:
    app = cdk.App()
    stack = cdk.Stack(app, "Search", env=cdk.Environment(account=ACCOUNT, region=REGION))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0a1b2c3d4e5f67890",
        vpc_cidr_block="10.20.0.0/16",
        availability_zones=["eu-west-1a", "eu-west-1b"],
        private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"],
    )
    store = ModelStore(stack, "Store", props=ModelStoreProps())
    topic = sns.Topic.from_topic_arn(stack, "Pager", f"arn:aws:sns:{REGION}:{ACCOUNT}:search-pager")
    capacity = GpuCapacity(
        stack, "Gpus", vpc=vpc, topic=topic, props=GpuCapacityProps(instance_types=("g5.xlarge",), max_capacity=4)
    )
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=store.access_logs_bucket,
        longest_request_seconds=30,
        props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    ModelService(
        stack,
        "Embedder",
        model=ModelProps(name="embedder", version="2026-12-05", min_tasks=1, max_tasks=2),
        server=BundledServer(BundledServerProps(runtime=runtime)),
        capacity=capacity,
        model_source=ModelBucket(store.bucket),
        route=alb,
        environment="search",
        logs=ServiceLogs(
            kms.Key.from_key_arn(
                stack, "LogsKey", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/11111111-2222-4333-8444-555555555555"
            )
        ),
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    template = app.synth().get_stack_by_name(stack.stack_name).template
    world = TemplateWorld(template, ACCOUNT, REGION)
    (bucket_id,) = [i for i in world.of_type("AWS::S3::Bucket") if i.startswith("StoreModels")]
    return template, world, bucket_id


@pytest.fixture(scope="module")
def compiled():
    return team_app("compile")


def server_environment(template: dict, world: TemplateWorld) -> dict[str, str]:
    (task,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    (server,) = [c for c in task["Properties"]["ContainerDefinitions"] if c["Name"] == "server"]
    return {e["Name"]: world.resolve(e["Value"]) for e in server["Environment"]}


def test_the_server_is_told_where_its_compile_cache_lives(compiled):
    template, world, _ = compiled
    environment = server_environment(template, world)
    assert environment["MODEL_RUNTIME"] == "compile"
    model_uri, cache_uri = environment["MODEL_URI"], environment["COMPILE_CACHE_URI"]
    assert model_uri.endswith("/models/embedder/2026-12-05/")
    assert cache_uri == model_uri.replace("/models/embedder/2026-12-05/", "/models/embedder/.compile-cache/2026-12-05/")


def test_the_task_may_read_its_cache_and_only_create_one_and_write_nothing_else(compiled):
    template, world, bucket_id = compiled
    environment = server_environment(template, world)
    (role,) = [i for i in world.of_type("AWS::IAM::Role") if i.startswith("EmbedderTaskRole")]
    bucket_arn = "arn:aws:s3:::" + environment["MODEL_URI"].removeprefix("s3://").split("/", 1)[0]
    cache_key = environment["COMPILE_CACHE_URI"].split("/", 3)[3] + "torch-2.13.0-cu128-py311-cuda-sm86.tar.gz"
    new_object = {**TLS, "s3:if-none-match": "*"}  # what the server sends: a PUT that never replaces
    assert world.role_may(role, "s3:GetObject", f"{bucket_arn}/{cache_key}", TLS, resource_id=bucket_id)
    assert world.role_may(role, "s3:PutObject", f"{bucket_arn}/{cache_key}", new_object, resource_id=bucket_id)
    # An archive already there cannot be replaced: a PUT without If-None-Match is refused.
    assert not world.role_may(role, "s3:PutObject", f"{bucket_arn}/{cache_key}", TLS, resource_id=bucket_id)
    assert not world.role_may(
        role,
        "s3:PutObject",
        f"{bucket_arn}/{cache_key}",
        {**new_object, "aws:SecureTransport": "false"},
        resource_id=bucket_id,
    )
    for elsewhere in (
        "models/embedder/2026-12-05/model.safetensors",
        "models/embedder/.compile-cache-other/x",
        "models/other/.compile-cache/2026-12-05/x",
    ):
        assert not world.role_may(
            role, "s3:PutObject", f"{bucket_arn}/{elsewhere}", new_object, resource_id=bucket_id
        ), elsewhere


def test_an_eager_server_gets_no_cache_and_no_write():
    template, world, _ = team_app("eager")
    assert "COMPILE_CACHE_URI" not in server_environment(template, world)
    statements = [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert not [s for s in statements if "s3:PutObject" in str(s["Action"])]
