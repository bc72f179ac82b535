"""How a new model version replaces the old one: ECS's built-in deployment strategies, their traffic steps and
bake times, the alarms that roll a deployment back, and the checks that keep them safe on a GPU fleet.

``rolling`` replaces tasks behind one target group (circuit breaker plus alarms). ``canary``, ``linear`` and
``blue_green`` start a full set of new tasks behind a second target group, shift the model's one listener rule's
weights to it step by step, bake, then stop the old tasks; any rollback alarm in ALARM sends traffic back, and a
version that never becomes healthy trips revision_health's alarm. The deployment circuit breaker stops rolling and
blue/green deployments too (ECS developer guide, deployment-failure-detection: "Both methods only support rolling
update deployment and blue/green deployment types"); no AWS page names it for linear or canary.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import aws_cdk as cdk
import jsii
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from constructs import Construct

from ..core.deployment_props import (
    ALARM_MINUTES,
    BUILT_IN_ALARMS,
    CIRCUIT_BREAKER_STRATEGIES,
    CLOUDFORMATION_DEPLOYMENT_MINUTES,
    DEFAULTS,
    MAX_BAKE_MINUTES,
    ROLLBACK_LATENCY,
    ROLLBACK_LATENCY_FACTOR,
    STEP_RANGES,
    DeploymentProps,
    RollbackProps,
    RollbackThresholds,
    Strategy,
)
from ..routing.target_group_metrics import TargetGroupMetrics

__all__ = [
    "ALARM_MINUTES",
    "BUILT_IN_ALARMS",
    "CIRCUIT_BREAKER_STRATEGIES",
    "CLOUDFORMATION_DEPLOYMENT_MINUTES",
    "DEFAULTS",
    "MAX_BAKE_MINUTES",
    "ROLLBACK_LATENCY",
    "ROLLBACK_LATENCY_FACTOR",
    "STEP_RANGES",
    "DeploymentProps",
    "RollbackAlarmNames",
    "RollbackAlarms",
    "RollbackProps",
    "RollbackThresholds",
    "Strategy",
    "service_options",
    "sum_over",
    "worst_of",
]


@jsii.implements(cdk.IStableListProducer)
class _Names:
    def __init__(self, names: list[str]) -> None:
        self._names = names

    def produce(self) -> list[str]:
        return list(self._names)


class RollbackAlarmNames:
    """The alarm names a service rolls back on; alarms added later still reach the template.

    (aws-cdk-lib's ``enable_deployment_alarms`` drops the names of a second call: it concatenates into a discarded
    list.)
    """

    def __init__(self) -> None:
        self.names: list[str] = []
        self.token = cdk.Lazy.list(_Names(self.names))

    def add(self, name: str) -> None:
        self.names.append(name)

    def config(self) -> ecs.DeploymentAlarmConfig:
        return ecs.DeploymentAlarmConfig(alarm_names=self.token, behavior=ecs.AlarmBehavior.ROLLBACK_ON_ALARM)


def _ids(label: str, count: int) -> list[str]:
    """Metric ids unique within any expression that nests this one (CloudWatch ids: lowercase start, [a-z0-9_])."""
    stem = re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
    return [f"m_{stem}_{index}" for index in range(count)]


def sum_over(metrics: Sequence[cloudwatch.Metric], label: str) -> cloudwatch.IMetric:
    """The sum of one metric across target groups (the one metric itself when there is one)."""
    if len(metrics) == 1:
        return metrics[0].with_(label=label)
    names = _ids(label, len(metrics))
    return cloudwatch.MathExpression(
        expression=" + ".join(f"FILL({name}, 0)" for name in names),
        using_metrics=dict(zip(names, metrics, strict=False)),
        period=metrics[0].period,
        label=label,
    )


def worst_of(metrics: Sequence[cloudwatch.Metric | cloudwatch.MathExpression], label: str) -> cloudwatch.IMetric:
    """The highest of one metric across target groups: a percentile of the sum cannot be computed from its parts,
    and the new version's own percentile is what a rollback must see."""
    if len(metrics) == 1:
        return metrics[0].with_(label=label)
    names = _ids(label, len(metrics))
    return cloudwatch.MathExpression(
        expression=f"MAX([{', '.join(names)}])",
        using_metrics=dict(zip(names, metrics, strict=False)),
        period=metrics[0].period,
        label=label,
    )


