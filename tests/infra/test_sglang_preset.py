"""Issue 46: the SGLang preset, checked like the vLLM preset (its command against its contract, the contract's fit, the
synthesized task definition, what it refuses, naming the key and the fix), and the TGI preset's maintenance warning.

SGLang itself does not run here: its PyPI build is CUDA-only (docs/aws-facts.md, "SGLang and TGI (issue 46)"), so the
facts the contract rests on are cited from SGLang's source, and the shell that hands SGLang its API key is run with a
stand-in for ``python3``."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk.assertions import Annotations, Match, Template

import gpu_inference_constructs
from gpu_inference_constructs import (
    ConfigError,
    EcrImage,
    GpuShare,
    ModelProps,
    ModelService,
    ServiceAccess,
    ServiceScaling,
    ServiceTimingProps,
    SglangProps,
    SglangServer,
    StopTiming,
    TgiProps,
    TgiServer,
    VllmProps,
    VllmServer,
)
from gpu_inference_constructs.core.server_signals import ScalingSignal
from gpu_inference_constructs.core.service_timing import SPOT_STOP_SECONDS
from gpu_inference_constructs.servers.sglang import (
    SGLANG_API_KEY_VARIABLE,
    SGLANG_ENTRY_POINT,
    SGLANG_EXIT_SECONDS,
    SGLANG_METRICS,
    sglang_stop,
)
from gpu_inference_constructs.servers.tgi_triton import TGI_MAINTENANCE_WARNING
from tests.infra.test_server_contract import (
    IMAGE,
    at_priority,
    fields_without_a_stated_default,
    on_cluster,
    stack_with_load_balancer,
    stack_with_placement,
)

MIRROR = EcrImage("mirror/sglang", "v0.5.23-cu129")
LLM = ModelProps(name="llm", version="1", gpus=4, cpu=40960, memory_mib=131072)
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:team/api-keys-AbCdEf"


def sglang_stack(
    props: SglangProps | None = None,
    model: ModelProps = LLM,
    instance_type: str = "g5.12xlarge",
    with_secret: bool = False,
    **extra,
):
    """A plain cdk.App with an imported cluster and listener (stack_with_placement), one model on SGLang."""
    stack, parts = stack_with_placement()
    if with_secret:
        extra["access"] = ServiceAccess(
            api_keys_secret=secretsmanager.Secret.from_secret_complete_arn(stack, "Keys", SECRET_ARN)
        )
    service = ModelService(
        stack,
        "M",
        model=model,
        server=SglangServer(props or SglangProps(image=MIRROR)),
        capacity=on_cluster(stack, instance_type),
        **parts,
        **extra,
    )
    return stack, service


def task_containers(stack: cdk.Stack) -> dict[str, dict]:
    (task,) = Template.from_stack(stack).find_resources("AWS::ECS::TaskDefinition").values()
    return {c["Name"]: c for c in task["Properties"]["ContainerDefinitions"]}


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_synthesized_task_runs_sglang_as_its_contract_says():
    """The task definition, target group, listener rule and collector agree with the command: --port is the target
    group's and the container's port and the scraped one, --tp-size the task's GPUs, /health the readiness path, the
    API key the secret's one JSON key, the stop the one sglang_stop gives."""
    stack, service = sglang_stack()
    stack_with_secret, _ = sglang_stack(with_secret=True)
    containers = task_containers(stack)
    server = containers["server"]
    command = server["Command"]
    assert server["EntryPoint"] == list(SGLANG_ENTRY_POINT)
    assert command[:2] == ["--model-path", "/scratch/model"] and flag(command, "--host") == "0.0.0.0"
    assert flag(command, "--port") == "30000" == str(service.contract.port)
    assert server["PortMappings"][0]["ContainerPort"] == 30000
    assert flag(command, "--tp-size") == "4" and server["ResourceRequirements"] == [{"Type": "GPU", "Value": "4"}]
    assert flag(command, "--served-model-name") == "llm" and flag(command, "--mem-fraction-static") == "0.7"
    assert flag(command, "--max-running-requests") == "64" and "--enable-metrics" in command
    template = Template.from_stack(stack).to_json()["Resources"]
    (group,) = [r["Properties"] for r in template.values() if r["Type"] == "AWS::ElasticLoadBalancingV2::TargetGroup"]
    assert (group["Port"], group["HealthCheckPath"]) == (30000, "/health")
    attributes = {a["Key"]: a["Value"] for a in group["TargetGroupAttributes"]}
    assert attributes["deregistration_delay.timeout_seconds"] == "80" and server["StopTimeout"] == 30
    (rule,) = [r["Properties"] for r in template.values() if r["Type"] == "AWS::ElasticLoadBalancingV2::ListenerRule"]
    paths = [
        v
        for c in rule["Conditions"]
        if c["Field"] == "path-pattern"
        for v in c.get("PathPatternConfig", {}).get("Values", c.get("Values", []))
    ]
    assert paths == ["/llm/v1/*"], "clients reach the OpenAI API only: the key also opens SGLang's control routes"
    collector = {e["Name"]: e["Value"] for e in containers["metrics-collector"]["Environment"]}
    # The ADOT collector (its latency histograms): a Fn::Join, the log group's name is a token.
    otel = json.loads(
        "".join(p if isinstance(p, str) else "TOKEN" for p in collector["AOT_CONFIG_CONTENT"]["Fn::Join"][1])
    )
    (scrape,) = otel["receivers"]["prometheus"]["config"]["scrape_configs"]
    assert scrape["static_configs"][0]["targets"] == ["127.0.0.1:30000"] and scrape["metrics_path"] == "/metrics"
    assert service.contract.metric_names == ("sglang_num_running_reqs", "sglang_num_queue_reqs", "sglang_token_usage")
    selectors = otel["exporters"]["awsemf"]["metric_declarations"][0]["metric_name_selectors"]
    assert all(f"^{name}$" in selectors for name in service.contract.metric_names)
    environment = {e["Name"]: e["Value"] for e in server["Environment"]}
    assert environment["HF_HUB_OFFLINE"] == "1" and environment["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] == "true"
    assert int(environment["SGLANG_TIMEOUT_KEEP_ALIVE"]) == service.contract.keep_alive_seconds
    assert server["LinuxParameters"]["SharedMemorySize"] == 16384 and server["ReadonlyRootFilesystem"]
    assert "/metrics" in server["HealthCheck"]["Command"][-1], "liveness never runs the model"
    assert "Secrets" not in server
    (secret,) = task_containers(stack_with_secret)["server"]["Secrets"]
    assert secret["Name"] == SGLANG_API_KEY_VARIABLE and secret["ValueFrom"] == f"{SECRET_ARN}:default::"
    assert service.contract.stop == sglang_stop(80) and not service.contract.single_cuda_process


def test_the_contracts_command_is_cross_checked():
    """The contract's own check reads SGLang's --port: a contract whose port says otherwise is refused."""
    _, service = sglang_stack()
    with pytest.raises(ConfigError) as error:
        dataclasses.replace(service.contract, port=8000)
    assert error.value.key == "server.port" and "8000" in error.value.detail and "--port 30000" in error.value.detail
    assert dataclasses.replace(service.contract, port=30000) == service.contract


def run_entry_point(tmp_path: Path, api_key: str | None) -> list[str]:
    """What the task's entry point execs, with a python3 that prints its arguments one a line."""
    shell = shutil.which("sh")
    assert shell is not None
    fake = tmp_path / "python3"
    fake.write_text('#!/bin/sh\nfor arg in "$@"; do printf "%s\\n" "$arg"; done\n')
    fake.chmod(0o755)
    environment = {
        "PATH": f"{tmp_path}:/usr/bin:/bin",
        **({SGLANG_API_KEY_VARIABLE: api_key} if api_key is not None else {}),
    }
    entry_point = [shell, *SGLANG_ENTRY_POINT[1:]]
    done = subprocess.run(
        [*entry_point, "--port", "30000", "--served-model-name", "a b"],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def test_the_entry_point_passes_the_command_and_adds_the_key_only_when_the_task_has_one(tmp_path):
    """SGLang reads its key from --api-key only: the shell adds it from the secret's variable, as one argument
    whatever it holds, and without a secret adds nothing (an empty --api-key would be refused by no one and guard
    nothing)."""
    launch = ["-m", "sglang.launch_server", "--port", "30000", "--served-model-name", "a b"]
    assert run_entry_point(tmp_path, 'k3y with "quotes" and $HOME') == [
        *launch,
        "--api-key",
        'k3y with "quotes" and $HOME',
    ]
    assert run_entry_point(tmp_path, None) == launch


@pytest.mark.parametrize(
    "extra_args, flag_name, fix",
    [
        (("--tp-size=2",), "--tp-size", "the model's gpus (ModelProps.gpus)"),
        (("--tp", "2"), "--tp-size", "which argparse reads as it"),
        (("--tensor-parallel-size", "2"), "--tensor-parallel-size", "ModelProps.gpus"),
        (("--port", "8000"), "--port", "which the preset sets: set sglang.port"),
        (("--api-key=abc",), "--api-key", "sglang.api_key_name"),
        (("--mem-fraction-static", "0.5"), "--mem-fraction-static", "scaled to the model's gpu_share"),
        (("--mem-frac", "0.5"), "--mem-fraction-static", "which argparse reads as it"),
        (("--context-length", "8192"), "--context-length", "sglang.context_length"),
        (("--host", "127.0.0.1"), "--host", "listens on 0.0.0.0"),
        (("--model", "/scratch/other"), "--model", "copied to /scratch/model"),
        (("--config", "/scratch/c.yaml"), "--config", "the preset refuses: the construct cannot check a config file"),
        (("--tokenizer-worker-num", "4"), "--tokenizer-worker-num", "drains on SIGTERM"),
    ],
)
def test_flags_the_preset_sets_or_refuses_are_refused_naming_the_key(extra_args, flag_name, fix):
    with pytest.raises(ConfigError) as error:
        SglangProps(extra_args=("--chunked-prefill-size", "4096", *extra_args))
    assert error.value.key == "extra_args[2]" and f"is {flag_name}" in error.value.detail and fix in error.value.detail


def test_flags_of_its_own_pass():
    """The twin: SGLang's other flags, one beginning like an owned one, go through to the command."""
    extra = (
        "--chunked-prefill-size",
        "4096",
        "--enable-metrics-for-all-schedulers",
        "--trust-remote-code",
        "--model-impl",
        "sglang",
    )
    _, service = sglang_stack(SglangProps(image=MIRROR, extra_args=extra))
    assert service.contract.command[-len(extra) :] == extra


@pytest.mark.parametrize(
    "props, key, message",
    [
        (dict(mem_fraction_static=0.99), "mem_fraction_static", "0.1 to 0.95"),
        (dict(longest_request_seconds=81), "longest_request_seconds", "allowed 1 to 80"),
        (
            dict(max_running_requests=8, target_running_requests_per_task=9),
            "target_running_requests_per_task",
            "at most max_running_requests",
        ),
        (dict(api_key_name="a key"), "api_key_name", "not a key name"),
        (
            dict(image=EcrImage("mirror/sglang", "v0.5.9-cu126")),
            "image",
            "SGLang 0.5.9: before 0.5.10 SGLang keeps idle connections a fixed 5 s",
        ),
        (
            dict(image=EcrImage("mirror/sglang", "v0.4.10.post2-cu126")),
            "image",
            "mirror lmsysorg/sglang v0.5.10 or later",
        ),
        (dict(kv_cache_scale_out_percent=5), "kv_cache_scale_out_percent", "out of range"),
    ],
)
def test_values_are_refused_naming_the_key_and_the_fix(props, key, message):
    with pytest.raises(ConfigError) as error:
        SglangProps(**props)
    assert error.value.key == key and message in error.value.detail


@pytest.mark.parametrize("tag", ["v0.5.10-cu129", "v0.5.23", "0.6.0-rocm700", "nightly-dev-20261201"])
def test_tags_of_releases_that_keep_connections_alive_long_enough_pass(tag):
    SglangProps(image=EcrImage("mirror/sglang", tag))


def test_what_the_model_gives_the_preset_is_checked():
    with pytest.raises(ConfigError, match=r"^sglang.image.*ECR repository and tag"):
        sglang_stack(SglangProps())
    with pytest.raises(ConfigError, match=r"^environment.*SGLANG_TIMEOUT_KEEP_ALIVE"):
        sglang_stack(model=dataclasses.replace(LLM, environment={"SGLANG_TIMEOUT_KEEP_ALIVE": "5"}))
    with pytest.raises(ConfigError, match=r"^sglang.shared_memory_mib.*below memory_mib"):
        sglang_stack(
            SglangProps(image=MIRROR, shared_memory_mib=16384), model=dataclasses.replace(LLM, memory_mib=16384)
        )
    with pytest.raises(ConfigError, match=r"server.props: RepositoryImage is not SglangProps"):
        SglangServer(IMAGE)  # pyright: ignore[reportArgumentType]  # deliberately misplaced image: the refusal is under test


def test_the_fit_check_counts_the_sidecars():
    """SGLang's scratch-owner, fetcher and collector reserve memory too: a server sized to the limit alone does not
    fit."""
    limit = int(192 * 1024 * 0.90)
    with pytest.raises(ConfigError, match=rf"memory_mib: {limit + 768} MiB .*g5\.12xlarge"):
        sglang_stack(model=dataclasses.replace(LLM, cpu=45056, memory_mib=limit))
    assert SglangServer().sidecar_reservation == (2 * 128 + 256, 2 * 256 + 256)


def test_a_tensor_parallel_size_the_heads_cannot_divide_is_refused_or_warned():
    with pytest.raises(ConfigError, match=r"^gpus.*attention heads.*\(1, 2, 4, 8\)"):
        sglang_stack(SglangProps(image=MIRROR, attention_heads=40), model=dataclasses.replace(LLM, gpus=3))
    sglang_stack(SglangProps(image=MIRROR, attention_heads=40))
    warned, _ = sglang_stack(model=dataclasses.replace(LLM, gpus=3))
    assert Annotations.from_stack(warned).find_warning(
        "*", Match.string_like_regexp("SGLang with tensor-parallel size 3")
    )
    plain, _ = sglang_stack()
    assert not Annotations.from_stack(plain).find_warning("*", Match.string_like_regexp("tensor-parallel size"))


def test_on_a_share_sglang_sizes_its_static_memory_from_the_share_and_says_it_is_one_cuda_process():
    """--mem-fraction-static is of the device's whole memory (SGLang reads nvidia-smi's memory.total): on half an
    A10G it is half the props' fraction. At tensor-parallel size 1 SGLang holds the GPU from one process."""
    from tests.conftest import cloudformation_validation_findings
    from tests.infra.test_gpu_sharing import shared_task_definitions, team_stack

    app, _, service = team_stack(GpuShare(11514), SglangServer(SglangProps(image=MIRROR)))
    fraction = float(flag(list(service.contract.command), "--mem-fraction-static"))
    assert fraction == pytest.approx(0.70 * 11514 / 23028, abs=0.001) and service.contract.single_cuda_process
    (task,) = shared_task_definitions(app.synth().get_stack_by_name("Team").template).values()
    assert [c["Name"] for c in task["Properties"]["ContainerDefinitions"] if c.get("ResourceRequirements")] == [
        "server"
    ]
    assert cloudformation_validation_findings(Path(app.outdir)) == [], "CDK's CloudFormation validation finds nothing"
    _, whole = sglang_stack(model=ModelProps(name="one", version="1"), instance_type="g5.xlarge")
    assert flag(list(whole.contract.command), "--mem-fraction-static") == "0.7" and whole.contract.single_cuda_process


@pytest.mark.parametrize("longest", [80, 60])
def test_a_generation_of_the_stated_length_finishes_when_its_task_stops(longest):
    """The ALB keeps it through the deregistration delay; SGLang (which drains until its requests end) and its exit
    fit what the Spot notice leaves, before SIGKILL at stopTimeout."""
    stack, service = sglang_stack(SglangProps(image=MIRROR, longest_request_seconds=longest))
    (group,) = Template.from_stack(stack).find_resources("AWS::ElasticLoadBalancingV2::TargetGroup").values()
    delay = int(
        {a["Key"]: a["Value"] for a in group["Properties"]["TargetGroupAttributes"]}[
            "deregistration_delay.timeout_seconds"
        ]
    )
    stop_timeout = task_containers(stack)["server"]["StopTimeout"]
    assert delay == longest and stop_timeout == SPOT_STOP_SECONDS - longest >= SGLANG_EXIT_SECONDS
    assert service.contract.stop == StopTiming(
        SPOT_STOP_SECONDS - SGLANG_EXIT_SECONDS - longest, SGLANG_EXIT_SECONDS, longest, longest
    )
    timing = ServiceTimingProps()
    delay, stop_timeout = service.contract.stop.task_timing(
        timing.deregistration_delay_seconds, timing.stop_timeout_seconds
    )
    service.contract.stop.check_fits(stop_timeout_seconds=stop_timeout, deregistration_delay_seconds=delay)


@pytest.mark.parametrize("idle_timeout", [90, 200])
def test_sglangs_keep_alive_outlasts_the_load_balancers_idle_timeout(idle_timeout):
    stack, balancer, parts = stack_with_load_balancer(idle_timeout - 10)
    service = ModelService(
        stack,
        "M",
        model=ModelProps(name="llm", version="1"),
        access=ServiceAccess(allow_unauthenticated=True),
        server=SglangServer(SglangProps(image=MIRROR, longest_request_seconds=min(80, idle_timeout - 10))),
        **parts,
    )
    environment = {e["Name"]: e["Value"] for e in task_containers(stack)["server"]["Environment"]}
    assert int(environment["SGLANG_TIMEOUT_KEEP_ALIVE"]) > balancer.idle_timeout_seconds == idle_timeout
    assert service.contract.keep_alive_seconds == int(environment["SGLANG_TIMEOUT_KEEP_ALIVE"])


def test_sglang_scales_on_running_and_waiting_requests_and_its_kv_cache():
    stack, service = sglang_stack(SglangProps(image=MIRROR, max_running_requests=32))
    ServiceScaling(stack, "Scaling", service=service)
    template = json.dumps(Template.from_stack(stack).to_json())
    for name in SGLANG_METRICS:
        assert f'"{name.replace(":", "_")}"' in template
    signals = {s.metric: s for s in service.contract.scaling_signals if isinstance(s, ScalingSignal)}
    assert signals["sglang_num_running_reqs"].target == 24
    assert (signals["sglang_num_queue_reqs"].scale_out_above, signals["sglang_token_usage"].scale_out_above) == (4, 0.9)
    assert signals["sglang_token_usage"].maximum == 1


def test_sglang_is_exported_and_its_props_state_every_default():
    assert {"SglangProps", "SglangServer"} <= set(gpu_inference_constructs.__all__)
    assert fields_without_a_stated_default(SglangProps) == []


def test_tgi_warns_that_it_is_in_maintenance_naming_where_to_move_and_the_other_presets_do_not():
    stack, parts = stack_with_placement()
    for index, (name, server) in enumerate(
        [
            ("tgi", TgiServer(TgiProps(image=EcrImage("mirror/tgi", "3.3.7")))),
            ("vllm", VllmServer(VllmProps(image=EcrImage("mirror/vllm", "v0.32.0")))),
            ("sglang", SglangServer(SglangProps(image=MIRROR))),
        ]
    ):
        ModelService(
            stack,
            name.title(),
            model=dataclasses.replace(LLM, name=name),
            server=server,
            capacity=on_cluster(stack, "g5.12xlarge"),
            **at_priority(parts, 40 + index),
        )
    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(TGI_MAINTENANCE_WARNING))
    assert [w.id for w in warnings] == ["/S/Tgi"]
    message = warnings[0].entry.data
    assert isinstance(message, str)  # a warning's data is its message
    for words in (
        "maintenance mode since 2025-12-11",
        "v3.3.7",
        "VllmServer(VllmProps(...))",
        "SglangServer(SglangProps(...))",
        f"acknowledge_warning('{TGI_MAINTENANCE_WARNING}')",
    ):
        assert words in message


@pytest.mark.parametrize("acknowledged", [False, True])
def test_the_tgi_warning_stays_until_acknowledged(acknowledged):
    stack, parts = stack_with_placement()
    service = ModelService(
        stack,
        "Tgi",
        model=dataclasses.replace(LLM, name="tgi"),
        capacity=on_cluster(stack, "g5.12xlarge"),
        server=TgiServer(TgiProps(image=EcrImage("mirror/tgi", "3.3.7"))),
        **parts,
    )
    if acknowledged:
        cdk.Annotations.of(service).acknowledge_warning(TGI_MAINTENANCE_WARNING)
    found = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(TGI_MAINTENANCE_WARNING))
    assert bool(found) is not acknowledged


