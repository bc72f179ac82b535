"""Scaling: every policy and schedule per model service; predictive on the service, never on the GPU group."""

import json

import pytest

from tests.conftest import metric_stats, single_metric


def targets_by_model(template):
    return {
        logical_id.split("Service")[0].removeprefix("Model"): (logical_id, target)
        for logical_id, target in template.find_resources("AWS::ApplicationAutoScaling::ScalableTarget").items()
    }


def logical(model_name):
    return model_name.replace("-", "")


def policies_of(template, target_id, policy_type):
    return [
        p["Properties"]
        for p in template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").values()
        if p["Properties"].get("ScalingTargetId") == {"Ref": target_id} and p["Properties"]["PolicyType"] == policy_type
    ]


def test_each_service_scales_between_its_min_and_max_tasks(env):
    config, template = env
    targets = targets_by_model(template)
    assert sorted(targets) == sorted(logical(m.name) for m in config.models)
    for model in config.models:
        _, target = targets[logical(model.name)]
        properties = target["Properties"]
        assert (properties["MinCapacity"], properties["MaxCapacity"]) == (model.min_tasks, model.max_tasks)
        assert properties["ScalableDimension"] == "ecs:service:DesiredCount"


def test_target_tracking_on_requests_per_target_with_configured_cooldowns(env):
    config, template = env
    targets = targets_by_model(template)
    for model in [m for m in config.models if config.server_config(m).vllm is None]:
        (policy,) = policies_of(template, targets[logical(model.name)][0], "TargetTrackingScaling")
        tracking = policy["TargetTrackingScalingPolicyConfiguration"]
        if model.deployment.shifts_traffic:
            # Either target group may be production: requests over healthy targets of both.
            metrics = tracking["CustomizedMetricSpecification"]["Metrics"]
            (expression,) = [m for m in metrics if "Expression" in m]
            assert expression["ReturnData"] and expression["Expression"].startswith(
                "IF((FILL(healthy_0, 0) + FILL(healthy_1, 0)) > 0"
            )
            stats = sorted(
                (m["Id"], m["MetricStat"]["Metric"]["MetricName"], m["MetricStat"]["Stat"])
                for m in metrics
                if "MetricStat" in m
            )
            assert stats == [
                ("healthy_0", "HealthyHostCount", "Average"),
                ("healthy_1", "HealthyHostCount", "Average"),
                ("requests_0", "RequestCount", "Sum"),
                ("requests_1", "RequestCount", "Sum"),
            ]
            groups = {
                d["Value"]["Fn::GetAtt"][0]
                for m in metrics
                if "MetricStat" in m
                for d in m["MetricStat"]["Metric"]["Dimensions"]
                if d["Name"] == "TargetGroup"
            }
            assert len(groups) == 2
        else:
            assert tracking["PredefinedMetricSpecification"]["PredefinedMetricType"] == "ALBRequestCountPerTarget"
        assert tracking["TargetValue"] == model.scaling.requests_per_target_per_minute
        assert (tracking["ScaleOutCooldown"], tracking["ScaleInCooldown"]) == (
            model.scaling.scale_out_cooldown_seconds,
            model.scaling.scale_in_cooldown_seconds,
        )


def test_vllm_tracks_running_requests_per_task_not_requests_per_target(env):
    config, template = env
    targets = targets_by_model(template)
    for model in [m for m in config.models if config.server_config(m).vllm is not None]:
        (policy,) = policies_of(template, targets[logical(model.name)][0], "TargetTrackingScaling")
        tracking = policy["TargetTrackingScalingPolicyConfiguration"]
        metric = tracking["CustomizedMetricSpecification"]
        assert (metric["Namespace"], metric["MetricName"], metric["Statistic"]) == (
            "GpuInference",
            "vllm_num_requests_running",
            "Average",
        )
        assert {d["Name"]: d["Value"] for d in metric["Dimensions"]} == {
            "Environment": config.name,
            "ModelName": model.name,
        }
        assert (
            tracking["TargetValue"]
            == config.server_config(model).vllm.running_target
            == (config.server_config(model).vllm.max_num_seqs * 3) // 4
        )
        assert (tracking["ScaleOutCooldown"], tracking["ScaleInCooldown"]) == (
            model.scaling.scale_out_cooldown_seconds,
            model.scaling.scale_in_cooldown_seconds,
        )


