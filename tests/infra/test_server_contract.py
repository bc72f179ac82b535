"""The server contract and the checks inside the constructs: what a consumer gets wrong fails at construction,
with a message that names what is missing or too large."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Match, Template

import gpu_inference_constructs
from gpu_inference_constructs import (
    BundledServer,
    BundledServerProps,
    ClusterCapacity,
    ConfigError,
    EcrImage,
    ListenerRoute,
    LivenessCheck,
    ModelBucket,
    ModelFromS3,
    ModelProps,
    ModelService,
    PrometheusMetrics,
    ScalingSignal,
    ServerContext,
    ServerContract,
    ServiceAccess,
    ServiceLogs,
    ServiceTimingProps,
    StopTiming,
    VllmProps,
    VllmServer,
)
from gpu_inference_constructs.core.server_contract import holds_token
from gpu_inference_constructs.servers.bundled import bundled_stop
from gpu_inference_constructs.servers.tgi_triton import tgi_stop, triton_stop
from gpu_inference_constructs.servers.vllm import vllm_stop
from stacks.config import load_environment
from tests.scenarios import scenario_environment

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
        stop=StopTiming(drain_seconds=30, exit_seconds=10),
    )
    return ServerContract(**{**values, **overrides})


def test_an_incomplete_contract_names_everything_it_misses():
    """Keyword-only, its required fields required: Python names every one missing."""
    with pytest.raises(TypeError) as error:
        ServerContract(image=IMAGE, command=("serve",), user="1000:1000")  # pyright: ignore[reportCallIssue]  # deliberately incomplete: Python's TypeError is under test
    message = str(error.value)
    assert "missing 5 required keyword-only arguments" in message
    for name in ("port", "readiness_path", "liveness", "model_source", "stop"):
        assert f"'{name}'" in message


def test_an_empty_command_is_missing_too():
    with pytest.raises(ConfigError, match=r"missing: command \(.*starts the server"):
        complete(command=())


@pytest.mark.parametrize(
    "overrides, key, message",
    [
        ({"user": "0"}, "server.user", "non-root"),
        ({"user": "root"}, "server.user", "non-root"),
        ({"user": "app"}, "server.user", "numeric"),
        ({"port": 80}, "server.port", "unprivileged"),
        ({"readiness_path": "health"}, "server.readiness_path", "absolute URL path"),
        ({"shared_memory_mib": 32}, "server.shared_memory_mib", "out of range"),
        ({"tmpfs_mib": {"/scratch/x": 10}}, "server.tmpfs_mib[/scratch/x]", "outside the scratch volume"),
        (
            {"environment": {"KEYS": "x"}, "api_keys_variable": "KEYS"},
            "server.api_keys_variable",
            "also set as plain environment",
        ),
        (
            {"environment": {"CACHE": "s3://x/"}, "compile_cache_variable": "CACHE"},
            "server.compile_cache_variable",
            "also set as plain environment",
        ),
        ({"compile_cache_variable": "cache-uri"}, "server.compile_cache_variable", "not an environment variable name"),
        ({"public_paths": ("v1/*",)}, "server.public_paths", "absolute URL path pattern"),
        ({"public_paths": tuple(f"/p{i}/*" for i in range(6))}, "server.public_paths", "at most 5"),
    ],
)
def test_contract_values_are_checked(overrides, key, message):
    with pytest.raises(ConfigError) as error:
        complete(**overrides)
    assert error.value.key == key and message in error.value.detail


@pytest.mark.parametrize(
    "value",
    [
        cdk.Aws.REGION,
        cdk.Token.as_string(cdk.Fn.ref("Port")),
        cdk.Token.as_string(cdk.Token.as_number(cdk.Fn.ref("Port"))),
        cdk.Token.as_list(cdk.Fn.ref("Ports"))[0],
        f"--port={cdk.Aws.ACCOUNT_ID}",
        "8000",
        "${Token}",
        "#{Token[]}",
        "",
    ],
    # A token's text numbers tokens in creation order, which differs between xdist workers: name the cases instead.
    ids=["region", "string", "number", "list", "inside-text", "plain", "token-word", "empty-token-marks", "empty"],
)
def test_the_contracts_token_test_is_cdks(value):
    """core/ reads CDK's string encoding of a token without loading aws_cdk: it agrees with cdk.Token.is_unresolved."""
    assert holds_token(value) == cdk.Token.is_unresolved(value)


def test_a_flag_whose_value_is_a_token_is_not_compared_and_a_literal_one_is():
    """A port known only at deploy cannot contradict the contract at synth; a literal one can."""
    port = cdk.Token.as_string(cdk.Fn.ref("Port"))
    assert complete(command=("serve", "--port", port)).port == 9000
    with pytest.raises(ConfigError) as error:
        complete(command=("serve", "--port", "8000"))
    assert error.value.key == "server.port" and "--port 8000" in error.value.detail


@dataclasses.dataclass(frozen=True)
class RecordingContext(ServerContext):
    """A context of no CDK app: what a preset asks it for is recorded, and images are their names."""

    asked: list[str] = dataclasses.field(default_factory=list)

    def warn(self, warning_id: str, message: str) -> None:
        self.asked.append(f"warn {warning_id}")

    def ecr_image(self, image: EcrImage, construct_id: str) -> Any:
        self.asked.append(f"ecr {construct_id}")
        return f"{image.name}:{image.tag}"

    def registry_image(self, reference: str) -> Any:
        self.asked.append("registry")
        return reference

    def asset_image(self, directory: str, display_name: str, target: str | None = None) -> Any:
        self.asked.append(f"asset {display_name}")
        return display_name


