"""Issue 45's infrastructure: a collector in every model task that sends traces to X-Ray with least privilege, the
servers pointed at it, the X-Ray endpoint, and FireLens where an environment chooses it."""

import json

import pytest

from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.networking.network import DEFAULT_INTERFACE_ENDPOINTS
from gpu_inference_constructs.task_telemetry.telemetry import (
    OTLP_GRPC_ADDRESS,
    OTLP_HTTP_ADDRESS,
    OTLP_HTTP_ENDPOINT,
    TRACE_COLLECTOR_CPU,
    TRACE_COLLECTOR_MEMORY_MIB,
    FireLensProps,
    TelemetryProps,
)
from tests.infra.test_service import containers, logical


def _environment(container):
    return {e["Name"]: e["Value"] for e in container.get("Environment", [])}


def _text(value) -> str:
    """A value as text, each token in it (the log group's name in the agent's configuration) as a placeholder."""
    if isinstance(value, dict):
        return "".join(part if isinstance(part, str) else "TOKEN" for part in value["Fn::Join"][1])
    return str(value)


def test_every_task_has_a_collector_whose_otlp_receiver_sends_traces_to_xray(env):
    """The ADOT collector in every task of these environments (none runs a server whose Prometheus metrics lack
    histograms, the CloudWatch agent's case): OTLP in on the loopback, X-Ray out; traces alone where the server
    exports no Prometheus metrics, which then writes no log group."""
    config, template = env
    collectors = containers(template, "metrics-collector")
    assert set(collectors) == {m.name for m in config.models}
    for model in config.models:
        collector = collectors[model.name]
        otel = json.loads(_text(_environment(collector)["AOT_CONFIG_CONTENT"]))
        assert otel["receivers"]["otlp"]["protocols"] == {
            "grpc": {"endpoint": OTLP_GRPC_ADDRESS},
            "http": {"endpoint": OTLP_HTTP_ADDRESS},
        }
        assert otel["service"]["pipelines"]["traces"]["exporters"] == ["awsxray"]
        assert "CW_CONFIG_CONTENT" not in _environment(collector)
        assert collector["Essential"] is False
        if not config.server_config(model).vllm:  # traces only: the smaller reservation, inside the task's fit check
            assert set(otel["service"]["pipelines"]) == {"traces"} and "awsemf" not in otel["exporters"]
            assert (collector["Cpu"], collector["MemoryReservation"]) == (
                TRACE_COLLECTOR_CPU,
                TRACE_COLLECTOR_MEMORY_MIB,
            )


def test_the_task_role_may_only_write_traces(env):
    """No wider than AWSXrayWriteOnlyAccess: the two write actions, and no sampling reads or anything else of X-Ray."""
    config, template = env
    policies = {k: p for k, p in template.find_resources("AWS::IAM::Policy").items() if "TaskRoleDefaultPolicy" in k}
    for model in config.models:
        (policy,) = [p for k, p in policies.items() if k.startswith(f"Model{logical(model.name)}")]
        xray = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if "xray:" in str(s["Action"])]
        assert xray == [
            {"Action": ["xray:PutTelemetryRecords", "xray:PutTraceSegments"], "Effect": "Allow", "Resource": "*"}
        ]


