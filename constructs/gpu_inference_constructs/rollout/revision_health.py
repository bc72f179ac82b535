"""A version whose tasks never become healthy rolls back within its start window: the alarm half.

The 5xx and latency rollback alarms (deployment.py) watch traffic, and a canary, linear or blue/green version whose
tasks never pass readiness (an unpublished version, a bad image tag, truncated weights, no GPU capacity) gets none:
ECS keeps replacing its tasks and CloudFormation waits up to 36 hours. What AWS documents for failing such a
deployment before traffic moves is a lifecycle hook (revision_hook.py, at POST_SCALE_UP). AWS ties deployment alarms
to the bake time, and no page says whether they act while a new set is still scaling up; this alarm stays beside the
hook for the stages after it (a new set that loses every healthy task during the steps or the bake).

Those strategies run the new set in the model's other target group beside the old set until the bake ends, so while a
deployment is in progress (Container Insights' ``DeploymentCount`` 2 or more) each of the two target groups holds a
healthy target once the new version is up, whatever the desired count (scaling may change it mid-deployment). The
alarm fires when one of them holds none for longer than the new version's start window: GPU capacity for the second
set, then the health-check grace period. A minute whose metrics arrive late reads as not breaching, so the alarm needs
its minutes out of a few more (M of N), not in a row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from ..routing.target_group_metrics import TargetGroupMetrics
from ..shared.acknowledgements import default_child

CONTAINER_INSIGHTS = "ECS/ContainerInsights"
# A deployment's second task set may need new GPU instances: the capacity provider's reaction, the launch and boot,
# the agent's registration and the image pull of `python -m gpu_inference_constructs.sizing.timeline` (90 + 60 + 15 +
# 138 s, the server's image and the collector's; up to 142 s with FireLens's router and a fetcher: 307 s;
# tests/infra/test_never_healthy_rollback.py holds it to the timeline's figures).
NEW_CAPACITY_SECONDS = 330
PERIOD_SECONDS = 60
# Minutes of late metric data the alarm tolerates: the newest minute, evaluated before its datapoints arrive, reads as
# not breaching (FILL(deployments, 0) is 0); with M of M + LATE_MINUTES it still counts once they arrive.
LATE_MINUTES = 2


def start_window_seconds(health_check_grace_seconds: int) -> int:
    """From a deployment's start until its new tasks must be healthy: capacity, then the grace period, in whole
    minutes (the alarm's periods)."""
    return PERIOD_SECONDS * math.ceil((NEW_CAPACITY_SECONDS + health_check_grace_seconds) / PERIOD_SECONDS)


def breaching_minutes(start_window: int) -> int:
    """One-minute periods in a row the alarm needs: one more than the start window holds, so a version healthy
    within the window never fills them, however the deployment's start falls within a minute."""
    return start_window // PERIOD_SECONDS + 1


def short_of_healthy_expression(target_group_count: int) -> str:
    """1 in a minute of a deployment in which one of the model's target groups held no healthy target, else 0."""
    empty = " OR ".join(f"FILL(healthy_{index}, 0) < 1" for index in range(target_group_count))
    return f"IF(FILL(deployments, 0) >= 2 AND ({empty}), 1, 0)"


class NeverHealthyAlarm(Construct):
    """The rollback alarm for a version that cannot become healthy. Attributes: ``alarm``, ``alarm_name``,
    ``start_window_seconds``.

    ``cluster_name`` and ``service_name`` dimension Container Insights' DeploymentCount, which the cluster must
    publish (GpuCapacity turns Container Insights on; an imported cluster's owner must). The name is fixed, since the
    service names the alarm and the alarm names the service, which CloudFormation can resolve only by a name; it is
    ``name_prefix`` followed by the alarm's logical ID, so a change of logical ID is a change of name too
    (CloudFormation creates the replacement before deleting the old one, which a name kept across the change would
    refuse)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_name: str,
        name_prefix: str,
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
            return cloudwatch.Metric(
                namespace=CONTAINER_INSIGHTS,
                metric_name=name,
                statistic=statistic,
                period=minute,
                dimensions_map={"ClusterName": cluster_name, "ServiceName": service_name},
            )

        # The most healthy in the minute: a minute in which both sets were up never counts.
        using: dict[str, cloudwatch.IMetric] = {"deployments": service_metric("DeploymentCount", "Maximum")}
        for index, target_group in enumerate(target_groups):
            using[f"healthy_{index}"] = target_group.custom("HealthyHostCount", statistic="Maximum", period=minute)
        short = cloudwatch.MathExpression(
            expression=short_of_healthy_expression(len(target_groups)),
            using_metrics=using,
            period=minute,
            label=f"{model_name}: deployment short of healthy targets (1 = yes)",
        )
        self.alarm = short.create_alarm(
            self,
            "Alarm",
            threshold=1,
            evaluation_periods=minutes + LATE_MINUTES,
            datapoints_to_alarm=minutes,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=(
                f"{model_name}: a target group of a deployment in progress held no healthy target for "
                f"{self.start_window_seconds} s (GPU capacity {NEW_CAPACITY_SECONDS} s + the "
                f"{health_check_grace_seconds} s grace period); rolls the deployment back"
            ),
        )
        cfn_alarm = default_child(self.alarm, cloudwatch.CfnAlarm)
        self.alarm_name = f"{name_prefix}-{cdk.Stack.of(self).get_logical_id(cfn_alarm)}"
        cfn_alarm.alarm_name = self.alarm_name
