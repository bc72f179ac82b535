"""The server contract and the checks inside the constructs: what a consumer gets wrong fails at construction,
with a message that names what is missing or too large."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

import gpu_inference_constructs
from gpu_inference_constructs import (
    BundledServer,
    ConfigError,
    LivenessCheck,
    ModelFromS3,
    ModelProps,
    ModelService,
    PrometheusMetrics,
    ScalingSignal,
    ServerContract,
    VllmProps,
    VllmServer,
)
from stacks.config import load_environment
from tests.conftest import cdk_context

IMAGE = ecs.ContainerImage.from_registry("123456789012.dkr.ecr.us-east-1.amazonaws.com/team/server:1.0.0")


def complete(**overrides) -> ServerContract:
    values = dict(
        image=IMAGE,
        command=("serve",),
        port=9000,
        readiness_path="/ready",
        liveness=LivenessCheck(("CMD", "serve", "--alive")),
        user="1000:1000",
        model_source=ModelFromS3.server_downloads(),
    )
    return ServerContract(**{**values, **overrides})


def test_an_incomplete_contract_names_everything_it_misses():
    with pytest.raises(ConfigError) as error:
        ServerContract(image=IMAGE, command=("serve",), user="1000:1000")
    message = str(error.value)
    assert message.startswith("server.port: the custom server contract is incomplete; missing: port (")
    for name in ("port", "readiness_path", "liveness", "model_source"):
        assert f"{name} (" in message
    assert "image (" not in message and "command (" not in message


def test_an_empty_command_is_missing_too():
    with pytest.raises(ConfigError, match=r"missing: command \(the command that starts the server"):
        complete(command=())


@pytest.mark.parametrize(
    "overrides, key, message",
    [
        ({"user": "0"}, "server.user", "non-root"),
        ({"user": "root"}, "server.user", "non-root"),
        ({"user": "app"}, "server.user", "numeric"),
        ({"port": 80}, "server.port", "unprivileged"),
        ({"readiness_path": "health"}, "server.readiness_path", "absolute URL path"),
        ({"gpus_per_task": 9}, "server.gpus_per_task", "out of range"),
        ({"shared_memory_mib": 32}, "server.shared_memory_mib", "out of range"),
        ({"tmpfs_mib": {"/scratch/x": 10}}, "server.tmpfs_mib[/scratch/x]", "outside the scratch volume"),
        ({"environment": {"KEYS": "x"}, "api_keys_variable": "KEYS"}, "server.api_keys_variable", "also set as plain environment"),
        ({"public_paths": ("v1/*",)}, "server.public_paths", "absolute URL path pattern"),
        ({"public_paths": tuple(f"/p{i}/*" for i in range(6))}, "server.public_paths", "at most 5"),
    ],
)
def test_contract_values_are_checked(overrides, key, message):
    with pytest.raises(ConfigError) as error:
        complete(**overrides)
    assert error.value.key == key and message in error.value.detail


def test_liveness_and_signals_are_checked():
    with pytest.raises(ConfigError, match="must start with 'CMD' or 'CMD-SHELL'"):
        LivenessCheck(("curl", "-f", "http://127.0.0.1/health"))
    with pytest.raises(ConfigError, match="exactly one of target and scale_out_above"):
        ScalingSignal("queue", target=1, scale_out_above=2)
    with pytest.raises(ConfigError, match="not a Prometheus metric name"):
        PrometheusMetrics(metrics=("bad name",))
    with pytest.raises(ConfigError, match="under the scratch volume"):
        ModelFromS3.copy_to_scratch("/models")


def test_vllm_props_refuse_flags_they_own_and_bad_fractions():
    with pytest.raises(ConfigError, match=r"extra_args\[0\].*set from its own key"):
        VllmProps(extra_args=("--tensor-parallel-size=2",))
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        VllmProps(gpu_memory_utilization=1.0)
    with pytest.raises(ConfigError, match="pin an exact tag"):
        gpu_inference_constructs.EcrImage("mirror/vllm-openai", "latest")


def stack_with_placement(region: str = "us-east-1"):
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=cdk.Environment(account="123456789012", region=region))
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-east-1a"], private_subnet_ids=["subnet-1"])
    listener = elbv2.ApplicationListener.from_application_listener_attributes(
        stack, "Listener",
        listener_arn="arn:aws:elasticloadbalancing:us-east-1:123456789012:listener/app/lb/0123456789abcdef/0123456789abcdef",
        security_group=ec2.SecurityGroup.from_security_group_id(stack, "Sg", "sg-1"),
    )
    parts = dict(
        cluster=ecs.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="c", vpc=vpc),
        capacity_provider_name="gpus",
        model_bucket=s3.Bucket.from_bucket_name(stack, "Bucket", "models-bucket"),
        listener=listener,
        listener_priority=10,
        logs_key=kms.Key.from_key_arn(stack, "Key", "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-4333-8444-555555555555"),
        environment_name="test",
    )
    return stack, parts


@pytest.mark.parametrize(
    "model, instance_type, key, message",
    [
        (ModelProps(name="big", version="1", cpu=40000), "g5.xlarge", "models[big].cpu", "40000 CPU units does not fit on g5.xlarge"),
        (ModelProps(name="big", version="1", memory_mib=16384), "g5.xlarge", "models[big].memory_mib", "16384 MiB does not fit on g5.xlarge"),
        (ModelProps(name="llm", version="1", gpus=4, cpu=3072, memory_mib=12288, vllm=VllmProps(shared_memory_mib=4096)), "g5.2xlarge",
         "models[llm].gpus", "4 GPUs per task do not fit on g5.2xlarge (1 GPU)"),
    ],
)
def test_a_task_that_does_not_fit_fails_in_the_construct_itself(model, instance_type, key, message):
    """ModelProps(cpu=40000) used to pass construction: only the app's config loader checked the fit."""
    stack, parts = stack_with_placement()
    server = VllmServer(image=IMAGE) if model.vllm else BundledServer(IMAGE)
    with pytest.raises(ConfigError) as error:
        ModelService(stack, "M", model=model, server=server, instance_type=instance_type, **parts)
    assert error.value.key == key and message in error.value.detail


