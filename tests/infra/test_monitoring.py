"""Alarms, the Spot interruption counter, the dashboard, and the metric names shared with the server."""

import json
import math

import pytest
from aws_cdk.assertions import Template

from tests.conftest import metric_stats, single_metric
from tests.infra.test_server_contract import on_cluster
from tests.metric_math import evaluate
from tests.scenarios import scenario_environment

PER_MODEL_ALARMS = [
    "LatencyP95",
    "LatencyP99",
    "Target5xxRate",
    "UnhealthyTargets",
    "TasksBelowDesired",
    "TaskFailures",
]
BUNDLED_SERVER_ALARMS = ["QueueDepth", "RejectedRequests", "GpuMemory", "LowGpuUtilization"]
DEVICE_ALARMS = ("GpuMemory", "LowGpuUtilization")  # the whole GPU's figures: not for a model on a share
VLLM_ALARMS = {
    "vllm_num_requests_waiting": "waiting_requests_scale_out",
    "vllm_kv_cache_usage_perc": "kv_cache_scale_out_percent",
}
# A pool's own alarms, beside a bundled model's (tests/infra/test_model_pool.py).
POOL_ALARMS = ["PoolHitRate", "PoolLoads", "PoolLoadTimeP95", "PoolEvictions", "PoolResidentModels", "PoolFailedLoads"]


def alarms_of(config, model) -> list[str]:
    """The alarms a model has: every model's, then its server's (ours: from our metrics; vLLM: its scale-out
    signals)."""
    if config.server_config(model).vllm is not None:
        return PER_MODEL_ALARMS + list(VLLM_ALARMS)
    pool = POOL_ALARMS if config.server_config(model).pool is not None else []
    return (
        PER_MODEL_ALARMS
        + [a for a in BUNDLED_SERVER_ALARMS if model.gpu_share is None or a not in DEVICE_ALARMS]
        + pool
    )


TOPIC = "NotificationsTopicAE679CBD"


def monitoring_alarms(template):
    return {
        k: a["Properties"]
        for k, a in template.find_resources("AWS::CloudWatch::Alarm").items()
        if k.startswith("Monitoring")
    }


def alarm(template, name):
    key = "Monitoring" + "".join(c for c in name if c.isalnum())
    (found,) = [a for k, a in monitoring_alarms(template).items() if k.startswith(key)]
    return found


def test_every_alarm_exists_and_notifies_the_encrypted_topic(env):
    config, template = env
    alarms = monitoring_alarms(template)
    assert len(alarms) == sum(len(alarms_of(config, model)) for model in config.models) + 2
    for properties in alarms.values():
        assert properties["AlarmActions"] == [{"Ref": "NotificationsTopicAE679CBD"}]
        assert properties["OKActions"] == [{"Ref": "NotificationsTopicAE679CBD"}]
        assert properties["TreatMissingData"] == "notBreaching"
    template.has_resource_properties(
        "AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": ["NotificationsKeyADCFA950", "Arn"]}}
    )


def test_latency_alarms_use_each_models_own_percentile_thresholds(env):
    config, template = env
    for model in config.models:
        p95 = alarm(template, f"{model.name}-LatencyP95")
        p99 = alarm(template, f"{model.name}-LatencyP99")
        thresholds = model.latency_alarm_thresholds()
        target_groups = 2 if model.deployment.shifts_traffic else 1  # the worst of both during and after a deployment
        assert (metric_stats(p95), p95["Threshold"]) == (
            [("AWS/ApplicationELB", "TargetResponseTime", "p95")] * target_groups,
            thresholds.latency_p95_ms / 1000,
        )
        assert (metric_stats(p99), p99["Threshold"]) == (
            [("AWS/ApplicationELB", "TargetResponseTime", "p99")] * target_groups,
            thresholds.latency_p99_ms / 1000,
        )


def test_no_latency_alarm_pages_below_its_models_own_scaling_goal(env, synthesized):
    """Read from the synthesized templates, per model: an alarm on a model's p95 or p99 that trips below the p95 its
    service scales to would page under load the model is sized for (a 500 ms alarm on staging's 20 s LLM)."""
    config, template = env
    stacks = [s for s in synthesized.stack_ids(config.name) if s.startswith("Model-")]
    assert len(stacks) == len(config.models)
    for model in config.models:
        (stack,) = [s for s in stacks if s == f"Model-{model.name}"]
        own = synthesized.template(config.name, stack)["Resources"]
        alarms = template.find_resources("AWS::CloudWatch::Alarm", {"Properties": {"AlarmActions": [{"Ref": TOPIC}]}})
        # request latency only: a pool's load-time p95 (PoolLoadTime) is not a request's
        paging = {
            k: r["Properties"]
            for k, r in alarms.items()
            if k in own
            and any(
                stat in ("p95", "p99") and name != "PoolLoadTime" for _, name, stat in metric_stats(r["Properties"])
            )
        }
        assert len(paging) == 2, (config.name, model.name, sorted(paging))
        for logical_id, properties in paging.items():
            assert properties["Threshold"] * 1000 >= model.scaling.latency_p95_ms, (
                config.name,
                model.name,
                logical_id,
                properties["Threshold"],
            )


