"""Issue 45's TTFT route: the LLM presets' collector is the ADOT collector, which brings vLLM's and SGLang's latency
histograms into CloudWatch under the OpenTelemetry GenAI names, keeps every gauge the CloudWatch agent delivered
(the scaling signals and alarms read them) and the traces to X-Ray, and the dashboard graphs them per model.

The collector's configuration is checked against its components' documented keys (the config.schema.yaml files
vendored in aws-observability/aws-otel-collector v0.49.0, contrib v0.156.0; the Prometheus scrape configuration's
documented keys), with a planted-defect twin. No collector runs here (no Docker)."""

import copy
import json
import re

import pytest
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.core.prometheus_metrics import PrometheusMetrics, collector_config
from gpu_inference_constructs.observability.environment_dashboard import TOKEN_LATENCY_TITLE
from gpu_inference_constructs.servers.sglang import SGLANG_LATENCY_HISTOGRAMS, SGLANG_METRICS
from gpu_inference_constructs.servers.vllm import VLLM_LATENCY_HISTOGRAMS, VLLM_METRICS
from gpu_inference_constructs.task_telemetry.otel_collector import (
    DEFAULT_OTEL_COLLECTOR_IMAGE,
    GEN_AI_TIME_PER_OUTPUT_TOKEN,
    GEN_AI_TIME_TO_FIRST_TOKEN,
    OTEL_COLLECTOR_USER,
    OTEL_CONFIG_VARIABLE,
    otel_collector_config,
)
from gpu_inference_constructs.task_telemetry.telemetry import OTLP_GRPC_ADDRESS, OTLP_HTTP_ADDRESS
from tests.infra.test_monitoring import dashboard_widgets
from tests.infra.test_service import containers
from tests.infra.test_telemetry import _environment, _text

# Documented configuration keys of the components the configuration uses (ADOT v0.49.0's vendored config.schema.yaml,
# or the component's config.go mapstructure tags where it has none: prometheus, metricstransform).
_AWS_SESSION = {
    "endpoint",
    "external_id",
    "local_mode",
    "max_retries",
    "no_verify_ssl",
    "num_workers",
    "proxy_address",
    "region",
    "request_timeout_seconds",
    "resource_arn",
    "role_arn",
}  # internal/aws/awsutil
COMPONENT_KEYS = {
    ("receivers", "prometheus"): {
        "config",
        "trim_metric_suffixes",
        "target_allocator",
        "api_server",  # its config.go
        "scrape_on_shutdown",
        "discovery_reload_on_startup",
        "initial_scrape_offset",
    },
    ("receivers", "otlp"): {"protocols"},
    ("processors", "metricstransform"): {"transforms"},
    ("processors", "cumulativetodelta"): {"include", "exclude", "initial_value", "max_staleness"},
    ("processors", "batch"): {
        "timeout",
        "send_batch_size",
        "send_batch_max_size",
        "metadata_keys",
        "metadata_cardinality_limit",
    },
    ("exporters", "awsemf"): _AWS_SESSION
    | {
        "detailed_metrics",
        "dimension_rollup_option",
        "eks_fargate_container_insights_enabled",
        "log_group_name",
        "log_retention",
        "log_stream_name",
        "metric_declarations",
        "metric_descriptors",
        "namespace",
        "output_destination",
        "parse_json_encoded_attr_values",
        "resource_to_telemetry_conversion",
        "retain_initial_value_of_delta_metric",
        "tags",
        "version",
    },
    ("exporters", "awsxray"): _AWS_SESSION
    | {"aws_log_groups", "index_all_attributes", "indexed_attributes", "telemetry"},
}
SCRAPE_CONFIG_KEYS = {
    "job_name",
    "metrics_path",
    "scrape_interval",
    "scrape_timeout",
    "static_configs",
    "scheme",
    "metric_relabel_configs",
    "relabel_configs",
    "honor_labels",
    "honor_timestamps",
    "params",
}
TRANSFORM_KEYS = {
    "include",
    "match_type",
    "action",
    "new_name",
    "operations",
    "experimental_match_labels",
    "submatch_case",
    "aggregation_type",
    "group_resource_labels",
}
MATCH_KEYS = {"metrics", "match_type", "metric_types", "regexp"}
DECLARATION_KEYS = {"dimensions", "label_matchers", "metric_name_selectors"}
ROLLUP_OPTIONS = {"NoDimensionRollup", "SingleDimensionRollupOnly", "ZeroAndSingleDimensionRollup"}