def test_a_preset_asks_its_context_for_its_image_and_a_hand_made_context_is_refused():
    """Issue 56: the presets make images (and warnings) through the context ModelService hands them, not by importing
    aws_cdk: the bundled preset's contract builds against a context of no CDK app. ServerContext itself is abstract."""
    model = ModelProps(name="encoder", version="1")
    context = RecordingContext(
        cast(Any, None), model, ServiceTimingProps(), "prod", "eu-west-1", "s3://b/models/encoder/1/"
    )
    assert BundledServer().contract(context).image == "gpu-inference-server"
    assert context.asked == ["asset gpu-inference-server"]
    with pytest.raises(TypeError, match="abstract"):
        ServerContext(cast(Any, None), model, ServiceTimingProps(), "prod", "eu-west-1", "s3://b/m/1/")  # type: ignore[abstract]


def test_liveness_and_signals_are_checked():
    with pytest.raises(ConfigError, match=r"^liveness\.command: .*'CMD' or 'CMD-SHELL'"):
        LivenessCheck(("curl", "-f", "http://127.0.0.1/health"))
    with pytest.raises(ConfigError, match=r"scaling_signals\[queue\].*target.*scale_out_above"):
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


def stack_with_placement(region: str = "us-east-1") -> tuple[cdk.Stack, dict[str, Any]]:
    """A stack in ``region`` with an imported VPC, listener, cluster (see on_cluster), bucket and key, and the
    parts of a ModelService but its capacity."""
    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="123456789012", region=region))
    return stack, placement_parts(stack)


def placement_parts(stack: cdk.Stack) -> dict[str, Any]:
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-east-1a"], private_subnet_ids=["subnet-1"]
    )
    listener = elbv2.ApplicationListener.from_application_listener_attributes(
        stack,
        "Listener",
        listener_arn="arn:aws:elasticloadbalancing:us-east-1:123456789012:listener/app/lb/0123456789abcdef/0123456789abcdef",
        security_group=ec2.SecurityGroup.from_security_group_id(stack, "Sg", "sg-1"),
    )
    ecs.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="c", vpc=vpc)
    return dict(
        model_source=ModelBucket(s3.Bucket.from_bucket_name(stack, "Bucket", "models-bucket")),
        route=ListenerRoute(listener, 10),
        logs=ServiceLogs(
            kms.Key.from_key_arn(
                stack, "Key", "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-4333-8444-555555555555"
            )
        ),
        environment="test",
    )


def on_cluster(stack: cdk.Stack, instance_type: str) -> ClusterCapacity:
    """The capacity provider ``gpus`` of the cluster stack_with_placement imported into ``stack``."""
    return ClusterCapacity(cast(ecs.ICluster, stack.node.find_child("Cluster")), "gpus", instance_type)


def at_priority(parts: dict[str, Any], priority: int) -> dict[str, Any]:
    """``parts`` with its listener rule at ``priority``."""
    return {**parts, "route": dataclasses.replace(parts["route"], priority=priority)}


@pytest.mark.parametrize(
    "model, instance_type, key, message",
    [
        (
            ModelProps(name="big", version="1", cpu=40000),
            "g5.xlarge",
            "models[big].cpu",
            "40064 CPU units does not fit on g5.xlarge",
        ),
        (
            ModelProps(name="big", version="1", memory_mib=16384),
            "g5.xlarge",
            "models[big].memory_mib",
            "16512 MiB does not fit on g5.xlarge",
        ),
        (
            ModelProps(name="llm", version="1", gpus=4, cpu=3072, memory_mib=12288),
            "g5.2xlarge",
            "models[llm].gpus",
            "4 GPUs per task do not fit on g5.2xlarge (1 GPU)",
        ),
    ],
)
def test_a_task_that_does_not_fit_fails_in_the_construct_itself(model, instance_type, key, message):
    """ModelProps(cpu=40000) used to pass construction: only the app's config loader checked the fit."""
    stack, parts = stack_with_placement()
    server = (
        VllmServer(VllmProps(shared_memory_mib=4096), image=IMAGE) if model.gpus > 1 else BundledServer(image=IMAGE)
    )
    with pytest.raises(ConfigError) as error:
        ModelService(stack, "M", model=model, server=server, capacity=on_cluster(stack, instance_type), **parts)
    assert error.value.key == key and message in error.value.detail


def test_the_fit_check_counts_the_sidecars():
    """vLLM's scratch-owner, fetcher and collector reserve CPU and memory too: a server sized to the limit alone does
    not fit."""
    stack, parts = stack_with_placement()
    limit = int(192 * 1024 * 0.90)
    model = ModelProps(name="llm", version="1", gpus=4, cpu=45056, memory_mib=limit)
    with pytest.raises(ConfigError, match=rf"memory_mib: {limit + 768} MiB .*g5\.12xlarge"):
        ModelService(
            stack, "M", model=model, server=VllmServer(image=IMAGE), capacity=on_cluster(stack, "g5.12xlarge"), **parts
        )


def test_without_a_server_the_model_runs_on_the_bundled_server_and_a_misplaced_image_is_named():
    stack, parts = stack_with_placement()
    service = ModelService(
        stack, "M", model=ModelProps(name="mm", version="1"), capacity=on_cluster(stack, "g5.xlarge"), **parts
    )
    assert service.contract.name == "bundled" and service.contract.command == ("python", "-m", "inference_server")
    with pytest.raises(ConfigError, match=r"server.props.*pass an image as image="):
        BundledServer(IMAGE)  # pyright: ignore[reportArgumentType]  # deliberately misplaced image: the refusal is under test
    with pytest.raises(ConfigError, match=r"server.props: RepositoryImage is not VllmProps"):
        VllmServer(IMAGE)  # pyright: ignore[reportArgumentType]  # deliberately misplaced image: the refusal is under test


