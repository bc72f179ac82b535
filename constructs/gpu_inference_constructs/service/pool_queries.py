"""Per-model request counts and latency of a pool without one CloudWatch metric per model: two saved CloudWatch
Logs Insights queries (the top models, a model's p95 over time) and a Contributor Insights rule (the models with the
most requests), all over the pool's one log group, where the server writes one line per model and metrics interval
(pool_server.py's fields; EMF properties, not metrics)."""

from __future__ import annotations

import json

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_logs as logs
from constructs import Construct

from ..servers.pool import (
    POOL_MODEL_ERRORS_FIELD,
    POOL_MODEL_FIELD,
    POOL_MODEL_LATENCY_P95_FIELD,
    POOL_MODEL_REQUESTS_FIELD,
)

TOP_MODELS_QUERY = "\n".join(
    (
        f"fields {POOL_MODEL_FIELD}, {POOL_MODEL_REQUESTS_FIELD}, {POOL_MODEL_LATENCY_P95_FIELD}, "
        f"{POOL_MODEL_ERRORS_FIELD}",
        f"| filter ispresent({POOL_MODEL_FIELD})",
        f"| stats sum({POOL_MODEL_REQUESTS_FIELD}) as requests, sum({POOL_MODEL_ERRORS_FIELD}) as errors, "
        f"max({POOL_MODEL_LATENCY_P95_FIELD}) as worst_interval_p95_ms by {POOL_MODEL_FIELD}",
        "| sort requests desc",
        "| limit 100",
    )
)
# A model's p95 over time: edit the model's name in the filter (a saved query takes no parameters).
MODEL_LATENCY_QUERY = "\n".join(
    (
        f"fields {POOL_MODEL_FIELD}, {POOL_MODEL_REQUESTS_FIELD}, {POOL_MODEL_LATENCY_P95_FIELD}",
        f'| filter {POOL_MODEL_FIELD} = "MODEL-NAME"',
        f"| stats sum({POOL_MODEL_REQUESTS_FIELD}) as requests, pct({POOL_MODEL_LATENCY_P95_FIELD}, 95) as p95_ms by "
        "bin(5m)",
        "| sort @timestamp desc",
    )
)


def top_models_rule_body(log_group_name: str) -> dict:
    """A Contributor Insights rule (CloudWatchLogRule schema, version 1, JSON logs): each model's requests, summed."""
    return {
        "Schema": {"Name": "CloudWatchLogRule", "Version": 1},
        "LogGroupNames": [log_group_name],
        "LogFormat": "JSON",
        "Contribution": {
            "Keys": [f"$.{POOL_MODEL_FIELD}"],
            "ValueOf": f"$.{POOL_MODEL_REQUESTS_FIELD}",
            "Filters": [{"Match": f"$.{POOL_MODEL_FIELD}", "IsPresent": True}],
        },
        "AggregateOn": "Sum",
    }


class PoolQueries(Construct):
    """The saved queries and the Contributor Insights rule of one pool's log group, named
    ``<name_prefix>-<environment>-<pool>-...``. Attributes: ``top_models_query``, ``model_latency_query``
    (CfnQueryDefinition), ``top_models_rule`` (CfnInsightRule)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        log_group: logs.ILogGroup,
        pool_name: str,
        environment_name: str,
        name_prefix: str,
    ) -> None:
        super().__init__(scope, construct_id)
        stem = f"{name_prefix}/{environment_name}/{pool_name}"
        self.top_models_query = logs.CfnQueryDefinition(
            self,
            "TopModels",
            name=f"{stem}/top-models",
            query_string=TOP_MODELS_QUERY,
            log_group_names=[log_group.log_group_name],
        )
        self.model_latency_query = logs.CfnQueryDefinition(
            self,
            "ModelLatency",
            name=f"{stem}/model-latency",
            query_string=MODEL_LATENCY_QUERY,
            log_group_names=[log_group.log_group_name],
        )
        self.top_models_rule = cloudwatch.CfnInsightRule(
            self,
            "TopModelsRule",
            rule_name=f"{name_prefix}-{environment_name}-{pool_name}-top-models",
            rule_state="ENABLED",
            rule_body=json.dumps(top_models_rule_body(log_group.log_group_name)),
        )