def step_alarm(template, policy_logical_id):
    (alarm,) = [
        a["Properties"]
        for a in template.find_resources("AWS::CloudWatch::Alarm").values()
        if {"Ref": policy_logical_id} in a["Properties"].get("AlarmActions", [])
    ]
    return alarm


def step_policies(template, model_name):
    return {
        logical_id.split("TaskCountTarget")[1].split("UpperPolicy")[0]: (logical_id, p["Properties"])
        for logical_id, p in template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").items()
        if logical_id.startswith(f"Model{logical(model_name)}") and p["Properties"]["PolicyType"] == "StepScaling"
    }


def test_step_scaling_only_adds_tasks_on_latency_gpu_queue_and_cpu_with_growing_queue(env):
    config, template = env
    for model in [m for m in config.models if config.server_config(m).vllm is None]:
        steps = step_policies(template, model.name)
        # A model on a share never scales on its GPU's utilisation: that is every co-tenant's.
        gpu = [] if model.gpu_share is not None else ["GpuUtilization"]
        assert sorted(steps) == sorted(["CpuAndQueueGrowing", *gpu, "LatencyP95", "QueueBacklog"])
        # +2 at twice the threshold only where the metric can get there (a percentage, an indicator of 0 or 1 cannot).
        expected = {
            "LatencyP95": [1, 2],
            "QueueBacklog": [1, 2],
            "CpuAndQueueGrowing": [1],
            "GpuUtilization": [1, 2]
            if config.server_config(model).bundled.scaling.gpu_utilization_percent * 2 < 100
            else [1],
        }
        for name, (_logical_id, policy) in steps.items():
            adjustments = [s["ScalingAdjustment"] for s in policy["StepScalingPolicyConfiguration"]["StepAdjustments"]]
            assert (
                adjustments == expected[name]
                and policy["StepScalingPolicyConfiguration"]["Cooldown"] == model.scaling.scale_out_cooldown_seconds
            )

        latency = step_alarm(template, steps["LatencyP95"][0])
        assert {stat[1:] for stat in metric_stats(latency)} == {("TargetResponseTime", "p95")}
        assert latency["Threshold"] == model.scaling.latency_p95_ms / 1000
        if model.gpu_share is None:
            gpu_alarm = step_alarm(template, steps["GpuUtilization"][0])
            namespace, name, _, dimensions, _ = single_metric(gpu_alarm)
            assert (namespace, name, gpu_alarm["Threshold"]) == (
                "GpuInference",
                "GpuUtilization",
                config.server_config(model).bundled.scaling.gpu_utilization_percent,
            )
            assert {d["Name"]: d["Value"] for d in dimensions} == {"Environment": config.name, "ModelName": model.name}
        queue = step_alarm(template, steps["QueueBacklog"][0])
        namespace, name, statistic, dimensions, period = single_metric(queue)
        assert (namespace, name, statistic, queue["Threshold"]) == (
            "GpuInference",
            "QueueDepth",
            "Maximum",
            config.server_config(model).bundled.scaling.queue_depth_scale_out,
        )
        # Seconds, not minutes: a 10 s period needs the metric stored at 1-second resolution (the server's EMF
        # StorageResolution 1, tests/server/front/test_api.py); 3 of 3 datapoints.
        assert (period, queue["EvaluationPeriods"], queue["DatapointsToAlarm"]) == (10, 3, 3)


def test_queue_signal_periods_are_ones_cloudwatch_accepts():
    from gpu_inference_constructs.core.errors import ConfigError
    from gpu_inference_constructs.servers.bundled_signals import BundledScalingProps

    assert BundledScalingProps(queue_signal_period_seconds=30).queue_signal_period_seconds == 30
    for bad in (15, 45, 0):
        with pytest.raises(ConfigError, match=r"queue_signal_period_seconds.*allowed 10, 20, 30"):
            BundledScalingProps(queue_signal_period_seconds=bad)


