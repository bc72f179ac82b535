"""Requests and latency per LoRA adapter without one CloudWatch metric per adapter: two saved CloudWatch Logs Insights
queries (the top adapters, an adapter's p95 over time) over the model's log group, where the server's request-log
middleware writes one line per inference request (core/adapter_sync.py's fields; properties, not metrics)."""

from __future__ import annotations

from aws_cdk import aws_logs as logs
from constructs import Construct

from ..core.adapter_sync import (
    ADAPTER_LATENCY_FIELD,
    ADAPTER_NAME_FIELD,
    ADAPTER_STATUS_FIELD,
    REQUEST_LOG_MESSAGE,
)

_ONLY_REQUEST_LINES = f'| filter message = "{REQUEST_LOG_MESSAGE}"'
TOP_ADAPTERS_QUERY = "\n".join(
    (
        f"fields {ADAPTER_NAME_FIELD}, {ADAPTER_STATUS_FIELD}, {ADAPTER_LATENCY_FIELD}",
        _ONLY_REQUEST_LINES,
        f"| stats count(*) as requests, pct({ADAPTER_LATENCY_FIELD}, 95) as p95_ms by {ADAPTER_NAME_FIELD}",
        "| sort requests desc",
        "| limit 100",
    )
)
# An adapter's p95 over time: edit the adapter's name in the filter (a saved query takes no parameters).
ADAPTER_LATENCY_QUERY = "\n".join(
    (
        f"fields {ADAPTER_NAME_FIELD}, {ADAPTER_STATUS_FIELD}, {ADAPTER_LATENCY_FIELD}",
        _ONLY_REQUEST_LINES,
        f'| filter {ADAPTER_NAME_FIELD} = "ADAPTER-NAME"',
        f"| stats count(*) as requests, pct({ADAPTER_LATENCY_FIELD}, 95) as p95_ms, "
        f"max({ADAPTER_LATENCY_FIELD}) as max_ms by bin(5m)",
        "| sort @timestamp desc",
    )
)


class AdapterQueries(Construct):
    """The saved queries of one model's log group, named ``<name_prefix>/<environment>/<model>/top-adapters`` and
    ``.../adapter-latency``. Attributes: ``top_adapters_query``, ``adapter_latency_query`` (CfnQueryDefinition)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        log_group: logs.ILogGroup,
        model_name: str,
        environment_name: str,
        name_prefix: str,
    ) -> None:
        super().__init__(scope, construct_id)
        stem = f"{name_prefix}/{environment_name}/{model_name}"
        self.top_adapters_query = logs.CfnQueryDefinition(
            self,
            "TopAdapters",
            name=f"{stem}/top-adapters",
            query_string=TOP_ADAPTERS_QUERY,
            log_group_names=[log_group.log_group_name],
        )
        self.adapter_latency_query = logs.CfnQueryDefinition(
            self,
            "AdapterLatency",
            name=f"{stem}/adapter-latency",
            query_string=ADAPTER_LATENCY_QUERY,
            log_group_names=[log_group.log_group_name],
        )
