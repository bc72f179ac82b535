"""Alarms and a dashboard for one environment's model services, GPU fleet and load balancer."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_events as events
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from . import metric_names, task_start_handler
from .cdk_interfaces import sns_action
from .errors import ConfigError
from .gpu_capacity import GpuCapacity
from .instance_catalog import PRICES_AS_OF
from .latency_alarms import LatencyAlarmThresholds
from .load_balancer import InferenceLoadBalancer
from .model_service import DEFAULT_NAME_PREFIX, ModelService, check_name_prefix, service_log_group_name
from .monitoring_props import HOURS_PER_MONTH as HOURS_PER_MONTH
from .monitoring_props import MonitoringProps, root_volume_hourly_usd, warm_pool_monthly_usd
from .notifications import topic_target
from .server_contract import PrometheusMetrics
from .target_group_metrics import load_balancer_full_name as full_name_of
from .task_starts import TaskStarts

MINUTE = cdk.Duration.minutes(1)
GIB = 2**30  # a billed GB taken as 2^30 bytes (were it 10^9, the logs figure would be 7 % higher)
HOUR = cdk.Duration.hours(1)
FIVE_MINUTES = cdk.Duration.minutes(5)


def _in_service(name: str, index: int) -> str:
    """Capacity group ``index``'s instances in service, metric ``name``: the other groups may scale to zero (an LLM
    group off hours) and then have no datapoints, so none count 0."""
    return name if index == 0 else f"FILL({name}, 0)"


def alarm_name(environment_name: str, name: str, name_prefix: str = DEFAULT_NAME_PREFIX) -> str:
    """The name an alarm of this environment carries: in the console, in every notification, in ``alarm_name_prefix``."""
    return f"{alarm_name_prefix(environment_name, name_prefix)}{name}"


def alarm_name_prefix(environment_name: str, name_prefix: str = DEFAULT_NAME_PREFIX) -> str:
    return f"{name_prefix}-{environment_name}-"


class _Alarms(Construct):
    """Alarms that notify ``topic`` on ALARM and on OK, named after the environment."""

    def __init__(self, scope: Construct, construct_id: str, *, environment_name: str, topic: sns.ITopic, props: MonitoringProps,
                 name_prefix: str) -> None:
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


class ModelAlarms(_Alarms):
    """The alarms of one model service (they live with the service, in its stack), to ``topic``.

    Every server: ALB p95/p99 latency, target 5xx rate, unhealthy targets, tasks below desired, tasks that stopped on
    their own (TaskStarts' ``TaskFailures``, written for the clusters InferenceMonitoring watches). A server
    with the library's metrics (``contract.bundled_metrics``) also: queue depth, shed requests, and on whole GPUs GPU
    memory and idle GPUs (on a share the device's figures are every co-tenant's). Any other server: one alarm per scale-out signal of its contract, held above its threshold
    for 15 minutes (scaling is not keeping up). Latency thresholds: ``latency_thresholds`` (default
    ``service.model.latency_alarm_thresholds()``: the model's ``alarms``, else 2 x and 6 x its
    ``scaling.latency_p95_ms``; never below that goal); the others: ``props`` (MonitoringProps, defaults there).
    Attributes: ``alarms`` (name -> Alarm), ``latency_thresholds``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment_name: str,
        service: ModelService,
        topic: sns.ITopic,
        props: MonitoringProps,
        latency_thresholds: LatencyAlarmThresholds | None = None,
    ) -> None:
        super().__init__(scope, construct_id, environment_name=environment_name, topic=topic, props=props, name_prefix=service.name_prefix)
        name = service.model.name
        if latency_thresholds is None:
            latency_thresholds = service.model.latency_alarm_thresholds()  # ModelProps checked its alarms block
        else:
            try:
                latency_thresholds.check_above_scaling(service.model.scaling.latency_p95_ms)
            except ConfigError as error:
                raise error.within("latency_thresholds") from None
        self.latency_thresholds = latency = latency_thresholds
        self._alarm(f"{name}-LatencyP95", service.metric_target_response_time("p95"), latency.latency_p95_ms / 1000,
                    f"{name}: p95 latency at the load balancer above {latency.latency_p95_ms} ms for 3 minutes "
                    f"(its scaling goal is {service.model.scaling.latency_p95_ms} ms)", periods=3)
        self._alarm(f"{name}-LatencyP99", service.metric_target_response_time("p99"), latency.latency_p99_ms / 1000,
                    f"{name}: p99 latency at the load balancer above {latency.latency_p99_ms} ms for 3 minutes", periods=3)
        self._alarm(f"{name}-Target5xxRate", error_rate(service.metric_target_5xx(), service.metric_requests(), f"{name} target 5xx %"),
                    props.target_5xx_percent, f"{name}: more than {props.target_5xx_percent}% of requests answered 5xx by the server", periods=3)
        self._alarm(f"{name}-UnhealthyTargets", service.metric_unhealthy_hosts(), 1,
                    f"{name}: a task failed its readiness check for {props.unhealthy_hosts_minutes} minutes", periods=props.unhealthy_hosts_minutes)
        below = cloudwatch.MathExpression(
            expression="desired - running",
            using_metrics={"desired": service.metric_tasks("DesiredTaskCount"), "running": service.metric_tasks("RunningTaskCount")},
            period=MINUTE,
            label=f"{name} tasks below desired",
        )
        self._alarm(f"{name}-TasksBelowDesired", below, 1,
                    f"{name}: fewer tasks running than desired for {props.tasks_below_desired_minutes} minutes (no GPU capacity, failing starts or image pulls)",
                    periods=props.tasks_below_desired_minutes)
        failures = cloudwatch.Metric(
            namespace=metric_names.NAMESPACE, metric_name="TaskFailures", statistic="Sum", period=cdk.Duration.minutes(5),
            dimensions_map={"ClusterName": service.service.cluster.cluster_name, "ServiceName": service.service.service_name},
            label=f"{name} tasks stopped on their own")
        shared = service.model.gpu_share is not None
        self._alarm(f"{name}-TaskFailures", failures, 1,
                    f"{name}: a task stopped on its own (its server exited or it failed to start: TaskStarts' TaskFailures)"
                    + ("; on a shared GPU a co-tenant's fatal GPU error restarts every model on that GPU" if shared else ""))
        if not service.contract.bundled_metrics:
            self._add_contract_alarms(service)
            return
        self._alarm(f"{name}-QueueDepth", service.metric_server(metric_names.QUEUE_DEPTH, "Maximum"), props.queue_depth,
                    f"{name}: server queue above {props.queue_depth} requests for 3 minutes", periods=3)
        self._alarm(f"{name}-RejectedRequests", service.metric_server(metric_names.REJECTED_REQUESTS, "Sum"), props.rejected_requests_per_minute,
                    f"{name}: more than {props.rejected_requests_per_minute} requests a minute shed with 503 (queue full or draining)", periods=2)
        if shared:  # the device's figures are every co-tenant's: the server plans within its share (docs/server.md)
            return
        self._alarm(f"{name}-GpuMemory", service.metric_server(metric_names.GPU_MEMORY_UTILIZATION, "Maximum"), props.gpu_memory_percent,
                    f"{name}: GPU memory above {props.gpu_memory_percent}% (risk of CUDA out-of-memory)", periods=3)
        self._alarm(f"{name}-LowGpuUtilization", service.metric_server(metric_names.GPU_UTILIZATION, "Average", period=HOUR),
                    props.low_gpu_utilization_percent,
                    f"{name}: GPU below {props.low_gpu_utilization_percent}% busy for {props.low_gpu_utilization_hours} hours: paying for idle GPUs (lower min_tasks or add a schedule)",
                    periods=props.low_gpu_utilization_hours, comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD)

    def _add_contract_alarms(self, service: ModelService) -> None:
        name = service.model.name
        for signal in service.contract.scaling_signals:
            if signal.scale_out_above is None:
                continue
            self._alarm(f"{name}-{signal.metric}", service.metric_server(signal.metric, signal.statistic), signal.scale_out_above,
                        f"{name}: {signal.metric} ({signal.statistic}) above its scale-out threshold {signal.scale_out_above:g} "
                        "for 15 minutes: scaling is not keeping up (max_tasks or GPU capacity)", periods=15)