def test_vllm_adds_tasks_on_latency_waiting_requests_and_kv_cache(env):
    config, template = env
    for model in [m for m in config.models if config.server_config(m).vllm is not None]:
        steps = step_policies(template, model.name)
        assert sorted(steps) == ["LatencyP95", "ScaleOutvllmkvcacheusageperc", "ScaleOutvllmnumrequestswaiting"]
        for name, (_logical_id, policy) in steps.items():
            adjustments = [s["ScalingAdjustment"] for s in policy["StepScalingPolicyConfiguration"]["StepAdjustments"]]
            # KV-cache use is a fraction: no +2 step at twice 0.9 (tests below: every step is reachable).
            assert adjustments == (
                [1]
                if name == "ScaleOutvllmkvcacheusageperc"
                and config.server_config(model).vllm.kv_cache_scale_out_percent >= 50
                else [1, 2]
            )
        waiting = step_alarm(template, steps["ScaleOutvllmnumrequestswaiting"][0])
        assert single_metric(waiting)[:3] == ("GpuInference", "vllm_num_requests_waiting", "Maximum")
        assert waiting["Threshold"] == config.server_config(model).vllm.waiting_requests_scale_out
        kv_cache = step_alarm(template, steps["ScaleOutvllmkvcacheusageperc"][0])
        assert single_metric(kv_cache)[:3] == ("GpuInference", "vllm_kv_cache_usage_perc", "Maximum")
        assert kv_cache["Threshold"] == config.server_config(model).vllm.kv_cache_scale_out_percent / 100, (
            "vLLM reports KV-cache use as a fraction"
        )
        latency = step_alarm(template, steps["LatencyP95"][0])
        assert '"MetricName": "TargetResponseTime"' in json.dumps(latency) and '"p95"' in json.dumps(latency)
        assert latency["Threshold"] == model.scaling.latency_p95_ms / 1000


def test_cpu_and_growing_queue_is_one_metric_math_alarm(env):
    config, template = env
    for model in [m for m in config.models if config.server_config(m).vllm is None]:
        alarm = step_alarm(template, step_policies(template, model.name)["CpuAndQueueGrowing"][0])
        expression = next(m for m in alarm["Metrics"] if "Expression" in m)["Expression"]
        assert (
            expression
            == f"IF(cpu > {config.server_config(model).bundled.scaling.cpu_percent} AND DIFF(queue) > 0, 1, 0)"
        )
        named = {m["Id"]: m["MetricStat"]["Metric"]["MetricName"] for m in alarm["Metrics"] if "MetricStat" in m}
        assert named == {"cpu": "CPUUtilization", "queue": "QueueDepth"}
        assert alarm["EvaluationPeriods"] == 3, "a short CPU spike alone does not scale"


def test_schedules_apply_to_every_service_with_time_zones(env):
    config, template = env
    for model in config.models:
        _, target = targets_by_model(template)[logical(model.name)]
        actions = target["Properties"].get("ScheduledActions", [])
        assert [a["ScheduledActionName"] for a in actions] == [f"Schedule-{s.name}" for s in config.scaling.schedules]
        for action, schedule in zip(actions, config.scaling.schedules, strict=False):
            assert action["Schedule"] == f"cron({schedule.cron})" and action["Timezone"] == schedule.time_zone
            expected_min = model.min_tasks if schedule.min_tasks is None else schedule.min_tasks
            assert action["ScalableTargetAction"]["MinCapacity"] == expected_min


def test_dev_scales_to_zero_on_nights_and_weekends(synthesized):
    dev = synthesized.stages["dev"].config
    off = [s for s in dev.scaling.schedules if s.max_tasks == 0]
    assert off and off[0].cron.endswith("MON-FRI *") and (off[0].min_tasks, off[0].max_tasks) == (0, 0)
    assert dev.capacity.min_capacity == 0