def test_the_bundled_server_takes_one_gpu_and_vllm_needs_an_image():
    stack, parts = stack_with_placement()
    with pytest.raises(ConfigError, match="one GPU per task"):
        ModelService(
            stack,
            "A",
            model=ModelProps(name="aa", version="1", gpus=4),
            server=BundledServer(image=IMAGE),
            capacity=on_cluster(stack, "g5.12xlarge"),
            **parts,
        )
    stack, parts = stack_with_placement()
    with pytest.raises(ConfigError, match=r"vllm.image: is missing"):
        ModelService(
            stack,
            "B",
            model=ModelProps(name="bb", version="1", gpus=1),
            server=VllmServer(),
            capacity=on_cluster(stack, "g5.xlarge"),
            **parts,
        )


def test_the_bundled_servers_stop_timing_is_read_from_the_server_itself():
    """The preset's numbers are the server's own (inference_server/facts.py: tests/infra/test_server_facts.py)."""
    stack, parts = stack_with_placement()
    timing = gpu_inference_constructs.ServiceTimingProps(stop_timeout_seconds=80)
    server = BundledServer(BundledServerProps(drain_seconds=60, request_timeout_seconds=12), image=IMAGE)
    service = ModelService(
        stack,
        "M",
        model=ModelProps(name="mm", version="1"),
        server=server,
        capacity=on_cluster(stack, "g5.xlarge"),
        timing=timing,
        **parts,
    )
    assert service.contract.stop == StopTiming(drain_seconds=60, exit_seconds=15, longest_request_seconds=12)
    assert (
        service.contract.environment["DRAIN_TIMEOUT_S"] == "60"
        and service.contract.environment["REQUEST_TIMEOUT_S"] == "12"
    )


@pytest.mark.parametrize("preset", [vllm_stop(), tgi_stop(), triton_stop(), bundled_stop()])
def test_each_preset_fits_the_default_timing(preset):
    timing = gpu_inference_constructs.ServiceTimingProps()
    deregistration_delay, stop_timeout = preset.task_timing(
        timing.deregistration_delay_seconds, timing.stop_timeout_seconds
    )
    preset.check_fits(stop_timeout_seconds=stop_timeout, deregistration_delay_seconds=deregistration_delay)


@pytest.mark.parametrize(
    "stop, timing, key, message",
    [
        (
            StopTiming(drain_seconds=75, exit_seconds=15),
            dict(stop_timeout_seconds=85),
            "timing.stop_timeout_seconds",
            "raise stop_timeout_seconds to 90",
        ),
        (
            StopTiming(drain_seconds=95, exit_seconds=15),
            dict(stop_timeout_seconds=90),
            "timing.deregistration_delay_seconds",
            "shorten the delay or the server's drain",
        ),
        (
            StopTiming(drain_seconds=0, exit_seconds=20, longest_request_seconds=45),
            dict(deregistration_delay_seconds=30, stop_timeout_seconds=80),
            "timing.deregistration_delay_seconds",
            "raise deregistration_delay_seconds to 45",
        ),
    ],
)
def test_a_server_that_needs_more_time_than_the_task_gives_fails_at_construction(stop, timing, key, message):
    """A server cut by SIGKILL mid-drain, or by the Spot reclaim, or stopped while requests still run, is a
    configuration error: the contract's stop timing against the task's stopTimeout and deregistration delay."""
    stack, parts = stack_with_placement()
    with pytest.raises(ConfigError) as error:
        ModelService(
            stack,
            "M",
            model=ModelProps(name="mm", version="1"),
            server=complete(stop=stop),
            capacity=on_cluster(stack, "g5.xlarge"),
            timing=gpu_inference_constructs.ServiceTimingProps(**timing),
            **parts,
        )
    assert error.value.key == key and message in error.value.detail and "(models[mm])" in error.value.detail


def test_vllm_drains_in_flight_generations_within_the_spot_notice():
    """vLLM 0.32 aborts running requests on SIGTERM unless --shutdown-timeout is set. The preset sets it, and the
    model's target groups, stopTimeout and drain are sized so a generation of longest_request_seconds in flight when
    its task stops finishes: the ALB keeps it through the deregistration delay (that long), vLLM drains after SIGTERM
    for what the Spot notice leaves, and delay + drain + exit fit the notice."""
    from gpu_inference_constructs.core.service_timing import SPOT_STOP_SECONDS
    from gpu_inference_constructs.servers.vllm import VLLM_EXIT_SECONDS

    for longest in (80, 60, 90):
        stack, parts = stack_with_placement()
        model = ModelProps(name="llm", version="1", gpus=4, cpu=45056, memory_mib=163840)
        service = ModelService(
            stack,
            "M",
            model=model,
            server=VllmServer(VllmProps(longest_request_seconds=longest), image=IMAGE),
            capacity=on_cluster(stack, "g5.12xlarge"),
            **parts,
        )
        template = Template.from_stack(stack)
        (task,) = template.find_resources("AWS::ECS::TaskDefinition").values()
        (server,) = [c for c in task["Properties"]["ContainerDefinitions"] if c["Name"] == "server"]
        command = server["Command"]
        drain = int(command[command.index("--shutdown-timeout") + 1])
        (group,) = template.find_resources("AWS::ElasticLoadBalancingV2::TargetGroup").values()
        delay = int(
            {a["Key"]: a["Value"] for a in group["Properties"]["TargetGroupAttributes"]}[
                "deregistration_delay.timeout_seconds"
            ]
        )
        assert delay >= longest, "the ALB lets a generation of the stated length finish before ECS sends SIGTERM"
        assert server["StopTimeout"] >= drain + VLLM_EXIT_SECONDS, "vLLM drains and exits before SIGKILL"
        assert delay + server["StopTimeout"] <= SPOT_STOP_SECONDS, (
            "all of it inside the Spot notice, after the agent sees it"
        )
        assert (delay, drain, server["StopTimeout"]) == (
            longest,
            SPOT_STOP_SECONDS - VLLM_EXIT_SECONDS - longest,
            SPOT_STOP_SECONDS - longest,
        )
        assert (service.deregistration_delay_seconds, service.stop_timeout_seconds) == (delay, server["StopTimeout"])
        assert service.contract.stop == vllm_stop(longest)
    assert drain == 0, "at 90 s the delay takes all the notice leaves: vLLM aborts at SIGTERM (its default)"
    assert vllm_stop().drain_seconds == 10 and VllmProps().longest_request_seconds == 80


