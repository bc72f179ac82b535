"""Plausible mistakes that used to synthesize something wrong without a word: each now fails with a ConfigError that
names the fix (or, where synth cannot know, warns)."""

from __future__ import annotations

from typing import Any, cast

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk.assertions import Template

from gpu_inference_constructs import (
    BundledServer,
    ClusterCapacity,
    ConfigError,
    GpuCapacity,
    GpuCapacityProps,
    ListenerRoute,
    LivenessCheck,
    ModelFromS3,
    ModelProps,
    ModelService,
    PrometheusMetrics,
    ScalingSignal,
    ServerContract,
    ServiceAccess,
    ServiceScaling,
    StopTiming,
    TgiProps,
    TgiServer,
    TritonProps,
    TritonServer,
    VllmProps,
    VllmServer,
)
from gpu_inference_constructs.core.server_contract import EcrImage
from gpu_inference_constructs.servers.tgi_triton import tgi_stop, triton_stop
from tests.infra.test_server_contract import IMAGE, at_priority, on_cluster, placement_parts, stack_with_placement


def contract(**overrides) -> ServerContract:
    values = dict(
        image=IMAGE,
        command=("serve", "--http-port", "9000"),
        port=9000,
        readiness_path="/ready",
        liveness=LivenessCheck(("CMD", "serve", "--alive")),
        user="1000:1000",
        model_source=ModelFromS3.server_downloads(),
        stop=StopTiming(drain_seconds=30, exit_seconds=10),
    )
    return ServerContract(**{**values, **overrides})