def test_the_llm_pages_at_its_own_goal_not_the_encoders(synthesized):
    config = synthesized.stages["staging"].config
    template = Template.from_json(synthesized.inference_template("staging"))
    (llama,) = [m for m in config.models if m.name == "llama-13b"]
    assert llama.scaling.latency_p95_ms == 20_000
    p95, p99 = (alarm(template, f"llama-13b-{name}")["Threshold"] for name in ("LatencyP95", "LatencyP99"))
    assert (p95, p99) == (40.0, 120.0)  # 2 x its 20 s goal, and 3 x that
    assert alarm(template, "minilm-LatencyP95")["Threshold"] == 0.5  # 2 x the encoder's 250 ms goal


def test_a_paging_threshold_below_the_models_goal_is_refused_naming_both_keys():
    from gpu_inference_constructs import LatencyAlarmProps, ModelProps, ModelScalingProps
    from gpu_inference_constructs.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^alarms.latency_p95_ms.*below the model's scaling.latency_p95_ms"):
        ModelProps(
            name="llm",
            version="1",
            scaling=ModelScalingProps(latency_p95_ms=20_000),
            alarms=LatencyAlarmProps(latency_p95_ms=10_000),
        )
    with pytest.raises(ConfigError, match=r"^alarms.latency_p95_ms.*above latency_p99_ms"):
        ModelProps(name="llm", version="1", alarms=LatencyAlarmProps(latency_p95_ms=60_000, latency_p99_ms=50_000))
    model = ModelProps(
        name="llm",
        version="1",
        scaling=ModelScalingProps(latency_p95_ms=20_000),
        alarms=LatencyAlarmProps(latency_p95_ms=25_000),
    )
    assert (model.latency_alarm_thresholds().latency_p95_ms, model.latency_alarm_thresholds().latency_p99_ms) == (
        25_000,
        75_000,
    )


def test_staging_refuses_an_llm_paging_threshold_below_its_goal_naming_the_model_and_both_keys():

    from gpu_inference_constructs.core.errors import ConfigError
    from stacks.config import load_environment

    data = scenario_environment("staging")
    (llama,) = [m for m in data["models"] if m["name"] == "llama-13b"]
    llama["alarms"] = {"latency_p95_ms": 500}
    with pytest.raises(
        ConfigError, match=r"^environment 'staging': models\[2\]\.alarms\.latency_p95_ms.*scaling\.latency_p95_ms"
    ):
        load_environment("staging", data)


def test_the_environment_wide_latency_thresholds_are_refused_with_the_per_model_fix():
    from gpu_inference_constructs import MonitoringProps
    from gpu_inference_constructs.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^latency_p95_ms.*models\[\]\.alarms\.latency_p95_ms"):
        MonitoringProps(latency_p95_ms=500)


def test_error_rates_are_percentages_by_metric_math(env):
    config, template = env
    rates = [(alarm(template, f"{m.name}-Target5xxRate"), config.monitoring.target_5xx_percent) for m in config.models]
    rates.append((alarm(template, "Elb5xxRate"), config.monitoring.elb_5xx_percent))
    for properties, threshold in rates:
        expression = next(m for m in properties["Metrics"] if "Expression" in m)["Expression"]
        assert expression == "IF(FILL(requests, 0) > 0, 100 * FILL(errors, 0) / requests, 0)"
        assert properties["Threshold"] == threshold
        names = sorted({m["MetricStat"]["Metric"]["MetricName"] for m in properties["Metrics"] if "MetricStat" in m})
        assert names in (["HTTPCode_Target_5XX_Count", "RequestCount"], ["HTTPCode_ELB_5XX_Count", "RequestCount"])


def test_tasks_below_desired_compares_container_insights_counts(env):
    config, template = env
    for model in config.models:
        properties = alarm(template, f"{model.name}-TasksBelowDesired")
        assert next(m for m in properties["Metrics"] if "Expression" in m)["Expression"] == "desired - running"
        assert properties["EvaluationPeriods"] == config.monitoring.tasks_below_desired_minutes