def test_the_fit_check_counts_the_sidecars():
    """vLLM's fetcher and collector reserve CPU and memory too: a server sized to the limit alone does not fit."""
    stack, parts = stack_with_placement()
    limit = int(192 * 1024 * 0.90)
    model = ModelProps(name="llm", version="1", gpus=4, cpu=45056, memory_mib=limit, vllm=VllmProps())
    with pytest.raises(ConfigError, match=rf"{limit + 512} MiB does not fit on g5.12xlarge"):
        ModelService(stack, "M", model=model, server=VllmServer(image=IMAGE), instance_type="g5.12xlarge", **parts)


@pytest.mark.parametrize(
    "change, key, message",
    [
        ({"instance_type": None}, "instance_type", "missing: instance_type"),
        ({"listener_priority": None}, "listener_priority", "is missing"),
        ({"model_bucket": None}, "model_store", "exactly one of model_store or model_bucket (got neither)"),
        ({"listener": None}, "load_balancer", "exactly one of load_balancer or listener (got neither)"),
        ({"server": None}, "server", "is missing"),
    ],
)
def test_missing_parts_are_named(change, key, message):
    stack, parts = stack_with_placement()
    arguments = {**parts, "instance_type": "g5.xlarge", "server": complete(), **change}
    with pytest.raises(ConfigError) as error:
        ModelService(stack, "M", model=ModelProps(name="mm", version="1"), **{k: v for k, v in arguments.items() if v is not None})
    assert error.value.key == key and message in error.value.detail


def test_the_bundled_server_takes_one_gpu_and_vllm_needs_an_image():
    stack, parts = stack_with_placement()
    with pytest.raises(ConfigError, match="one GPU per task"):
        ModelService(stack, "A", model=ModelProps(name="aa", version="1", gpus=4), server=BundledServer(IMAGE), instance_type="g5.12xlarge", **parts)
    stack, parts = stack_with_placement()
    with pytest.raises(ConfigError, match=r"vllm.image: is missing"):
        ModelService(stack, "B", model=ModelProps(name="bb", version="1", gpus=1), server=VllmServer(), instance_type="g5.xlarge", **parts)


