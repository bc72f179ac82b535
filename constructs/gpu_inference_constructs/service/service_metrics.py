"""The metrics a ModelService offers its callers (alarms, scaling, dashboards): the server's own EMF metrics, the load
balancer's per target group, and Container Insights' task counts."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2

from ..core import metric_names
from ..core.model_props import ModelProps
from ..rollout.deployment import sum_over, worst_of
from ..routing.target_group_metrics import TargetGroupMetrics


class ServiceMetrics:
    """``metric_*`` of a model service; what it reads of the service is declared here."""

    environment_name: str
    model: ModelProps
    service: ecs.Ec2Service
    target_group_metrics: Sequence[TargetGroupMetrics]

    def metric_server(
        self, name: str, statistic: str, period: cdk.Duration = cdk.Duration.minutes(1)
    ) -> cloudwatch.Metric:
        """A metric the server emits in EMF (see metric_names), for this model in this environment."""
        return cloudwatch.Metric(
            namespace=metric_names.NAMESPACE,
            metric_name=name,
            dimensions_map={
                metric_names.DIMENSION_ENVIRONMENT: self.environment_name,
                metric_names.DIMENSION_MODEL: self.model.name,
            },
            statistic=statistic,
            period=period,
            label=f"{self.model.name} {name} {statistic}",
        )

    def metric_requests(self, period: cdk.Duration = cdk.Duration.minutes(1)) -> cloudwatch.IMetric:
        return sum_over(
            [tg.request_count(period=period) for tg in self.target_group_metrics], f"{self.model.name} requests"
        )

    def metric_target_response_time(
        self, statistic: str, period: cdk.Duration = cdk.Duration.minutes(1)
    ) -> cloudwatch.IMetric:
        """ALB TargetResponseTime in seconds (``p50``, ``p95``, ``p99``, ...)."""
        return worst_of(
            [tg.target_response_time(statistic=statistic, period=period) for tg in self.target_group_metrics],
            f"{self.model.name} {statistic}",
        )

    def metric_target_5xx(self, period: cdk.Duration = cdk.Duration.minutes(1)) -> cloudwatch.IMetric:
        return sum_over(
            [
                tg.http_code_target(elbv2.HttpCodeTarget.TARGET_5XX_COUNT, period=period, statistic="Sum")
                for tg in self.target_group_metrics
            ],
            f"{self.model.name} target 5xx",
        )

    def metric_unhealthy_hosts(self, period: cdk.Duration = cdk.Duration.minutes(1)) -> cloudwatch.IMetric:
        return sum_over(
            [tg.unhealthy_host_count(period=period, statistic="Maximum") for tg in self.target_group_metrics],
            f"{self.model.name} unhealthy targets",
        )

    def metric_tasks(self, name: str, period: cdk.Duration = cdk.Duration.minutes(1)) -> cloudwatch.Metric:
        """Container Insights task counts: ``RunningTaskCount``, ``DesiredTaskCount`` or ``PendingTaskCount``."""
        return cloudwatch.Metric(
            namespace="ECS/ContainerInsights",
            metric_name=name,
            dimensions_map={"ClusterName": self.service.cluster.cluster_name, "ServiceName": self.service.service_name},
            statistic="Average",
            period=period,
            label=f"{self.model.name} {name}",
        )
