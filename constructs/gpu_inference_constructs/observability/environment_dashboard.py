"""The environment's CloudWatch dashboard: every model found by search, so it references no model's stack."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from constructs import Construct

from ..capacity.gpu_capacity import GpuCapacity
from ..core import metric_names
from ..routing.target_group_metrics import load_balancer_full_name as full_name_of
from ..task_telemetry.otel_collector import GEN_AI_TIME_PER_OUTPUT_TOKEN, GEN_AI_TIME_TO_FIRST_TOKEN
from . import task_start_handler
from .model_alarms import alarm_name_prefix
from .monitoring_costs import CostMetrics, on_demand_instances_expression


class DashboardFigures(Protocol):
    """What the dashboard graphs beside its searches: InferenceMonitoring's metrics and alarms."""

    name_prefix: str
    costs: CostMetrics
    alarms: dict[str, cloudwatch.Alarm]
    metric_spot_interruptions: cloudwatch.Metric
    metric_cost_per_million_requests: cloudwatch.MathExpression
    metric_cost_components: list[cloudwatch.MathExpression]
    metric_spare_capacity_cost: list[cloudwatch.MathExpression]
    metric_warm_pool_cost: list[cloudwatch.MathExpression]


MINUTE = cdk.Duration.minutes(1)
LATENCY_BREAKDOWN_TITLE = "Latency breakdown per model (ms, average): queue, model, request; batch size (right)"
TOKEN_LATENCY_TITLE = (
    f"LLM servers (vLLM, SGLang) per model (s, mean per minute): {GEN_AI_TIME_TO_FIRST_TOKEN}, "
    f"{GEN_AI_TIME_PER_OUTPUT_TOKEN}; first tokens per minute (right)"
)


def search(query: str, statistic: str, label: str, period: cdk.Duration = MINUTE) -> cloudwatch.MathExpression:
    """A CloudWatch SEARCH expression: one graph line per matching metric, however many models there are."""
    return cloudwatch.MathExpression(
        expression=f"SEARCH('{query}', '{statistic}', {period.to_seconds()})",
        using_metrics={},
        period=period,
        label=label,
    )


def graph(title: str, left: list, right: list | None = None, unit: str = "") -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(
        title=title,
        left=left,
        right=right or [],
        width=12,
        height=6,
        left_y_axis=cloudwatch.YAxisProps(label=unit, show_units=False) if unit else None,
    )


@dataclass(frozen=True)
class Searches:
    """The environment's metrics by search: per target group of its load balancer, per model, per service of its
    cluster."""

    environment_name: str
    """The environment whose models' metrics are found. Required."""
    load_balancer: elbv2.IApplicationLoadBalancer
    """The load balancer whose target groups' metrics are found. Required."""
    cluster_name: str
    """The cluster whose services' metrics are found. Required."""

    def per_target_group(self, metric: str, statistic: str, label: str) -> cloudwatch.MathExpression:
        return search(
            f'{{AWS/ApplicationELB,LoadBalancer,TargetGroup}} MetricName="{metric}" '
            f'LoadBalancer="{full_name_of(self.load_balancer)}"',
            statistic,
            f"{label} ${{PROP('Dim.TargetGroup')}}",
        )

    def per_model(self, metric: str, statistic: str, label: str = "") -> cloudwatch.MathExpression:
        return search(
            f"{{{metric_names.NAMESPACE},{metric_names.DIMENSION_ENVIRONMENT},{metric_names.DIMENSION_MODEL}}} "
            f'MetricName="{metric}" {metric_names.DIMENSION_ENVIRONMENT}="{self.environment_name}"',
            statistic,
            f"${{PROP('Dim.{metric_names.DIMENSION_MODEL}')}} {label or metric} {statistic}",
        )

    def per_service(
        self, metric: str, namespace: str = "ECS/ContainerInsights", statistic: str = "Average", label: str = ""
    ) -> cloudwatch.MathExpression:
        return search(
            f'{{{namespace},ClusterName,ServiceName}} MetricName="{metric}" ClusterName="{self.cluster_name}"',
            statistic,
            f"${{PROP('Dim.ServiceName')}} {label or metric}",
        )