@pytest.mark.parametrize(
    ("suffix", "metric", "statistic", "threshold_key", "comparison"),
    [
        ("QueueDepth", "QueueDepth", "Maximum", "queue_depth", "GreaterThanOrEqualToThreshold"),
        (
            "RejectedRequests",
            "RejectedRequests",
            "Sum",
            "rejected_requests_per_minute",
            "GreaterThanOrEqualToThreshold",
        ),
        ("GpuMemory", "GpuMemoryUtilization", "Maximum", "gpu_memory_percent", "GreaterThanOrEqualToThreshold"),
        ("LowGpuUtilization", "GpuUtilization", "Average", "low_gpu_utilization_percent", "LessThanThreshold"),
    ],
)
def test_server_metric_alarms(env, suffix, metric, statistic, threshold_key, comparison):
    config, template = env
    for model in [m for m in config.models if config.server_config(m).vllm is None]:
        if model.gpu_share is not None and suffix in DEVICE_ALARMS:
            assert not [
                k
                for k in monitoring_alarms(template)
                if k.startswith("Monitoring" + f"{model.name}-{suffix}".replace("-", ""))
            ]
            continue
        properties = alarm(template, f"{model.name}-{suffix}")
        namespace, name, stat, dimensions, _ = single_metric(properties)
        assert (namespace, name, stat) == ("GpuInference", metric, statistic)
        assert {d["Name"]: d["Value"] for d in dimensions} == {"Environment": config.name, "ModelName": model.name}
        assert properties["Threshold"] == getattr(config.monitoring, threshold_key)
        assert properties["ComparisonOperator"] == comparison


def test_vllm_models_alarm_when_a_scale_out_signal_stays_high_for_15_minutes(env):
    config, template = env
    for model in [m for m in config.models if config.server_config(m).vllm is not None]:
        for metric, threshold_key in VLLM_ALARMS.items():
            properties = alarm(template, f"{model.name}-{metric}")
            namespace, name, stat, dimensions, _ = single_metric(properties)
            assert (namespace, name, stat) == ("GpuInference", metric, "Maximum")
            assert {d["Name"]: d["Value"] for d in dimensions} == {"Environment": config.name, "ModelName": model.name}
            threshold = getattr(config.server_config(model).vllm, threshold_key)
            assert properties["Threshold"] == (threshold / 100 if threshold_key.endswith("percent") else threshold)
            assert properties["EvaluationPeriods"] == 15
        with pytest.raises(ValueError):
            alarm(template, f"{model.name}-QueueDepth")  # vLLM does not emit our server's metrics


def test_low_gpu_utilization_is_judged_over_hours(env):
    config, template = env
    for model in [m for m in config.models if config.server_config(m).vllm is None and m.gpu_share is None]:
        properties = alarm(template, f"{model.name}-LowGpuUtilization")
        assert (
            single_metric(properties)[4] == 3600
            and properties["EvaluationPeriods"] == config.monitoring.low_gpu_utilization_hours
        )


def test_spot_interruption_warnings_are_counted_and_alarmed(env):
    config, template = env
    (rule_id, rule) = next(
        iter(
            template.find_resources(
                "AWS::Events::Rule", {"Properties": {"EventPattern": {"source": ["aws.ec2"]}}}
            ).items()
        )
    )
    assert rule["Properties"]["EventPattern"] == {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Spot Instance Interruption Warning"],
    }
    properties = alarm(template, "SpotInterruptionStorm")
    namespace, name, _, dimensions, _ = single_metric(properties)
    assert (namespace, name) == ("AWS/Events", "TriggeredRules")
    assert dimensions == [{"Name": "RuleName", "Value": {"Ref": rule_id}}]
    assert properties["Threshold"] == config.monitoring.spot_interruptions_per_15_minutes


def dashboard_body(template) -> str:
    (dashboard,) = template.find_resources("AWS::CloudWatch::Dashboard").values()
    return json.dumps(dashboard["Properties"]["DashboardBody"])


@pytest.mark.parametrize(
    "title",
    [
        "Requests per minute",
        "Latency at the load balancer (s): p50 / p95 / p99",
        "Errors per minute",
        "Server latency (ms): p50 / p95 / p99, queue wait p95",
        "Tasks: running / desired",
        "GPU instances: Spot vs On-Demand",
        "GPU utilisation and memory (%)",
        "Batch size (avg) and queue depth (max)",
        "Shed (503) and timed-out (504) requests",
        "Cost per 1M requests (USD, hourly)",
        "Alarms",
    ],
)
def test_dashboard_has_each_widget(env, title):
    _, template = env
    assert f'\\"title\\":\\"{title}\\"' in dashboard_body(template)


def dashboard_widgets(template) -> list[dict]:
    """The dashboard's widgets, each reference in its body replaced by "<ref>"."""
    (dashboard,) = template.find_resources("AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    text = (
        "".join(part if isinstance(part, str) else "<ref>" for part in body["Fn::Join"][1])
        if isinstance(body, dict)
        else body
    )
    return json.loads(text)["widgets"]


def graph_expressions(template, title) -> list[str]:
    (widget,) = [w for w in dashboard_widgets(template) if w["properties"].get("title") == title]
    return [entry[0]["expression"] for entry in widget["properties"]["metrics"] if isinstance(entry[0], dict)]


