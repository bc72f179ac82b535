"""Each server traces as its maker documents it, or says at synth that it cannot: vLLM gets its trace flag only on an
image that carries OpenTelemetry (without it vLLM exits at start), SGLang its own two flags and the OpenTelemetry
SDK's variables where its image has the tracing extra, and TorchServe (the Neuron preset) nothing, with a warning
whenever the environment samples traces."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Match, Template

from gpu_inference_constructs import (
    DEFAULT_COLLECTOR_IMAGE,
    BundledServer,
    ClusterCapacity,
    EcrImage,
    ListenerRoute,
    ModelBucket,
    ModelProps,
    ModelService,
    NeuronServer,
    ServiceAccess,
    ServiceLogs,
    SglangProps,
    SglangServer,
    TritonServer,
    VllmProps,
    VllmServer,
)
from gpu_inference_constructs.servers.vllm import VLLM_OPENTELEMETRY_CHECK, vllm_tag_has_opentelemetry
from gpu_inference_constructs.service.task import NO_TRACES_WARNING
from gpu_inference_constructs.task_telemetry.otel_collector import OTEL_COLLECTOR_USER, OTEL_CONFIG_VARIABLE
from gpu_inference_constructs.task_telemetry.telemetry import OTLP_GRPC_ADDRESS, TelemetryProps
from tests.infra.team_parts import imported_team_parts

KEY = "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-3333-4444-555555555555"


def synthesized(
    server,
    ratio: float,
    instance_type: str = "g5.2xlarge",
    collector_image: EcrImage | None = None,
    warning: str = NO_TRACES_WARNING,
    container: str = "server",
) -> tuple[dict, list[str]]:
    """(the ``container``, the warnings of id ``warning``) of one team model at ``ratio``."""
    app = cdk.App()
    stack = cdk.Stack(app, "Team", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    team = imported_team_parts(stack)
    ModelService(
        stack,
        "Chat",
        model=ModelProps(name="chat", version="1", cpu=2048, memory_mib=10240),
        server=server,
        environment="team",
        logs=ServiceLogs(
            kms.Key.from_key_arn(stack, "Key", KEY),
            telemetry=TelemetryProps(trace_sampling_ratio=ratio, collector_image=collector_image),
        ),
        capacity=ClusterCapacity(team.cluster, "team-gpu", instance_type),
        model_source=ModelBucket(s3.Bucket.from_bucket_name(stack, "Models", "team-models")),
        route=ListenerRoute(team.listener, 7),
        access=ServiceAccess(allow_unauthenticated=True),
    )
    (task,) = Template.from_stack(stack).find_resources("AWS::ECS::TaskDefinition").values()
    (found,) = [c for c in task["Properties"]["ContainerDefinitions"] if c["Name"] == container]
    warnings = [
        w.entry.data for w in Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(warning))
    ]
    return found, [str(w) for w in warnings]


def environment(container: dict) -> dict[str, str]:
    return {e["Name"]: e["Value"] for e in container.get("Environment", [])}


@pytest.mark.parametrize(
    ("tag", "carries"),
    [
        ("v0.11.0", False),
        ("v0.16.9", False),
        ("v0.17.0", True),
        ("v0.32.0", True),
        ("0.17.1", True),
        ("nightly-2026-11-01", None),
    ],
)
def test_the_vllm_tags_that_carry_opentelemetry(tag, carries):
    assert vllm_tag_has_opentelemetry(tag) is carries


def test_vllm_on_a_release_with_opentelemetry_gets_its_trace_flag():
    server, warnings = synthesized(VllmServer(VllmProps(image=EcrImage("mirror/vllm-openai", "v0.32.0"))), 0.05)
    command = server["Command"]
    assert command[command.index("--otlp-traces-endpoint") + 1] == f"grpc://{OTLP_GRPC_ADDRESS}"
    assert environment(server)["OTEL_TRACES_SAMPLER_ARG"] == "0.05" and warnings == []


@pytest.mark.parametrize(
    "server",
    [
        VllmServer(VllmProps(image=EcrImage("mirror/vllm-openai", "v0.11.0"))),
        VllmServer(VllmProps(), image=ecs.ContainerImage.from_registry("registry.example/team/vllm:custom")),
    ],
    ids=["a-release-before-opentelemetry", "an-image-the-library-cannot-read"],
)
def test_vllm_on_an_image_it_cannot_vouch_for_gets_no_trace_flag_and_a_warning_naming_the_check(server):
    """The flag would make vLLM exit at start ("OpenTelemetry is not available"): left out, and said."""
    container, warnings = synthesized(server, 0.05)
    assert "--otlp-traces-endpoint" not in container["Command"]
    (warning,) = warnings
    assert "vllm.opentelemetry" in warning and VLLM_OPENTELEMETRY_CHECK in warning


def test_vllm_declared_to_carry_opentelemetry_traces_and_without_sampling_gets_no_flag():
    custom = ecs.ContainerImage.from_registry("registry.example/team/vllm:custom")
    declared, warnings = synthesized(VllmServer(VllmProps(opentelemetry=True), image=custom), 0.05)
    assert "--otlp-traces-endpoint" in declared["Command"] and warnings == []
    unsampled, warnings = synthesized(VllmServer(VllmProps(image=EcrImage("mirror/vllm-openai", "v0.32.0"))), 0)
    assert "--otlp-traces-endpoint" not in unsampled["Command"] and warnings == []


SGLANG_IMAGE = EcrImage("mirror/sglang", "v0.5.10-cu129")


def test_sglang_with_its_tracing_extra_traces_at_the_environments_ratio():
    container, warnings = synthesized(SglangServer(SglangProps(image=SGLANG_IMAGE, opentelemetry=True)), 0.05)
    command = container["Command"]
    assert "--enable-trace" in command and command[command.index("--otlp-traces-endpoint") + 1] == OTLP_GRPC_ADDRESS
    variables = environment(container)
    assert (variables["OTEL_TRACES_SAMPLER"], variables["OTEL_TRACES_SAMPLER_ARG"]) == (
        "parentbased_traceidratio",
        "0.05",
    )
    assert variables["OTEL_SERVICE_NAME"] == "chat" and warnings == []


def test_sglang_without_its_tracing_extra_says_so_where_traces_are_sampled():
    container, warnings = synthesized(SglangServer(SglangProps(image=SGLANG_IMAGE)), 0.05)
    assert "--enable-trace" not in container["Command"] and "OTEL_TRACES_SAMPLER" not in environment(container)
    (warning,) = warnings
    assert "sglang.opentelemetry" in warning and "sglang[tracing]" in warning
    assert synthesized(SglangServer(SglangProps(image=SGLANG_IMAGE)), 0)[1] == []


def test_the_neuron_preset_says_torchserve_sends_no_traces_where_they_are_sampled():
    _, warnings = synthesized(NeuronServer(), 0.01, instance_type="inf2.xlarge")
    (warning,) = warnings
    assert "TorchServe" in warning and "trace_sampling_ratio" in warning
    assert synthesized(NeuronServer(), 0, instance_type="inf2.xlarge")[1] == []


def test_the_bundled_servers_collector_is_the_environments_adot_mirror_as_its_own_user():
    collector, _ = synthesized(
        BundledServer(image=ecs.ContainerImage.from_registry("registry.example/team/server:1")),
        0.01,
        collector_image=EcrImage("mirror/aws-otel-collector", "v0.49.0"),
        container="metrics-collector",
    )
    assert "mirror/aws-otel-collector:v0.49.0" in json.dumps(collector["Image"])
    assert collector["User"] == OTEL_COLLECTOR_USER and collector["ReadonlyRootFilesystem"] is True
    names = {e["Name"] for e in collector["Environment"]}
    assert OTEL_CONFIG_VARIABLE in names and "CW_CONFIG_CONTENT" not in names


def test_a_cloudwatch_agent_collector_never_takes_the_adot_mirror_and_says_so():
    """Triton's Prometheus metrics have no histogram: the CloudWatch agent, public, where the mirror is ADOT's."""
    triton = TritonServer(image=ecs.ContainerImage.from_registry("registry.example/team/tritonserver:24.08-py3"))
    collector, warnings = synthesized(
        triton,
        0.01,
        collector_image=EcrImage("mirror/aws-otel-collector", "v0.49.0"),
        warning="gpu-inference:cloudwatch-agent-public-image",
        container="metrics-collector",
    )
    assert DEFAULT_COLLECTOR_IMAGE in json.dumps(collector["Image"])
    (warning,) = warnings
    assert "collector_image" in warning