def test_the_environments_timing_still_applies_to_the_other_servers_of_the_environment(synthesized):
    """staging: the encoders keep the environment's 20 s delay and 90 s stopTimeout; only the LLM has its own."""
    config = synthesized.stages["staging"].config
    for model in config.models:
        template = synthesized.template("staging", f"Model-{model.name}")["Resources"]
        delays = {
            int(
                {a["Key"]: a["Value"] for a in r["Properties"]["TargetGroupAttributes"]}[
                    "deregistration_delay.timeout_seconds"
                ]
            )
            for r in template.values()
            if r["Type"] == "AWS::ElasticLoadBalancingV2::TargetGroup"
        }
        (task,) = [r for r in template.values() if r["Type"] == "AWS::ECS::TaskDefinition"]
        (server,) = [c for c in task["Properties"]["ContainerDefinitions"] if c["Name"] == "server"]
        if config.server_config(model).vllm is None:
            assert (delays, server["StopTimeout"]) == (
                {config.timing.deregistration_delay_seconds},
                config.timing.stop_timeout_seconds,
            )
        else:
            assert (delays, server["StopTimeout"]) == ({80}, 30) and server["Command"][-3:-1] == [
                "--shutdown-timeout",
                "10",
            ]


@pytest.mark.parametrize("longest", [0, 91])
def test_a_generation_longer_than_the_spot_notice_allows_is_refused(longest):
    """110 s of the notice are left once the agent has seen it, less vLLM's 20 s exit."""
    with pytest.raises(ConfigError, match=r"longest_request_seconds.*allowed 1 to 90"):
        VllmProps(longest_request_seconds=longest)
    with pytest.raises(ConfigError, match=r"extra_args\[0\].*set that key instead"):
        VllmProps(extra_args=("--shutdown-timeout=5",))


def test_stop_timing_ranges():
    with pytest.raises(ConfigError, match="server.stop.exit_seconds"):
        StopTiming(drain_seconds=10, exit_seconds=0)
    with pytest.raises(ConfigError, match="server.stop.drain_seconds"):
        StopTiming(drain_seconds=-1, exit_seconds=5)


def test_a_secret_needs_a_variable_in_the_contract():
    from aws_cdk import aws_secretsmanager as secretsmanager

    stack, parts = stack_with_placement()
    secret = secretsmanager.Secret.from_secret_name_v2(stack, "Keys", "keys")
    with pytest.raises(ConfigError, match="names no api_keys_variable"):
        ModelService(
            stack,
            "M",
            model=ModelProps(name="mm", version="1"),
            server=complete(),
            capacity=on_cluster(stack, "g5.xlarge"),
            access=ServiceAccess(api_keys_secret=secret),
            **parts,
        )


def test_a_server_that_serves_at_its_root_gets_the_prefix_stripped_and_ours_does_not():
    stack, parts = stack_with_placement()
    ModelService(
        stack,
        "Root",
        model=ModelProps(name="root", version="1"),
        server=complete(),
        capacity=on_cluster(stack, "g5.xlarge"),
        **parts,
    )
    ModelService(
        stack,
        "Ours",
        model=ModelProps(name="ours", version="1"),
        server=BundledServer(image=IMAGE),
        capacity=on_cluster(stack, "g5.xlarge"),
        **at_priority(parts, 11),
    )
    rules = {
        r["Properties"]["Priority"]: r["Properties"]
        for r in Template.from_stack(stack).find_resources("AWS::ElasticLoadBalancingV2::ListenerRule").values()
    }
    assert rules[10]["Transforms"] == [
        {"Type": "url-rewrite", "UrlRewriteConfig": {"Rewrites": [{"Regex": "^/root/(.*)$", "Replace": "/$1"}]}}
    ]
    assert "Transforms" not in rules[11], "the bundled server serves under /<model>/ itself"


def library_namespace() -> dict:
    """Every name of every module of the library: what its annotations (strings, under ``from __future__ import
    annotations``, some imported only for type checking) refer to."""
    import importlib
    import pkgutil

    namespace = {}
    for module in pkgutil.walk_packages(gpu_inference_constructs.__path__, "gpu_inference_constructs."):
        if not module.name.endswith("__main__"):  # a command line, not a module to import
            namespace.update(vars(importlib.import_module(module.name)))
    return namespace


def library_types_in(annotation) -> set[type]:
    """The library's own classes that an annotation names, through Optional, Union, Sequence, Mapping, tuple, ..."""
    import typing

    found = set()
    for part in (typing.get_origin(annotation), *typing.get_args(annotation), annotation):
        if part is annotation and (typing.get_origin(annotation) or typing.get_args(annotation)):
            continue
        if part is not annotation and (typing.get_origin(part) or typing.get_args(part)):
            found |= library_types_in(part)
        elif isinstance(part, type) and part.__module__.startswith("gpu_inference_constructs"):
            found.add(part)
    return found