class InferenceMonitoring(_Alarms):
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
        environment_name: str,
        model_names: Sequence[str],
        load_balancer: InferenceLoadBalancer | elbv2.IApplicationLoadBalancer,
        capacity: GpuCapacity,
        topic: sns.ITopic,
        props: MonitoringProps,
        more_capacity: Sequence[GpuCapacity] = (),
        more_load_balancers: Sequence[InferenceLoadBalancer | elbv2.IApplicationLoadBalancer] = (),
        name_prefix: str = DEFAULT_NAME_PREFIX,
        logs_key: kms.IKey | None = None,
    ) -> None:
        """``more_capacity``: the environment's other capacity groups (other GPU shapes), priced at their own types.
        ``more_load_balancers``: the environment's other load balancers, each with its own ELB 5xx alarm (the cost
        metric and the dashboard read ``load_balancer`` only). ``logs_key`` encrypts the task-start function's log
        group (:class:`~.task_starts.TaskStarts`)."""
        super().__init__(scope, construct_id, environment_name=environment_name, topic=topic, props=props, name_prefix=name_prefix)
        # The ALB-wide 5xx alarm only on a load balancer this library made: on a team's shared one it would page every
        # team for any team's errors. Each model's own target 5xx alarm is ModelAlarms'.
        for number, balancer in enumerate([load_balancer, *more_load_balancers], start=1):
            if isinstance(balancer, InferenceLoadBalancer):
                self._add_load_balancer_alarm(balancer.load_balancer, "Elb5xxRate" if number == 1 else f"Elb5xxRate{number}")
        load_balancer = load_balancer.load_balancer if isinstance(load_balancer, InferenceLoadBalancer) else load_balancer
        self.spot_interruption_rule = events.Rule(
            self,
            "SpotInterruptions",
            description="EC2 Spot interruption warnings in this account and region (the GPU fleet's Spot instances)",
            event_pattern=events.EventPattern(source=["aws.ec2"], detail_type=["EC2 Spot Instance Interruption Warning"]),
            targets=[topic_target(topic)],
        )
        self.task_starts = TaskStarts(self, "TaskStarts", cluster=capacity.cluster, logs_key=logs_key)
        self.deployment_rollback_rule = events.Rule(
            self,
            "DeploymentRollbacks",
            description="ECS deployments of this cluster's services that failed or are being rolled back (circuit breaker or rollback alarms)",
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
            "Spot capacity is being reclaimed repeatedly: On-Demand base and the g4dn fallback carry the load; consider a higher On-Demand share",
        )
        self.metric_cost_per_million_requests, self.metric_cost_components = self._cost_per_million_requests(
            [capacity, *more_capacity], load_balancer, [service_log_group_name(environment_name, name, name_prefix) for name in model_names])
        self.metric_spare_capacity_cost = self.spare_capacity_cost([capacity, *more_capacity])
        self.metric_warm_pool_cost = self.warm_pool_cost([capacity, *more_capacity])
        self.dashboard = self._dashboard(environment_name, model_names, load_balancer, capacity)

    def add_model(self, service: ModelService) -> None:
        """Graph the metrics ``service``'s server contract brings into CloudWatch (vLLM: running and waiting requests,
        KV-cache use), one graph per model. The bundled server's metrics are on the dashboard already; its dimensions
        are literal (environment and model name), so a model of another stack adds no reference between them."""
        contract = service.contract
        if contract.bundled_metrics or contract.metrics is None:
            return
        metrics = [service.metric_server(PrometheusMetrics.cloudwatch_name(name), "Average") for name in contract.metrics.metrics]
        self.dashboard.add_widgets(cloudwatch.GraphWidget(
            title=f"{service.model.name}: {contract.name} server metrics (average)", left=metrics, width=24, height=6))

    def _add_load_balancer_alarm(self, load_balancer: elbv2.IApplicationLoadBalancer, name: str = "Elb5xxRate") -> None:
        rate = error_rate(
            load_balancer.metrics.http_code_elb(elbv2.HttpCodeElb.ELB_5XX_COUNT, period=MINUTE, statistic="Sum"),
            load_balancer.metrics.request_count(period=MINUTE, statistic="Sum"),
            "load balancer 5xx %",
        )
        self._alarm(name, rate, self.props.elb_5xx_percent,
                    f"More than {self.props.elb_5xx_percent}% of requests answered 5xx by the load balancer itself (no healthy targets, timeouts)", periods=3)

    def _instances(self, capacity: GpuCapacity, period: cdk.Duration) -> cloudwatch.Metric:
        return self._group_metric(capacity, "GroupInServiceInstances", period, "GPU instances in service")

    @staticmethod
    def _group_metric(capacity: GpuCapacity, name: str, period: cdk.Duration, label: str) -> cloudwatch.Metric:
        """An Auto Scaling group metric of ``capacity``'s group (every one is collected: ``GroupMetrics.all()``, the
        warm pool's WarmPool* metrics included)."""
        return cloudwatch.Metric(
            namespace="AWS/AutoScaling",
            metric_name=name,
            dimensions_map={"AutoScalingGroupName": capacity.auto_scaling_group.auto_scaling_group_name},
            statistic="Average",
            period=period,
            label=label,
        )

    def _warm_pool_hourly(self, capacity: GpuCapacity, index: int, period: cdk.Duration,
                          using: dict[str, cloudwatch.IMetric]) -> str:
        """USD per hour of ``capacity``'s warm pool (a metric math term; its metrics added to ``using``): every
        instance in it bills its root volume (a stopped one nothing else), and one warming runs On-Demand (Auto
        Scaling cannot stop a Spot instance it launched, so the pool's instances are On-Demand)."""
        pooled, warming = f"pool{index}", f"warming{index}"
        using[pooled] = self._group_metric(capacity, "WarmPoolTotalCapacity", period, "instances in the warm pool")
        using[warming] = self._group_metric(capacity, "WarmPoolPendingCapacity", period, "instances warming")
        return (f"(FILL({pooled}, 0) * {root_volume_hourly_usd(capacity.props, self.props)} + FILL({warming}, 0) * "
                f"{self._on_demand_price(capacity, index)})")

    def warm_pool_cost(self, capacities: Sequence[GpuCapacity]) -> list[cloudwatch.MathExpression]:
        """USD per hour of each group's warm pool (the groups with one), labelled with its monthly cost at its
        minimum size (:func:`warm_pool_monthly_usd`)."""
        lines = []
        for index, capacity in enumerate(capacities):
            pool = capacity.props.warm_pool
            if pool is None:
                continue
            using: dict[str, cloudwatch.IMetric] = {}
            hourly = self._warm_pool_hourly(capacity, index, FIVE_MINUTES, using)
            monthly = warm_pool_monthly_usd(capacity.props, self.props)
            lines.append(cloudwatch.MathExpression(
                expression=hourly, using_metrics=using, period=FIVE_MINUTES,
                label=f"{capacity.instance_types[0].name} group: warm pool, USD/h ({pool.min_size} stopped: their "
                      f"{capacity.props.root_volume_gib} GiB gp3 root volumes, ${monthly:.2f} a month; On-Demand while "
                      "one warms; estimate)"))
        return lines

    def _on_demand_price(self, capacity: GpuCapacity, index: int) -> float:
        """Capacity group ``index``'s On-Demand USD per hour: ``hourly_price_usd`` for the first group, else its
        preferred type's catalog price."""
        return (self.props.hourly_price_usd if index == 0 else None) or capacity.instance_types[0].on_demand_hourly_usd

    def _gpu_hourly(self, capacity: GpuCapacity, price: float, running: str) -> str:
        """USD per hour of the group's ``running`` instances (a metric math term) by its purchase policy, On-Demand
        at ``price``."""
        spot_price = round(price * self.props.spot_price_fraction, 5)
        on_demand = on_demand_instances_expression(capacity, running)
        return f"(({on_demand}) * {price} + ({running} - ({on_demand})) * {spot_price})"

    def spare_capacity_cost(self, capacities: Sequence[GpuCapacity]) -> list[cloudwatch.MathExpression]:
        """USD per hour of each group's warm spare: the share of its instances that no task reserves, (100 -
        CapacityProviderReservation) % (ECS managed scaling's own metric: tasks' need over instances in service, which
        target_capacity_percent below 100 holds below 100), priced like the group's instances and their root
        volumes."""
        spares = []
        for index, capacity in enumerate(capacities):
            total, reserved = f"total{index}", f"reservation{index}"  # ids unique across the graph's expressions
            # No FILL: a group at zero has no spare either.
            gpus = self._gpu_hourly(capacity, self._on_demand_price(capacity, index), total)
            hourly = f"({gpus} + {total} * {root_volume_hourly_usd(capacity.props, self.props)})"
            reservation = cloudwatch.Metric(
                namespace="AWS/ECS/ManagedScaling", metric_name="CapacityProviderReservation",
                dimensions_map={"ClusterName": capacity.cluster.cluster_name,
                                "CapacityProviderName": capacity.capacity_provider.capacity_provider_name},
                statistic="Average", period=FIVE_MINUTES)
            spares.append(cloudwatch.MathExpression(
                expression=f"IF({reserved} < 100, (1 - {reserved} / 100) * {hourly}, 0)",
                using_metrics={total: self._instances(capacity, FIVE_MINUTES), reserved: reservation},
                period=FIVE_MINUTES,
                label=f"{capacity.instance_types[0].name} group: warm spare, USD/h (target "
                      f"{capacity.props.target_capacity_percent} %, estimate)"))
        return spares

    def _cost_per_million_requests(
        self, capacities: Sequence[GpuCapacity], load_balancer: elbv2.IApplicationLoadBalancer,
        log_group_names: Sequence[str],
    ) -> tuple[cloudwatch.MathExpression, list[cloudwatch.MathExpression]]:
        """USD per 1M requests, hourly: each capacity group's GPU instances by its purchase policy at its preferred type's
        price (``hourly_price_usd`` overrides the first group's), log bytes ingested, the ALB's hour and LCUs.

        ConsumedLCUs is the load balancer's billed capacity (AWS re:Post: the usage averaged over time that billing
        uses), so its hourly Average is that hour's LCU-hours. IncomingBytes is the uncompressed volume ingested, which
        is what CloudWatch Logs bills per GB."""
        props = self.props
        using: dict[str, cloudwatch.IMetric] = {}
        gpu_parts, volume_parts, priced = [], [], []
        for index, capacity in enumerate(capacities):
            name = "total" if index == 0 else f"total{index}"
            using[name] = self._instances(capacity, HOUR)
            price = self._on_demand_price(capacity, index)
            gpu_parts.append(self._gpu_hourly(capacity, price, _in_service(name, index)))
            volume_parts.append(f"{_in_service(name, index)} * {root_volume_hourly_usd(capacity.props, props)}")
            priced.append(f"{capacity.instance_types[0].name} at ${price}/h")
        using["requests"] = load_balancer.metrics.request_count(period=HOUR, statistic="Sum")
        using["lcus"] = load_balancer.metrics.custom("ConsumedLCUs", period=HOUR, statistic="Average")
        for index, name in enumerate(log_group_names):
            using[f"logbytes{index}"] = cloudwatch.Metric(
                namespace="AWS/Logs", metric_name="IncomingBytes", dimensions_map={"LogGroupName": name},
                statistic="Sum", period=HOUR)
        log_bytes = " + ".join(f"FILL(logbytes{i}, 0)" for i in range(len(log_group_names))) or "0"
        pools = [self._warm_pool_hourly(capacity, index, HOUR, using)
                 for index, capacity in enumerate(capacities) if capacity.props.warm_pool is not None]
        parts = {
            "GPU instances": " + ".join(gpu_parts),
            "GPU root volumes": " + ".join(volume_parts),
            **({"warm pool": " + ".join(pools)} if pools else {}),
            "CloudWatch Logs ingestion": f"({log_bytes}) / {GIB} * {props.logs_ingestion_usd_per_gb}",
            "load balancer": f"({props.load_balancer_hourly_usd} + FILL(lcus, 0) * {props.load_balancer_lcu_hourly_usd})",
        }

        def per_million(hourly: str, label: str) -> cloudwatch.MathExpression:
            return cloudwatch.MathExpression(expression=f"IF(requests > 0, ({hourly}) / requests * 1000000, 0)",
                                             using_metrics=using, period=HOUR, label=label)

        total = per_million(" + ".join(parts.values()),
                            f"USD per 1M requests, estimate: GPU ({', '.join(priced)}, Spot at "
                            f"{props.spot_price_fraction:.0%}; prices {PRICES_AS_OF}) + root volumes (gp3 "
                            f"${props.gp3_gib_month_usd}/GiB-month, provisioned IOPS and throughput) + "
                            + ("warm pool (its instances' root volumes; On-Demand while warming) + " if pools else "")
                            + "CloudWatch Logs ingestion "
                            f"(${props.logs_ingestion_usd_per_gb}/GB) + ALB (${props.load_balancer_hourly_usd}/h + "
                            f"${props.load_balancer_lcu_hourly_usd}/LCU-h)")
        return total, [per_million(hourly, f"{name} (estimate)") for name, hourly in parts.items()]

    def _dashboard(
        self,
        environment_name: str,
        model_names: Sequence[str],
        load_balancer: elbv2.IApplicationLoadBalancer,
        capacity: GpuCapacity,
    ) -> cloudwatch.Dashboard:
        def graph(title: str, left: list, right: list | None = None, unit: str = "") -> cloudwatch.GraphWidget:
            return cloudwatch.GraphWidget(title=title, left=left, right=right or [], width=12, height=6,
                                          left_y_axis=cloudwatch.YAxisProps(label=unit, show_units=False) if unit else None)

        def per_target_group(metric: str, statistic: str, label: str) -> cloudwatch.MathExpression:
            return search(
                f"{{AWS/ApplicationELB,LoadBalancer,TargetGroup}} MetricName=\"{metric}\" LoadBalancer=\"{full_name_of(load_balancer)}\"",
                statistic, f"{label} ${{PROP('Dim.TargetGroup')}}",
            )

        def per_model(metric: str, statistic: str, label: str = "") -> cloudwatch.MathExpression:
            return search(
                f"{{{metric_names.NAMESPACE},{metric_names.DIMENSION_ENVIRONMENT},{metric_names.DIMENSION_MODEL}}} "
                f"MetricName=\"{metric}\" {metric_names.DIMENSION_ENVIRONMENT}=\"{environment_name}\"",
                statistic, f"${{PROP('Dim.{metric_names.DIMENSION_MODEL}')}} {label or metric} {statistic}",
            )

        def per_service(metric: str, namespace: str = "ECS/ContainerInsights", statistic: str = "Average",
                        label: str = "") -> cloudwatch.MathExpression:
            return search(
                f"{{{namespace},ClusterName,ServiceName}} MetricName=\"{metric}\" ClusterName=\"{capacity.cluster.cluster_name}\"",
                statistic, f"${{PROP('Dim.ServiceName')}} {label or metric}",
            )

        total = self._instances(capacity, MINUTE)
        on_demand = on_demand_instances_expression(capacity)
        dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=f"{self.name_prefix}-{environment_name}", default_interval=cdk.Duration.hours(3))
        dashboard.add_widgets(
            cloudwatch.TextWidget(
                markdown=f"# GPU inference: {environment_name}\nModels: {', '.join(model_names)}\n\n"
                         f"Each model's alarms are named `{alarm_name_prefix(environment_name, self.name_prefix)}<model>-<alarm>`: "
                         f"[all alarms of this environment](https://console.aws.amazon.com/cloudwatch/home#alarmsV2:?search={alarm_name_prefix(environment_name, self.name_prefix)})",
                width=24, height=2,
            )
        )
        dashboard.add_widgets(
            graph("Requests per minute", [per_target_group("RequestCount", "Sum", "requests"),
                                          load_balancer.metrics.request_count(period=MINUTE, statistic="Sum", label="load balancer total")]),
            graph("Latency at the load balancer (s): p50 / p95 / p99",
                  [per_target_group("TargetResponseTime", p, p) for p in ("p50", "p95", "p99")], unit="seconds"),
        )
        dashboard.add_widgets(
            graph("Errors per minute", [per_target_group("HTTPCode_Target_5XX_Count", "Sum", "5xx"),
                                        load_balancer.metrics.http_code_elb(elbv2.HttpCodeElb.ELB_5XX_COUNT, period=MINUTE, statistic="Sum", label="load balancer 5xx"),
                                        per_target_group("HTTPCode_Target_4XX_Count", "Sum", "4xx")]),
            graph("Server latency (ms): p50 / p95 / p99, queue wait p95",
                  [per_model(metric_names.REQUEST_LATENCY, p) for p in ("p50", "p95", "p99")]
                  + [per_model(metric_names.QUEUE_WAIT, "p95")], unit="ms"),
        )
        dashboard.add_widgets(
            graph("Tasks: running / desired", [per_service("RunningTaskCount"), per_service("DesiredTaskCount")]),
            graph("GPU instances: Spot vs On-Demand", [
                total,
                cloudwatch.MathExpression(expression=on_demand, using_metrics={"total": total}, period=MINUTE, label="On-Demand (by policy)"),
                cloudwatch.MathExpression(expression=f"total - ({on_demand})", using_metrics={"total": total}, period=MINUTE, label="Spot (by policy)"),
            ]),
        )
        dashboard.add_widgets(
            graph("GPU utilisation and memory (%)",
                  [per_model(metric_names.GPU_UTILIZATION, "Average")],
                  [per_model(metric_names.GPU_MEMORY_UTILIZATION, "Maximum")], unit="%"),
            graph("Batch size (avg) and queue depth (max)",
                  [per_model(metric_names.BATCH_SIZE, "Average")],
                  [per_model(metric_names.QUEUE_DEPTH, "Maximum")]),
        )
        # Each model's own figures from its own process: on a shared GPU (NVIDIA MPS) the device's utilisation and
        # memory above are every co-tenant's.
        dashboard.add_widgets(
            graph("Each model's own GPU: busy (% of time in forwards) and memory it holds (MiB)",
                  [per_model(metric_names.MODEL_BUSY_PERCENT, "Average")],
                  [per_model(metric_names.GPU_MEMORY_USED_MIB, "Maximum")], unit="%"),
        )
        dashboard.add_widgets(
            graph("Shed (503) and timed-out (504) requests",
                  [per_model(n, "Sum") for n in (metric_names.REJECTED_REQUESTS, metric_names.TIMED_OUT_REQUESTS)]
                  + [self.metric_spot_interruptions]),
            graph("Cost per 1M requests (USD, hourly)", [self.metric_cost_per_million_requests, *self.metric_cost_components]),
        )
        dashboard.add_widgets(
            graph("Warm spare GPU capacity (USD/h): what capacity kept ahead of the tasks costs",
                  [*self.metric_spare_capacity_cost, *self.metric_warm_pool_cost]),
            # One point per task start of the bundled server, from its EMF document when the model is ready.
            graph("Task start (s): server process start to ready, and the model's fetch, load and warm-up in it; "
                  "with runtime compile, loaded to every shape compiled (after ready)",
                  [per_model(name, "Maximum", label) for name, label in (
                      (metric_names.STARTUP_SECONDS, "start to ready"), (metric_names.STARTUP_FETCH_SECONDS, "fetch"),
                      (metric_names.STARTUP_LOAD_SECONDS, "load"), (metric_names.STARTUP_WARMUP_SECONDS, "warm-up"),
                      (metric_names.STARTUP_COMPILE_SECONDS, "compiled"))],
                  unit="seconds"),
        )
        dashboard.add_widgets(
            # One point per task that reaches RUNNING, from ECS's Task State Change event (TaskStarts).
            graph("Task start on ECS (s): created to image pull (placement, waiting for an instance), the pull, and "
                  "pull to RUNNING (init containers such as model-fetch)",
                  [per_service(name, task_start_handler.NAMESPACE, "Maximum", label)
                   for name, label in zip([name for name, _, _ in task_start_handler.PHASES],
                                          ("wait", "pull", "to RUNNING", "created to RUNNING"), strict=True)],
                  unit="seconds"),
        )
        dashboard.add_widgets(cloudwatch.AlarmStatusWidget(alarms=list(self.alarms.values()), title="Alarms", width=24, height=6))
        return dashboard