def _unknown(where: str, value: dict, allowed: set) -> list[str]:
    return [f"{where}: unknown key {key}" for key in sorted(set(value) - allowed)]


def _component_problems(config: dict) -> list[str]:
    problems = _unknown("top level", config, {"receivers", "processors", "exporters", "extensions", "service"})
    for kind in ("receivers", "processors", "exporters"):
        for name, settings in config.get(kind, {}).items():
            allowed = COMPONENT_KEYS.get((kind, name.split("/")[0]))
            if allowed is None:
                problems.append(f"{kind}.{name}: not a component this configuration's schema covers")
            else:
                problems += _unknown(f"{kind}.{name}", settings or {}, allowed)
    return problems


def _setting_problems(config: dict) -> list[str]:
    receivers, processors, exporters = (config.get(k, {}) for k in ("receivers", "processors", "exporters"))
    problems = []
    for scrape in receivers.get("prometheus", {}).get("config", {}).get("scrape_configs", []):
        problems += _unknown("scrape_config", scrape, SCRAPE_CONFIG_KEYS)
    for transform in processors.get("metricstransform", {}).get("transforms", []):
        problems += _unknown("metricstransform.transforms[]", transform, TRANSFORM_KEYS)
    for side in ("include", "exclude"):
        problems += _unknown(
            f"cumulativetodelta.{side}", processors.get("cumulativetodelta", {}).get(side, {}), MATCH_KEYS
        )
    emf = exporters.get("awsemf", {})
    if emf.get("dimension_rollup_option", "NoDimensionRollup") not in ROLLUP_OPTIONS:
        problems.append(f"awsemf.dimension_rollup_option: {emf['dimension_rollup_option']!r}")
    for declaration in emf.get("metric_declarations", []):
        problems += _unknown("awsemf.metric_declarations[]", declaration, DECLARATION_KEYS)
    return problems


def _pipeline_problems(config: dict) -> list[str]:
    problems = []
    for pipeline, parts in config.get("service", {}).get("pipelines", {}).items():
        if pipeline.split("/")[0] not in ("metrics", "traces", "logs"):
            problems.append(f"pipeline {pipeline}: not a signal")
        for kind in ("receivers", "processors", "exporters"):
            problems += [
                f"pipeline {pipeline}: {kind[:-1]} {name} is not defined"
                for name in parts.get(kind, [])
                if name not in config.get(kind, {})
            ]
    if "${" in json.dumps(config):
        problems.append("a ${...} the collector would expand as a variable")
    return problems


def otel_config_problems(config: dict) -> list[str]:
    """What an ADOT collector configuration gets wrong by its components' documented keys and its pipelines."""
    return _component_problems(config) + _setting_problems(config) + _pipeline_problems(config)


class _Contract:
    name, port = "vllm", 8000

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self.metrics = metrics


VLLM_CONTRACT = _Contract(PrometheusMetrics(metrics=VLLM_METRICS, histograms=VLLM_LATENCY_HISTOGRAMS))
PLACES = dict(environment_name="dev", model_name="llama", region="eu-west-1", log_group_name="/gpu-inference/dev/llama")


def _config(contract=VLLM_CONTRACT) -> dict:
    return json.loads(otel_collector_config(contract, **PLACES)[OTEL_CONFIG_VARIABLE])


def test_the_configuration_keeps_to_the_documented_keys():
    assert otel_config_problems(_config()) == []