def containers(stack: cdk.Stack) -> dict:
    template = Template.from_stack(stack).to_json()
    (task,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    return {c["Name"]: c for c in task["Properties"]["ContainerDefinitions"]}


def test_gpus_per_task_come_from_the_model_alone():
    """ModelProps(gpus=4) with a custom contract gave the task the contract's 1 GPU; the contract has no GPU field
    now."""
    stack, parts = stack_with_placement()
    ModelService(
        stack,
        "M",
        model=ModelProps(name="big", version="1", gpus=4, cpu=40960, memory_mib=131072),
        server=contract(),
        capacity=on_cluster(stack, "g5.12xlarge"),
        **parts,
    )
    assert containers(stack)["server"]["ResourceRequirements"] == [{"Type": "GPU", "Value": "4"}]
    with pytest.raises(TypeError, match="gpus_per_task"):
        contract(gpus_per_task=4)


def test_four_gpus_on_a_one_gpu_type_is_refused():
    stack, parts = stack_with_placement()
    with pytest.raises(ConfigError, match=r"gpus"):
        ModelService(
            stack,
            "M",
            model=ModelProps(name="big", version="1", gpus=4),
            server=contract(),
            capacity=on_cluster(stack, "g5.xlarge"),
            **parts,
        )


@pytest.mark.parametrize(
    "overrides, key, says",
    [
        (
            {"command": ("serve", "--http-port", "8001")},
            "server.port",
            "9000 but the custom server's command says --http-port 8001",
        ),
        ({"command": ("vllm", "serve", "/scratch/model", "--port=8001")}, "server.port", "says --port 8001"),
        (
            {
                "command": ("tritonserver", "--http-port=9000", "--metrics-port=8003"),
                "metrics": PrometheusMetrics(metrics=("nv_gpu_utilization",), port=8002),
            },
            "server.metrics.port",
            "8002 but the custom server's command says --metrics-port 8003",
        ),
        (
            {
                "command": ("tritonserver", "--http-port=9000", "--metrics-port=8002"),
                "metrics": PrometheusMetrics(metrics=("nv_gpu_utilization",)),
            },
            "server.metrics.port",
            "9000 but the custom server's command says --metrics-port 8002",
        ),
        (
            {"command": ("tritonserver", "--http-port=9000", "--exit-timeout-secs=60"), "stop": triton_stop(30)},
            "server.stop.drain_seconds",
            "30 but the custom server's command says --exit-timeout-secs 60",
        ),
    ],
)
def test_a_contract_its_command_contradicts_is_refused(overrides, key, says):
    with pytest.raises(ConfigError) as error:
        contract(**overrides)
    assert error.value.key == key and says in error.value.detail


def test_a_command_that_agrees_passes():
    contract(
        command=("tritonserver", "--http-port=9000", "--metrics-port=8002", "--exit-timeout-secs=30"),
        metrics=PrometheusMetrics(metrics=("nv_gpu_utilization",), port=8002),
        stop=triton_stop(30),
    )


def test_triton_and_tgi_presets_bring_their_ports_health_paths_metrics_and_stop():
    stack, parts = stack_with_placement()
    triton = ModelService(
        stack,
        "Triton",
        model=ModelProps(name="detector", version="1"),
        server=TritonServer(TritonProps(image=EcrImage("mirror/tritonserver", "25.10-py3"), exit_timeout_seconds=40)),
        capacity=on_cluster(stack, "g5.xlarge"),
        **parts,
    )
    tgi = ModelService(
        stack,
        "Tgi",
        model=ModelProps(name="chat", version="1", gpus=4, cpu=40960, memory_mib=131072),
        server=TgiServer(TgiProps(image=EcrImage("mirror/tgi", "3.3"))),
        capacity=on_cluster(stack, "g5.12xlarge"),
        **at_priority(parts, 11),
    )
    assert triton.contract.metrics is not None  # Triton's preset scrapes its Prometheus port
    assert (triton.contract.port, triton.contract.readiness_path, triton.contract.metrics.port) == (
        8000,
        "/v2/health/ready",
        8002,
    )
    assert triton.contract.stop == triton_stop(40) and "--exit-timeout-secs=40" in triton.contract.command
    assert (tgi.contract.port, tgi.contract.readiness_path, tgi.contract.stop) == (8080, "/health", tgi_stop(60))
    assert (
        "--num-shard" in tgi.contract.command
        and tgi.contract.command[tgi.contract.command.index("--num-shard") + 1] == "4"
    )
    ServiceScaling(stack, "TritonScaling", service=triton)
    ServiceScaling(stack, "TgiScaling", service=tgi)


def test_presets_refuse_flags_they_set():
    with pytest.raises(ConfigError, match=r"extra_args\[0\]: '--http-port=9000' .*set that key"):
        TritonProps(extra_args=("--http-port=9000",))
    with pytest.raises(ConfigError, match=r"extra_args\[0\]: '--port' .*set that key"):
        TgiProps(extra_args=("--port", "80"))


def test_two_models_on_one_imported_listener_with_one_priority_are_refused_across_stacks():
    stack, parts = stack_with_placement()
    ModelService(
        stack,
        "A",
        model=ModelProps(name="first", version="1"),
        server=contract(),
        capacity=on_cluster(stack, "g5.xlarge"),
        **parts,
    )
    assert stack.environment  # stack_with_placement's stack has an account and region, which the other shares
    app = cast(cdk.App, stack.node.root)  # the root of the tree is the App; node.root is typed IConstruct
    other = cdk.Stack(app, "Other", env=cdk.Environment(account="123456789012", region="us-east-1"))
    _, other_parts = stack_with_placement_in(other)
    with pytest.raises(ConfigError, match=r"route\.priority: 10 .*'first''s.*give models\[second\] another"):
        ModelService(
            other,
            "B",
            model=ModelProps(name="second", version="1"),
            server=contract(),
            capacity=on_cluster(other, "g5.xlarge"),
            **other_parts,
        )


def test_the_same_model_name_twice_is_refused_as_a_name_taken_not_a_priority_clash():
    """Issue 43: the second 'first' was reported as a listener-priority clash, whose fix (another priority) would have
    synthesized two rules for one path and two log groups of one name."""
    stack, parts = stack_with_placement()
    ModelService(
        stack,
        "A",
        model=ModelProps(name="first", version="1"),
        server=contract(),
        capacity=on_cluster(stack, "g5.xlarge"),
        **parts,
    )
    app = cast(cdk.App, stack.node.root)
    other = cdk.Stack(app, "Other", env=cdk.Environment(account="123456789012", region="us-east-1"))
    _, other_parts = stack_with_placement_in(other)
    with pytest.raises(ConfigError, match=r"model\.name: 'first' .*/A.*another name"):
        ModelService(
            other,
            "B",
            model=ModelProps(name="first", version="2"),
            server=contract(),
            capacity=on_cluster(other, "g5.xlarge"),
            **at_priority(other_parts, 11),
        )
    # Another environment of the same app may serve its own 'first' (dev and prod in one app) behind another
    # listener; on the same one its path /first/ is taken (issue 53).
    with pytest.raises(ConfigError, match=r"model\.name: 'first' .*S/A on this listener: its path /first/"):
        ModelService(
            other,
            "C",
            model=ModelProps(name="first", version="2"),
            server=contract(),
            capacity=on_cluster(other, "g5.xlarge"),
            **{**at_priority(other_parts, 12), "environment": "prod"},
        )
    listener = elbv2.ApplicationListener.from_application_listener_attributes(
        other,
        "ProdListener",
        security_group=ec2.SecurityGroup.from_security_group_id(other, "ProdSg", "sg-2"),
        listener_arn="arn:aws:elasticloadbalancing:us-east-1:123456789012:listener/app/prod/0123456789abcdef/0123456789abcdef",
    )
    ModelService(
        other,
        "D",
        model=ModelProps(name="first", version="2"),
        server=contract(),
        capacity=on_cluster(other, "g5.xlarge"),
        **{**other_parts, "route": ListenerRoute(listener, 12), "environment": "prod"},
    )


def stack_with_placement_in(stack: cdk.Stack) -> tuple[cdk.Stack, dict[str, Any]]:
    return stack, placement_parts(stack)


def scaling_policies(stack: cdk.Stack) -> list[str]:
    template = Template.from_stack(stack).to_json()
    return [
        r["Properties"]["PolicyType"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::ApplicationAutoScaling::ScalingPolicy"
    ]


def test_signals_that_only_scale_out_also_get_a_policy_that_scales_in():
    """A contract whose every signal is a scale-out step (no target) could add tasks and never remove them."""
    stack, parts = stack_with_placement()
    service = ModelService(
        stack,
        "M",
        model=ModelProps(name="ranker", version="1"),
        capacity=on_cluster(stack, "g5.xlarge"),
        server=contract(
            metrics=PrometheusMetrics(metrics=("queue_depth",)),
            command=("serve", "--http-port", "9000"),
            scaling_signals=(ScalingSignal("queue_depth", statistic="Maximum", scale_out_above=8),),
        ),
        **parts,
    )
    ServiceScaling(stack, "Scaling", service=service)
    assert "TargetTrackingScaling" in scaling_policies(stack)


@pytest.mark.parametrize("server", ["bundled", "vllm", "triton", "tgi", "custom"])
def test_every_server_kind_can_scale_in(server):
    stack, parts = stack_with_placement()
    model = ModelProps(name="mm", version="1", gpus=1)
    definition = {
        "bundled": BundledServer(image=IMAGE),
        "vllm": VllmServer(VllmProps(image=EcrImage("mirror/vllm", "v0.32.0"))),
        "triton": TritonServer(TritonProps(image=EcrImage("mirror/triton", "25.10-py3"))),
        "tgi": TgiServer(TgiProps(image=EcrImage("mirror/tgi", "3.3"))),
        "custom": contract(),
    }[server]
    service = ModelService(stack, "M", model=model, server=definition, capacity=on_cluster(stack, "g5.xlarge"), **parts)
    ServiceScaling(stack, "Scaling", service=service)
    assert "TargetTrackingScaling" in scaling_policies(stack)


def capacity_stack():

    stack, parts = stack_with_placement()
    return stack, parts, on_cluster(stack, "g5.xlarge").cluster.vpc


def test_the_library_defaults_hold_a_rolling_deployment_at_peak():
    """ModelProps' 4 tasks rolling at 200 % need 8 GPUs: GpuCapacityProps' default group now holds them."""
    stack, parts, vpc = capacity_stack()
    gpus = GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps())
    ModelService(stack, "M", model=ModelProps(name="mm", version="1"), server=contract(), capacity=gpus, **parts)


def test_a_deployment_peak_that_does_not_fit_the_group_is_refused_by_the_construct():
    from gpu_inference_constructs import DeploymentProps

    stack, parts, vpc = capacity_stack()
    gpus = GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps(max_capacity=5))
    ModelService(
        stack, "A", model=ModelProps(name="first", version="1", max_tasks=2), server=contract(), capacity=gpus, **parts
    )
    with pytest.raises(ConfigError) as error:
        ModelService(
            stack,
            "B",
            model=ModelProps(name="second", version="1", max_tasks=2, deployment=DeploymentProps(strategy="canary")),
            server=contract(),
            capacity=gpus,
            **at_priority(parts, 11),
        )
    assert error.value.key.startswith("capacity (Gpus.max_capacity)")
    assert (
        "max_capacity to at least 6" in error.value.detail
        and "lower max_tasks" in error.value.detail
        and "models[second]" in error.value.detail
    )


