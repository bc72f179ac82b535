"""Issue 55: a team's app in a plain ``cdk.App()`` serving a hundred fine-tunes of one LLM as LoRA adapters over one
vLLM base (``VllmProps(lora=LoraSettings(...))``) on its own imported VPC, bucket and API-key secret, cdk-nag's
AwsSolutions checks on.

What AWS and the containers will do with the template is proven against it: the ``adapter-sync`` sidecar's
environment is the seam's (/work/notes/lora-contract.md, docs/lora-adapters.md) and every value resolves to this
task's own bucket, port and key; its role may read this model's adapters and registry and nothing else; the target
group checks the sidecar's ``/ready`` and the tasks' security group lets the load balancer reach it; ECS stops the
server (its whole drain) before the sidecar; vLLM's load/unload routes are never reachable through the listener."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match
from cdk_nag import AwsSolutionsChecks

from gpu_inference_constructs import (
    ConfigError,
    EcrImage,
    GpuCapacity,
    GpuCapacityProps,
    InferenceLoadBalancer,
    LoadBalancerProps,
    LoraBaseModel,
    LoraSettings,
    ModelBucket,
    ModelProps,
    ModelService,
    ServiceAccess,
    ServiceLogs,
    SglangProps,
    SglangServer,
    VllmProps,
    VllmServer,
)
from gpu_inference_constructs.core.adapter_sync import ADAPTER_SYNC_CPU, ADAPTER_SYNC_MEMORY_MIB
from gpu_inference_constructs.servers.lora_contract import LORA_MEMORY_UNCHECKED
from inference_server.adapters import request_log
from inference_server.adapters.sidecar_settings import SidecarSettings, load_sidecar_settings
from tests.infra.aws_policies import TemplateWorld

ACCOUNT, REGION = "123456789012", "eu-west-1"
BUCKET = f"chat-weights-{ACCOUNT}"
SECRET_ARN = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:chat/api-keys-AbCdEf"
TLS = {"aws:SecureTransport": "true"}
IMAGE = EcrImage(repository="mirror/vllm-openai", tag="v0.32.0")
# Llama-2-7B's config.json.
LLAMA_7B = LoraBaseModel(params=6.74e9, layers=32, hidden_size=4096, intermediate_size=11008, heads=32)
LORA = LoraSettings(max_gpu_adapters=8, max_cpu_adapters=32, max_rank=16, expected_adapters=100, base=LLAMA_7B)


def team_app(server, instance_type: str = "g6e.xlarge") -> tuple[cdk.App, cdk.Stack, ModelService]:
    """The team's stack: one model, ``server``, on a single-GPU type; nothing of the team's is built here."""
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
        stack, "Gpus", vpc=vpc, topic=topic, props=GpuCapacityProps(instance_types=(instance_type,), max_capacity=4)
    )
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=bucket,
        longest_request_seconds=80,
        props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    service = ModelService(
        stack,
        "Llama",
        model=ModelProps(
            name="llama",
            version="2026-12-01",
            cpu=2944,  # what g6e.xlarge leaves beside the sidecars (the adapter sync's 128 CPU units counted)
            memory_mib=24576,
            min_tasks=1,
            max_tasks=2,
            expected_load_seconds=600,
        ),
        server=server,
        capacity=capacity,
        model_source=ModelBucket(bucket),
        route=alb,
        environment="chat",
        access=ServiceAccess(api_keys_secret=secretsmanager.Secret.from_secret_complete_arn(stack, "Keys", SECRET_ARN)),
        logs=ServiceLogs(
            kms.Key.from_key_arn(
                stack, "LogsKey", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/11111111-2222-4333-8444-555555555555"
            )
        ),
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack, service


@pytest.fixture(scope="module")
def synthesized() -> tuple[dict, cdk.Stack]:
    app, stack, _ = team_app(VllmServer(VllmProps(image=IMAGE, lora=LORA)))
    return app.synth().get_stack_by_name(stack.stack_name).template, stack


@pytest.fixture(scope="module")
def template(synthesized) -> dict:
    return synthesized[0]


@pytest.fixture(scope="module")
def world(template) -> TemplateWorld:
    return TemplateWorld(template, ACCOUNT, REGION)


def containers(template: dict) -> dict:
    (task,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    return {c["Name"]: c for c in task["Properties"]["ContainerDefinitions"]}


def only(template: dict, kind: str) -> dict:
    (found,) = [r for r in template["Resources"].values() if r["Type"] == kind]
    return found


def resolved_environment(world: TemplateWorld, container: dict) -> dict[str, str]:
    return {e["Name"]: world.resolve(e["Value"]) for e in container.get("Environment", [])}


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_vllm_starts_with_its_lora_flags_and_runtime_loading_on(template, world):
    server = containers(template)["server"]
    command = [world.resolve(part) for part in server["Command"]]
    assert "--enable-lora" in command
    assert flag(command, "--max-loras") == "8"
    assert flag(command, "--max-cpu-loras") == "32"
    assert flag(command, "--max-lora-rank") == "16"
    assert resolved_environment(world, server)["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_the_sidecar_gets_the_seams_environment_resolved_to_this_task(template, world):
    by_name = containers(template)
    sidecar, server = by_name["adapter-sync"], by_name["server"]
    assert sidecar["Command"] == ["python", "-m", "inference_server.adapters"]
    assert resolved_environment(world, sidecar) == {
        "DEPLOYMENT_ENV": "chat",
        "ADAPTER_REGISTRY_URI": f"s3://{BUCKET}/adapters/llama/registry.json",
        "ADAPTER_DIR": "/adapters",
        "ADAPTER_SERVER_URL": f"http://127.0.0.1:{server['PortMappings'][0]['ContainerPort']}",
        "ADAPTER_SERVER_KIND": "vllm",
        "ADAPTER_POLL_SECONDS": "10",
        "ADAPTER_MAX_RANK": "16",
        "ADAPTER_READY_PORT": "8081",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
    }
    # What the library sets is what the sidecar reads: its own settings parse it (a name it does not know would be
    # ignored there, so each one is also one of its fields).
    variables = {field.metadata["variable"] for field in dataclasses.fields(SidecarSettings)}
    assert set(resolved_environment(world, sidecar)) - {"AWS_REGION", "AWS_DEFAULT_REGION"} <= variables
    settings = load_sidecar_settings({**resolved_environment(world, sidecar), "ADAPTER_SERVER_API_KEY": "k"})
    assert (settings.deployment_env, settings.ready_port, settings.server_kind) == ("chat", 8081, "vllm")
    # The same key vLLM takes (VLLM_API_KEY), from the same secret and JSON key.
    (sidecar_key,) = sidecar["Secrets"]
    (server_key,) = [s for s in server["Secrets"] if s["Name"] == "VLLM_API_KEY"]
    assert sidecar_key["Name"] == "ADAPTER_SERVER_API_KEY"
    assert world.resolve(sidecar_key["ValueFrom"]) == world.resolve(server_key["ValueFrom"])
    assert world.resolve(sidecar_key["ValueFrom"]).startswith(SECRET_ARN + ":default::")


def test_the_adapters_volume_is_the_sidecars_to_write_and_the_servers_to_read(template):
    by_name = containers(template)
    task = only(template, "AWS::ECS::TaskDefinition")["Properties"]
    (volume,) = [v for v in task["Volumes"] if v["Name"] == "adapters"]
    assert volume["DockerVolumeConfiguration"]["Scope"] == "task"

    def mount(name: str) -> dict:
        (found,) = [m for m in by_name[name]["MountPoints"] if m["SourceVolume"] == "adapters"]
        return found

    assert mount("server") == {"ContainerPath": "/adapters", "SourceVolume": "adapters", "ReadOnly": True}
    assert mount("adapter-sync")["ReadOnly"] is False
    # Docker creates the volume root-owned: the scratch owner hands it to the user the sidecar and server run as.
    owner = by_name["scratch-owner"]
    assert mount("scratch-owner")["ReadOnly"] is False
    assert owner["Command"][0].endswith('chown -R "$SERVER_USER" /scratch /adapters')
    assert by_name["adapter-sync"]["User"] == by_name["server"]["User"] == "1000:1000"
    assert by_name["adapter-sync"]["ReadonlyRootFilesystem"] is True
    assert {"ContainerName": "scratch-owner", "Condition": "SUCCESS"} in by_name["adapter-sync"]["DependsOn"]


def test_the_sidecar_is_essential_and_stops_after_the_servers_drain(template):
    """ECS stops containers in the reverse order of their dependencies: the server depends on the sidecar having
    started, so on a stop the server drains first and the sidecar (quick to exit) is stopped after it."""
    by_name = containers(template)
    sidecar, server = by_name["adapter-sync"], by_name["server"]
    assert sidecar["Essential"] is True
    assert {"ContainerName": "adapter-sync", "Condition": "START"} in server["DependsOn"]
    assert sidecar["StopTimeout"] <= server["StopTimeout"]
    assert sidecar["LinuxParameters"]["Capabilities"]["Drop"] == ["ALL"]


def test_the_target_group_checks_the_sidecars_ready_and_the_load_balancer_may_reach_it(template, world):
    group = only(template, "AWS::ElasticLoadBalancingV2::TargetGroup")["Properties"]
    assert (group["HealthCheckPort"], group["HealthCheckPath"]) == ("8081", "/ready")
    ingress = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress" and r["Properties"].get("FromPort") == 8081
    ]
    assert ingress and all(r["ToPort"] == 8081 and "SourceSecurityGroupId" in r for r in ingress)
    balancer = next(
        r["Properties"]
        for logical_id, r in template["Resources"].items()
        if r["Type"] == "AWS::EC2::SecurityGroup" and logical_id.startswith("AlbSecurityGroup")
    )
    assert any(rule["FromPort"] == rule["ToPort"] == 8081 for rule in balancer["SecurityGroupEgress"]), (
        "the load balancer's group may send its health checks to the sidecar's port"
    )


def test_the_task_role_reads_this_models_adapters_and_registry_and_nothing_else(template, world):
    (role,) = [logical_id for logical_id in world.of_type("AWS::IAM::Role") if logical_id.startswith("LlamaTaskRole")]
    objects = f"arn:aws:s3:::{BUCKET}"
    for key in (
        "adapters/llama/registry.json",
        "adapters/llama/customer-001/3/adapter_model.safetensors",
        "adapters/llama/customer-001/3/manifest.json",
    ):
        assert world.role_may(role, "s3:GetObject", f"{objects}/{key}", TLS), key
    assert world.role_may(role, "s3:ListBucket", objects, {**TLS, "s3:prefix": "adapters/llama/customer-001/3/"})
    assert not world.role_may(role, "s3:GetObject", f"{objects}/adapters/other/registry.json", TLS)
    assert not world.role_may(role, "s3:GetObject", f"{objects}/adapters/llamax/registry.json", TLS)
    assert not world.role_may(role, "s3:PutObject", f"{objects}/adapters/llama/registry.json", TLS)
    assert not world.role_may(role, "s3:ListBucket", objects, {**TLS, "s3:prefix": "adapters/"})


def test_clients_reach_the_inference_routes_but_never_vllms_adapter_loading(template):
    rule = only(template, "AWS::ElasticLoadBalancingV2::ListenerRule")["Properties"]
    patterns = [
        value for condition in rule["Conditions"] for value in condition.get("PathPatternConfig", {}).get("Values", [])
    ]
    assert "/llama/v1/chat/completions" in patterns and "/llama/v1/models" in patterns
    assert not any(p.startswith("/llama/v1/*") or p.startswith("/llama/v1/load") for p in patterns), patterns


def test_the_default_sidecar_image_is_built_from_the_packages_server_image_and_a_mirror_replaces_it(template):
    image = containers(template)["adapter-sync"]["Image"]
    assert "cdk-hnb659fds-container-assets" in str(image)
    mirrored = LoraSettings(sidecar_image=EcrImage("mirror/adapter-sync", "0.3.0"), base=LLAMA_7B)
    app, stack, _ = team_app(VllmServer(VllmProps(image=IMAGE, lora=mirrored)))
    image = containers(app.synth().get_stack_by_name(stack.stack_name).template)["adapter-sync"]["Image"]
    assert "mirror/adapter-sync:0.3.0" in str(image)


def test_the_sidecar_is_counted_in_the_tasks_size():
    plain = VllmServer(VllmProps(image=IMAGE)).sidecar_reservation
    with_adapters = VllmServer(VllmProps(image=IMAGE, lora=LORA)).sidecar_reservation
    assert (with_adapters[0] - plain[0], with_adapters[1] - plain[1]) == (ADAPTER_SYNC_CPU, ADAPTER_SYNC_MEMORY_MIB)
    assert "adapter sync" in with_adapters.described(1)


def test_adapter_slots_beyond_what_the_gpu_has_left_are_refused_naming_the_key_and_what_fits():
    # Llama-2-7B at float16 on an L40S (48 GiB x 0.9): 12.6 GiB of weights and 2 GiB of KV cache leave about 28 GiB;
    # a rank-512 slot takes 2.4 GiB, so 16 do not fit and 12 do.
    too_many = LoraSettings(max_gpu_adapters=16, max_rank=512, base=LLAMA_7B)
    with pytest.raises(ConfigError) as error:
        team_app(VllmServer(VllmProps(image=IMAGE, dtype="float16", lora=too_many)))
    assert error.value.key == "vllm.lora.max_gpu_adapters"
    assert "at most 12 fit" in error.value.detail and "lower max_gpu_adapters or max_rank" in error.value.detail


def test_without_the_base_models_geometry_synth_warns_that_the_memory_is_unchecked(synthesized):
    _, stack, _ = team_app(VllmServer(VllmProps(image=IMAGE, lora=LoraSettings())))
    Annotations.from_stack(stack).has_warning("*", Match.string_like_regexp(f".*lora.base.*{LORA_MEMORY_UNCHECKED}.*"))
    _, checked = synthesized
    Annotations.from_stack(checked).has_no_warning("*", Match.string_like_regexp(f".*{LORA_MEMORY_UNCHECKED}.*"))


@pytest.mark.parametrize(
    "props, key, fix",
    [
        (dict(lora=LoraSettings(max_rank=24)), "lora.max_rank", "8, 16, 32"),
        (dict(lora=LoraSettings(target_modules=("q_proj",))), "lora.target_modules", "SGLang only"),
        (dict(extra_args=("--max-loras", "4")), "extra_args[0]", "set from its own key"),
    ],
)
def test_what_vllm_cannot_take_is_refused_naming_the_key_and_the_fix(props, key, fix):
    with pytest.raises(ConfigError) as error:
        VllmProps(image=IMAGE, **props)
    assert error.value.key == key and fix in error.value.detail


def test_sglang_with_adapters_gets_its_own_flags_and_the_sidecar_calls_its_endpoints():
    """SGLang in templates: its flags (docs.sglang.io, "LoRA Serving": dynamic loading needs the rank and target
    modules up front) and the sidecar told it is SGLang's."""
    lora = LoraSettings(max_gpu_adapters=4, max_cpu_adapters=128, expected_adapters=100, base=LLAMA_7B)
    server = SglangServer(SglangProps(image=EcrImage("mirror/sglang", "v0.5.23-cu129"), lora=lora))
    app, stack, _ = team_app(server)
    template = app.synth().get_stack_by_name(stack.stack_name).template
    world = TemplateWorld(template, ACCOUNT, REGION)
    by_name = containers(template)
    command = [world.resolve(part) for part in by_name["server"]["Command"]]
    assert "--enable-lora" in command
    assert flag(command, "--max-loras-per-batch") == "4"
    assert flag(command, "--max-loaded-loras") == "128"
    assert flag(command, "--max-lora-rank") == "16"
    assert flag(command, "--lora-target-modules") == "all"
    # SGLang has no --middleware: no request-log middleware, no saved adapter queries.
    assert "--middleware" not in command and "REQUEST_LOG_SOURCE" not in json.dumps(by_name["scratch-owner"])
    assert not [r for r in template["Resources"].values() if r["Type"] == "AWS::Logs::QueryDefinition"]
    environment = resolved_environment(world, by_name["adapter-sync"])
    assert environment["ADAPTER_SERVER_KIND"] == "sglang"
    assert environment["ADAPTER_SERVER_URL"] == "http://127.0.0.1:30000"
    with pytest.raises(ConfigError) as error:
        SglangProps(lora=LoraSettings(max_cpu_adapters=50, expected_adapters=100))
    assert error.value.key == "lora.max_cpu_adapters" and "refuses to load" in error.value.detail


