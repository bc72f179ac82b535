"""The collector of a server whose Prometheus metrics include histograms (the LLM presets' time to first token and
inter-token latency), and of a server that exports no Prometheus metrics (traces only: the bundled server's): the AWS
Distro for OpenTelemetry (ADOT) collector, configured from one environment variable (``AOT_CONFIG_CONTENT``), as its
image's non-root user on a read-only root filesystem. The CloudWatch agent's Prometheus pipeline drops histograms; this
collector scrapes the same gauges into the same CloudWatch metrics (namespace, names, Environment and ModelName
dimensions, the model's log group), sends each histogram per scrape as a statistic set (count, sum) under the
OpenTelemetry GenAI name, and receives the server's OTLP spans for X-Ray as the agent did. Free of aws_cdk (the sizing
advisor loads it)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from ..core import metric_names
from ..core.errors import ConfigError

if TYPE_CHECKING:
    from ..core.prometheus_metrics import ScrapedServer

# ADOT collector release v0.49.0 (aws-observability/aws-otel-collector, 2026-07-15); its image is published to ECR
# Public under the release's tag. In a VPC without a route to the internet, pass a copy in your own ECR.
DEFAULT_OTEL_COLLECTOR_IMAGE = "public.ecr.aws/aws-observability/aws-otel-collector:v0.49.0"
# The image's user (cmd/awscollector/Dockerfile: USER aoc, uid and gid 4317); it writes no file with this configuration.
OTEL_COLLECTOR_USER = "4317:4317"
OTEL_CONFIG_VARIABLE = "AOT_CONFIG_CONTENT"
# The OpenTelemetry GenAI semantic conventions' server metrics (seconds).
GEN_AI_TIME_TO_FIRST_TOKEN = "gen_ai.server.time_to_first_token"
GEN_AI_TIME_PER_OUTPUT_TOKEN = "gen_ai.server.time_per_output_token"
# The OTLP receiver's addresses on the task's loopback (the same the CloudWatch agent listened on).
_OTLP_GRPC, _OTLP_HTTP = "127.0.0.1:4317", "127.0.0.1:4318"


def _otlp_receiver() -> dict:
    return {"protocols": {"grpc": {"endpoint": _OTLP_GRPC}, "http": {"endpoint": _OTLP_HTTP}}}


def otel_traces_config(*, region: str) -> dict[str, str]:
    """The ADOT collector's configuration for a server that exports no Prometheus metrics: OTLP spans -> X-Ray, and
    nothing else (no log group, no metric)."""
    config = {
        "receivers": {"otlp": _otlp_receiver()},
        "processors": {"batch": {}},
        "exporters": {"awsxray": {"region": region}},
        "service": {
            "pipelines": {"traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["awsxray"]}}
        },
    }
    return {OTEL_CONFIG_VARIABLE: json.dumps(config, sort_keys=True)}


def otel_collector_config(
    contract: ScrapedServer, *, environment_name: str, model_name: str, region: str, log_group_name: str
) -> dict[str, str]:
    """The ADOT collector's configuration as the environment variable it reads it from: Prometheus scrape ->
    rename -> histograms to deltas -> EMF into the model's log group; OTLP spans -> X-Ray."""
    metrics = contract.metrics
    if metrics is None or not metrics.histograms:
        raise ConfigError(
            "server.metrics.histograms",
            f"is empty: the {contract.name} server has no histogram to collect; use collector_config",
        )
    histogram_names = [cloudwatch for _, cloudwatch in metrics.histograms]
    renames = {**{name: metrics.cloudwatch_name(name) for name in metrics.metrics}, **dict(metrics.histograms)}
    scrape = {
        "job_name": "model-server",
        "metrics_path": metrics.path,
        "scrape_interval": f"{metrics.scrape_interval_seconds}s",
        "scrape_timeout": f"{max(2, metrics.scrape_interval_seconds // 2)}s",
        "static_configs": [
            {
                "targets": [f"127.0.0.1:{metrics.port or contract.port}"],
                "labels": {
                    metric_names.DIMENSION_ENVIRONMENT: environment_name,
                    metric_names.DIMENSION_MODEL: model_name,
                },
            }
        ],
    }
    config = {
        "receivers": {
            "prometheus": {"config": {"scrape_configs": [scrape]}},
            "otlp": _otlp_receiver(),
        },
        "processors": {
            # Renamed after the scrape, not by metric_relabel_configs: a relabelled histogram loses its type.
            "metricstransform": {
                "transforms": [
                    {"include": source, "match_type": "strict", "action": "update", "new_name": target}
                    for source, target in renames.items()
                    if source != target
                ]
            },
            # Prometheus histograms are cumulative; the EMF exporter sends a histogram's count and sum as they come.
            "cumulativetodelta": {"include": {"metrics": histogram_names, "match_type": "strict"}},
            "batch": {},
        },
        "exporters": {
            "awsemf": {
                "region": region,
                "namespace": metric_names.NAMESPACE,
                "log_group_name": log_group_name,
                "log_stream_name": "metrics-collector",
                "dimension_rollup_option": "NoDimensionRollup",
                "metric_declarations": [
                    {
                        "dimensions": [[metric_names.DIMENSION_ENVIRONMENT, metric_names.DIMENSION_MODEL]],
                        "metric_name_selectors": [f"^{re.escape(name)}$" for name in sorted(set(renames.values()))],
                    }
                ],
            },
            "awsxray": {"region": region},
        },
        "service": {
            "pipelines": {
                "metrics": {
                    "receivers": ["prometheus"],
                    "processors": ["metricstransform", "cumulativetodelta", "batch"],
                    "exporters": ["awsemf"],
                },
                "traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["awsxray"]},
            }
        },
    }
    # JSON is YAML: the collector's YAML provider reads it as one line.
    return {OTEL_CONFIG_VARIABLE: json.dumps(config, sort_keys=True)}