def test_dashboard_finds_every_model_by_search_so_it_grows_with_the_models(env):
    """The dashboard lives in the shared stack and references no model stack: each per-model graph is a
    SEARCH over this environment's models, this load balancer's target groups or this cluster's services."""
    config, template = env
    latency = graph_expressions(template, "Latency at the load balancer (s): p50 / p95 / p99")
    assert latency == [
        f'SEARCH(\'{{AWS/ApplicationELB,LoadBalancer,TargetGroup}} MetricName="TargetResponseTime" '
        f"LoadBalancer=\"<ref>\"', '{p}', 60)"
        for p in ("p50", "p95", "p99")
    ]
    server = graph_expressions(template, "Server latency (ms): p50 / p95 / p99, queue wait p95")
    assert (
        server[0] == f'SEARCH(\'{{GpuInference,Environment,ModelName}} MetricName="RequestLatency" '
        f"Environment=\"{config.name}\"', 'p50', 60)"
    )
    tasks = graph_expressions(template, "Tasks: running / desired")
    assert all('ClusterName="<ref>"' in expression for expression in tasks) and len(tasks) == 2


OWN_GPU = "Each model's own GPU: busy (% of time in forwards) and memory it holds (MiB)"


def test_the_dashboard_graphs_each_models_own_gpu_figures_from_its_process(env):
    """Issue 41: on a shared GPU the device's utilisation is every co-tenant's; each model's own busy time and GPU
    memory (the model process's ModelBusyPercent and GpuMemoryUsedMiB, the server's metric_names) are graphed per
    model."""
    config, template = env
    expressions = graph_expressions(template, OWN_GPU)
    assert expressions == [
        f'SEARCH(\'{{GpuInference,Environment,ModelName}} MetricName="{name}" Environment="{config.name}"\', '
        f"'{statistic}', 60)"
        for name, statistic in (("ModelBusyPercent", "Average"), ("GpuMemoryUsedMiB", "Maximum"))
    ]


TASK_START = (
    "Task start (s): server process start to ready, and the model's fetch, load and warm-up in it; with "
    "runtime compile, loaded to every shape compiled (after ready)"
)


def test_the_dashboard_graphs_each_task_start_from_the_servers_start_metrics(env):
    """The bundled server's one document per start (tests/server/test_process.py proves it is written, with these
    names): each phase a SEARCH over this environment's models, its maximum a minute."""
    config, template = env
    from inference_server import facts as server_names

    names = (
        server_names.STARTUP_SECONDS,
        server_names.STARTUP_FETCH_SECONDS,
        server_names.STARTUP_LOAD_SECONDS,
        server_names.STARTUP_WARMUP_SECONDS,
        server_names.STARTUP_COMPILE_SECONDS,
    )
    assert graph_expressions(template, TASK_START) == [
        f'SEARCH(\'{{GpuInference,Environment,ModelName}} MetricName="{name}" Environment="{config.name}"\', '
        "'Maximum', 60)"
        for name in names
    ]


def cost_widget(template) -> dict:
    (widget,) = [
        w for w in dashboard_widgets(template) if w["properties"].get("title") == "Cost per 1M requests (USD, hourly)"
    ]
    return widget


def gpu_cost_expression(config) -> str:
    """Each capacity group's instances at its preferred type's catalog price, Spot at 40 %; the other groups' counts
    FILLed with 0 (a group scaled to zero has no datapoints)."""
    from gpu_inference_constructs.core.instance_catalog import CATALOG

    groups = [("total", config.capacity)] + [
        (f"FILL(total{i}, 0)", group.capacity) for i, group in enumerate(config.capacity_groups.values(), start=1)
    ]
    parts = []
    for total, capacity in groups:
        base, share = capacity.on_demand_base_capacity, capacity.on_demand_percentage_above_base / 100
        price = CATALOG[capacity.instance_types[0]].on_demand_hourly_usd
        on_demand = f"IF({total} > {base}, {base} + CEIL(({total} - {base}) * {share}), {total})"
        parts.append(f"(({on_demand}) * {price} + ({total} - ({on_demand})) * {round(price * 0.4, 5)})")
    return " + ".join(parts)