def test_a_secret_needs_a_variable_in_the_contract():
    from aws_cdk import aws_secretsmanager as secretsmanager

    stack, parts = stack_with_placement()
    secret = secretsmanager.Secret.from_secret_name_v2(stack, "Keys", "keys")
    with pytest.raises(ConfigError, match="names no api_keys_variable"):
        ModelService(stack, "M", model=ModelProps(name="mm", version="1"), server=complete(), instance_type="g5.xlarge", api_keys_secret=secret, **parts)


def test_a_server_that_serves_at_its_root_gets_the_prefix_stripped_and_ours_does_not():
    stack, parts = stack_with_placement()
    ModelService(stack, "Root", model=ModelProps(name="root", version="1"), server=complete(), instance_type="g5.xlarge", **parts)
    ModelService(stack, "Ours", model=ModelProps(name="ours", version="1"), server=BundledServer(IMAGE), instance_type="g5.xlarge",
                 **{**parts, "listener_priority": 11})
    rules = {r["Properties"]["Priority"]: r["Properties"] for r in Template.from_stack(stack).find_resources("AWS::ElasticLoadBalancingV2::ListenerRule").values()}
    assert rules[10]["Transforms"] == [{"Type": "url-rewrite", "UrlRewriteConfig": {"Rewrites": [{"Regex": "^/root/(.*)$", "Replace": "/$1"}]}}]
    assert "Transforms" not in rules[11], "the bundled server serves under /<model>/ itself"


def test_everything_a_consumer_needs_is_exported_with_documented_defaults():
    for name in ("ServiceScaling", "InferenceMonitoring", "ModelScalingProps", "ScalingProps", "PredictiveScalingProps", "MonitoringProps",
                 "ServerContract", "BundledServer", "VllmServer", "VllmProps", "LivenessCheck", "ModelFromS3", "PrometheusMetrics",
                 "ScalingSignal", "ModelService", "ModelProps", "GpuCapacity", "ModelStore", "InferenceLoadBalancer", "grant_logs_service"):
        assert name in gpu_inference_constructs.__all__, name
    for name in gpu_inference_constructs.__all__:
        value = getattr(gpu_inference_constructs, name)
        if isinstance(value, type):
            assert value.__doc__ and len(value.__doc__) > 40, f"{name} needs a docstring"
    for props in ("ModelScalingProps", "ScalingProps", "PredictiveScalingProps", "MonitoringProps", "ServerContract", "VllmProps", "ModelProps"):
        assert "efault" in getattr(gpu_inference_constructs, props).__doc__, f"{props}' docstring states its defaults"


def environment_with(**changes) -> dict:
    data = dict(cdk_context()["environments"]["staging"])
    data.update(changes)
    return data


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"capacity_groups": {}}, r"models\[2\].gpus: 4 GPUs per task do not fit on g5.xlarge .* \(it runs on capacity; place it in a capacity group"),
        ({"capacity_groups": {"llm": {"capacity": {"instance_types": ["g5.12xlarge"]}, "models": ["nope"]}}}, r"capacity_groups.llm.models\[0\]: 'nope' is not a model"),
        ({"capacity_groups": {"llm": {"capacity": {"instance_types": ["g5.12xlarge"]}, "models": []}}}, r"capacity_groups.llm.models: list the models"),
        ({"capacity_groups": {"LLM": {"capacity": {"instance_types": ["g5.12xlarge"]}, "models": ["llama-13b"]}}}, r"capacity_groups.LLM: group names"),
        ({"capacity_groups": {"llm": {"capacity": {"instance_types": ["g5.12xlarge", "g5.2xlarge"]}, "models": ["llama-13b"]}}}, r"capacity_groups.llm.capacity.instance_types\[1\]: g5.2xlarge has shape"),
        ({"capacity_groups": {"a": {"capacity": {"instance_types": ["g5.12xlarge"]}, "models": ["llama-13b"]},
                              "b": {"capacity": {"instance_types": ["g6.12xlarge"]}, "models": ["llama-13b"]}}}, r"capacity_groups.b.models\[0\]: 'llama-13b' is already placed"),
    ],
)
def test_capacity_groups_are_validated_with_the_key_and_the_fix(changes, message):
    with pytest.raises(ConfigError, match=message):
        load_environment("staging", environment_with(**changes))


