"""A version whose tasks never become healthy rolls back within its start window.

The 5xx and latency rollback alarms (deployment.py) watch traffic, and a canary, linear or blue/green version whose
tasks never pass readiness (an unpublished version, a bad image tag, truncated weights, no GPU capacity) gets none:
ECS keeps replacing its tasks and CloudFormation waits up to 36 hours. Those strategies start a full set of new tasks
beside the old set and hold both until the bake ends, so while a deployment is in progress (Container Insights'
``DeploymentCount`` above 1) the model's target groups hold twice its desired count of healthy targets once the new
version is up. This alarm fires when they hold fewer for longer than the new version's start window: GPU capacity
for the second set, then the health-check grace period the service gives a task to load and warm up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from .target_group_metrics import TargetGroupMetrics

CONTAINER_INSIGHTS = "ECS/ContainerInsights"
# A deployment's second task set may need new GPU instances: the capacity provider's reaction, the launch and boot,
# the agent's registration and the image pull of `python -m gpu_inference_constructs.sizing.timeline` (90 + 60 + 15 +
# 138 s, the server's image and the collector's; up to 142 s with FireLens's router and a fetcher: 307 s;
# tests/infra/test_never_healthy_rollback.py holds it to the timeline's figures).
NEW_CAPACITY_SECONDS = 330
PERIOD_SECONDS = 60


def start_window_seconds(health_check_grace_seconds: int) -> int:
    """From a deployment's start until its new tasks must be healthy: capacity, then the grace period, in whole
    minutes (the alarm's periods)."""
    return PERIOD_SECONDS * math.ceil((NEW_CAPACITY_SECONDS + health_check_grace_seconds) / PERIOD_SECONDS)


def breaching_minutes(start_window: int) -> int:
    """One-minute periods in a row the alarm needs: one more than the start window holds, so a version healthy
    within the window never fills them, however the deployment's start falls within a minute."""
    return start_window // PERIOD_SECONDS + 1


def short_of_healthy_expression(target_group_count: int) -> str:
    """1 in a minute of a deployment whose healthy targets are fewer than twice the desired count, else 0."""
    healthy = " + ".join(f"FILL(healthy_{index}, 0)" for index in range(target_group_count))
    return f"IF(FILL(deployments, 0) >= 2 AND ({healthy}) < 2 * FILL(desired, 0), 1, 0)"


class NeverHealthyAlarm(Construct):
    """The rollback alarm for a version that cannot become healthy. Attributes: ``alarm``, ``start_window_seconds``.

    ``cluster_name`` and ``service_name`` dimension Container Insights' service metrics, which the cluster must
    publish (GpuCapacity turns Container Insights on; an imported cluster's owner must). ``alarm_name`` is fixed: the
    service names the alarm and the alarm names the service, which CloudFormation can resolve only by a name."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_name: str,
        alarm_name: str,
        cluster_name: str,
        service_name: str,
        target_groups: Sequence[TargetGroupMetrics],
        health_check_grace_seconds: int,
    ) -> None:
        super().__init__(scope, construct_id)
        minute = cdk.Duration.seconds(PERIOD_SECONDS)
        self.start_window_seconds = start_window_seconds(health_check_grace_seconds)
        minutes = breaching_minutes(self.start_window_seconds)

        def service_metric(name: str, statistic: str) -> cloudwatch.Metric:
            return cloudwatch.Metric(namespace=CONTAINER_INSIGHTS, metric_name=name, statistic=statistic, period=minute,
                                     dimensions_map={"ClusterName": cluster_name, "ServiceName": service_name})

        using: dict[str, cloudwatch.IMetric] = {
            "deployments": service_metric("DeploymentCount", "Maximum"),
            # The fewest desired in the minute and the most healthy: a minute with both sets up never counts.
            "desired": service_metric("DesiredTaskCount", "Minimum"),
        }
        for index, target_group in enumerate(target_groups):
            using[f"healthy_{index}"] = target_group.custom("HealthyHostCount", statistic="Maximum", period=minute)
        short = cloudwatch.MathExpression(
            expression=short_of_healthy_expression(len(target_groups)), using_metrics=using, period=minute,
            label=f"{model_name}: deployment short of healthy targets (1 = yes)")
        self.alarm = short.create_alarm(
            self, "Alarm",
            alarm_name=alarm_name,
            threshold=1,
            evaluation_periods=minutes,
            datapoints_to_alarm=minutes,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=(
                f"{model_name}: a deployment's new tasks were not all healthy {self.start_window_seconds} s after it "
                f"began (GPU capacity {NEW_CAPACITY_SECONDS} s + the {health_check_grace_seconds} s grace period); "
                "rolls the deployment back"),
        )