def test_predictive_scaling_sits_on_each_service_target(env):
    config, template = env
    targets = targets_by_model(template)
    for model in config.models:
        policies = policies_of(template, targets[logical(model.name)][0], "PredictiveScaling")
        if config.scaling.predictive.mode == "off":
            assert policies == []
            continue
        (policy,) = policies
        predictive = policy["PredictiveScalingPolicyConfiguration"]
        assert predictive["Mode"] == config.scaling.predictive.mode
        assert predictive["SchedulingBufferTime"] == config.scaling.predictive.scheduling_buffer_seconds
        (spec,) = predictive["MetricSpecifications"]
        assert spec["TargetValue"] == model.scaling.requests_per_target_per_minute
        if not model.deployment.shifts_traffic:
            assert spec["PredefinedMetricPairSpecification"]["PredefinedMetricType"] == "ALBRequestCount"
            continue
        # ALBRequestCount over both target groups, so the forecast's history survives deployments moving production.
        load = spec["CustomizedLoadMetricSpecification"]["MetricDataQueries"]
        scaling = spec["CustomizedScalingMetricSpecification"]["MetricDataQueries"]
        assert [q["Expression"] for q in load if q.get("ReturnData")] == ["FILL(requests_0, 0) + FILL(requests_1, 0)"]
        assert [q["Id"] for q in scaling if q.get("ReturnData")] == ["requests_per_target"]
        for queries in (load, scaling):
            groups = {
                d["Value"]["Fn::GetAtt"][0]
                for q in queries
                if "MetricStat" in q
                for d in q["MetricStat"]["Metric"]["Dimensions"]
                if d["Name"] == "TargetGroup"
            }
            assert len(groups) == 2


def test_predictive_modes_per_environment(synthesized):
    modes = {name: stage.config.scaling.predictive.mode for name, stage in synthesized.stages.items()}
    assert modes == {"dev": "off", "staging": "ForecastOnly", "prod": "ForecastAndScale"}


def test_no_scaling_policy_targets_the_gpu_auto_scaling_group(env):
    _, template = env
    template.resource_count_is("AWS::AutoScaling::ScalingPolicy", 0)
    for target in template.find_resources("AWS::ApplicationAutoScaling::ScalableTarget").values():
        assert target["Properties"]["ServiceNamespace"] == "ecs"


def test_group_schedules_raise_only_the_minimum(env):
    config, template = env
    actions = template.find_resources("AWS::AutoScaling::ScheduledAction")
    assert len(actions) == len(config.scaling.capacity_prewarm)
    for action in actions.values():
        properties = action["Properties"]
        assert "DesiredCapacity" not in properties and "MaxSize" not in properties
        assert "MinSize" in properties and "TimeZone" in properties


# The most each step-scaled metric can be: vLLM's KV-cache use is a fraction, GPU utilisation a percentage, and
# "CPU high and queue growing" an IF(...) of 1 or 0. Latency and waiting requests have no ceiling.
STEP_METRIC_MAXIMUM = {
    "kvcacheusageperc": 1,
    "GpuUtilization": 100,
    "CpuAndQueueGrowing": 1,
    "LatencyP95": None,
    "numrequestswaiting": None,
    "QueueBacklog": None,
}  # the queue's bound is each model's max_queue_size (well above 2 x 16)


def unreachable_steps(template: dict) -> list[str]:
    """Step adjustments whose lower bound (alarm threshold + MetricIntervalLowerBound) the metric can never reach."""
    resources = template["Resources"]
    thresholds = {
        action["Ref"]: alarm["Properties"]["Threshold"]
        for alarm in resources.values()
        if alarm["Type"] == "AWS::CloudWatch::Alarm"
        for action in alarm["Properties"].get("AlarmActions", [])
        if isinstance(action, dict) and "Ref" in action
    }
    found = []
    for logical_id, policy in resources.items():
        if (
            policy["Type"] != "AWS::ApplicationAutoScaling::ScalingPolicy"
            or policy["Properties"].get("PolicyType") != "StepScaling"
        ):
            continue
        (kind,) = [k for k in STEP_METRIC_MAXIMUM if k in logical_id]  # every step policy's metric is classified
        maximum = STEP_METRIC_MAXIMUM[kind]
        for step in policy["Properties"]["StepScalingPolicyConfiguration"]["StepAdjustments"]:
            lower = thresholds[logical_id] + step.get("MetricIntervalLowerBound", 0)
            if maximum is not None and lower > maximum:
                found.append(f"{logical_id}: +{step['ScalingAdjustment']} at {lower:g} > {maximum}")
    return found


def test_every_scale_out_step_is_reachable_by_its_metric(env):
    """The KV-cache policy had a +2 step at 1.8 of a 0-1 metric; GPU utilisation one at 170 %."""
    config, template = env
    merged = template.to_json()
    assert sum(
        1 for r in merged["Resources"].values() if r["Properties"].get("PolicyType") == "StepScaling"
    ) >= 2 * len(config.models)
    assert unreachable_steps(merged) == []