def add_dashboard(
    scope: Construct,
    monitoring: DashboardFigures,
    environment_name: str,
    model_names: Sequence[str],
    load_balancer: elbv2.IApplicationLoadBalancer,
    capacity: GpuCapacity,
) -> cloudwatch.Dashboard:
    """The dashboard ``Dashboard`` in ``scope``: traffic, the fleet, the servers, cost and task starts, alarms."""
    find = Searches(environment_name, load_balancer, capacity.cluster.cluster_name)
    total = monitoring.costs.instances(capacity, MINUTE)
    on_demand = on_demand_instances_expression(capacity)
    dashboard = cloudwatch.Dashboard(
        scope,
        "Dashboard",
        dashboard_name=f"{monitoring.name_prefix}-{environment_name}",
        default_interval=cdk.Duration.hours(3),
    )
    dashboard.add_widgets(
        cloudwatch.TextWidget(
            markdown=f"# GPU inference: {environment_name}\nModels: {', '.join(model_names)}\n\n"
            "Each model's alarms are named "
            f"`{alarm_name_prefix(environment_name, monitoring.name_prefix)}<model>-<alarm>`: "
            "[all alarms of this environment]"
            "(https://console.aws.amazon.com/cloudwatch/home#alarmsV2:?search="
            f"{alarm_name_prefix(environment_name, monitoring.name_prefix)})",
            width=24,
            height=2,
        )
    )
    _traffic_and_fleet(dashboard, find, load_balancer, total, on_demand)
    _servers(dashboard, find)
    _cost_and_starts(dashboard, find, monitoring)
    dashboard.add_widgets(
        cloudwatch.AlarmStatusWidget(alarms=list(monitoring.alarms.values()), title="Alarms", width=24, height=6)
    )
    return dashboard


def _traffic_and_fleet(
    dashboard: cloudwatch.Dashboard,
    find: Searches,
    load_balancer: elbv2.IApplicationLoadBalancer,
    total: cloudwatch.IMetric,
    on_demand: str,
) -> None:
    """Requests, latency and errors at the load balancer and the servers; tasks and GPU instances."""
    dashboard.add_widgets(
        graph(
            "Requests per minute",
            [
                find.per_target_group("RequestCount", "Sum", "requests"),
                load_balancer.metrics.request_count(period=MINUTE, statistic="Sum", label="load balancer total"),
            ],
        ),
        graph(
            "Latency at the load balancer (s): p50 / p95 / p99",
            [find.per_target_group("TargetResponseTime", p, p) for p in ("p50", "p95", "p99")],
            unit="seconds",
        ),
    )
    dashboard.add_widgets(
        graph(
            "Errors per minute",
            [
                find.per_target_group("HTTPCode_Target_5XX_Count", "Sum", "5xx"),
                load_balancer.metrics.http_code_elb(
                    elbv2.HttpCodeElb.ELB_5XX_COUNT, period=MINUTE, statistic="Sum", label="load balancer 5xx"
                ),
                find.per_target_group("HTTPCode_Target_4XX_Count", "Sum", "4xx"),
            ],
        ),
        graph(
            "Server latency (ms): p50 / p95 / p99, queue wait p95",
            [find.per_model(metric_names.REQUEST_LATENCY, p) for p in ("p50", "p95", "p99")]
            + [find.per_model(metric_names.QUEUE_WAIT, "p95")],
            unit="ms",
        ),
    )
    dashboard.add_widgets(
        graph("Tasks: running / desired", [find.per_service("RunningTaskCount"), find.per_service("DesiredTaskCount")]),
        graph(
            "GPU instances: Spot vs On-Demand",
            [
                total,
                cloudwatch.MathExpression(
                    expression=on_demand, using_metrics={"total": total}, period=MINUTE, label="On-Demand (by policy)"
                ),
                cloudwatch.MathExpression(
                    expression=f"total - ({on_demand})",
                    using_metrics={"total": total},
                    period=MINUTE,
                    label="Spot (by policy)",
                ),
            ],
        ),
    )