def public_signatures(obj, names: dict | None = None) -> dict[str, dict]:
    """{where: type hints} of an exported class (its fields, constructor, public methods and properties) or function."""
    import dataclasses
    import inspect
    import typing

    namespace = {**library_namespace(), **(names or {})}

    def hints(function) -> dict:
        try:
            return typing.get_type_hints(function, globalns=namespace, localns=namespace)
        except NameError as error:
            raise AssertionError(
                f"{function.__qualname__}: an annotation names something the library does not define ({error})"
            ) from None

    if not isinstance(obj, type):
        return {obj.__name__: hints(obj)} if callable(obj) else {}
    found = {f"{obj.__name__} fields": hints(obj)} if dataclasses.is_dataclass(obj) else {}
    for name, member in inspect.getmembers(obj):
        function = member.fget if isinstance(member, property) else member
        if (
            (name == "__init__" or not name.startswith("_"))
            and inspect.isfunction(function)
            and function.__module__.startswith("gpu_inference_constructs")
        ):
            found[f"{obj.__name__}.{name}"] = hints(function)
    return found


def test_every_library_type_in_a_public_signature_is_exported():
    """Walks the type hints of everything exported (constructs' and presets' constructors, props' fields, public
    methods and properties, functions), and of every library type they name, in turn: a library type a consumer
    must build or receive (RollbackThresholds for ModelService, LoadBalancerQuotas for LoadBalancerProps, ...) and
    cannot import from gpu_inference_constructs fails here, naming where it is used."""
    exported = set(gpu_inference_constructs.__all__)
    import inspect

    pending = [getattr(gpu_inference_constructs, name) for name in sorted(exported)]
    pending = [obj for obj in pending if isinstance(obj, type) or inspect.isfunction(obj)]  # not CATALOG and the like
    walked, unexported = set(), {}
    while pending:
        obj = pending.pop()
        if obj in walked:
            continue
        walked.add(obj)
        for where, hints in public_signatures(obj).items():
            for name, annotation in hints.items():
                for kind in library_types_in(annotation):
                    if kind.__name__ not in exported or getattr(gpu_inference_constructs, kind.__name__) is not kind:
                        unexported.setdefault(kind.__name__, []).append(f"{where}({name})")
                    pending.append(kind)
    assert not unexported, f"used in public signatures but not exported from gpu_inference_constructs: {unexported}"
    assert len(walked) > 40, "the walk reaches the constructs, their props and what those name"


def test_the_signature_walk_finds_a_type_that_is_not_exported():
    """The walk itself: a props class naming an unexported library type is caught, inside Optional and tuple too."""
    from dataclasses import dataclass
    from typing import Optional

    from gpu_inference_constructs.routing.load_balancer import LoadBalancerQuotas

    @dataclass(frozen=True)
    class Hidden:
        """Not exported."""

    Hidden.__module__ = "gpu_inference_constructs.hidden"

    @dataclass(frozen=True)
    class Props:
        quotas: LoadBalancerQuotas | None = None
        hidden: tuple[Hidden | None, ...] = ()

    Props.__module__ = "gpu_inference_constructs.hidden"
    hints = public_signatures(Props, {"Hidden": Hidden, "Optional": Optional})["Props fields"]
    found = {kind.__name__ for annotation in hints.values() for kind in library_types_in(annotation)}
    assert found == {"LoadBalancerQuotas", "Hidden"}


def test_exported_classes_have_docstrings_that_state_their_defaults():
    for name in gpu_inference_constructs.__all__:
        value = getattr(gpu_inference_constructs, name)
        if isinstance(value, type):
            assert value.__doc__ and len(value.__doc__) > 40, f"{name} needs a docstring"
    for props in (
        "ModelScalingProps",
        "ScalingProps",
        "PredictiveScalingProps",
        "MonitoringProps",
        "ServerContract",
        "VllmProps",
        "LoadBalancerQuotas",
        "RollbackThresholds",
        "StopTiming",
        "LatencyAlarmProps",
    ):
        assert "efault" in getattr(gpu_inference_constructs, props).__doc__, f"{props}' docstring states its defaults"
    for props in ("ModelProps", "BundledServerProps", "ServiceTimingProps", "BundledServer"):
        assert fields_without_a_stated_default(getattr(gpu_inference_constructs, props)) == [], props


def fields_without_a_stated_default(cls: type) -> list[str]:
    """Fields of ``cls`` whose own docstring (the string under the field, as aws-cdk-lib documents each property) is
    missing, or does not state the default of a field that has one."""
    import ast
    import inspect
    import textwrap

    (node,) = ast.parse(textwrap.dedent(inspect.getsource(cls))).body
    assert isinstance(node, ast.ClassDef), cls
    body = node.body
    missing = []
    for statement, following in zip(body, [*body[1:], None], strict=True):
        if not isinstance(statement, ast.AnnAssign) or ast.unparse(statement.annotation).startswith("ClassVar"):
            continue  # a ClassVar is the class's constant, not a field
        assert isinstance(statement.target, ast.Name)  # a class body annotates plain names
        name = statement.target.id
        doc = (
            following.value.value
            if isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
            else ""
        )
        if not doc or (statement.value is not None and "Default" not in doc):
            missing.append(name)
    return missing


def test_the_field_docstring_check_finds_an_undocumented_default():
    from dataclasses import dataclass

    @dataclass
    class Planted:
        documented: int = 1
        """How many. Default: 1."""
        undocumented: int = 2
        silent_default: int = 3
        """How many, with no word on the default."""

    assert fields_without_a_stated_default(Planted) == ["undocumented", "silent_default"]


