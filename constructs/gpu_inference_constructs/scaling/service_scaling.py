"""Auto scaling of one model service on several signals, on schedules, and by forecast.

Target tracking on requests per target is the main signal (measure the per-task capacity with
the benchmark). Step policies add tasks when p95 latency runs high, and on the signals the server's
contract declares.
Predictive scaling sits on the service's scalable target, never on the GPU Auto Scaling group,
whose desired capacity ECS managed scaling owns.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from constructs import Construct

from ..core.errors import require
from ..core.legacy_keywords import accepts_legacy_keywords
from ..core.scaling_props import ModelScalingProps, PredictiveScalingProps, ScalingProps
from ..core.schedules import CapacityPrewarm, check_schedule_task_ranges
from ..core.server_signals import SERVICE_CPU, ExpressionSignal, ScalingSignal
from ..service.model_service import ModelService


class ServiceScaling(Construct):
    """Auto scaling of one ModelService between its model's ``min_tasks`` and ``max_tasks``.

    Signals: step scale-out on ALB p95 latency (``props.latency_p95_ms``), and each of the server contract's
    ``scaling_signals`` as it declares it (the bundled server: its queue, GPU utilisation, CPU while its queue grows;
    vLLM and SGLang: running and waiting requests, KV-cache use); a signal marked ``whole_gpu_only`` is left out on a
    GPU share. Unless some signal tracks a target, target tracking on requests per target too (step policies only add
    tasks; target tracking removes them). ``scaling`` adds schedules and predictive scaling. The load balancer's name
    is the service's (``service.load_balancer_full_name``): ModelService is the one place that takes it.

    ``scaling.capacity_prewarm`` raises the minimum of the capacity group the model runs on
    (``CapacityGroup.add_prewarm``, once per group); on a ClusterCapacity it is refused.

    Attributes: ``task_count`` (ScalableTaskCount), ``scalable_target``, ``prewarm_actions`` (the group's scheduled
    actions of ``scaling.capacity_prewarm``), ``predictive_policy`` (or None),
    ``signal_metrics`` (each declared signal's metric, by its policy's construct ID).
    """

    @accepts_legacy_keywords("ServiceScaling")
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        service: ModelService,
        props: ModelScalingProps | None = None,
        scaling: ScalingProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        scaling = scaling or ScalingProps(predictive=PredictiveScalingProps(mode="off"))
        model = service.model
        props = props or model.scaling
        contract = service.contract
        self.task_count = service.service.auto_scale_task_count(
            min_capacity=model.min_tasks, max_capacity=model.max_tasks
        )
        target = self.task_count.node.find_child("Target")
        assert isinstance(target, appscaling.ScalableTarget), target
        self.scalable_target: appscaling.ScalableTarget = target
        out_cooldown = cdk.Duration.seconds(props.scale_out_cooldown_seconds)
        in_cooldown = cdk.Duration.seconds(props.scale_in_cooldown_seconds)

        # Step policies only add tasks; target tracking is what removes them. A contract whose signals only scale out
        # (none with a target) therefore also tracks requests per target, or it could never scale in.
        if not any(
            isinstance(signal, ScalingSignal) and signal.target is not None for signal in contract.scaling_signals
        ):
            self._track_requests(service, props, out_cooldown, in_cooldown)
        self._scale_out_on(
            "LatencyP95",
            service.metric_target_response_time("p95"),
            props.latency_p95_ms / 1000,
            out_cooldown,
        )
        self.signal_metrics: dict[str, cloudwatch.IMetric] = {}
        shared = model.gpu_share is not None
        for signal in contract.scaling_signals:
            if isinstance(signal, ScalingSignal) and signal.whole_gpu_only and shared:
                continue  # on a shared GPU the device's figures are every co-tenant's
            self._add_signal(service, signal, out_cooldown, in_cooldown)

        check_schedule_task_ranges(model.name, model.min_tasks, model.max_tasks, scaling.schedules)
        for schedule in scaling.schedules:
            low, high = schedule.task_range(model.min_tasks, model.max_tasks)
            # Scaling may bring a service scheduled to zero back one task at a time.
            service.allow_draining_down_to(max(1, low))
            self.task_count.scale_on_schedule(
                f"Schedule-{schedule.name}",
                schedule=appscaling.Schedule.expression(f"cron({schedule.cron})"),
                time_zone=cdk.TimeZone.of(schedule.time_zone),
                min_capacity=low,
                max_capacity=high,
            )

        self.prewarm_actions = self._prewarm(service, scaling.capacity_prewarm)
        self.predictive_policy = None
        if scaling.predictive.mode != "off":
            self.predictive_policy = self._add_predictive(
                scaling.predictive, props, service, service.load_balancer_full_name
            )

    @staticmethod
    def _prewarm(service: ModelService, prewarms: tuple[CapacityPrewarm, ...]) -> list[autoscaling.ScheduledAction]:
        """``scaling.capacity_prewarm``'s floors on the capacity group the model runs on (once per group, however many
        of its models are scaled with them); a capacity provider of the team's own is not the library's to raise."""
        if not prewarms:
            return []
        group = service.capacity_group
        require(
            group is not None,
            "scaling.capacity_prewarm",
            f"model {service.model.name!r} runs on a ClusterCapacity (a capacity provider of your own), whose Auto "
            "Scaling group the library cannot raise: schedule its minimum yourself (autoscaling.AutoScalingGroup."
            "scale_on_schedule) and leave capacity_prewarm out of this ServiceScaling's scaling",
        )
        assert group is not None  # required above
        return [group.add_prewarm(prewarm) for prewarm in prewarms]

    def _track_requests(
        self,
        model_service: ModelService,
        props: ModelScalingProps,
        out_cooldown: cdk.Duration,
        in_cooldown: cdk.Duration,
    ) -> None:
        """Target tracking on requests per target: of the one target group, or across both
        (:meth:`_track_requests_across`)."""
        if len(model_service.target_groups) > 1:
            self._track_requests_across(model_service, model_service.load_balancer_full_name, props)
            return
        # scale_on_request_count would parse the load balancer's name out of the listener's ARN (Fn::Split),
        # which CloudFormation may not accept over another stack's output: the name is given instead.
        appscaling.TargetTrackingScalingPolicy(
            self.task_count,
            "RequestsPerTarget",
            scaling_target=self.scalable_target,
            predefined_metric=appscaling.PredefinedMetric.ALB_REQUEST_COUNT_PER_TARGET,
            resource_label=f"{model_service.load_balancer_full_name}/{model_service.target_group.target_group_full_name}",
            target_value=props.requests_per_target_per_minute,
            scale_out_cooldown=out_cooldown,
            scale_in_cooldown=in_cooldown,
        )

    def _add_signal(
        self,
        model_service: ModelService,
        signal: ScalingSignal | ExpressionSignal,
        out_cooldown: cdk.Duration,
        in_cooldown: cdk.Duration,
    ) -> None:
        """One signal the server's contract declares: target tracking, or a step policy that adds tasks."""
        if isinstance(signal, ExpressionSignal):
            metric: cloudwatch.IMetric = signal_expression(model_service, signal)
            self._scale_out_on(
                signal.policy_id,
                metric,
                signal.scale_out_above,
                out_cooldown,
                evaluation_periods=signal.evaluation_periods,
                maximum=signal.maximum,
            )
        else:
            metric = model_service.metric_server(
                signal.metric, signal.statistic, period=cdk.Duration.seconds(signal.period_seconds)
            )
            if signal.target is not None:
                self.task_count.scale_to_track_custom_metric(
                    signal.policy_id,
                    metric=metric,
                    target_value=signal.target,
                    scale_out_cooldown=out_cooldown,
                    scale_in_cooldown=in_cooldown,
                )
            else:
                assert signal.scale_out_above is not None  # a signal sets exactly one of target and scale_out_above
                self._scale_out_on(
                    signal.policy_id,
                    metric,
                    signal.scale_out_above,
                    out_cooldown,
                    evaluation_periods=signal.evaluation_periods,
                    maximum=signal.maximum,
                )
        self.signal_metrics[signal.policy_id] = metric

    def _track_requests_across(
        self, model_service: ModelService, load_balancer_full_name: str, props: ModelScalingProps
    ) -> appscaling.CfnScalingPolicy:
        """Requests per healthy target over both target groups: after a canary, linear or blue/green deployment the
        alternate one is production, and ALBRequestCountPerTarget names one target group only."""

        def stat(metric_id: str, name: str, statistic: str, target_group: elbv2.ApplicationTargetGroup):
            return appscaling.CfnScalingPolicy.TargetTrackingMetricDataQueryProperty(
                id=metric_id,
                return_data=False,
                metric_stat=appscaling.CfnScalingPolicy.TargetTrackingMetricStatProperty(
                    stat=statistic,
                    metric=appscaling.CfnScalingPolicy.TargetTrackingMetricProperty(
                        namespace="AWS/ApplicationELB",
                        metric_name=name,
                        dimensions=[
                            appscaling.CfnScalingPolicy.TargetTrackingMetricDimensionProperty(
                                name="LoadBalancer", value=load_balancer_full_name
                            ),
                            appscaling.CfnScalingPolicy.TargetTrackingMetricDimensionProperty(
                                name="TargetGroup", value=target_group.target_group_full_name
                            ),
                        ],
                    ),
                ),
            )

        groups = list(enumerate(model_service.target_groups))
        requests = " + ".join(f"FILL(requests_{i}, 0)" for i, _ in groups)
        healthy = " + ".join(f"FILL(healthy_{i}, 0)" for i, _ in groups)
        queries = [stat(f"requests_{i}", "RequestCount", "Sum", tg) for i, tg in groups]
        queries += [stat(f"healthy_{i}", "HealthyHostCount", "Average", tg) for i, tg in groups]
        queries.append(
            appscaling.CfnScalingPolicy.TargetTrackingMetricDataQueryProperty(
                id="requests_per_target",
                expression=f"IF(({healthy}) > 0, ({requests}) / ({healthy}), {requests})",
                label="requests per healthy target, both target groups",
                return_data=True,
            )
        )
        return appscaling.CfnScalingPolicy(
            self,
            "RequestsPerTarget",
            policy_name=f"{cdk.Names.unique_id(self)[-200:]}-requests-per-target",
            policy_type="TargetTrackingScaling",
            scaling_target_id=self.scalable_target.scalable_target_id,
            target_tracking_scaling_policy_configuration=appscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty(
                target_value=props.requests_per_target_per_minute,
                scale_out_cooldown=props.scale_out_cooldown_seconds,
                scale_in_cooldown=props.scale_in_cooldown_seconds,
                customized_metric_specification=appscaling.CfnScalingPolicy.CustomizedMetricSpecificationProperty(
                    metrics=queries
                ),
            ),
        )

    def _scale_out_on(
        self,
        name: str,
        metric: cloudwatch.IMetric,
        threshold: float,
        cooldown: cdk.Duration,
        evaluation_periods: int = 2,
        maximum: float | None = None,
    ) -> None:
        """Step policy that only adds tasks (+1 above the threshold, +2 above twice it where the metric, at most
        ``maximum``, can get there); target tracking scales in."""
        steps = [
            appscaling.ScalingInterval(upper=threshold, change=0),
            appscaling.ScalingInterval(lower=threshold, change=1),
        ]
        if maximum is None or threshold * 2 < maximum:
            steps.append(appscaling.ScalingInterval(lower=threshold * 2, change=2))
        self.task_count.scale_on_metric(
            name,
            metric=metric,
            scaling_steps=steps,
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            cooldown=cooldown,
            evaluation_periods=evaluation_periods,
            datapoints_to_alarm=evaluation_periods,
            metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM,
        )

    def _add_predictive(
        self,
        predictive: PredictiveScalingProps,
        props: ModelScalingProps,
        model_service: ModelService,
        load_balancer_full_name: str,
    ) -> appscaling.CfnScalingPolicy:
        resource_label = f"{load_balancer_full_name}/{model_service.target_group.target_group_full_name}"
        return appscaling.CfnScalingPolicy(
            self,
            "Predictive",
            policy_name=f"{cdk.Names.unique_id(self)[-200:]}-predictive",
            policy_type="PredictiveScaling",
            scaling_target_id=self.scalable_target.scalable_target_id,
            predictive_scaling_policy_configuration=appscaling.CfnScalingPolicy.PredictiveScalingPolicyConfigurationProperty(
                mode=predictive.mode,
                scheduling_buffer_time=predictive.scheduling_buffer_seconds,
                max_capacity_breach_behavior=predictive.max_capacity_breach_behavior,
                max_capacity_buffer=predictive.max_capacity_buffer_percent,
                metric_specifications=[
                    appscaling.CfnScalingPolicy.PredictiveScalingMetricSpecificationProperty(
                        target_value=props.requests_per_target_per_minute,
                        predefined_metric_pair_specification=appscaling.CfnScalingPolicy.PredictiveScalingPredefinedMetricPairProperty(
                            predefined_metric_type="ALBRequestCount",
                            resource_label=resource_label,
                        ),
                    )
                    if len(model_service.target_groups) == 1
                    else self._requests_across_target_groups_for_prediction(
                        model_service, load_balancer_full_name, props
                    )
                ],
            ),
        )

    @staticmethod
    def _requests_across_target_groups_for_prediction(
        model_service: ModelService, load_balancer_full_name: str, props: ModelScalingProps
    ) -> appscaling.CfnScalingPolicy.PredictiveScalingMetricSpecificationProperty:
        """The ALBRequestCount pair over both target groups: load = their requests (Sum), scaling metric = requests per
        healthy target per minute (the forecast's history stays whole while deployments move production between them).

        Predictive scaling chooses the period it reads these queries at and sums the load into hours for its forecast
        (Application Auto Scaling, "Advanced predictive scaling policy using custom metrics"; the load metric's points
        "within each hour" are summed to the forecast's 60-minute granularity). A Sum of RequestCount is per period,
        so the scaling metric is scaled to one minute with PERIOD(): the unit of ``requests_per_target_per_minute``
        and of the predefined pair's RequestCountPerTarget, whatever period the service reads at."""
        policy = appscaling.CfnScalingPolicy

        def stat(metric_id: str, name: str, statistic: str, target_group: elbv2.ApplicationTargetGroup):
            return policy.PredictiveScalingMetricDataQueryProperty(
                id=metric_id,
                return_data=False,
                metric_stat=policy.PredictiveScalingMetricStatProperty(
                    stat=statistic,
                    metric=policy.PredictiveScalingMetricProperty(
                        namespace="AWS/ApplicationELB",
                        metric_name=name,
                        dimensions=[
                            policy.PredictiveScalingMetricDimensionProperty(
                                name="LoadBalancer", value=load_balancer_full_name
                            ),
                            policy.PredictiveScalingMetricDimensionProperty(
                                name="TargetGroup", value=target_group.target_group_full_name
                            ),
                        ],
                    ),
                ),
            )

        groups = list(enumerate(model_service.target_groups))
        requests = " + ".join(f"FILL(requests_{i}, 0)" for i, _ in groups)
        healthy = " + ".join(f"FILL(healthy_{i}, 0)" for i, _ in groups)
        request_stats = [stat(f"requests_{i}", "RequestCount", "Sum", tg) for i, tg in groups]
        load = policy.PredictiveScalingMetricDataQueryProperty(
            id="load", expression=requests, label="requests, both target groups", return_data=True
        )
        per_target = policy.PredictiveScalingMetricDataQueryProperty(
            id="requests_per_target",
            expression=f"IF(({healthy}) > 0, ({requests}) / ({healthy}), {requests}) * 60 / PERIOD(requests_0)",
            label="requests per healthy target per minute, both target groups",
            return_data=True,
        )
        return policy.PredictiveScalingMetricSpecificationProperty(
            target_value=props.requests_per_target_per_minute,
            customized_load_metric_specification=policy.PredictiveScalingCustomizedLoadMetricProperty(
                metric_data_queries=[*request_stats, load]
            ),
            customized_scaling_metric_specification=policy.PredictiveScalingCustomizedScalingMetricProperty(
                metric_data_queries=[
                    *request_stats,
                    *[stat(f"healthy_{i}", "HealthyHostCount", "Average", tg) for i, tg in groups],
                    per_target,
                ]
            ),
        )


def signal_expression(model_service: ModelService, signal: ExpressionSignal) -> cloudwatch.MathExpression:
    """An expression signal's metric math over the server's metrics (and the service's CPU), per minute."""
    minute = cdk.Duration.minutes(1)
    using: dict[str, cloudwatch.IMetric] = {
        metric_id: model_service.service.metric_cpu_utilization(period=minute)
        if name == SERVICE_CPU
        else model_service.metric_server(name, statistic)
        for metric_id, (name, statistic) in signal.metrics.items()
    }
    return cloudwatch.MathExpression(
        expression=signal.expression, using_metrics=using, period=minute, label=signal.label
    )