def root_volume_hourly(capacity) -> float:
    """One instance's gp3 root volume by hand, us-east-1 list prices: $0.08/GiB-month, $0.005 per IOPS-month above
    3,000 (EC2 needs 4 IOPS per provisioned MiB/s), $0.04 per MiB/s-month above 125; 730 hours a month."""
    throughput = capacity.root_volume_throughput_mib_s
    iops = max(3000, -(-throughput * 4 // 1)) if throughput > 125 else 3000
    return round((capacity.root_volume_gib * 0.08 + (iops - 3000) * 0.005 + (throughput - 125) * 0.04) / 730, 6)


def volume_cost_expression(config) -> str:
    groups = [("total", config.capacity)] + [
        (f"FILL(total{i}, 0)", group.capacity) for i, group in enumerate(config.capacity_groups.values(), start=1)
    ]
    return " + ".join(f"{total} * {root_volume_hourly(capacity)}" for total, capacity in groups)


def pool_cost_expression(config) -> str | None:
    """The warm pool's hour (issue 44), by hand: each instance in it bills its root volume, one warming its On-Demand
    price; None for an environment without one."""
    from gpu_inference_constructs.core.instance_catalog import CATALOG

    groups = [config.capacity, *(group.capacity for group in config.capacity_groups.values())]
    terms = [
        f"(FILL(pool{i}, 0) * {root_volume_hourly(c)} + FILL(warming{i}, 0) * "
        f"{CATALOG[c.instance_types[0]].on_demand_hourly_usd})"
        for i, c in enumerate(groups)
        if c.warm_pool is not None
    ]
    return " + ".join(terms) or None


def test_cost_per_million_requests_is_the_whole_bill_gpu_logs_and_load_balancer(env):
    config, template = env
    gpu = gpu_cost_expression(config)
    logs = " + ".join(f"FILL(logbytes{i}, 0)" for i in range(len(config.models)))
    pool = pool_cost_expression(config)
    parts = [
        gpu,
        volume_cost_expression(config),
        *([pool] if pool else []),
        f"({logs}) / 1073741824 * 0.5",
        "(0.0225 + FILL(lcus, 0) * 0.008)",
    ]
    names = (
        "GPU instances",
        "GPU root volumes",
        *(("warm pool",) if pool else ()),
        "CloudWatch Logs ingestion",
        "load balancer",
    )
    metrics = cost_widget(template)["properties"]["metrics"]
    expressions = {
        m[0]["label"]: m[0]["expression"] for m in metrics if isinstance(m[0], dict) and "expression" in m[0]
    }
    (total_label,) = [label for label in expressions if label.startswith("USD per 1M requests, estimate")]
    assert expressions[total_label] == f"IF(requests > 0, ({' + '.join(parts)}) / requests * 1000000, 0)"
    assert "CloudWatch Logs ingestion ($0.5/GB)" in total_label and "ALB ($0.0225/h + $0.008/LCU-h)" in total_label
    assert all(f"{group.capacity.instance_types[0]} at $" in total_label for group in config.capacity_groups.values())
    assert "root volumes (gp3 $0.08/GiB-month" in total_label
    assert ("warm pool (its instances' root volumes; On-Demand while warming)" in total_label) is bool(pool)
    for name, part in zip(names, parts, strict=True):
        assert expressions[f"{name} (estimate)"] == f"IF(requests > 0, ({part}) / requests * 1000000, 0)"
    named = {m[1]: m for m in metrics if isinstance(m[0], str)}
    assert {"GroupInServiceInstances", "RequestCount", "ConsumedLCUs", "IncomingBytes"} <= set(named)
    incoming = [m for m in metrics if isinstance(m[0], str) and m[1] == "IncomingBytes"]
    assert len(incoming) == len(config.models)  # one per model service's log group
    for m in incoming:
        assert m[0] == "AWS/Logs" and m[2] == "LogGroupName" and m[-1]["stat"] == "Sum" and m[-1]["period"] == 3600
    # the names the dashboard prices are the names the model stacks give their log groups (no cross-stack reference)
    named_groups = {
        g["Properties"].get("LogGroupName") for g in template.find_resources("AWS::Logs::LogGroup").values()
    }
    assert {m[3] for m in incoming} == {f"/gpu-inference/{config.name}/{model.name}" for model in config.models}
    assert {m[3] for m in incoming} <= named_groups
    assert named["ConsumedLCUs"][-1].get("stat", "Average") == "Average"  # a dashboard omits its default stat
    assert named["ConsumedLCUs"][-1]["period"] == 3600


def test_a_root_volume_with_provisioned_throughput_costs_its_iops_and_throughput():
    """staging's LLM group: 400 GiB at 1,000 MiB/s (and the 4,000 IOPS it needs) is $32 + $5 + $35 a month; the
    default 100 GiB volume $8; the dashboard and the by-hand helper above agree."""
    from gpu_inference_constructs.capacity.gpu_capacity import GpuCapacityProps
    from gpu_inference_constructs.observability.monitoring import MonitoringProps, root_volume_hourly_usd

    llm = GpuCapacityProps(instance_types=("g5.12xlarge",), root_volume_gib=400, root_volume_throughput_mib_s=1000)
    for capacity, monthly in ((llm, 32 + 5 + 35), (GpuCapacityProps(), 8)):
        assert root_volume_hourly_usd(capacity, MonitoringProps()) == pytest.approx(monthly / 730, abs=1e-6)
        assert root_volume_hourly(capacity) == pytest.approx(monthly / 730, abs=1e-6)
    cheaper = MonitoringProps(gp3_gib_month_usd=0.04, gp3_iops_month_usd=0, gp3_mib_s_month_usd=0)
    assert root_volume_hourly_usd(llm, cheaper) == pytest.approx(16 / 730, abs=1e-6)


def test_cost_prices_are_settings_with_ranges():
    from gpu_inference_constructs.core.errors import ConfigError
    from gpu_inference_constructs.observability.monitoring import MonitoringProps

    assert MonitoringProps(logs_ingestion_usd_per_gb=0.63).logs_ingestion_usd_per_gb == 0.63
    with pytest.raises(ConfigError, match=r"load_balancer_lcu_hourly_usd: -1 .*out of range"):
        MonitoringProps(load_balancer_lcu_hourly_usd=-1)


def test_the_dashboards_cost_agrees_with_the_sizing_advisors_arithmetic(env):
    """At 5 instances, 2M requests an hour, 3 GiB of logs and 12 LCUs, the total equals GPU (the advisor's
    On-Demand/Spot split and prices) + logs + ALB, by hand; the advisor's GPU-only figure for the same fleet is the GPU
    part."""
    from gpu_inference_constructs.sizing import Purchase

    config, template = env
    metrics = cost_widget(template)["properties"]["metrics"]
    expressions = {
        m[0]["label"]: m[0]["expression"] for m in metrics if isinstance(m[0], dict) and "expression" in m[0]
    }
    (total,) = [e for label, e in expressions.items() if label.startswith("USD per 1M requests, estimate")]
    values = {
        "total": 5,
        "requests": 2_000_000,
        "lcus": 12.0,
        "pool0": 2,
        "warming0": 1,
        **{f"logbytes{i}": 3 * 2**30 / len(config.models) for i in range(len(config.models))},
        **{f"total{i}": None for i in range(1, len(config.capacity_groups) + 1)},
    }  # scaled to zero: no data
    purchase = Purchase(
        on_demand_base=config.capacity.on_demand_base_capacity,
        on_demand_percent=config.capacity.on_demand_percentage_above_base,
    )
    on_demand = purchase.on_demand_instances(5)
    gpu_hourly = on_demand * 1.006 + (5 - on_demand) * 0.4024
    volumes_hourly = 5 * root_volume_hourly(config.capacity)
    # With a warm pool (prod): 2 instances in it, one of them warming, On-Demand.
    pool_hourly = 2 * root_volume_hourly(config.capacity) + 1 * 1.006 if config.capacity.warm_pool else 0
    by_hand = (gpu_hourly + volumes_hourly + pool_hourly + 3 * 0.5 + 0.0225 + 12 * 0.008) / 2_000_000 * 1e6
    assert evaluate(total, values) == pytest.approx(by_hand)
    assert evaluate(expressions["GPU instances (estimate)"], values) == pytest.approx(gpu_hourly / 2)
    assert total.startswith("IF(requests > 0, ") and total.endswith(", 0)")  # no requests: 0, not a division by zero


def test_the_dashboards_cost_prices_every_capacity_group_at_its_own_type(synthesized):
    """staging's LLM group (4-GPU g5.12xlarge, all Spot) adds its instances at its own price to the GPU part."""
    from gpu_inference_constructs.core.instance_catalog import CATALOG
    from gpu_inference_constructs.sizing import Purchase

    config = synthesized.stages["staging"].config
    template = Template.from_json(synthesized.inference_template("staging"))
    (group,) = config.capacity_groups.values()
    metrics = cost_widget(template)["properties"]["metrics"]
    expressions = {
        m[0]["label"]: m[0]["expression"] for m in metrics if isinstance(m[0], dict) and "expression" in m[0]
    }
    instances = [m for m in metrics if isinstance(m[0], str) and m[1] == "GroupInServiceInstances"]
    assert len(instances) == 2  # the main group and the LLM group, each its own Auto Scaling group
    values = {"total": 3, "total1": 2, "requests": 1_000_000}
    main, llm = (
        Purchase(on_demand_base=c.on_demand_base_capacity, on_demand_percent=c.on_demand_percentage_above_base)
        for c in (config.capacity, group.capacity)
    )
    main_price, llm_price = (
        CATALOG[c.instance_types[0]].on_demand_hourly_usd for c in (config.capacity, group.capacity)
    )
    by_hand = (
        main.on_demand_instances(3) * main_price
        + (3 - main.on_demand_instances(3)) * main_price * 0.4
        + llm.on_demand_instances(2) * llm_price
        + (2 - llm.on_demand_instances(2)) * llm_price * 0.4
    )
    assert evaluate(expressions["GPU instances (estimate)"], values) == pytest.approx(by_hand)


def test_the_librarys_model_alarms_follow_the_models_goal_without_the_app():
    """A consumer's ModelAlarms in a bare app: no environment config, the thresholds come from the model itself; an
    explicit threshold below its goal is refused at construction."""
    from aws_cdk import aws_sns as sns

    from gpu_inference_constructs import (
        LatencyAlarmThresholds,
        ModelAlarms,
        ModelProps,
        ModelScalingProps,
        ModelService,
        MonitoringProps,
        VllmServer,
    )
    from gpu_inference_constructs.core.errors import ConfigError
    from tests.infra.test_server_contract import IMAGE, stack_with_placement

    stack, parts = stack_with_placement()
    model = ModelProps(
        name="llm", version="1", gpus=4, cpu=45056, memory_mib=163840, scaling=ModelScalingProps(latency_p95_ms=20_000)
    )
    service = ModelService(
        stack, "M", model=model, server=VllmServer(image=IMAGE), capacity=on_cluster(stack, "g5.12xlarge"), **parts
    )
    topic = sns.Topic.from_topic_arn(stack, "Topic", "arn:aws:sns:us-east-1:123456789012:alarms")
    alarms = ModelAlarms(
        stack, "Alarms", environment_name="test", service=service, topic=topic, props=MonitoringProps()
    )
    template = Template.from_stack(stack)
    thresholds = {
        a["Properties"]["AlarmName"]: a["Properties"]["Threshold"]
        for a in template.find_resources("AWS::CloudWatch::Alarm").values()
        if "AlarmName" in a["Properties"]
    }
    assert (thresholds["gpu-inference-test-llm-LatencyP95"], thresholds["gpu-inference-test-llm-LatencyP99"]) == (
        40.0,
        120.0,
    )
    assert alarms.latency_thresholds == LatencyAlarmThresholds(latency_p95_ms=40_000, latency_p99_ms=120_000)
    with pytest.raises(ConfigError, match=r"^latency_thresholds.latency_p95_ms.*scaling.latency_p95_ms"):
        ModelAlarms(
            stack,
            "Low",
            environment_name="test",
            service=service,
            topic=topic,
            props=MonitoringProps(),
            latency_thresholds=LatencyAlarmThresholds(latency_p95_ms=500, latency_p99_ms=1500),
        )


def test_rules_targeting_a_topic_through_topic_target_allow_this_accounts_rules_once():
    """On any encrypted topic of the app (here not a NotificationTopic), however many rules target it: one topic
    policy statement for this account's rules and one key statement."""
    import aws_cdk as cdk
    from aws_cdk import aws_events as events
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_sns as sns

    from gpu_inference_constructs import topic_target
    from gpu_inference_constructs.shared.cdk_interfaces import as_key, as_topic

    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="123456789012", region="us-east-1"))
    topic = sns.Topic(stack, "Topic", master_key=as_key(kms.Key(stack, "Key")))
    for index in range(3):
        events.Rule(
            stack,
            f"Rule{index}",
            event_pattern=events.EventPattern(source=["aws.ec2"]),
            targets=[topic_target(as_topic(topic))],
        )
    template = Template.from_stack(stack)
    (policy,) = template.find_resources("AWS::SNS::TopicPolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert [s.get("Sid") for s in statements] == ["RulesOfThisAccountPublish"]
    assert statements[0]["Condition"]["StringEquals"] == {"aws:SourceAccount": "123456789012"}
    (key,) = template.find_resources("AWS::KMS::Key").values()
    sids = [s.get("Sid") for s in key["Properties"]["KeyPolicy"]["Statement"]]
    assert sids.count("RulesPublishingToThisAccountsTopicsUseTheKey") == 1


# One instance's gp3 root volume per hour at us-east-1's list prices (GiB-month $0.08, IOPS-month above 3,000 $0.005,
# MiB/s-month above 125 $0.04; 730 hours a month), by (GiB, MiB/s): 400 GiB at 1,000 MiB/s (4,000 IOPS) is $32 + $5 +
# $35 a month.
ROOT_VOLUME_USD_PER_HOUR = {(100, 125): 0.010959, (150, 125): 0.016438, (400, 1000): 0.09863}


def test_the_dashboard_prices_each_groups_warm_spare_from_managed_scalings_reservation(env):
    """The spare is (100 - CapacityProviderReservation) % of the group's instances at its purchase mix, with their
    root volumes: at 2 instances with tasks reserving one (reservation 50) it costs half the group's hour; at or
    above 100 nothing."""
    from gpu_inference_constructs.core.instance_catalog import CATALOG

    config, template = env
    (widget,) = [
        w for w in dashboard_widgets(template) if w["properties"].get("title", "").startswith("Warm spare GPU capacity")
    ]
    metrics = widget["properties"]["metrics"]
    spares = [
        m[0] for m in metrics if isinstance(m[0], dict) and "expression" in m[0] and "warm spare" in m[0]["label"]
    ]
    groups = [config.capacity, *(group.capacity for group in config.capacity_groups.values())]
    assert len(spares) == len(groups)
    reservations = [m for m in metrics if isinstance(m[0], str) and m[1] == "CapacityProviderReservation"]
    assert len(reservations) == len(groups) and all(m[0] == "AWS/ECS/ManagedScaling" for m in reservations)
    assert all({"ClusterName", "CapacityProviderName"} <= set(m[2:-1:2]) for m in reservations)
    for index, (spare, capacity) in enumerate(zip(spares, groups, strict=False)):
        assert f"target {capacity.target_capacity_percent} %" in spare["label"]
        price = CATALOG[capacity.instance_types[0]].on_demand_hourly_usd
        base, share = capacity.on_demand_base_capacity, capacity.on_demand_percentage_above_base / 100
        on_demand = min(2, base + math.ceil(max(0, 2 - base) * share)) if 2 > base else 2
        volume_hour = ROOT_VOLUME_USD_PER_HOUR[(capacity.root_volume_gib, capacity.root_volume_throughput_mib_s)]
        group_hour = on_demand * price + (2 - on_demand) * round(price * 0.4, 5) + 2 * volume_hour
        at = {f"total{index}": 2, f"reservation{index}": 50}
        assert evaluate(spare["expression"], at) == pytest.approx(group_hour / 2)
        assert evaluate(spare["expression"], {**at, f"reservation{index}": 130}) == 0  # tasks waiting: no spare


def test_the_warm_spare_graph_prices_the_warm_pool_and_says_its_monthly_cost(env):
    """Issue 44: each group with a warm pool gets a line beside its warm spare: its instances' root volumes (a stopped
    instance bills nothing else) and one warming at the On-Demand price; the label gives the pool's month, by hand
    150 GiB x $0.08 = $12 a stopped instance, $24 for prod's two."""
    config, template = env
    (widget,) = [
        w for w in dashboard_widgets(template) if w["properties"].get("title", "").startswith("Warm spare GPU capacity")
    ]
    lines = [
        m[0] for m in widget["properties"]["metrics"] if isinstance(m[0], dict) and "warm pool" in m[0].get("label", "")
    ]
    pool = config.capacity.warm_pool
    assert len(lines) == (1 if pool else 0) and not any(g.capacity.warm_pool for g in config.capacity_groups.values())
    if pool is None:
        return
    (line,) = lines
    assert f"{pool.min_size} stopped" in line["label"] and "$24.00 a month" in line["label"]
    assert evaluate(line["expression"], {"pool0": 2, "warming0": 0}) == pytest.approx(2 * 150 * 0.08 / 730, abs=1e-4)
    assert evaluate(line["expression"], {"pool0": 2, "warming0": 1}) == pytest.approx(
        2 * 150 * 0.08 / 730 + 1.006, abs=1e-4
    )
    assert evaluate(line["expression"], {"pool0": None, "warming0": None}) == 0  # no datapoints yet: nothing
    named = {m[1] for m in widget["properties"]["metrics"] if isinstance(m[0], str)}
    assert {"WarmPoolTotalCapacity", "WarmPoolPendingCapacity"} <= named


def test_hourly_price_usd_prices_the_first_groups_instances_only(tmp_path):
    """``monitoring.hourly_price_usd`` (a negotiated rate, say) is the first capacity group's On-Demand price; another
    group (staging's llm) keeps its preferred type's catalog price, in the warm spare as in the cost per 1M requests."""
    from gpu_inference_constructs.core.instance_catalog import CATALOG
    from tests.conftest import scenario_context, synthesize

    data = scenario_environment("staging")
    data["monitoring"] = {**data.get("monitoring", {}), "hourly_price_usd": 0.5}
    synthesized = synthesize({**scenario_context(), "environments": {"staging": data}}, tmp_path)
    widgets = dashboard_widgets(Template.from_json(synthesized.template("staging", "Inference")))
    (spare,) = [w for w in widgets if w["properties"].get("title", "").startswith("Warm spare GPU capacity")]
    first, llm = [m[0]["expression"] for m in spare["properties"]["metrics"] if isinstance(m[0], dict)]
    llm_price = CATALOG["g5.12xlarge"].on_demand_hourly_usd
    assert "* 0.5 +" in first and f"* {llm_price} +" not in first
    assert f"* {llm_price} +" in llm and "* 0.5 +" not in llm
    costs = [w for w in widgets if "per 1M requests" in json.dumps(w)]
    assert costs and all("* 0.5 +" in json.dumps(w) and f"* {llm_price} +" in json.dumps(w) for w in costs)


def test_the_dashboard_breaks_each_models_latency_into_queue_model_and_request(env):
    """Issue 45: per model, the time queued until its batch formed, its batch's forward pass and the whole request
    (the server's QueueWait, InferenceTime and RequestLatency), with the batch size beside them."""
    from gpu_inference_constructs.observability.environment_dashboard import LATENCY_BREAKDOWN_TITLE

    config, template = env
    expressions = graph_expressions(template, LATENCY_BREAKDOWN_TITLE)
    assert expressions == [
        f'SEARCH(\'{{GpuInference,Environment,ModelName}} MetricName="{name}" Environment="{config.name}"\', '
        "'Average', 60)"
        for name in ("QueueWait", "InferenceTime", "RequestLatency", "BatchSize")
    ]