def environment_with(**changes) -> dict:
    data = scenario_environment("staging")
    data.update(changes)
    return data


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"capacity_groups": {}}, r"models\[2\]\.gpus: 4 GPUs .*g5\.xlarge.*capacity group"),
        (
            {"capacity_groups": {"llm": {"capacity": {"instance_types": ["g5.12xlarge"]}, "models": ["nope"]}}},
            r"capacity_groups\.llm\.models\[0\]: 'nope' .*model",
        ),
        (
            {"capacity_groups": {"llm": {"capacity": {"instance_types": ["g5.12xlarge"]}, "models": []}}},
            r"capacity_groups.llm.models: list the models",
        ),
        (
            {"capacity_groups": {"LLM": {"capacity": {"instance_types": ["g5.12xlarge"]}, "models": ["llama-13b"]}}},
            r"capacity_groups.LLM: group names",
        ),
        (
            {
                "capacity_groups": {
                    "llm": {"capacity": {"instance_types": ["g5.12xlarge", "g5.2xlarge"]}, "models": ["llama-13b"]}
                }
            },
            r"capacity_groups.llm.capacity.instance_types\[1\]: g5.2xlarge has shape",
        ),
        (
            {
                "capacity_groups": {
                    "a": {"capacity": {"instance_types": ["g5.12xlarge"]}, "models": ["llama-13b"]},
                    "b": {"capacity": {"instance_types": ["g6.12xlarge"]}, "models": ["llama-13b"]},
                }
            },
            r"capacity_groups.b.models\[0\]: 'llama-13b' is already placed",
        ),
    ],
)
def test_capacity_groups_are_validated_with_the_key_and_the_fix(changes, message):
    with pytest.raises(ConfigError, match=message):
        load_environment("staging", environment_with(**changes))


def test_staging_places_the_llm_on_four_gpu_instances():
    config = load_environment("staging", environment_with())
    (llm,) = [m for m in config.models if config.server_config(m).vllm is not None]
    assert config.model_placement() == {llm.name: "llm"}
    smallest = config.group_capacity("llm").smallest_instance_type()
    assert (smallest.gpus, llm.gpus) == (4, 4)