class RollbackAlarms(Construct):
    """The built-in rollback alarms of one model, each watching every target group the model serves from, so a
    canary's errors count however little traffic it has (``target_groups``: the TargetGroupMetrics of each). Attribute
    ``alarms``: name (``BUILT_IN_ALARMS``) -> Alarm."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_name: str,
        target_groups: Sequence[TargetGroupMetrics],
        thresholds: RollbackThresholds,
        enabled: Sequence[str] = BUILT_IN_ALARMS,
    ) -> None:
        super().__init__(scope, construct_id)
        minute = cdk.Duration.minutes(1)
        per_group_rates = [
            cloudwatch.MathExpression(
                expression=f"IF(FILL(requests_{index}, 0) > 0, 100 * FILL(errors_{index}, 0) / requests_{index}, 0)",
                using_metrics={
                    f"errors_{index}": tg.http_code_target(
                        elbv2.HttpCodeTarget.TARGET_5XX_COUNT, period=minute, statistic="Sum"
                    ),
                    f"requests_{index}": tg.request_count(period=minute, statistic="Sum"),
                },
                period=minute,
                label=f"{model_name} target 5xx % ({index})",
            )
            for index, tg in enumerate(target_groups)
        ]
        latencies = [tg.target_response_time(statistic="p95", period=minute) for tg in target_groups]
        definitions = {
            "target_5xx_rate": (
                worst_of(per_group_rates, f"{model_name} target 5xx % (worst target group)"),
                thresholds.target_5xx_percent,
                f"{model_name}: more than {thresholds.target_5xx_percent}% of a target group's requests answered 5xx "
                f"for {ALARM_MINUTES} minutes; rolls back a deployment in progress",
            ),
            "latency_p95": (
                worst_of(latencies, f"{model_name} p95 (worst target group)"),
                thresholds.latency_p95_ms / 1000,
                f"{model_name}: p95 latency of a target group above {thresholds.latency_p95_ms} ms for {ALARM_MINUTES} "
                "minutes; rolls back a deployment in progress",
            ),
        }
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        for name in enabled:
            metric, threshold, description = definitions[name]
            self.alarms[name] = cloudwatch.Alarm(
                self,
                name.replace("_", "-"),
                metric=metric,
                threshold=threshold,
                evaluation_periods=ALARM_MINUTES,
                datapoints_to_alarm=ALARM_MINUTES,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=description,
            )


def service_options(props: DeploymentProps) -> dict:
    """Keyword arguments for ``ecs.Ec2Service`` / ``FargateService`` from ``props`` (everything but the alarms)."""
    breaker = ecs.DeploymentCircuitBreaker(enable=True, rollback=True) if props.uses_circuit_breaker else None
    if not props.shifts_traffic:
        return {"circuit_breaker": breaker}
    final_bake, step_bake = props.final_bake, props.step_bake
    assert final_bake is not None  # every strategy that shifts traffic has a default bake time
    options: dict = {
        "circuit_breaker": breaker,
        "deployment_strategy": {
            "canary": ecs.DeploymentStrategy.CANARY,
            "linear": ecs.DeploymentStrategy.LINEAR,
            "blue_green": ecs.DeploymentStrategy.BLUE_GREEN,
        }[props.strategy],
        "bake_time": cdk.Duration.minutes(final_bake),
    }
    if props.strategy in STEP_RANGES:
        assert step_bake is not None  # canary and linear have a default step bake
        shift = ecs.TrafficShiftConfig(
            step_percent=props.traffic_step_percent, step_bake_time=cdk.Duration.minutes(step_bake)
        )
        options[f"{props.strategy}_configuration"] = shift
    return options
