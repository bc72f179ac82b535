"""A server's Prometheus metrics (:class:`PrometheusMetrics`) and the CloudWatch agent sidecar's configuration that
brings them into CloudWatch (:func:`collector_config`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from . import metric_names
from .errors import ConfigError, require, require_range
from .model_source import PATH

if TYPE_CHECKING:  # only its types: the props load without aws_cdk (the sizing advisor)
    from aws_cdk import aws_ecs as ecs


class ScrapedServer(Protocol):
    """What the collector needs of a server contract."""

    @property
    def metrics(self) -> PrometheusMetrics | None: ...
    @property
    def port(self) -> int: ...
    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class PrometheusMetrics:
    """The server exposes Prometheus metrics; a CloudWatch agent sidecar scrapes ``path`` on the
    server's port every ``scrape_interval_seconds`` and writes the ``metrics`` listed (names as the
    server exposes them; on ``port``, default the server's own) to CloudWatch through the model's log group (EMF), in
    namespace ``GpuInference`` with the model's Environment and ModelName dimensions. Names are imported
    with ':' replaced by '_' (``vllm:num_requests_waiting`` becomes ``vllm_num_requests_waiting``).
    """

    metrics: tuple[str, ...]
    """The Prometheus metrics to bring into CloudWatch, as the server names them. Required."""
    path: str = "/metrics"
    """The path the collector scrapes. Default: /metrics."""
    port: int | None = None
    """The port the collector scrapes. Default: None (the server's port; Triton serves metrics on its own, 8002)."""
    scrape_interval_seconds: int = 15
    """Seconds between scrapes (5-300). Default: 15."""
    collector_image: ecs.ContainerImage | None = None
    """The collector's image. Default: None (with histograms, the ADOT collector: the environment's
    ``telemetry.collector_image`` mirror, else ``DEFAULT_OTEL_COLLECTOR_IMAGE``; without, ``DEFAULT_COLLECTOR_IMAGE``,
    the CloudWatch agent)."""
    collector_cpu: int = 256
    """CPU units ECS reserves for the collector (64-4096). Default: 256."""
    collector_memory_mib: int = 256
    """MiB ECS reserves for the collector (128-8192). Default: 256."""
    histograms: tuple[tuple[str, str], ...] = ()
    """Prometheus histograms to bring into CloudWatch too, as (the server's name, the CloudWatch metric's name)
    pairs: each scrape's count and sum as a statistic set, so a period's Average is its mean. The CloudWatch agent
    drops histograms, so with any the collector is the ADOT collector (``DEFAULT_OTEL_COLLECTOR_IMAGE``).
    Default: () (none: the CloudWatch agent)."""

    def __post_init__(self) -> None:
        require(
            bool(self.metrics),
            "metrics.metrics",
            "list the Prometheus metrics to bring into CloudWatch (scaling and alarms use them)",
        )
        for index, name in enumerate(self.metrics):
            require(
                bool(re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", name)),
                f"metrics.metrics[{index}]",
                f"{name!r} is not a Prometheus metric name",
            )
        require(bool(PATH.match(self.path)), "metrics.path", f"{self.path!r} is not an absolute URL path")
        if self.port is not None:
            require_range(self.port, 1024, 65535, "metrics.port")
        require_range(self.scrape_interval_seconds, 5, 300, "metrics.scrape_interval_seconds")
        require_range(self.collector_cpu, 64, 4096, "metrics.collector_cpu")
        require_range(self.collector_memory_mib, 128, 8192, "metrics.collector_memory_mib")
        for index, (name, cloudwatch) in enumerate(self.histograms):
            require(
                bool(re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", name)),
                f"metrics.histograms[{index}]",
                f"{name!r} is not a Prometheus metric name",
            )
            require(
                bool(re.match(r"^[a-zA-Z0-9_.:/-]{1,255}$", cloudwatch)),
                f"metrics.histograms[{index}]",
                f"{cloudwatch!r}: name the CloudWatch metric with letters, digits and _ . : / - (at most 255)",
            )

    @staticmethod
    def cloudwatch_name(prometheus_name: str) -> str:
        return prometheus_name.replace(":", "_")


def collector_config(
    contract: ScrapedServer, *, environment_name: str, model_name: str, region: str, log_group_name: str
) -> dict[str, str]:
    """The CloudWatch agent's two configurations, as the environment variables it reads them from."""
    metrics = contract.metrics
    if metrics is None:
        raise ConfigError(
            "server.metrics",
            f"is not set: the {contract.name} server contract exports no Prometheus metrics to collect",
        )
    names = [PrometheusMetrics.cloudwatch_name(m) for m in metrics.metrics]
    prometheus = {
        "global": {
            "scrape_interval": f"{metrics.scrape_interval_seconds}s",
            "scrape_timeout": f"{max(2, metrics.scrape_interval_seconds // 2)}s",
        },
        "scrape_configs": [
            {
                "job_name": "model-server",
                "metrics_path": metrics.path,
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{metrics.port or contract.port}"],
                        "labels": {
                            metric_names.DIMENSION_ENVIRONMENT: environment_name,
                            metric_names.DIMENSION_MODEL: model_name,
                        },
                    }
                ],
                # One literal rename per metric: CloudFormation would read a "${1}" group reference as its own syntax.
                "metric_relabel_configs": [
                    {
                        "source_labels": ["__name__"],
                        "regex": re.escape(name),
                        "target_label": "__name__",
                        "replacement": PrometheusMetrics.cloudwatch_name(name),
                    }
                    for name in metrics.metrics
                    if ":" in name
                ],
            }
        ],
    }
    agent = {
        "agent": {"region": region},
        "logs": {
            "metrics_collected": {
                "prometheus": {
                    "log_group_name": log_group_name,
                    "prometheus_config_path": "env:PROMETHEUS_CONFIG_CONTENT",
                    "emf_processor": {
                        "metric_namespace": metric_names.NAMESPACE,
                        "metric_declaration": [
                            {
                                "source_labels": ["job"],
                                "label_matcher": "^model-server$",
                                "dimensions": [[metric_names.DIMENSION_ENVIRONMENT, metric_names.DIMENSION_MODEL]],
                                "metric_selectors": [f"^{name}$" for name in names],
                            }
                        ],
                    },
                }
            },
            "force_flush_interval": 5,
        },
    }
    return {"PROMETHEUS_CONFIG_CONTENT": _yaml_of(prometheus), "CW_CONFIG_CONTENT": json.dumps(agent, sort_keys=True)}


def _yaml_of(value: object) -> str:
    """Prometheus reads YAML, and JSON is YAML: one line, no YAML library needed."""
    return json.dumps(value, sort_keys=True)
