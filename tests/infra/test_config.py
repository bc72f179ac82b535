"""Bad configuration fails before any construct is built, naming the environment, key and fix."""

import copy

import pytest

from gpu_inference_constructs.core.errors import ConfigError
from stacks.config import load_environment, load_environments
from tests.conftest import scenario_context
from tests.scenarios import scenario_environment

BASE = scenario_environment("dev")


def plain_http_from_anywhere():
    """dev as it was before issue 26: plain HTTP, internet-facing, open to 0.0.0.0/0."""
    data = with_change("load_balancer.certificate_arn", DELETE)
    data["load_balancer"]["allow_http"] = True
    return data


def with_change(path: str, value):
    """A copy of the dev config with ``path`` (dotted; list indexes as numbers) set, or removed if value is DELETE."""
    data = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


class _Delete:
    """Marks a key to remove; its repr is stable so every xdist worker collects the same test ids."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()

BAD_CONFIGS = [
    ("account", "12345", r"^environment 'dev': account: '12345' .*12-digit"),
    ("region", "mars-1", r"^environment 'dev': region: 'mars-1' .*AWS region"),
    ("region", DELETE, r"^environment 'dev': region: .*missing"),
    ("colour", "blue", r"^environment 'dev': colour: unknown key.*allowed.*network"),
    ("network.vpc_cidr", "10.0.0.300/16", r"network\.vpc_cidr: '10\.0\.0\.300/16' .*CIDR"),
    ("network.vpc_cidr", "10.0.0.1/16", r"network\.vpc_cidr: .*host bits"),
    ("network.vpc_cidr", "10.0.0.0/8", r"network\.vpc_cidr: '10\.0\.0\.0/8'.*/16 and /24"),
    ("network.max_azs", 0, r"network\.max_azs: 0 .*1 to 6"),
    ("network.max_azs", "2", r"network\.max_azs: .*whole number"),
    ("network.max_azs", 4, r"network\.availability_zone_ids: .*max_azs is 4"),
    (
        "network.availability_zone_ids",
        ["usw2-az1", "usw2-az2"],
        r"network\.availability_zone_ids: \['usw2-az1', 'usw2-az2'\] .*region 'us-east-1'",
    ),
    (
        "network.availability_zone_ids",
        ["use1-az1", "use1az2"],
        r"network\.availability_zone_ids: \['use1az2'\] .*short code",
    ),
    (
        "network.availability_zones",
        ["us-east-1a", "us-east-1b"],
        r"network\.availability_zone_ids: .*drop availability_zones",
    ),
    ("network.nat_gateways", 3, r"network\.nat_gateways: 3 .*max_azs \(2\)"),
    ("network.interface_endpoints", ["ecr.api", "ecr.dockr"], r"network\.interface_endpoints: .*\['ecr\.dockr'\]"),
    ("network.flow_log_retention_days", 31, r"network\.flow_log_retention_days: 31 .*allowed days: 1, 3"),
    ("network.flow_logs", True, r"network\.flow_logs: unknown key"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD_CONFIGS, ids=[f"{p}={v!r}" for p, v, _ in BAD_CONFIGS])
def test_bad_config_is_refused_with_a_message_naming_the_key(path, value, message):
    with pytest.raises(ConfigError, match=message):
        load_environment("dev", with_change(path, value))


def test_unknown_environment_is_refused():
    with pytest.raises(ConfigError, match=r"unknown environment 'qa'.*defined: dev"):
        load_environments(scenario_context(), only="qa")


def test_environment_names_are_checked():
    with pytest.raises(ConfigError, match=r"environment 'Prod!'"):
        load_environment("Prod!", BASE)


def test_missing_environments_block_is_refused():
    with pytest.raises(ConfigError, match=r"^environments: .*object"):
        load_environments({})


BAD_CAPACITY = [
    ("capacity.instance_types", ["g5.xlarg"], r"capacity\.instance_types\[0\]: 'g5\.xlarg' .*known: g4dn\.12xlarge"),
    (
        "capacity.instance_types",
        ["g5.xlarge", "m5.xlarge"],
        r"capacity\.instance_types\[1\]: 'm5\.xlarge' .*GPU instance type",
    ),
    ("capacity.instance_types", ["g6e.xlarge"], None),  # us-east-1 offers g6e: accepted
    (
        "capacity.instance_types",
        ["g5.xlarge", "g4dn.2xlarge"],
        r"capacity\.instance_types\[1\]: g4dn\.2xlarge .*shape.*g5\.xlarge",
    ),
    ("capacity.instance_types", [], r"capacity\.instance_types: .*at least one"),
    ("capacity.instance_types", ["g5.xlarge", "g5.xlarge"], r"capacity\.instance_types: .*repeats"),
    ("capacity.instance_weights", {"g5.xlarge": 1, "g4dn.2xlarge": 2}, r"capacity\.instance_weights: .*weighting"),
    ("capacity.on_demand_base_capacity", 9, r"capacity\.on_demand_base_capacity: 9 .*max_capacity 8"),
    ("capacity.on_demand_percentage_above_base", 150, r"capacity\.on_demand_percentage_above_base: 150 .*0 to 100"),
    ("capacity.min_capacity", 9, r"capacity\.min_capacity: 9 .*max_capacity 8"),
    ("capacity.target_capacity_percent", 0, r"capacity\.target_capacity_percent: 0 .*1 to 100"),
    ("capacity.root_volume_gib", 8, r"capacity\.root_volume_gib: 8 .*30 to 16384"),
    ("capacity.root_volume_throughput_mib_s", 2000, r"capacity\.root_volume_throughput_mib_s: 2000 .*125 to 1000"),
    ("capacity.managed_termination_protection", "yes", r"capacity\.managed_termination_protection: .*true or false"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD_CAPACITY, ids=[f"{p}={v!r}" for p, v, _ in BAD_CAPACITY])
def test_bad_capacity_config_is_refused(path, value, message):
    if message is None:
        load_environment("dev", with_change(path, value))
        return
    with pytest.raises(ConfigError, match=rf"^environment 'dev': {message}"):
        load_environment("dev", with_change(path, value))


def test_an_instance_type_the_catalog_does_not_list_in_the_region_loads():
    """The catalog's region table is behind AWS: GpuCapacity warns at synth (test_team_scenarios), the loader does not
    refuse."""
    data = with_change("region", "eu-west-3")
    data["network"]["availability_zone_ids"] = ["euw3-az1", "euw3-az2"]
    data["load_balancer"]["certificate_arn"] = data["load_balancer"]["certificate_arn"].replace(
        "us-east-1", "eu-west-3"
    )
    assert load_environment("dev", data).region == "eu-west-3"


def test_an_unknown_instance_type_name_is_still_refused():
    with pytest.raises(
        ConfigError, match=r"^environment 'dev': capacity\.instance_types\[0\]: 'g9\.xlarge' .*GPU instance type"
    ):
        load_environment("dev", with_change("capacity.instance_types", ["g9.xlarge"]))


def many_models(count: int, max_tasks: int = 2, **model_keys):
    """The dev config serving ``count`` copies of its first model (and a group big enough for them)."""
    data = copy.deepcopy(BASE)
    data["models"] = [
        {**data["models"][0], "name": f"model-{index}", "max_tasks": max_tasks, **model_keys} for index in range(count)
    ]
    data["capacity"]["max_capacity"] = 10_000
    return data


def model_change(index: int, key: str, value):
    return with_change(f"models.{index}.{key}", value)


BAD_SERVICE = [
    (model_change(1, "name", "minilm"), r"models\[1\]\.name: 'minilm' .*unique"),
    (model_change(0, "name", "MiniLM"), r"models\[0\]\.name: 'MiniLM' .*URL-safe"),
    (model_change(0, "name", "mini/lm"), r"models\[0\]\.name: 'mini/lm' .*URL-safe"),
    (model_change(0, "memory_mib", 16384), r"models\[0\]\.memory_mib: 16512 MiB .*at most 14745 MiB"),
    (model_change(0, "cpu", 4096), r"models\[0\]\.cpu: 4160 .*g5\.xlarge"),
    (
        model_change(0, "task", "text-generation"),
        r"models\[0\]\.task: 'text-generation' .*use one of: .*text-classification",
    ),
    (model_change(0, "min_tasks", 5), r"models\[0\]\.min_tasks: 5 .*max_tasks \(2\)"),
    (model_change(0, "min_tasks", 0), r"models\[0\]\.min_tasks: 0 .*set min_tasks to at least 1"),
    (
        with_change("capacity.max_capacity", 2),
        r"capacity\.max_capacity: 2 .*raise max_capacity to at least 4",
    ),  # dev's pool counts
    (model_change(0, "max_batch_wait_ms", 50.5), r"models\[0\]\.max_batch_wait_ms: .*whole number"),
    (
        model_change(0, "environment", {"MODEL_URI": "s3://elsewhere/"}),
        r"models\[0\]\.environment: \['MODEL_URI'\] .*own keys",
    ),
    (model_change(0, "environment", {"WORKERS": "0"}), r"models\[0\]\.environment\.WORKERS: '0' .*1 to 256"),
    (with_change("models", []), r"models: .*at least one model"),
    (with_change("load_balancer.certificate_arn", DELETE), r"load_balancer\.certificate_arn: .*allow_http"),
    (
        plain_http_from_anywhere(),
        r"load_balancer\.allow_http: .*set certificate_arn .*narrow ingress_cidrs .*internet_facing: false",
    ),
    (
        with_change("load_balancer.certificate_arn", "arn:aws:acm:eu-west-1:111111111111:certificate/abc"),
        r"load_balancer\.certificate_arn: .*region 'us-east-1'",
    ),
    (
        with_change("load_balancer.certificate_arn", "my-cert"),
        r"load_balancer\.certificate_arn: 'my-cert' .*ACM certificate ARN",
    ),
    (
        with_change("load_balancer.ingress_cidrs", ["10.0.0.0/33"]),
        r"load_balancer\.ingress_cidrs\[0\]: '10\.0\.0\.0/33' .*CIDR",
    ),
    (
        with_change("load_balancer.waf_rate_limit_per_5_minutes", 11999),
        r"load_balancer\.waf_rate_limit_per_5_minutes: 11999 .*set at least 12000",
    ),
    (many_models(101), r"models\[100\]\.load_balancer: .*101 listener rules.*set models\[100\]\.load_balancer: 2"),
    (
        many_models(51, deployment={"strategy": "blue_green"}),
        r"models\[50\]\.load_balancer: .*102 target groups.*quota of 100",
    ),
    (many_models(100, max_tasks=10), r"models\[99\]\.load_balancer: .*1010 targets.*quota of 1000"),
    (model_change(2, "load_balancer", 3), r"models: .*load balancer 2.*without gaps"),
    (model_change(0, "load_balancer", 21), r"models\[0\]\.load_balancer: 21 .*1 to 20"),
    (with_change("service.keep_alive_seconds", 60), r"service\.keep_alive_seconds: 60 .*idle timeout"),
    (
        with_change("load_balancer.idle_timeout_seconds", 19),
        r"load_balancer\.idle_timeout_seconds: 19 .*set at least 20",
    ),
    (model_change(0, "request_timeout_seconds", 3991), r"models\[0\]\.request_timeout_seconds: 3991 .*1 to 3990"),
    (with_change("service.stop_timeout_seconds", 110), r"service\.stop_timeout_seconds: .*= 130 s .*Spot interruption"),
    (
        with_change("service.drain_timeout_seconds", 70),
        r"service\.drain_timeout_seconds: .*no longer.*models\[\]\.drain_seconds",
    ),
    # 95 s after SIGTERM with a 10 s delay fits the 110 s a Spot notice leaves, but not the 90 s stop timeout
    (
        {**model_change(0, "drain_seconds", 80), "service": {**BASE["service"], "deregistration_delay_seconds": 10}},
        r"service\.stop_timeout_seconds: 90 s .*raise stop_timeout_seconds to 95",
    ),
    (
        model_change(0, "drain_seconds", 80),
        r"service\.deregistration_delay_seconds: .*= 115 s exceeds the 110 s .*ECS agent sees it",
    ),
    (model_change(0, "compile", True), r"models\[0\]\.compile: .*no longer.*runtime: \"compile\""),
    (
        with_change("model_store.noncurrent_versions_to_infrequent_access_days", 7),
        r"model_store\.noncurrent_versions_to_infrequent_access_days: 7 .*too short",
    ),
    (with_change("log_retention_days", 10), r"log_retention_days: 10 .*retention period"),
]


@pytest.mark.parametrize(
    ("data", "message"), BAD_SERVICE, ids=[m.split(":")[0].replace("\\", "") for _, m in BAD_SERVICE]
)
def test_bad_service_config_is_refused(data, message):
    with pytest.raises(ConfigError, match=rf"^environment 'dev': {message}"):
        load_environment("dev", data)


def schedule_change(key: str, value, index: int = 0):
    data = copy.deepcopy(BASE)
    if value is DELETE:
        del data["scaling"]["schedules"][index][key]
    else:
        data["scaling"]["schedules"][index][key] = value
    return data


def second_schedule_change(key: str, value):
    return schedule_change(key, value, index=1)


BAD_SCALING = [
    (
        schedule_change("cron", "0 19 1 * MON"),
        r"scaling\.schedules\[0\]\.cron: '0 19 1 \* MON' names both a day of the month",
    ),
    (schedule_change("cron", "0 19 * * MON-FRI *"), r"scaling\.schedules\[0\]\.cron: .*day-of-week .*'\?'"),
    (schedule_change("cron", "0 25 ? * MON-FRI *"), r"scaling\.schedules\[0\]\.cron: hour 25 .*0-23"),
    (schedule_change("time_zone", "Europe/Atlantis"), r"scaling\.schedules\[0\]\.time_zone: 'Europe/Atlantis' .*IANA"),
    (schedule_change("min_tasks", 3), r"scaling\.schedules\[0\]\.min_tasks: 3 .*max_tasks 0"),
    (schedule_change("min_tasks", DELETE), r"scaling\.schedules\[0\]\.min_tasks: .*set min_tasks: 0"),
    (second_schedule_change("min_tasks", 0), r"scaling\.schedules\[1\]\.min_tasks: 0 .*no requests per target"),
    (second_schedule_change("min_tasks", 3), r"scaling\.schedules\[1\]\.min_tasks: 3 .*'minilm'.*1-2"),
    (schedule_change("name", "workday-on"), r"scaling\.schedules: .*unique.*\['workday-on'\]"),
    (
        with_change("scaling.predictive.mode", "Forecast"),
        r"scaling\.predictive\.mode: 'Forecast' .*use one of: .*'ForecastOnly'",
    ),
    (
        with_change("scaling.predictive", {"mode": "ForecastOnly", "scheduling_buffer_seconds": 3600}),
        r"scaling\.predictive\.scheduling_buffer_seconds: 3600 .*out of range",
    ),
    (
        with_change("scaling.capacity_prewarm", [{"name": "am", "cron": "0 7 * * *", "min_capacity": 9}]),
        r"scaling\.capacity_prewarm\[0\]\.min_capacity: 9 .*capacity\.max_capacity 8",
    ),
    (
        with_change(
            "scaling.capacity_prewarm", [{"name": "am", "cron": "0 7 * * *", "min_capacity": 1, "desired_capacity": 2}]
        ),
        r"scaling\.capacity_prewarm\[0\]\.desired_capacity: unknown key",
    ),
    (
        model_change(0, "scaling", {"requests_per_target_per_minute": 0}),
        r"models\[0\]\.scaling\.requests_per_target_per_minute: 0 .*greater than 0",
    ),
    (
        model_change(0, "scaling", {"gpu_utilization_percent": 120}),
        r"models\[0\]\.scaling\.gpu_utilization_percent: 120 .*1 to 100",
    ),
    (with_change("monitoring", {"latency_p95_ms": 1000}), r"monitoring\.latency_p95_ms: .*no longer.*latency goal"),
    (
        model_change(0, "alarms", {"latency_p95_ms": 100}),
        r"models\[0\]\.alarms\.latency_p95_ms: 100 ms .*scaling\.latency_p95_ms",
    ),
    (
        model_change(0, "alarms", {"latency_p95_ms": 5000, "latency_p99_ms": 3000}),
        r"models\[0\]\.alarms\.latency_p95_ms: 5000 .*latency_p99_ms 3000",
    ),
    (with_change("monitoring", {"target_5xx_percent": 0}), r"monitoring\.target_5xx_percent: 0\.0 .*out of range"),
    (with_change("monitoring", {"spot_price_fraction": 1.5}), r"monitoring\.spot_price_fraction: 1\.5 .*out of range"),
]


@pytest.mark.parametrize(
    ("data", "message"),
    BAD_SCALING,
    ids=[m.split(":")[0].replace("\\", "") + str(i) for i, (_, m) in enumerate(BAD_SCALING)],
)
def test_bad_scaling_and_monitoring_config_is_refused(data, message):
    with pytest.raises(ConfigError, match=rf"^environment 'dev': {message}"):
        load_environment("dev", data)


@pytest.mark.parametrize("task", ["torch-export", "image-classification"])
def test_non_text_tasks_are_accepted_for_a_model(task):
    environment = load_environment("dev", model_change(0, "task", task))
    bundled = environment.server_config(environment.models[0]).bundled
    assert bundled is not None  # dev's first model runs on the bundled server
    assert bundled.task == task


def test_a_capacity_group_holds_a_multi_gpu_models_deployment_at_peak_counted_in_gpus():
    """staging's llama-13b: 4 GPUs a task, max_tasks 2, canary (a second full set while it deploys): 16 GPUs, 4
    g5.12xlarge."""
    data = scenario_environment("staging")
    data["capacity_groups"]["llm"]["capacity"]["max_capacity"] = 3
    with pytest.raises(
        ConfigError,
        match=r"^environment 'staging': capacity_groups\.llm\.capacity\.max_capacity: 3 .*16 GPUs = 4 instances",
    ):
        load_environment("staging", data)
    data["capacity_groups"]["llm"]["capacity"]["max_capacity"] = 4
    load_environment("staging", data)


def test_a_models_runtime_is_read_from_cdk_json_and_checked():
    environment = load_environment("dev", model_change(0, "runtime", "onnx"))
    bundled = environment.server_config(environment.models[0]).bundled
    assert bundled is not None  # dev's first model runs on the bundled server
    assert bundled.runtime == "onnx"
    with pytest.raises(ConfigError, match=r"models\[0\]\.runtime"):
        load_environment("dev", model_change(0, "runtime", "tensorrt"))


def test_a_vllm_models_weights_are_copied_unless_cdk_json_says_stream():
    staging = scenario_environment("staging")
    (llama,) = [m for m in staging["models"] if m["name"] == "llama-13b"]
    index = staging["models"].index(llama)
    copied = load_environment("staging", staging).servers[index].vllm
    assert copied is not None and copied.weights == "copy"
    llama["vllm"].update(weights="stream", stream_buffer_mib=8192)
    streamed = load_environment("staging", staging).servers[index].vllm
    assert streamed is not None and (streamed.weights, streamed.stream_buffer_mib, streamed.model_source().mode) == (
        "stream",
        8192,
        "server_streams",
    )
    llama["vllm"]["weights"] = "copied"
    with pytest.raises(
        ConfigError, match=rf"models\[{index}\]\.vllm\.weights: 'copied' .*use one of: 'copy', 'stream'"
    ):
        load_environment("staging", staging)