def _servers(dashboard: cloudwatch.Dashboard, find: Searches) -> None:
    """GPU utilisation and memory, batches and queues, by model."""
    dashboard.add_widgets(
        graph(
            "GPU utilisation and memory (%)",
            [find.per_model(metric_names.GPU_UTILIZATION, "Average")],
            [find.per_model(metric_names.GPU_MEMORY_UTILIZATION, "Maximum")],
            unit="%",
        ),
        graph(
            "Batch size (avg) and queue depth (max)",
            [find.per_model(metric_names.BATCH_SIZE, "Average")],
            [find.per_model(metric_names.QUEUE_DEPTH, "Maximum")],
        ),
    )
    # Each model's own figures from its own process: on a shared GPU (NVIDIA MPS) the device's utilisation and
    # memory above are every co-tenant's.
    dashboard.add_widgets(
        graph(
            "Each model's own GPU: busy (% of time in forwards) and memory it holds (MiB)",
            [find.per_model(metric_names.MODEL_BUSY_PERCENT, "Average")],
            [find.per_model(metric_names.GPU_MEMORY_USED_MIB, "Maximum")],
            unit="%",
        ),
        # Where a request's time goes: queued until its batch formed, its batch's forward pass, and the whole request
        # (the rest is HTTP, tokenizing and encoding the answer); the batch it rode in on the right.
        graph(
            LATENCY_BREAKDOWN_TITLE,
            [
                find.per_model(name, "Average", label)
                for name, label in (
                    (metric_names.QUEUE_WAIT, "queue (to its batch)"),
                    (metric_names.INFERENCE_TIME, "model (its batch)"),
                    (metric_names.REQUEST_LATENCY, "request"),
                )
            ],
            [find.per_model(metric_names.BATCH_SIZE, "Average", "batch size")],
            unit="ms",
        ),
    )
    # vLLM's and SGLang's own histograms, one statistic set (count, sum) per scrape: Average is the mean per period;
    # no percentiles (a statistic set has no distribution). Models of other servers have no line here.
    dashboard.add_widgets(
        graph(
            TOKEN_LATENCY_TITLE,
            [
                find.per_model(GEN_AI_TIME_TO_FIRST_TOKEN, "Average", "time to first token"),
                find.per_model(GEN_AI_TIME_PER_OUTPUT_TOKEN, "Average", "time per output token"),
            ],
            [find.per_model(GEN_AI_TIME_TO_FIRST_TOKEN, "SampleCount", "first tokens")],
            unit="seconds",
        ),
    )


def _cost_and_starts(dashboard: cloudwatch.Dashboard, find: Searches, monitoring: DashboardFigures) -> None:
    """Shed requests, cost, warm capacity, and task starts as the server and ECS see them."""
    dashboard.add_widgets(
        graph(
            "Shed (503) and timed-out (504) requests",
            [find.per_model(n, "Sum") for n in (metric_names.REJECTED_REQUESTS, metric_names.TIMED_OUT_REQUESTS)]
            + [monitoring.metric_spot_interruptions],
        ),
        graph(
            "Cost per 1M requests (USD, hourly)",
            [monitoring.metric_cost_per_million_requests, *monitoring.metric_cost_components],
        ),
    )
    dashboard.add_widgets(
        graph(
            "Warm spare GPU capacity (USD/h): what capacity kept ahead of the tasks costs",
            [*monitoring.metric_spare_capacity_cost, *monitoring.metric_warm_pool_cost],
        ),
        # One point per task start of the bundled server, from its EMF document when the model is ready.
        graph(
            "Task start (s): server process start to ready, and the model's fetch, load and warm-up in it; "
            "with runtime compile, loaded to every shape compiled (after ready)",
            [
                find.per_model(name, "Maximum", label)
                for name, label in (
                    (metric_names.STARTUP_SECONDS, "start to ready"),
                    (metric_names.STARTUP_FETCH_SECONDS, "fetch"),
                    (metric_names.STARTUP_LOAD_SECONDS, "load"),
                    (metric_names.STARTUP_WARMUP_SECONDS, "warm-up"),
                    (metric_names.STARTUP_COMPILE_SECONDS, "compiled"),
                )
            ],
            unit="seconds",
        ),
    )
    dashboard.add_widgets(
        # One point per task that reaches RUNNING, from ECS's Task State Change event (TaskStarts).
        graph(
            "Task start on ECS (s): created to image pull (placement, waiting for an instance), the pull, and "
            "pull to RUNNING (init containers such as model-fetch)",
            [
                find.per_service(name, task_start_handler.NAMESPACE, "Maximum", label)
                for name, label in zip(
                    [name for name, _, _ in task_start_handler.PHASES],
                    ("wait", "pull", "to RUNNING", "created to RUNNING"),
                    strict=True,
                )
            ],
            unit="seconds",
        ),
    )