def test_the_configuration_pages_sglang_example_builds_the_server_it_describes():
    """docs/configuration.md's snippet, run as written: the server it makes serves the model it names."""
    import re

    from tests.conftest import ROOT

    page = (ROOT / "docs" / "configuration.md").read_text()
    section = page[page.index("## SGLang, and leaving TGI") : page.index("## Models in S3")]
    (source,) = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102  # the page's own example
    server = namespace["server"]
    assert isinstance(server, SglangServer) and server.props.served_model_name == "llama-3.1-8b-instruct"
    _, service = sglang_stack(server.props)
    assert flag(list(service.contract.command), "--context-length") == "8192"


@pytest.mark.parametrize(
    ("preset", "props", "other"), [(VllmServer, VllmProps, SglangProps), (SglangServer, SglangProps, VllmProps)]
)
def test_the_llm_presets_share_their_fields_and_keep_props_first(preset, props, other):
    """One shared base (llm_preset.LlmPreset): props stays the first positional argument, the images and user follow,
    and the other preset's props are refused by name."""
    assert [f.name for f in dataclasses.fields(preset)] == [
        "props",
        "image",
        "user",
        "fetcher_image",
        "collector_image",
    ]
    server = preset(props(), None, "2000:2000")
    assert isinstance(server.props, props) and server.user == "2000:2000" and preset().props == props()
    assert server.longest_request_seconds == server.props.longest_request_seconds
    assert server.sidecar_reservation[0] >= server.collected_metrics.collector_cpu
    with pytest.raises(ConfigError, match=r"^server\.props: .*image="):
        preset(other())