def test_the_servers_send_their_spans_to_the_collector_at_the_environments_ratio(env):
    config, template = env
    servers = containers(template, "server")
    ratio = f"{config.telemetry.trace_sampling_ratio:g}"
    for model in config.models:
        server = servers[model.name]
        environment = _environment(server)
        assert environment["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
        assert environment["OTEL_TRACES_SAMPLER_ARG"] == ratio
        assert environment["OTEL_SERVICE_NAME"] == model.name
        if config.server_config(model).vllm:
            command = server["Command"]
            assert command[command.index("--otlp-traces-endpoint") + 1] == f"grpc://{OTLP_GRPC_ADDRESS}"
            assert environment["OTEL_EXPORTER_OTLP_TRACES_INSECURE"] == "true"
        else:
            assert environment["OTEL_EXPORTER_OTLP_ENDPOINT"] == OTLP_HTTP_ENDPOINT


def test_the_network_has_an_xray_endpoint(network):
    _, template = network
    assert "xray" in DEFAULT_INTERFACE_ENDPOINTS
    endpoints = template.find_resources("AWS::EC2::VPCEndpoint", {"Properties": {"VpcEndpointType": "Interface"}})
    names = [json.dumps(e["Properties"]["ServiceName"]) for e in endpoints.values()]
    assert any(".xray" in name for name in names)


def test_an_environment_that_chooses_firelens_routes_the_servers_logs_through_fluent_bit(env):
    config, template = env
    servers, routers = containers(template, "server"), containers(template, "log-router")
    if config.telemetry.firelens is None:
        assert routers == {}
        assert all(s["LogConfiguration"]["LogDriver"] == "awslogs" for s in servers.values())
        return
    firelens = config.telemetry.firelens
    for model in config.models:
        server, router = servers[model.name], routers[model.name]
        logging = server["LogConfiguration"]
        assert logging["LogDriver"] == "awsfirelens"
        assert logging["Options"]["Name"] == "cloudwatch_logs"
        assert logging["Options"]["auto_create_group"] == "false"  # the model's own group: its retention and key
        assert logging["Options"]["log_stream_prefix"] == f"{model.name}/{model.version}/server/"
        # Each line as the server wrote it: an EMF line the JSON object CloudWatch extracts metrics from (the
        # record's other keys, ECS metadata, go to the archive's outputs only: tests/infra/test_log_archive.py).
        assert logging["Options"]["log_key"] == "log"
        assert router["FirelensConfiguration"]["Type"] == "fluentbit"
        assert router["LogConfiguration"]["LogDriver"] == "awslogs"
        assert (router["Cpu"], router["MemoryReservation"]) == (firelens.cpu, firelens.memory_mib)
        assert {"ContainerName": "log-router", "Condition": "START"} in server["DependsOn"]


def test_one_environment_of_the_tests_uses_firelens(synthesized):
    """cdk.json's staging opts in too (its template: tests/app's snapshot)."""
    assert any(stage.config.telemetry.firelens is not None for stage in synthesized.stages.values())


@pytest.mark.parametrize(
    ("props", "match"),
    [
        (dict(trace_sampling_ratio=1.5), r"trace_sampling_ratio.*from 0"),
        (dict(trace_sampling_ratio=True), r"trace_sampling_ratio.*from 0"),
    ],
)
def test_a_sampling_ratio_outside_0_to_1_is_refused(props, match):
    with pytest.raises(ConfigError, match=match):
        TelemetryProps(**props)


@pytest.mark.parametrize(
    ("props", "match"),
    [
        (dict(image="public.ecr.aws/aws-observability/aws-for-fluent-bit:2.34.0"), r"^image.*EcrImage"),
        (dict(cpu=0), r"^cpu"),
        (dict(memory_mib=4096), r"^memory_mib"),
    ],
)
def test_a_log_router_image_that_is_no_mirror_or_with_no_cpu_is_refused(props, match):
    with pytest.raises(ConfigError, match=match):
        FireLensProps(**props)


def test_the_images_come_from_the_environments_ecr_mirrors(env):
    """Private subnets without NAT reach no public registry: the collector and the log router are pulled from the
    ECR mirrors cdk.json names (a preset's own collector_image first)."""
    config, template = env
    mirrors = {
        "metrics-collector": config.telemetry.collector_image,
        "log-router": config.telemetry.firelens.image if config.telemetry.firelens else None,
    }
    for name, environment_mirror in mirrors.items():
        for model, container in containers(template, name).items():
            vllm = config.server_config(next(m for m in config.models if m.name == model)).vllm
            # The vLLM preset's own mirror comes first: the ADOT collector's.
            mirror = vllm.collector_image if name == "metrics-collector" and vllm is not None else environment_mirror
            assert mirror is not None, f"{name} of {model} would be pulled from ECR Public"
            image = json.dumps(container["Image"])
            assert f"/{mirror.repository}:{mirror.tag}" in image and "public.ecr.aws" not in image, (model, image)


def test_the_log_router_counts_in_the_task_fit():
    assert TelemetryProps().log_router_reservation == (0, 0)
    assert TelemetryProps(firelens=FireLensProps()).log_router_reservation == (64, 128)


# The cloudwatch_logs output's options (Fluent Bit's "Amazon CloudWatch" output; AWS for Fluent Bit's image carries it)
# and the keys FireLens itself reads. Debian 12 packages no fluent-bit (apt-cache policy fluent-bit: none), so the
# configuration is checked against the documented schema, not by a Fluent Bit run.
CLOUDWATCH_LOGS_OPTIONS = frozenset(
    {
        "Name",
        "region",
        "log_group_name",
        "log_group_template",
        "log_stream_prefix",
        "log_stream_name",
        "log_stream_template",
        "log_key",
        "log_format",
        "log_retention_days",
        "role_arn",
        "auto_create_group",
        "endpoint",
        "sts_endpoint",
        "metric_namespace",
        "metric_dimensions",
        "auto_retry_requests",
        "workers",
        "retry_limit",
    }
)


def firelens_output_problems(options: dict) -> list[str]:
    """What a FireLens cloudwatch_logs output's options get wrong by the plugin's documented schema."""
    problems = [f"unknown option {key}" for key in sorted(set(options) - CLOUDWATCH_LOGS_OPTIONS)]
    if options.get("Name") != "cloudwatch_logs":
        problems.append("Name is not cloudwatch_logs")
    for required in ("region", "log_group_name"):
        if required not in options:
            problems.append(f"{required} is missing")
    if ("log_stream_prefix" in options) == ("log_stream_name" in options):
        problems.append("give exactly one of log_stream_prefix and log_stream_name")
    if options.get("auto_create_group", "false") not in ("true", "false"):
        problems.append("auto_create_group is not true or false")
    return problems


def test_the_firelens_output_follows_the_cloudwatch_logs_plugins_schema(env):
    config, template = env
    for model, server in containers(template, "server").items():
        if config.telemetry.firelens is not None:
            assert firelens_output_problems(server["LogConfiguration"]["Options"]) == [], model


@pytest.mark.parametrize(
    ("defect", "problem"),
    [
        ({"log_group": "x"}, "unknown option log_group"),
        ({"Name": "cloudwatch"}, "Name is not cloudwatch_logs"),
        ({"log_stream_name": "s"}, "exactly one of log_stream_prefix and log_stream_name"),
        ({"auto_create_group": "no"}, "auto_create_group is not true or false"),
    ],
)
def test_the_schema_check_finds_a_planted_defect(defect, problem):
    good = {
        "Name": "cloudwatch_logs",
        "region": "us-east-1",
        "log_group_name": "g",
        "log_stream_prefix": "m/1/server/",
        "auto_create_group": "false",
    }
    assert firelens_output_problems(good) == []
    assert any(problem in found for found in firelens_output_problems({**good, **defect}))
    assert "region is missing" in firelens_output_problems({k: v for k, v in good.items() if k != "region"})


def test_cdk_json_telemetry_is_checked_on_load():
    from stacks.config import load_environment
    from tests.scenarios import scenario_environment

    dev = scenario_environment("dev")
    loaded = load_environment(
        "dev", {**dev, "telemetry": {"trace_sampling_ratio": 0.25, "firelens": {"memory_mib": 256}}}
    )
    assert loaded.telemetry == TelemetryProps(trace_sampling_ratio=0.25, firelens=FireLensProps(memory_mib=256))
    with pytest.raises(ConfigError, match=r"telemetry.trace_sampling_ratio.*from 0"):
        load_environment("dev", {**dev, "telemetry": {"trace_sampling_ratio": 2}})
    with pytest.raises(ConfigError, match=r"telemetry.firelens.image.tag.*pin"):
        load_environment(
            "dev", {**dev, "telemetry": {"firelens": {"image": {"repository": "mirror/fluent-bit", "tag": "latest"}}}}
        )