def test_tgi_and_triton_contracts_synthesize_with_their_own_ports_paths_and_metrics():
    """What the closing note tells a team to write for TGI and Triton: both synthesize, route and scrape as declared."""
    import json

    from gpu_inference_constructs import ScalingSignal

    stack, parts = stack_with_placement()
    tgi = ServerContract(
        name="tgi",
        image=IMAGE,
        command=("--model-id", "/scratch/model", "--port", "8080", "--hostname", "0.0.0.0", "--num-shard", "4"),
        port=8080,
        readiness_path="/health",
        liveness=LivenessCheck(("CMD", "curl", "-f", "http://127.0.0.1:8080/health")),
        user="1000:1000",
        model_source=ModelFromS3.copy_to_scratch(),
        shared_memory_mib=16384,
        stop=tgi_stop(),
        environment={"HF_HUB_OFFLINE": "1", "HOME": "/scratch/home", "HUGGINGFACE_HUB_CACHE": "/scratch/cache"},
        metrics=PrometheusMetrics(metrics=("tgi_queue_size", "tgi_batch_current_size")),
        scaling_signals=(ScalingSignal("tgi_queue_size", statistic="Maximum", scale_out_above=8),),
    )
    triton = ServerContract(
        name="triton",
        image=IMAGE,
        command=(
            "tritonserver",
            "--model-repository=/scratch/model",
            "--http-port=8000",
            "--metrics-port=8002",
            "--exit-timeout-secs=30",
        ),
        port=8000,
        readiness_path="/v2/health/ready",
        liveness=LivenessCheck(("CMD", "curl", "-f", "http://127.0.0.1:8000/v2/health/live")),
        user="1000:1000",
        model_source=ModelFromS3.copy_to_scratch(),
        shared_memory_mib=4096,
        stop=triton_stop(),
        metrics=PrometheusMetrics(metrics=("nv_inference_pending_request_count",), port=8002),
        scaling_signals=(ScalingSignal("nv_inference_pending_request_count", statistic="Maximum", scale_out_above=16),),
    )
    ModelService(
        stack,
        "Tgi",
        model=ModelProps(name="tgi-llm", version="1", gpus=4, cpu=40960, memory_mib=131072),
        server=tgi,
        capacity=on_cluster(stack, "g5.12xlarge"),
        **parts,
    )
    ModelService(
        stack,
        "Triton",
        model=ModelProps(name="triton-bert", version="1"),
        server=triton,
        capacity=on_cluster(stack, "g5.xlarge"),
        **at_priority(parts, 11),
    )
    template = Template.from_stack(stack).to_json()
    groups = {
        r["Properties"]["HealthCheckPath"]: r["Properties"]["Port"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::ElasticLoadBalancingV2::TargetGroup"
    }
    assert groups == {"/health": 8080, "/v2/health/ready": 8000}
    scrapes = {}
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::ECS::TaskDefinition":
            by_name = {c["Name"]: c for c in resource["Properties"]["ContainerDefinitions"]}
            config = next(
                e["Value"]
                for e in by_name["metrics-collector"]["Environment"]
                if e["Name"] == "PROMETHEUS_CONFIG_CONTENT"
            )
            scrapes[by_name["server"]["Command"][0]] = json.loads(config)["scrape_configs"][0]["static_configs"][0][
                "targets"
            ]
            gpus = by_name["server"]["ResourceRequirements"][0]["Value"]
            assert gpus == ("4" if by_name["server"]["Command"][0] == "--model-id" else "1")
    assert scrapes == {"--model-id": ["127.0.0.1:8080"], "tritonserver": ["127.0.0.1:8002"]}


def stack_with_load_balancer(longest_request_seconds, idle_timeout_seconds=None):
    """A stack with an InferenceLoadBalancer built for ``longest_request_seconds``, and the parts a ModelService
    needs."""
    from gpu_inference_constructs import InferenceLoadBalancer, LoadBalancerProps

    app = cdk.App()
    stack = cdk.Stack(app, "S", env=cdk.Environment(account="123456789012", region="us-east-1"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    balancer = InferenceLoadBalancer(
        stack,
        "LoadBalancer",
        vpc=vpc,
        access_logs_bucket=s3.Bucket(stack, "Logs"),
        props=LoadBalancerProps(
            allow_http=True, ingress_cidrs=("10.0.0.0/8",), idle_timeout_seconds=idle_timeout_seconds
        ),
        longest_request_seconds=longest_request_seconds,
    )
    parts: dict[str, Any] = dict(
        capacity=ClusterCapacity(
            ecs.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="c", vpc=vpc), "gpus", "g5.xlarge"
        ),
        model_source=ModelBucket(s3.Bucket.from_bucket_name(stack, "Bucket", "models-bucket")),
        route=balancer,
        logs=ServiceLogs(
            kms.Key.from_key_arn(
                stack, "Key", "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-4333-8444-555555555555"
            )
        ),
        environment_name="test",
    )
    return stack, balancer, parts


def test_the_load_balancers_idle_timeout_follows_the_longest_request_and_never_drops_below_the_alb_default():
    assert stack_with_load_balancer(100)[1].idle_timeout_seconds == 110
    assert stack_with_load_balancer(10)[1].idle_timeout_seconds == 60
    assert stack_with_load_balancer(None)[1].idle_timeout_seconds == 60
    stack, balancer, _ = stack_with_load_balancer(3990)
    (resource,) = Template.from_stack(stack).find_resources("AWS::ElasticLoadBalancingV2::LoadBalancer").values()
    attributes = {a["Key"]: a["Value"] for a in resource["Properties"]["LoadBalancerAttributes"]}
    assert attributes["idle_timeout.timeout_seconds"] == "4000"
    with pytest.raises(ConfigError, match=r"idle_timeout_seconds.*bound the request"):
        stack_with_load_balancer(3991)
    with pytest.raises(ConfigError, match=r"idle_timeout_seconds.*set at least 90"):
        stack_with_load_balancer(80, idle_timeout_seconds=60)


@pytest.mark.parametrize("server, idle_timeout", [("bundled", 60), ("bundled", 110), ("vllm", 90), ("vllm", 200)])
def test_each_presets_keep_alive_outlasts_the_load_balancers_idle_timeout(server, idle_timeout):
    """The bundled server's KEEP_ALIVE_S and vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE follow the load balancer they are
    behind."""
    stack, balancer, parts = stack_with_load_balancer(idle_timeout - 10)
    if server == "vllm":
        model = ModelProps(name="llm", version="1", gpus=1)
        props = VllmProps(longest_request_seconds=min(80, idle_timeout - 10), shared_memory_mib=4096)
        service = ModelService(stack, "M", model=model, server=VllmServer(props, image=IMAGE), **parts)
        variable = "VLLM_HTTP_TIMEOUT_KEEP_ALIVE"
    else:
        service = ModelService(
            stack, "M", model=ModelProps(name="mm", version="1"), server=BundledServer(image=IMAGE), **parts
        )
        variable = "KEEP_ALIVE_S"
    (task,) = Template.from_stack(stack).find_resources("AWS::ECS::TaskDefinition").values()
    (container,) = [c for c in task["Properties"]["ContainerDefinitions"] if c["Name"] == "server"]
    keep_alive = int(float({e["Name"]: e["Value"] for e in container["Environment"]}[variable]))
    assert (
        keep_alive > balancer.idle_timeout_seconds == idle_timeout and service.contract.keep_alive_seconds == keep_alive
    )


def test_a_server_keep_alive_at_or_below_the_idle_timeout_is_refused_and_an_unknown_one_is_a_warning():
    stack, _, parts = stack_with_load_balancer(100)
    with pytest.raises(ConfigError) as error:
        ModelService(
            stack, "A", model=ModelProps(name="aa", version="1"), server=complete(keep_alive_seconds=110), **parts
        )
    assert error.value.key == "server.keep_alive_seconds" and "idle timeout (110 s)" in error.value.detail
    with pytest.raises(ConfigError, match=r"timing\.keep_alive_seconds.*idle timeout"):
        ModelService(
            stack,
            "B",
            model=ModelProps(name="bb", version="1"),
            server=BundledServer(image=IMAGE),
            timing=gpu_inference_constructs.ServiceTimingProps(keep_alive_seconds=75),
            **parts,
        )
    ModelService(stack, "C", model=ModelProps(name="cc", version="1"), server=complete(keep_alive_seconds=111), **parts)
    ModelService(stack, "D", model=ModelProps(name="dd", version="1"), server=complete(), **parts)
    warnings = Annotations.from_stack(stack).find_warning(
        "*", Match.string_like_regexp("does not say its HTTP keep-alive")
    )
    assert [w.id for w in warnings] == ["/S/D"]
    message = warnings[0].entry.data
    assert isinstance(message, str)  # a warning's data is its message
    assert "Set ServerContract.keep_alive_seconds (at least 111)" in message


@pytest.mark.parametrize("longest", [101, 3600])
def test_a_server_whose_longest_request_outlasts_the_idle_timeout_is_refused(longest):
    """A custom server's StopTiming.longest_request_seconds past the load balancer's idle timeout: the client would get
    an ELB 504 that no target metric sees. Drained requests are not the point here, so the stop timing leaves room for
    them."""
    stack, _, parts = stack_with_load_balancer(100)
    stop = StopTiming(
        drain_seconds=100, exit_seconds=10, longest_request_seconds=longest, deregistration_delay_seconds=10
    )
    with pytest.raises(ConfigError) as error:
        ModelService(
            stack,
            "M",
            model=ModelProps(name="mm", version="1"),
            server=complete(stop=stop, keep_alive_seconds=200),
            **parts,
        )
    assert (
        error.value.key == "server.stop.longest_request_seconds"
        and f"({longest} s) + 10 s outlasts" in error.value.detail
    )
    assert "pass longest_request_seconds" in error.value.detail and "InferenceLoadBalancer" in error.value.detail


def test_behind_a_listener_whose_idle_timeout_is_unknown_a_long_request_is_a_warning_naming_the_timeout_to_set():
    """ModelService(listener=...) cannot know the load balancer's idle timeout: vLLM's 80 s generations get a synth
    warning (set the idle timeout to at least 90 s), not an error; behind an InferenceLoadBalancer the same is
    refused."""
    stack, parts = stack_with_placement()
    model = ModelProps(name="llm", version="1", gpus=1)
    ModelService(
        stack,
        "M",
        model=model,
        server=VllmServer(VllmProps(shared_memory_mib=4096), image=IMAGE),
        capacity=on_cluster(stack, "g5.xlarge"),
        **parts,
    )
    (warning,) = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("outlasts"))
    message = warning.entry.data
    assert isinstance(message, str)  # a warning's data is its message
    assert "(80 s) + 10 s" in message and "idle timeout to at least 90 s" in message
    stack, _, parts = stack_with_load_balancer(10)
    with pytest.raises(ConfigError, match=r"server.stop.longest_request_seconds.*80 s"):
        ModelService(
            stack, "M", model=model, server=VllmServer(VllmProps(shared_memory_mib=4096), image=IMAGE), **parts
        )


def test_the_models_runtime_reaches_the_bundled_server_and_is_checked():
    """models[].runtime becomes MODEL_RUNTIME (the server refuses it unless the version was published with it);
    eager leaves the environment as it was."""
    stack, parts = stack_with_placement()
    service = ModelService(
        stack,
        "R",
        model=ModelProps(name="rr", version="1"),
        server=BundledServer(BundledServerProps(runtime="onnx"), image=IMAGE),
        capacity=on_cluster(stack, "g5.xlarge"),
        **parts,
    )
    assert service.contract.environment["MODEL_RUNTIME"] == "onnx"
    stack, parts = stack_with_placement()
    service = ModelService(
        stack,
        "E",
        model=ModelProps(name="ee", version="1"),
        server=BundledServer(image=IMAGE),
        capacity=on_cluster(stack, "g5.xlarge"),
        **parts,
    )
    assert "MODEL_RUNTIME" not in service.contract.environment
    with pytest.raises(ConfigError, match=r"runtime.*use one of.*int8"):
        BundledServerProps(runtime="tensorrt-llm")
    with pytest.raises(ConfigError, match="runtime.*use eager for this model"):
        BundledServerProps(task="torch-export", runtime="onnx")
    with pytest.raises(ConfigError, match=r"environment.*MODEL_RUNTIME"):
        BundledServer().check(ModelProps(name="bb", version="1", environment={"MODEL_RUNTIME": "onnx"}))


def test_the_presets_run_as_a_uid_their_images_do_not_name():
    """vLLM's and TGI's images have no passwd entry for uid 1000: USER and LOGNAME answer getpass.getuser() (torch asks
    at import); TGI's HF_HOME leaves the read-only root; Triton gets a writable /tmp; TGI's Python under /root is a
    warning that names the fix (the construct cannot read the image)."""
    from gpu_inference_constructs import TgiProps, TgiServer, TritonProps, TritonServer, VllmProps, VllmServer
    from gpu_inference_constructs.servers.tgi_triton import TGI_PYTHON_WARNING

    stack, parts = stack_with_placement()
    mirror = gpu_inference_constructs.EcrImage(repository="mirror/server", tag="1.0.0")
    for index, (name, server) in enumerate(
        [
            ("vllm", VllmServer(VllmProps(image=mirror))),
            ("tgi", TgiServer(TgiProps(image=mirror))),
            ("triton", TritonServer(TritonProps(image=mirror))),
        ]
    ):
        ModelService(
            stack,
            name.title(),
            model=ModelProps(name=name, version="1", gpus=4, cpu=40960, memory_mib=131072),
            server=server,
            capacity=on_cluster(stack, "g5.12xlarge"),
            **at_priority(parts, 20 + index),
        )
    servers = {}
    for logical_id, resource in Template.from_stack(stack).find_resources("AWS::ECS::TaskDefinition").items():
        (server,) = [c for c in resource["Properties"]["ContainerDefinitions"] if c["Name"] == "server"]
        servers[logical_id.split("TaskDefinition")[0].lower()] = server
    environment = {name: {e["Name"]: e["Value"] for e in server["Environment"]} for name, server in servers.items()}
    assert servers.keys() == {"vllm", "tgi", "triton"} and all(s["ReadonlyRootFilesystem"] for s in servers.values())
    for name in ("vllm", "tgi"):
        assert (environment[name]["USER"], environment[name]["LOGNAME"]) == (name, name)
    assert environment["tgi"]["HF_HOME"].startswith("/scratch/")
    assert {t["ContainerPath"] for t in servers["triton"]["LinuxParameters"]["Tmpfs"]} == {"/tmp"}
    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(TGI_PYTHON_WARNING))
    assert [w.id for w in warnings] == ["/S/Tgi"]


@pytest.mark.parametrize("variable", ["USER", "HF_HOME"])
def test_vllm_and_tgi_refuse_a_model_environment_that_overrides_what_they_set(variable):
    from gpu_inference_constructs import TgiProps, TgiServer, VllmProps, VllmServer

    model = ModelProps(name="llm", version="1", gpus=4, cpu=40960, memory_mib=131072, environment={variable: "x"})
    mirror = gpu_inference_constructs.EcrImage(repository="mirror/server", tag="1")
    stack, parts = stack_with_placement()
    for index, server in enumerate([VllmServer(VllmProps(image=mirror)), TgiServer(TgiProps(image=mirror))]):
        with pytest.raises(ConfigError, match=variable):
            ModelService(
                stack,
                f"M{index}",
                model=model,
                server=server,
                capacity=on_cluster(stack, "g5.12xlarge"),
                **at_priority(parts, 30 + index),
            )