# ECS's "ECS Deployment State Change" events (ECS developer guide, ecs_service_deployment_events): FAILED is documented for
# services with the circuit breaker; a rollback starts a new deployment whose IN_PROGRESS event's reason says it is one
# ("ECS deployment circuit breaker: rolling back to deploymentId ..."). The alarm rollbacks and the blue/green, canary and
# linear strategies document no event names of their own, so both are matched, and the reason in either spelling.
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
                {"eventName": [DEPLOYMENT_IN_PROGRESS], "reason": [{"wildcard": reason} for reason in ROLLBACK_REASONS]},
            ]
        },
    )


def search(query: str, statistic: str, label: str, period: cdk.Duration = MINUTE) -> cloudwatch.MathExpression:
    """A CloudWatch SEARCH expression: one graph line per matching metric, however many models there are."""
    return cloudwatch.MathExpression(expression=f"SEARCH('{query}', '{statistic}', {period.to_seconds()})", using_metrics={}, period=period, label=label)


def on_demand_instances_expression(capacity: GpuCapacity, total: str = "total") -> str:
    """Metric math for the On-Demand share of ``total`` in-service instances that the distribution policy implies
    (no CloudWatch metric splits a mixed-instances group by purchase option)."""
    base = capacity.props.on_demand_base_capacity
    share = capacity.props.on_demand_percentage_above_base / 100
    return f"IF({total} > {base}, {base} + CEIL(({total} - {base}) * {share}), {total})"


def error_rate(errors: cloudwatch.IMetric, requests: cloudwatch.IMetric, label: str) -> cloudwatch.MathExpression:
    """Errors as a percentage of requests; 0 when there are no requests."""
    return cloudwatch.MathExpression(
        expression="IF(FILL(requests, 0) > 0, 100 * FILL(errors, 0) / requests, 0)",
        using_metrics={"errors": errors, "requests": requests},
        period=MINUTE,
        label=label,
    )