def server_start_chain(by_name: dict) -> list[str]:
    """The containers the server waits on to succeed, nearest first (each init container waits on the one before)."""
    chain, name = [], "server"
    while True:
        successes = [d["ContainerName"] for d in by_name[name].get("DependsOn", []) if d["Condition"] == "SUCCESS"]
        if not successes:
            return chain
        (name,) = successes
        chain.append(name)


def test_the_scratch_owner_writes_the_request_log_middleware_before_vllm_starts_and_imports_it(
    template, world, tmp_path
):
    """Run the scratch owner's shell command as ECS would (paths moved under tmp_path), then import what it wrote
    from the server's PYTHONPATH and name the class vLLM's --middleware names: the bytes are the middleware's."""
    by_name = containers(template)
    assert server_start_chain(by_name)[-1] == "scratch-owner"  # the server starts once it succeeded
    server, owner = by_name["server"], by_name["scratch-owner"]
    command = [world.resolve(part) for part in server["Command"]]
    middleware = flag(command, "--middleware")
    python_path = resolved_environment(world, server)["PYTHONPATH"]
    owner_environment = resolved_environment(world, owner)
    assert owner_environment["REQUEST_LOG_SOURCE"] == Path(request_log.__file__).read_text()
    script = owner["Command"][0].replace("/scratch", str(tmp_path / "scratch")).replace("/adapters", str(tmp_path))
    script = script.replace('chown -R "$SERVER_USER"', "true")  # the chown is root's; the write comes before it
    subprocess.run(["/bin/sh", "-c", script], env={**owner_environment, "PATH": "/usr/bin:/bin"}, check=True)
    folder = tmp_path / "scratch" / Path(python_path).relative_to("/scratch")
    module, name = middleware.rsplit(".", 1)  # as vLLM splits it (vllm/entrypoints/serve/middleware/register.py)
    assert (folder / f"{module}.py").read_bytes() == Path(request_log.__file__).read_bytes()
    probe = f"import {module}; assert callable({module}.{name}(app=None))"
    subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(folder)!r}); {probe}"], check=True
    )