@pytest.mark.parametrize(
    ("plant", "finding"),
    [
        (lambda c: c["exporters"]["awsemf"].update(log_group="x"), "awsemf: unknown key log_group"),
        (lambda c: c["exporters"]["awsemf"].update(dimension_rollup_option="None"), "dimension_rollup_option"),
        (
            lambda c: c["service"]["pipelines"]["metrics"]["processors"].append("filter"),
            "processor filter is not defined",
        ),
        (
            lambda c: c["processors"]["cumulativetodelta"]["include"].update(names=["x"]),
            "cumulativetodelta.include: unknown key names",
        ),
        (
            lambda c: c["receivers"]["prometheus"]["config"]["scrape_configs"][0].update(interval="15s"),
            "scrape_config: unknown key interval",
        ),
        (lambda c: c["processors"].update(transform={}), "processors.transform: not a component"),
        (lambda c: c["exporters"]["awsemf"].update(namespace="${NAMESPACE}"), "expand as a variable"),
    ],
)
def test_a_planted_defect_is_found(plant, finding):
    config = copy.deepcopy(_config())
    plant(config)
    assert any(finding in problem for problem in otel_config_problems(config)), otel_config_problems(config)


def _exposition() -> str:
    """What vLLM's /metrics serves for these families: prometheus_client (the library vLLM exports with), the
    names, labels and TTFT buckets of vllm/v1/metrics/loggers.py."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    for name in VLLM_METRICS:
        Gauge(name, "gauge", labels, registry=registry).labels("llama", "0").set(3)
    buckets = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
    for name, _ in VLLM_LATENCY_HISTOGRAMS:
        Histogram(name, "histogram", labels, buckets=buckets, registry=registry).labels("llama", "0").observe(0.2)
    Histogram("vllm:request_e2e_time_seconds", "not collected", labels, registry=registry).labels("llama", "0").observe(
        1
    )
    return generate_latest(registry).decode()


def test_the_collector_renames_exactly_the_families_vllm_exports():
    """The receiver keeps a histogram's family name (its _bucket/_sum/_count series are one OTel histogram): each
    configured name must be a family of the right type in the exposition, and the renames match no other."""
    families = {f.name: f.type for f in text_string_to_metric_families(_exposition())}
    config = _config()
    renames = {t["include"]: t["new_name"] for t in config["processors"]["metricstransform"]["transforms"]}
    for name in VLLM_METRICS:
        assert families[name] == "gauge" and renames[name] == PrometheusMetrics.cloudwatch_name(name)
    for name, cloudwatch in VLLM_LATENCY_HISTOGRAMS:
        assert families[name] == "histogram" and renames[name] == cloudwatch
    assert set(renames) <= set(families)
    assert config["processors"]["cumulativetodelta"]["include"]["metrics"] == [
        GEN_AI_TIME_TO_FIRST_TOKEN,
        GEN_AI_TIME_PER_OUTPUT_TOKEN,
    ]


def test_a_name_vllm_does_not_export_is_no_family():
    """The twin: vLLM's former TPOT histogram name is no family of the current exposition."""
    families = {f.name for f in text_string_to_metric_families(_exposition())}
    assert "vllm:time_per_output_token_seconds" not in families


def test_the_emf_export_delivers_what_the_cloudwatch_agent_did_and_the_gen_ai_names():
    """Same namespace, dimensions and metric names as the agent's EMF processor, plus the two GenAI metrics."""
    config = _config()
    agent = json.loads(
        collector_config(_Contract(PrometheusMetrics(metrics=VLLM_METRICS)), **PLACES)["CW_CONFIG_CONTENT"]
    )
    processor = agent["logs"]["metrics_collected"]["prometheus"]["emf_processor"]
    (declaration,) = processor["metric_declaration"]
    emf = config["exporters"]["awsemf"]
    (emf_declaration,) = emf["metric_declarations"]
    assert (emf["namespace"], emf["log_group_name"]) == (processor["metric_namespace"], PLACES["log_group_name"])
    assert emf_declaration["dimensions"] == declaration["dimensions"]
    assert emf["dimension_rollup_option"] == "NoDimensionRollup"  # no extra dimension sets
    selected = {re.sub(r"\\(.)", r"\1", s).strip("^$") for s in emf_declaration["metric_name_selectors"]}
    assert selected == {s.strip("^$") for s in declaration["metric_selectors"]} | {
        GEN_AI_TIME_TO_FIRST_TOKEN,
        GEN_AI_TIME_PER_OUTPUT_TOKEN,
    }