def test_vllm_defaults_fit_the_model_defaults():
    """VllmProps asked 16 GiB of /dev/shm inside ModelProps' default 12 GiB: the default now follows memory_mib."""
    stack, parts = stack_with_placement()
    service = ModelService(
        stack,
        "M",
        model=ModelProps(name="mm", version="1"),
        server=VllmServer(VllmProps(image=EcrImage("mirror/vllm", "v1"))),
        capacity=on_cluster(stack, "g5.xlarge"),
        **parts,
    )
    assert service.contract.shared_memory_mib == 6144 < ModelProps(name="mm", version="1").memory_mib
    assert VllmProps().shared_memory_for(163840) == 16384


def test_a_tensor_parallel_size_the_heads_cannot_divide_is_refused_or_warned():
    """Issue 43: vLLM exits at start when the model's attention heads do not divide over its GPUs. Known heads (40,
    a 13B model's) over 3 GPUs: an error naming gpus and the sizes that fit; unknown heads at 3: a warning."""

    def vllm(props: VllmProps, gpus: int) -> cdk.Stack:
        stack, parts = stack_with_placement()
        ModelService(
            stack,
            "M",
            model=ModelProps(name="llm", version="1", gpus=gpus, cpu=12288, memory_mib=49152),
            server=VllmServer(props, image=IMAGE),
            capacity=on_cluster(stack, "g5.12xlarge"),
            **parts,
        )
        return stack

    with pytest.raises(ConfigError, match=r"^gpus: 3 .*40 attention heads.*divide 40 \(1, 2, 4, 8\)"):
        vllm(VllmProps(attention_heads=40), 3)
    vllm(VllmProps(attention_heads=40), 4)  # divides
    from aws_cdk.assertions import Annotations, Match

    warned = Annotations.from_stack(vllm(VllmProps(), 3)).find_warning(
        "*", Match.string_like_regexp("tensor-parallel size 3")
    )
    assert warned
    assert not Annotations.from_stack(vllm(VllmProps(), 4)).find_warning(
        "*", Match.string_like_regexp("tensor-parallel size")
    )


