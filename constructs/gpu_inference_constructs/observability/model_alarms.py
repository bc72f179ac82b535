"""Alarms named after their environment that notify a topic (:class:`AlarmGroup`), and one model service's
(:class:`ModelAlarms`): the load balancer's view of it, its tasks, and the alarms its server's contract declares."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..core import metric_names
from ..core.alarm_thresholds import PAGING_MINUTES
from ..core.errors import ConfigError
from ..core.latency_alarms import LatencyAlarmThresholds
from ..core.monitoring_props import MonitoringProps
from ..core.server_signals import ServerAlarm
from ..service.checks import alarm_name_prefix as alarm_name_prefix
from ..service.model_service import DEFAULT_NAME_PREFIX, ModelService, check_name_prefix
from ..shared.cdk_interfaces import sns_action
from ..shared.environment import InferenceEnvironment, require_identity

MINUTE = cdk.Duration.minutes(1)


def alarm_name(environment_name: str, name: str, name_prefix: str = DEFAULT_NAME_PREFIX) -> str:
    """The name an alarm of this environment carries: in the console, in every notification, in
    ``alarm_name_prefix``."""
    return f"{alarm_name_prefix(environment_name, name_prefix)}{name}"


class AlarmGroup(Construct):
    """Alarms that notify ``topic`` on ALARM and on OK, named after the environment."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment_name: str,
        topic: sns.ITopic,
        props: MonitoringProps,
        name_prefix: str,
    ) -> None:
        super().__init__(scope, construct_id)
        check_name_prefix(name_prefix)
        self.name_prefix = name_prefix
        self.props = props
        self.environment_name = environment_name
        self._action = sns_action(topic)
        self.alarms: dict[str, cloudwatch.Alarm] = {}

    def _alarm(
        self,
        name: str,
        metric: cloudwatch.IMetric,
        threshold: float,
        description: str,
        *,
        periods: int = 1,
        comparison: cloudwatch.ComparisonOperator = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            name,
            alarm_name=alarm_name(self.environment_name, name, self.name_prefix),
            metric=metric,
            threshold=threshold,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            comparison_operator=comparison,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(self._action)
        alarm.add_ok_action(self._action)
        self.alarms[name] = alarm
        return alarm


def alarms_identity(
    service: ModelService, environment_name: str | None, topic: sns.ITopic | None
) -> tuple[str, sns.ITopic]:
    """(environment name, topic) of a service's alarms: its environment's, or, for a service built with the
    environment's name alone, the ones given."""
    if (environment := service.environment) is not None:
        InferenceEnvironment.refuse_beside("ModelAlarms", environment_name=environment_name, topic=topic)
        return environment.name, environment.topic
    require_identity("ModelAlarms", {"environment_name=": environment_name, "topic=": topic})
    assert environment_name is not None and topic is not None  # required above
    return environment_name, topic


class ModelAlarms(AlarmGroup):
    """The alarms of one model service (they live with the service, in its stack), to ``topic``.

    Every server: ALB p95/p99 latency, target 5xx rate, unhealthy targets, tasks below desired, tasks that stopped on
    their own (TaskStarts' ``TaskFailures``, written for the clusters InferenceMonitoring watches). Then the alarms
    the server's contract declares (``contract.server_alarms``; one marked ``whole_gpu_only`` not on a GPU share, where
    the device's figures are every co-tenant's): the bundled server's queue depth, shed requests, GPU memory and idle
    GPUs; by default one per scale-out signal, held above its threshold for 15 minutes (scaling is not keeping up).
    Latency thresholds: ``latency_thresholds`` (default ``service.model.latency_alarm_thresholds()``: the model's
    ``alarms``, else 2 x and 6 x its ``scaling.latency_p95_ms``; never below that goal); the others: ``props``
    (MonitoringProps, defaults there). The environment's name and topic are the service's ``environment``
    (``ModelService(environment=...)``); for a service built with 0.2's keywords, give ``environment_name`` and
    ``topic`` here. Attributes: ``alarms`` (name -> Alarm), ``latency_thresholds``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        service: ModelService,
        props: MonitoringProps,
        environment_name: str | None = None,
        topic: sns.ITopic | None = None,
        latency_thresholds: LatencyAlarmThresholds | None = None,
    ) -> None:
        environment_name, topic = alarms_identity(service, environment_name, topic)
        super().__init__(
            scope,
            construct_id,
            environment_name=environment_name,
            topic=topic,
            props=props,
            name_prefix=service.name_prefix,
        )
        name = service.model.name
        if latency_thresholds is None:
            latency_thresholds = service.model.latency_alarm_thresholds()  # ModelProps checked its alarms block
        else:
            try:
                latency_thresholds.check_above_scaling(service.model.scaling.latency_p95_ms)
            except ConfigError as error:
                raise error.within("latency_thresholds") from None
        self.latency_thresholds = latency = latency_thresholds
        self._alarm(
            f"{name}-LatencyP95",
            service.metric_target_response_time("p95"),
            latency.latency_p95_ms / 1000,
            f"{name}: p95 latency at the load balancer above {latency.latency_p95_ms} ms for {PAGING_MINUTES} minutes "
            f"(its scaling goal is {service.model.scaling.latency_p95_ms} ms)",
            periods=PAGING_MINUTES,
        )
        self._alarm(
            f"{name}-LatencyP99",
            service.metric_target_response_time("p99"),
            latency.latency_p99_ms / 1000,
            f"{name}: p99 latency at the load balancer above {latency.latency_p99_ms} ms for {PAGING_MINUTES} minutes",
            periods=PAGING_MINUTES,
        )
        self._alarm(
            f"{name}-Target5xxRate",
            error_rate(service.metric_target_5xx(), service.metric_requests(), f"{name} target 5xx %"),
            props.target_5xx_percent,
            f"{name}: more than {props.target_5xx_percent}% of requests answered 5xx by the server",
            periods=PAGING_MINUTES,
        )
        self._alarm(
            f"{name}-UnhealthyTargets",
            service.metric_unhealthy_hosts(),
            1,
            f"{name}: a task failed its readiness check for {props.unhealthy_hosts_minutes} minutes",
            periods=props.unhealthy_hosts_minutes,
        )
        below = cloudwatch.MathExpression(
            expression="desired - running",
            using_metrics={
                "desired": service.metric_tasks("DesiredTaskCount"),
                "running": service.metric_tasks("RunningTaskCount"),
            },
            period=MINUTE,
            label=f"{name} tasks below desired",
        )
        self._alarm(
            f"{name}-TasksBelowDesired",
            below,
            1,
            f"{name}: fewer tasks running than desired for {props.tasks_below_desired_minutes} minutes (no GPU "
            "capacity, failing starts or image pulls)",
            periods=props.tasks_below_desired_minutes,
        )
        failures = cloudwatch.Metric(
            namespace=metric_names.NAMESPACE,
            metric_name="TaskFailures",
            statistic="Sum",
            period=cdk.Duration.minutes(5),
            dimensions_map={
                "ClusterName": service.service.cluster.cluster_name,
                "ServiceName": service.service.service_name,
            },
            label=f"{name} tasks stopped on their own",
        )
        shared = service.model.gpu_share is not None
        self._alarm(
            f"{name}-TaskFailures",
            failures,
            1,
            f"{name}: a task stopped on its own (its server exited or it failed to start: TaskStarts' TaskFailures)"
            + ("; on a shared GPU a co-tenant's fatal GPU error restarts every model on that GPU" if shared else ""),
        )
        for alarm in service.contract.server_alarms:
            if not (alarm.whole_gpu_only and shared):  # on a share the device's figures are every co-tenant's
                self._add_server_alarm(service, alarm)

    def _add_server_alarm(self, service: ModelService, alarm: ServerAlarm) -> None:
        """One alarm the server's contract declares, its threshold and periods from ``props`` where it names them."""
        name = service.model.name
        threshold, periods = alarm.resolved(self.props)
        comparison = (
            cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD
            if alarm.below
            else cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
        )
        self._alarm(
            f"{name}-{alarm.name}",
            service.metric_server(alarm.metric, alarm.statistic, period=cdk.Duration.seconds(alarm.period_seconds)),
            threshold,
            f"{name}: " + alarm.description.format(threshold=threshold, periods=periods),
            periods=periods,
            comparison=comparison,
        )


def error_rate(errors: cloudwatch.IMetric, requests: cloudwatch.IMetric, label: str) -> cloudwatch.MathExpression:
    """Errors as a percentage of requests; 0 when there are no requests."""
    return cloudwatch.MathExpression(
        expression="IF(FILL(requests, 0) > 0, 100 * FILL(errors, 0) / requests, 0)",
        using_metrics={"errors": errors, "requests": requests},
        period=MINUTE,
        label=label,
    )