def test_traces_still_go_to_xray_from_the_same_otlp_addresses():
    config = _config()
    assert config["receivers"]["otlp"]["protocols"] == {
        "grpc": {"endpoint": OTLP_GRPC_ADDRESS},
        "http": {"endpoint": OTLP_HTTP_ADDRESS},
    }
    assert config["service"]["pipelines"]["traces"]["exporters"] == ["awsxray"]


def test_sglangs_histograms_go_under_the_same_names():
    assert [cloudwatch for _, cloudwatch in SGLANG_LATENCY_HISTOGRAMS] == [
        GEN_AI_TIME_TO_FIRST_TOKEN,
        GEN_AI_TIME_PER_OUTPUT_TOKEN,
    ]
    config = _config(_Contract(PrometheusMetrics(metrics=SGLANG_METRICS, histograms=SGLANG_LATENCY_HISTOGRAMS)))
    assert otel_config_problems(config) == []


@pytest.mark.parametrize(
    ("histograms", "match"),
    [
        ((("vllm time", "x"),), r"^metrics\.histograms\[0\]: .*Prometheus metric name"),
        ((("vllm:ttft", "gen ai ttft"),), r"^metrics\.histograms\[0\]: .*letters, digits"),
    ],
)
def test_a_histogram_misnamed_is_refused(histograms, match):
    with pytest.raises(ConfigError, match=match):
        PrometheusMetrics(metrics=VLLM_METRICS, histograms=histograms)


def test_llm_tasks_run_the_adot_collector_read_only_as_its_own_user(env):
    config, template = env
    collectors = containers(template, "metrics-collector")
    llm_models = [m for m in config.models if config.server_config(m).vllm]
    for model in llm_models:
        collector = collectors[model.name]
        environment = _environment(collector)
        assert OTEL_CONFIG_VARIABLE in environment and not {"CW_CONFIG_CONTENT", "PROMETHEUS_CONFIG_CONTENT"} & set(
            environment
        )
        assert collector["ReadonlyRootFilesystem"] is True and collector["User"] == OTEL_COLLECTOR_USER
        assert "aws-otel-collector" in json.dumps(collector["Image"])
        otel = json.loads(_text(environment[OTEL_CONFIG_VARIABLE]))
        assert otel_config_problems(otel) == []
        # Every vLLM metric the template reads (scaling policies, alarms) is one the collector exports.
        selected = {
            re.sub(r"\\(.)", r"\1", s).strip("^$")
            for s in otel["exporters"]["awsemf"]["metric_declarations"][0]["metric_name_selectors"]
        }
        read = set(re.findall(r'"(vllm_[a-z_]+)"', json.dumps(template.to_json())))
        assert read and read <= selected, read - selected
    assert DEFAULT_OTEL_COLLECTOR_IMAGE.startswith("public.ecr.aws/aws-observability/aws-otel-collector:")


def test_the_dashboard_graphs_ttft_and_time_per_output_token_per_model(env):
    _, template = env
    (widget,) = [w for w in dashboard_widgets(template) if w["properties"].get("title") == TOKEN_LATENCY_TITLE]
    expressions = json.dumps(widget["properties"]["metrics"])
    for name in (GEN_AI_TIME_TO_FIRST_TOKEN, GEN_AI_TIME_PER_OUTPUT_TOKEN):
        assert f'MetricName=\\\\\\"{name}\\\\\\"' in expressions or f'MetricName=\\"{name}\\"' in expressions, (
            expressions
        )
    assert "ModelName" in expressions and "'Average'" in expressions