def test_the_walk_finds_a_planted_unreachable_step():
    template = {
        "Resources": {
            "Alarm": {
                "Type": "AWS::CloudWatch::Alarm",
                "Properties": {"Threshold": 0.9, "AlarmActions": [{"Ref": "ScaleOutvllmkvcacheusagepercPolicy"}]},
            },
            "ScaleOutvllmkvcacheusagepercPolicy": {
                "Type": "AWS::ApplicationAutoScaling::ScalingPolicy",
                "Properties": {
                    "PolicyType": "StepScaling",
                    "StepScalingPolicyConfiguration": {
                        "StepAdjustments": [
                            {"MetricIntervalLowerBound": 0, "MetricIntervalUpperBound": 0.9, "ScalingAdjustment": 1},
                            {"MetricIntervalLowerBound": 0.9, "ScalingAdjustment": 2},
                        ]
                    },
                },
            },
        }
    }
    assert unreachable_steps(template) == ["ScaleOutvllmkvcacheusagepercPolicy: +2 at 1.8 > 1"]


def forecast_capacity(spec: dict, requests_per_minute: float, healthy_targets: int, period: int) -> float:
    """The capacity predictive scaling plans for a steady ``requests_per_minute``, read at ``period`` seconds.

    It reads the policy's queries at a period of its choosing and sums the load's points into the forecast's hours
    (Application Auto Scaling's custom-metric guide; the Scaling Plans reference: "sums up all the metric data points
    that occurred within each hour"). From the history it learns what the scaling metric is per unit of capacity for
    an hour's load, and plans the capacity at which the scaling metric meets the target."""
    from tests.metric_math import evaluate

    per_period = requests_per_minute * period / 60
    values = {
        "requests_0": per_period * 0.7,
        "requests_1": per_period * 0.3,
        "healthy_0": healthy_targets,
        "healthy_1": 0,
    }
    queries = spec["CustomizedScalingMetricSpecification"]["MetricDataQueries"]
    (scaling,) = [q["Expression"] for q in queries if q.get("ReturnData")]
    periods = {q["Id"]: period for q in queries if "MetricStat" in q}
    scaling_metric = evaluate(scaling, values, periods)
    hourly_load = per_period * 3600 / period
    per_capacity_per_load = scaling_metric * healthy_targets / hourly_load
    return per_capacity_per_load * hourly_load / spec["TargetValue"]


def prod_two_group_predictive_spec(synthesized) -> tuple[str, dict]:
    """prod's predictive mode and the metric specification of a model deployed by a canary (two target groups)."""
    template = synthesized.inference_template("prod")
    policies = [
        r["Properties"]["PredictiveScalingPolicyConfiguration"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::ApplicationAutoScaling::ScalingPolicy"
        and r["Properties"]["PolicyType"] == "PredictiveScaling"
    ]
    specs = [
        (policy["Mode"], spec)
        for policy in policies
        for spec in policy["MetricSpecifications"]
        if "CustomizedScalingMetricSpecification" in spec
    ]
    assert specs, "prod has a model deployed by a canary"
    return specs[0]


@pytest.mark.parametrize("period", [60, 300, 3600])
def test_the_predictive_forecast_over_both_target_groups_plans_what_the_per_minute_target_means(synthesized, period):
    """prod runs ForecastAndScale on a canary's two target groups: at 6,000 requests a minute and a target of N
    requests per target per minute, the plan is 6,000 / N tasks, at any period the service reads the queries at."""
    mode, spec = prod_two_group_predictive_spec(synthesized)
    assert mode == "ForecastAndScale"
    assert forecast_capacity(spec, 6000, healthy_targets=3, period=period) == pytest.approx(6000 / spec["TargetValue"])


def test_the_forecast_model_sees_a_scaling_metric_that_is_not_per_minute(synthesized):
    """The twin: the expression before the fix (requests per healthy target per period) plans 60 x at an hourly
    period."""
    _, spec = prod_two_group_predictive_spec(synthesized)
    for query in spec["CustomizedScalingMetricSpecification"]["MetricDataQueries"]:
        if query.get("ReturnData"):
            query["Expression"] = query["Expression"].split(" * 60 / PERIOD")[0]
    assert forecast_capacity(spec, 6000, 3, period=3600) == pytest.approx(60 * 6000 / spec["TargetValue"])
