"""The environment's own monitoring (:class:`InferenceMonitoring`): load balancer and Spot alarms, the Spot
interruption and deployment rollback rules, the cost metrics and the dashboard. Each model's alarms are
:class:`~.model_alarms.ModelAlarms`, in the model's own stack."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_events as events
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..capacity.capacity_group import CapacityGroup
from ..capacity.gpu_capacity import GpuCapacity
from ..core.alarm_thresholds import PAGING_MINUTES
from ..core.monitoring_props import HOURS_PER_MONTH as HOURS_PER_MONTH
from ..core.monitoring_props import MonitoringProps
from ..core.monitoring_props import root_volume_hourly_usd as root_volume_hourly_usd
from ..core.monitoring_props import warm_pool_monthly_usd as warm_pool_monthly_usd
from ..core.prometheus_metrics import PrometheusMetrics
from ..routing.load_balancer import InferenceLoadBalancer
from ..service.model_service import DEFAULT_NAME_PREFIX, ModelService, service_log_group_name
from ..service.target_optimizer import add_reject_widget
from ..shared.environment import DEFAULT_LOG_RETENTION_DAYS, InferenceEnvironment, require_identity
from ..shared.notifications import topic_target
from .environment_dashboard import add_dashboard
from .environment_dashboard import search as search
from .model_alarms import AlarmGroup, error_rate
from .model_alarms import ModelAlarms as ModelAlarms
from .model_alarms import alarm_name as alarm_name
from .model_alarms import alarm_name_prefix as alarm_name_prefix
from .monitoring_costs import CostMetrics
from .monitoring_costs import on_demand_instances_expression as on_demand_instances_expression
from .task_starts import TaskStarts

MINUTE = cdk.Duration.minutes(1)


class InferenceMonitoring(AlarmGroup):
    """The environment's own alarms (load balancer, Spot), the Spot interruption rule, the deployment rollback rule
    (every failed or rolled-back deployment of a service of ``capacity``'s cluster goes to ``topic``) and the dashboard.

    The dashboard finds every model by CloudWatch search (the environment's ``ModelName`` dimension, this load
    balancer's target groups, this cluster's services), so it references no model's stack and grows with the
    models. Each model's alarms are :class:`ModelAlarms`, in the model's own stack.

    Attributes: ``alarms`` (name -> Alarm), ``dashboard``, ``spot_interruption_rule``, ``deployment_rollback_rule``,
    ``task_starts`` (ECS's phases of each task start, as metrics: :class:`~.task_starts.TaskStarts`),
    ``metric_cost_per_million_requests``
    (an estimate of the whole bill per request: every capacity group's GPU instances + CloudWatch Logs ingestion of
    each model's log group, found by its name, :func:`~.model_service.service_log_group_name` + the load balancer's
    hour and LCUs) and
    ``metric_cost_components`` (each part per 1M requests; with a warm pool, ``warm pool`` among them), and
    ``metric_warm_pool_cost`` (USD per hour of each group's warm pool, on the warm spare graph; empty without one).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_names: Sequence[str],
        load_balancer: InferenceLoadBalancer | elbv2.IApplicationLoadBalancer,
        capacity: GpuCapacity,
        props: MonitoringProps,
        environment: InferenceEnvironment | None = None,
        more_capacity: Sequence[CapacityGroup[Any]] = (),
        more_load_balancers: Sequence[InferenceLoadBalancer | elbv2.IApplicationLoadBalancer] = (),
        environment_name: str | None = None,
        topic: sns.ITopic | None = None,
        name_prefix: str | None = None,
        logs_key: kms.IKey | None = None,
    ) -> None:
        """``environment``: the environment's name, name prefix, topic, logs key and log retention (the task-start
        function's log group's, :class:`~.task_starts.TaskStarts`; 90 days without one), given once; 0.2's
        ``environment_name``, ``topic``, ``name_prefix`` (default ``"gpu-inference"``) and ``logs_key`` (default None)
        still work, not beside it.
        ``more_capacity``: the environment's other capacity groups (other GPU shapes), priced at their own types.
        ``more_load_balancers``: the environment's other load balancers, each with its own ELB 5xx alarm (the cost
        metric and the dashboard read ``load_balancer`` only)."""
        log_retention_days = DEFAULT_LOG_RETENTION_DAYS
        if environment is not None:
            InferenceEnvironment.refuse_beside(
                "InferenceMonitoring",
                environment_name=environment_name,
                topic=topic,
                name_prefix=name_prefix,
                logs_key=logs_key,
            )
            environment_name, topic = environment.name, environment.topic
            name_prefix, logs_key = environment.name_prefix, environment.logs_key
            log_retention_days = environment.log_retention_days
        require_identity("InferenceMonitoring", {"environment_name=": environment_name, "topic=": topic})
        assert environment_name is not None and topic is not None  # required above
        name_prefix = DEFAULT_NAME_PREFIX if name_prefix is None else name_prefix
        super().__init__(
            scope, construct_id, environment_name=environment_name, topic=topic, props=props, name_prefix=name_prefix
        )
        # The ALB-wide 5xx alarm only on a load balancer this library made: on a team's shared one it would page every
        # team for any team's errors. Each model's own target 5xx alarm is ModelAlarms'.
        for number, balancer in enumerate([load_balancer, *more_load_balancers], start=1):
            if isinstance(balancer, InferenceLoadBalancer):
                self._add_load_balancer_alarm(
                    balancer.load_balancer, "Elb5xxRate" if number == 1 else f"Elb5xxRate{number}"
                )
        load_balancer = (
            load_balancer.load_balancer if isinstance(load_balancer, InferenceLoadBalancer) else load_balancer
        )
        self.spot_interruption_rule = events.Rule(
            self,
            "SpotInterruptions",
            description="EC2 Spot interruption warnings in this account and region (the GPU fleet's Spot instances)",
            event_pattern=events.EventPattern(
                source=["aws.ec2"], detail_type=["EC2 Spot Instance Interruption Warning"]
            ),
            targets=[topic_target(topic)],
        )
        self.task_starts = TaskStarts(
            self, "TaskStarts", cluster=capacity.cluster, logs_key=logs_key, log_retention_days=log_retention_days
        )
        self.deployment_rollback_rule = events.Rule(
            self,
            "DeploymentRollbacks",
            description="ECS deployments of this cluster's services that failed or are being rolled back (circuit "
            "breaker or rollback alarms)",
            event_pattern=deployment_rollback_pattern(capacity.cluster),
            targets=[topic_target(topic)],
        )
        self.metric_spot_interruptions = cloudwatch.Metric(
            namespace="AWS/Events",
            metric_name="TriggeredRules",
            dimensions_map={"RuleName": self.spot_interruption_rule.rule_name},
            statistic="Sum",
            period=cdk.Duration.minutes(15),
            label="Spot interruption warnings",
        )
        self._alarm(
            "SpotInterruptionStorm",
            self.metric_spot_interruptions,
            props.spot_interruptions_per_15_minutes,
            "Spot capacity is being reclaimed repeatedly: On-Demand base and the g4dn fallback carry the load; "
            "consider a higher On-Demand share",
        )
        self.costs = CostMetrics(props)
        self.metric_cost_per_million_requests, self.metric_cost_components = self.costs.cost_per_million_requests(
            [capacity, *more_capacity],
            load_balancer,
            [service_log_group_name(environment_name, name, name_prefix) for name in model_names],
        )
        self.metric_spare_capacity_cost = self.spare_capacity_cost([capacity, *more_capacity])
        self.metric_warm_pool_cost = self.warm_pool_cost([capacity, *more_capacity])
        self.dashboard = add_dashboard(self, self, environment_name, model_names, load_balancer, capacity)

    def add_model(self, service: ModelService) -> None:
        """Graph the metrics ``service``'s server contract brings into CloudWatch (vLLM: running and waiting requests,
        KV-cache use), one graph per model. The bundled server's metrics are on the dashboard already; its dimensions
        are literal (environment and model name), so a model of another stack adds no reference between them."""
        contract = service.contract
        if service.model.target_optimizer is not None:
            add_reject_widget(self.dashboard, service.model.name, service.load_balancer_full_name)
        if contract.metrics is None:
            return
        metrics = [
            service.metric_server(PrometheusMetrics.cloudwatch_name(name), "Average")
            for name in contract.metrics.metrics
        ]
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title=f"{service.model.name}: {contract.name} server metrics (average)",
                left=metrics,
                width=24,
                height=6,
            )
        )

    def _add_load_balancer_alarm(self, load_balancer: elbv2.IApplicationLoadBalancer, name: str = "Elb5xxRate") -> None:
        rate = error_rate(
            load_balancer.metrics.http_code_elb(elbv2.HttpCodeElb.ELB_5XX_COUNT, period=MINUTE, statistic="Sum"),
            load_balancer.metrics.request_count(period=MINUTE, statistic="Sum"),
            "load balancer 5xx %",
        )
        self._alarm(
            name,
            rate,
            self.props.elb_5xx_percent,
            f"More than {self.props.elb_5xx_percent}% of requests answered 5xx by the load balancer itself "
            "(no healthy targets, timeouts)",
            periods=PAGING_MINUTES,
        )

    def warm_pool_cost(self, capacities: Sequence[CapacityGroup[Any]]) -> list[cloudwatch.MathExpression]:
        """USD per hour of each group's warm pool (:meth:`CostMetrics.warm_pool_cost`)."""
        return self.costs.warm_pool_cost(capacities)

    def spare_capacity_cost(self, capacities: Sequence[CapacityGroup[Any]]) -> list[cloudwatch.MathExpression]:
        """USD per hour of each group's warm spare (:meth:`CostMetrics.spare_capacity_cost`)."""
        return self.costs.spare_capacity_cost(capacities)