def test_staging_places_the_llm_on_four_gpu_instances():
    config = load_environment("staging", environment_with())
    (llm,) = [m for m in config.models if m.vllm is not None]
    assert config.model_placement() == {llm.name: "llm"}
    smallest = config.group_capacity("llm").smallest_instance_type(config.region)
    assert (smallest.gpus, llm.gpus) == (4, 4)


def test_tgi_and_triton_contracts_synthesize_with_their_own_ports_paths_and_metrics():
    """What the closing note tells a team to write for TGI and Triton: both synthesize, route and scrape as declared."""
    import json

    from gpu_inference_constructs import ScalingSignal

    stack, parts = stack_with_placement()
    tgi = ServerContract(
        name="tgi", image=IMAGE,
        command=("--model-id", "/scratch/model", "--port", "8080", "--hostname", "0.0.0.0", "--num-shard", "4"),
        port=8080, readiness_path="/health", liveness=LivenessCheck(("CMD", "curl", "-f", "http://127.0.0.1:8080/health")),
        user="1000:1000", model_source=ModelFromS3.copy_to_scratch(), gpus_per_task=4, shared_memory_mib=16384,
        environment={"HF_HUB_OFFLINE": "1", "HOME": "/scratch/home", "HUGGINGFACE_HUB_CACHE": "/scratch/cache"},
        metrics=PrometheusMetrics(metrics=("tgi_queue_size", "tgi_batch_current_size")),
        scaling_signals=(ScalingSignal("tgi_queue_size", statistic="Maximum", scale_out_above=8),),
    )
    triton = ServerContract(
        name="triton", image=IMAGE,
        command=("tritonserver", "--model-repository=/scratch/model", "--http-port=8000", "--metrics-port=8002"),
        port=8000, readiness_path="/v2/health/ready", liveness=LivenessCheck(("CMD", "curl", "-f", "http://127.0.0.1:8000/v2/health/live")),
        user="1000:1000", model_source=ModelFromS3.copy_to_scratch(), shared_memory_mib=4096,
        metrics=PrometheusMetrics(metrics=("nv_inference_pending_request_count",), port=8002),
        scaling_signals=(ScalingSignal("nv_inference_pending_request_count", statistic="Maximum", scale_out_above=16),),
    )
    ModelService(stack, "Tgi", model=ModelProps(name="tgi-llm", version="1", gpus=4, cpu=40960, memory_mib=131072),
                 server=tgi, instance_type="g5.12xlarge", **parts)
    ModelService(stack, "Triton", model=ModelProps(name="triton-bert", version="1"), server=triton, instance_type="g5.xlarge",
                 **{**parts, "listener_priority": 11})
    template = Template.from_stack(stack).to_json()
    groups = {r["Properties"]["HealthCheckPath"]: r["Properties"]["Port"] for r in template["Resources"].values()
              if r["Type"] == "AWS::ElasticLoadBalancingV2::TargetGroup"}
    assert groups == {"/health": 8080, "/v2/health/ready": 8000}
    scrapes = {}
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::ECS::TaskDefinition":
            by_name = {c["Name"]: c for c in resource["Properties"]["ContainerDefinitions"]}
            config = next(e["Value"] for e in by_name["metrics-collector"]["Environment"] if e["Name"] == "PROMETHEUS_CONFIG_CONTENT")
            scrapes[by_name["server"]["Command"][0]] = json.loads(config)["scrape_configs"][0]["static_configs"][0]["targets"]
            gpus = by_name["server"]["ResourceRequirements"][0]["Value"]
            assert gpus == ("4" if by_name["server"]["Command"][0] == "--model-id" else "1")
    assert scrapes == {"--model-id": ["127.0.0.1:8080"], "tritonserver": ["127.0.0.1:8002"]}
