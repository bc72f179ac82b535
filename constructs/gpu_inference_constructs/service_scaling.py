"""Auto scaling of one model service on several signals, on schedules, and by forecast.

Target tracking on requests per target is the main signal (measure the per-task capacity with
the benchmark). Step policies add tasks when p95 latency or GPU utilisation run high, and when CPU
is high while the server's queue grows (one metric-math alarm: a CPU spike alone does not scale).
Predictive scaling sits on the service's scalable target, never on the GPU Auto Scaling group,
whose desired capacity ECS managed scaling owns.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from constructs import Construct

from . import metric_names
from .model_service import ModelService
from .scaling_props import ModelScalingProps, PredictiveScalingProps, ScalingProps
from .schedules import check_schedule_task_ranges


class ServiceScaling(Construct):
    """Auto scaling of one ModelService between its model's ``min_tasks`` and ``max_tasks``.

    Signals follow the service's server contract. A server with ``bundled_metrics`` (ours): target
    tracking on requests per target, step scale-out on ALB p95 latency, GPU utilisation, and CPU
    high while the queue grows. A server with ``scaling_signals`` (vLLM: running and waiting
    requests, KV-cache use): those signals plus ALB p95 latency, and no requests-per-target
    tracking (LLM requests differ too much in cost). Any other server, and one whose signals only scale out (no
    ``target``: step policies add tasks, only target tracking removes them): requests per target and latency. ``scaling`` adds schedules and predictive scaling. The load balancer's name is the service's
    (``model_service.load_balancer_full_name``): ModelService is the one place that takes the load balancer.

    Attributes: ``task_count`` (ScalableTaskCount), ``scalable_target``, ``predictive_policy`` (or None),
    ``combined_cpu_queue_metric`` (or None).
    """


    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_service: ModelService,
        props: ModelScalingProps | None = None,
        scaling: ScalingProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        scaling = scaling or ScalingProps(predictive=PredictiveScalingProps(mode="off"))
        model = model_service.model
        props = props or model.scaling
        contract = model_service.contract
        self.task_count = model_service.service.auto_scale_task_count(min_capacity=model.min_tasks, max_capacity=model.max_tasks)
        target = self.task_count.node.find_child("Target")
        assert isinstance(target, appscaling.ScalableTarget), target
        self.scalable_target: appscaling.ScalableTarget = target
        out_cooldown = cdk.Duration.seconds(props.scale_out_cooldown_seconds)
        in_cooldown = cdk.Duration.seconds(props.scale_in_cooldown_seconds)

        # Step policies only add tasks; target tracking is what removes them. A contract whose signals only scale out
        # (none with a target) therefore also tracks requests per target, or it could never scale in.
        if contract.bundled_metrics or not any(signal.target is not None for signal in contract.scaling_signals):
            if len(model_service.target_groups) == 1:
                # scale_on_request_count would parse the load balancer's name out of the listener's ARN (Fn::Split),
                # which CloudFormation may not accept over another stack's output: the name is given instead.
                name = model_service.load_balancer_full_name
                appscaling.TargetTrackingScalingPolicy(
                    self.task_count,
                    "RequestsPerTarget",
                    scaling_target=self.scalable_target,
                    predefined_metric=appscaling.PredefinedMetric.ALB_REQUEST_COUNT_PER_TARGET,
                    resource_label=f"{name}/{model_service.target_group.target_group_full_name}",
                    target_value=props.requests_per_target_per_minute,
                    scale_out_cooldown=out_cooldown,
                    scale_in_cooldown=in_cooldown,
                )
            else:
                self._track_requests_across(model_service, model_service.load_balancer_full_name, props)
        self._scale_out_on(
            "LatencyP95",
            model_service.metric_target_response_time("p95"),
            props.latency_p95_ms / 1000,
            out_cooldown,
        )
        for signal in contract.scaling_signals:
            metric = model_service.metric_server(signal.metric, signal.statistic)
            if signal.target is not None:
                self.task_count.scale_to_track_custom_metric(
                    f"Track-{signal.metric}",
                    metric=metric,
                    target_value=signal.target,
                    scale_out_cooldown=out_cooldown,
                    scale_in_cooldown=in_cooldown,
                )
            else:
                assert signal.scale_out_above is not None  # a signal sets exactly one of target and scale_out_above
                self._scale_out_on(f"ScaleOut-{signal.metric}", metric, signal.scale_out_above, out_cooldown, maximum=signal.maximum)
        self.combined_cpu_queue_metric = None
        if contract.bundled_metrics:
            self._add_bundled_signals(model_service, props, out_cooldown)

        check_schedule_task_ranges(model.name, model.min_tasks, model.max_tasks, scaling.schedules)
        for schedule in scaling.schedules:
            low, high = schedule.task_range(model.min_tasks, model.max_tasks)
            # Scaling may bring a service scheduled to zero back one task at a time.
            model_service.allow_draining_down_to(max(1, low))
            self.task_count.scale_on_schedule(
                f"Schedule-{schedule.name}",
                schedule=appscaling.Schedule.expression(f"cron({schedule.cron})"),
                time_zone=cdk.TimeZone.of(schedule.time_zone),
                min_capacity=low,
                max_capacity=high,
            )

        self.predictive_policy = None
        if scaling.predictive.mode != "off":
            self.predictive_policy = self._add_predictive(scaling.predictive, props, model_service, model_service.load_balancer_full_name)

    def _add_bundled_signals(self, model_service: ModelService, props: ModelScalingProps, out_cooldown: cdk.Duration) -> None:
        """Our server's own metrics: its model queue (high resolution, seconds), GPU utilisation, and CPU high while
        its queue grows."""
        self._scale_out_on(
            "QueueBacklog",
            model_service.metric_server(metric_names.QUEUE_DEPTH, "Maximum",
                                        period=cdk.Duration.seconds(props.queue_signal_period_seconds)),
            props.queue_depth_scale_out,
            out_cooldown,
            evaluation_periods=props.queue_signal_periods,
            maximum=model_service.contract.queue_capacity,  # the queue never holds more
        )
        if model_service.model.gpu_share is None:
            # On a shared GPU the device's utilisation is every co-tenant's: the queue signal scales a shared model.
            self._scale_out_on(
                "GpuUtilization",
                model_service.metric_server(metric_names.GPU_UTILIZATION, "Average"),
                props.gpu_utilization_percent,
                out_cooldown,
                maximum=100,
            )
        self.combined_cpu_queue_metric = cloudwatch.MathExpression(
            expression=f"IF(cpu > {props.cpu_percent} AND DIFF(queue) > 0, 1, 0)",
            using_metrics={
                "cpu": model_service.service.metric_cpu_utilization(period=cdk.Duration.minutes(1)),
                "queue": model_service.metric_server(metric_names.QUEUE_DEPTH, "Maximum"),
            },
            period=cdk.Duration.minutes(1),
            label="CPU high and queue growing",
        )
        self._scale_out_on("CpuAndQueueGrowing", self.combined_cpu_queue_metric, 1, out_cooldown, evaluation_periods=3, maximum=1)

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
                            appscaling.CfnScalingPolicy.TargetTrackingMetricDimensionProperty(name="LoadBalancer", value=load_balancer_full_name),
                            appscaling.CfnScalingPolicy.TargetTrackingMetricDimensionProperty(name="TargetGroup", value=target_group.target_group_full_name),
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
                customized_metric_specification=appscaling.CfnScalingPolicy.CustomizedMetricSpecificationProperty(metrics=queries),
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
        steps = [appscaling.ScalingInterval(upper=threshold, change=0), appscaling.ScalingInterval(lower=threshold, change=1)]
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
                    else self._requests_across_target_groups_for_prediction(model_service, load_balancer_full_name, props)
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
                            policy.PredictiveScalingMetricDimensionProperty(name="LoadBalancer", value=load_balancer_full_name),
                            policy.PredictiveScalingMetricDimensionProperty(name="TargetGroup", value=target_group.target_group_full_name),
                        ],
                    ),
                ),
            )

        groups = list(enumerate(model_service.target_groups))
        requests = " + ".join(f"FILL(requests_{i}, 0)" for i, _ in groups)
        healthy = " + ".join(f"FILL(healthy_{i}, 0)" for i, _ in groups)
        request_stats = [stat(f"requests_{i}", "RequestCount", "Sum", tg) for i, tg in groups]
        load = policy.PredictiveScalingMetricDataQueryProperty(id="load", expression=requests, label="requests, both target groups", return_data=True)
        per_target = policy.PredictiveScalingMetricDataQueryProperty(
            id="requests_per_target",
            expression=f"IF(({healthy}) > 0, ({requests}) / ({healthy}), {requests}) * 60 / PERIOD(requests_0)",
            label="requests per healthy target per minute, both target groups",
            return_data=True,
        )
        return policy.PredictiveScalingMetricSpecificationProperty(
            target_value=props.requests_per_target_per_minute,
            customized_load_metric_specification=policy.PredictiveScalingCustomizedLoadMetricProperty(metric_data_queries=[*request_stats, load]),
            customized_scaling_metric_specification=policy.PredictiveScalingCustomizedScalingMetricProperty(
                metric_data_queries=[*request_stats, *[stat(f"healthy_{i}", "HealthyHostCount", "Average", tg) for i, tg in groups], per_target]
            ),
        )