def test_an_imported_vpc_without_the_subnets_a_construct_needs_is_refused_naming_it_and_subnets():
    """Issue 43: aws-cdk-lib died with "There are no 'Isolated' subnet groups in this VPC"; now the construct that
    needs the subnets and the subnets= to pass are named."""
    from gpu_inference_constructs import InferenceLoadBalancer, LoadBalancerProps, ModelStore, ModelStoreProps

    stack = cdk.Stack(cdk.App(), "Team", env=cdk.Environment(account="123456789012", region="us-east-1"))
    public_only = ec2.Vpc.from_vpc_attributes(
        stack, "Public", vpc_id="vpc-1", availability_zones=["us-east-1a"], public_subnet_ids=["subnet-1"]
    )
    with pytest.raises(ConfigError, match=r"^subnets: GpuCapacity needs private subnets .*pass subnets="):
        GpuCapacity(stack, "Gpus", vpc=public_only, props=GpuCapacityProps())
    private_only = ec2.Vpc.from_vpc_attributes(
        stack, "Private", vpc_id="vpc-2", availability_zones=["us-east-1a"], private_subnet_ids=["subnet-2"]
    )
    store = ModelStore(stack, "Models", props=ModelStoreProps())
    with pytest.raises(
        ConfigError, match=r"^subnets: InferenceLoadBalancer .*no public subnets.*internet_facing=False"
    ):
        InferenceLoadBalancer(
            stack,
            "Alb",
            vpc=private_only,
            access_logs_bucket=store.access_logs_bucket,
            props=LoadBalancerProps(allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
        )
    other = cdk.Stack(cdk.App(), "Other", env=cdk.Environment(account="123456789012", region="us-east-1"))
    _, parts = stack_with_placement_in(other)
    public_cluster = ecs.Cluster.from_cluster_attributes(
        other,
        "PublicCluster",
        cluster_name="c",
        vpc=ec2.Vpc.from_vpc_attributes(
            other, "PublicVpc", vpc_id="vpc-3", availability_zones=["us-east-1a"], public_subnet_ids=["subnet-3"]
        ),
    )
    with pytest.raises(ConfigError, match=r"^subnets: ModelService 'edge' .*private subnets.*pass subnets="):
        ModelService(
            other,
            "M",
            model=ModelProps(name="edge", version="1"),
            server=contract(),
            capacity=ClusterCapacity(public_cluster, "gpus", "g5.xlarge"),
            **parts,
        )


def test_an_api_key_secret_imported_by_name_for_a_json_key_warns_naming_the_complete_arn_import():
    from aws_cdk import aws_secretsmanager as secretsmanager
    from aws_cdk.assertions import Annotations, Match

    def vllm_with(secret_of) -> cdk.Stack:
        stack, parts = stack_with_placement()
        ModelService(
            stack,
            "M",
            model=ModelProps(name="llm", version="1", gpus=4, cpu=12288, memory_mib=49152),
            server=VllmServer(VllmProps(), image=IMAGE),
            capacity=on_cluster(stack, "g5.12xlarge"),
            access=ServiceAccess(api_keys_secret=secret_of(stack)),
            **parts,
        )
        return stack

    by_name = vllm_with(lambda stack: secretsmanager.Secret.from_secret_name_v2(stack, "Keys", "team/api-keys"))
    assert Annotations.from_stack(by_name).find_warning("*", Match.string_like_regexp("from_secret_complete_arn"))
    complete = vllm_with(
        lambda stack: secretsmanager.Secret.from_secret_complete_arn(
            stack, "Keys", "arn:aws:secretsmanager:us-east-1:123456789012:secret:team/api-keys-AbCdEf"
        )
    )
    assert not Annotations.from_stack(complete).find_warning("*", Match.string_like_regexp("from_secret_complete_arn"))


def test_gpu_capacity_without_a_topic_tells_its_own_topic_and_warns_naming_the_key():
    """Issue 43: a GpuCapacity without a notification topic failed only at cdk-nag's AS3. Now its launch and
    termination events go to a topic of its own, cdk-nag passes, and synth warns naming topic."""
    from aws_cdk.assertions import Annotations, Match
    from cdk_nag import AwsSolutionsChecks

    app = cdk.App()
    stack = cdk.Stack(app, "Team", env=cdk.Environment(account="123456789012", region="us-east-1"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-east-1a"], private_subnet_ids=["subnet-1"]
    )
    gpus = GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps())
    assert gpus.own_notifications is not None and gpus.topic is gpus.own_notifications.topic
    assert Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("no topic.*Pass topic="))
    rule = Template.from_stack(stack).find_resources("AWS::Events::Rule")
    assert any(r["Properties"]["EventPattern"]["source"] == ["aws.autoscaling"] for r in rule.values())
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # cdk-nag's AS3 (and every other rule) passes: before, AS3 failed the synth


def test_stagings_llm_declares_its_heads_so_a_wrong_tensor_parallel_size_is_refused_at_synth():
    """staging's llama-13b names its 40 attention heads (cdk.json): a gpus its heads cannot split is a config error
    naming the key, before any stack is built."""
    import copy

    from stacks.config import load_environment
    from tests.scenarios import scenario_environment

    data = copy.deepcopy(scenario_environment("staging"))
    (llm,) = [m for m in data["models"] if m["name"] == "llama-13b"]
    assert llm["vllm"]["attention_heads"] == 40
    llm["gpus"] = 3
    with pytest.raises(ConfigError, match=r"models\[\d\]\.gpus: 3 .*attention heads.*divide 40"):
        load_environment("staging", data)