# ("ECS deployment circuit breaker: rolling back to deploymentId ..."). The alarm rollbacks and the blue/green, canary
# and linear strategies document no event names of their own, so both are matched, and the reason in either spelling.
DEPLOYMENT_STATE_CHANGE = "ECS Deployment State Change"
DEPLOYMENT_FAILED = "SERVICE_DEPLOYMENT_FAILED"
DEPLOYMENT_IN_PROGRESS = "SERVICE_DEPLOYMENT_IN_PROGRESS"
ROLLBACK_REASONS = ("*rolling back*", "*Rolling back*", "*rollback*", "*Rollback*", "*rolled back*")


def deployment_rollback_pattern(cluster: ecs.ICluster) -> events.EventPattern:
    """ECS deployment events of ``cluster``'s services (each event's resource is the service's ARN,
    ``arn:aws:ecs:<region>:<account>:service/<cluster>/<service>``) that report a failed deployment or the start of
    a rollback."""
    partition = cdk.Stack.of(cluster).partition
    services = f"arn:{partition}:ecs:{cluster.env.region}:{cluster.env.account}:service/{cluster.cluster_name}/"
    return events.EventPattern(
        source=["aws.ecs"],
        detail_type=[DEPLOYMENT_STATE_CHANGE],
        resources=events.Match.prefix(services),
        detail={
            "$or": [
                {"eventName": [DEPLOYMENT_FAILED]},
                {
                    "eventName": [DEPLOYMENT_IN_PROGRESS],
                    "reason": [{"wildcard": reason} for reason in ROLLBACK_REASONS],
                },
            ]
        },
    )