def test_requests_per_adapter_are_two_saved_queries_over_the_models_log_group(template, world):
    queries = {
        world.resolve(q["Properties"]["Name"]): q["Properties"]
        for q in template["Resources"].values()
        if q["Type"] == "AWS::Logs::QueryDefinition"
    }
    assert set(queries) == {"gpu-inference/chat/llama/top-adapters", "gpu-inference/chat/llama/adapter-latency"}
    (log_group,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::Logs::LogGroup"]
    for query in queries.values():
        assert query["LogGroupNames"] == [{"Ref": log_group}]
        assert f'filter message = "{request_log.MESSAGE}"' in query["QueryString"]
    top, latency = queries["gpu-inference/chat/llama/top-adapters"], queries["gpu-inference/chat/llama/adapter-latency"]
    assert "count(*) as requests" in top["QueryString"] and "by AdapterName" in top["QueryString"]
    assert "pct(LatencyMs, 95)" in latency["QueryString"] and "bin(5m)" in latency["QueryString"]
    # No metric per adapter: no alarm, dashboard or metric filter names the adapter field (only the middleware's
    # source, in the task definition, and the queries do).
    skipped = ("AWS::Logs::QueryDefinition", "AWS::ECS::TaskDefinition")
    assert "AdapterName" not in json.dumps([r for r in template["Resources"].values() if r["Type"] not in skipped])
