"""Bad configuration fails before any construct is built, naming the environment, key and fix."""

import copy

import pytest

from gpu_inference_constructs.errors import ConfigError
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
    ("account", "12345", r"environment 'dev': account: '12345' is not a 12-digit AWS account id"),
    ("region", "mars-1", r"environment 'dev': region: 'mars-1' is not an AWS region"),
    ("region", DELETE, r"environment 'dev': region: required key is missing"),
    ("colour", "blue", r"environment 'dev': colour: unknown key; allowed keys here: account, .*network"),
    ("network.vpc_cidr", "10.0.0.300/16", r"network.vpc_cidr: '10.0.0.300/16' is not an IPv4 network in CIDR form"),
    ("network.vpc_cidr", "10.0.0.1/16", r"network.vpc_cidr: .*has host bits set"),
    ("network.vpc_cidr", "10.0.0.0/8", r"network.vpc_cidr: '10.0.0.0/8': the prefix must be between /16 and /24"),
    ("network.max_azs", 0, r"network.max_azs: 0 is out of range; allowed 1 to 6"),
    ("network.max_azs", "2", r"network.max_azs: expected a whole number, got str '2'"),
    ("network.max_azs", 4, r"network.availability_zone_ids: lists 3 zone\(s\) but max_azs is 4"),
    ("network.availability_zone_ids", ["usw2-az1", "usw2-az2"], r"network.availability_zone_ids: \['usw2-az1', 'usw2-az2'\] are not zone IDs of region 'us-east-1'"),
    ("network.availability_zone_ids", ["use1-az1", "use1az2"], r"network.availability_zone_ids: \['use1az2'\] is not a zone ID: a zone ID is the region's short code"),
    ("network.availability_zones", ["us-east-1a", "us-east-1b"], r"network.availability_zone_ids: give the zones once: .*drop availability_zones"),
    ("network.nat_gateways", 3, r"network.nat_gateways: 3 is out of range; allowed 0 \(endpoints only\) to max_azs \(2\)"),
    ("network.interface_endpoints", ["ecr.api", "ecr.dockr"], r"network.interface_endpoints: unknown endpoint\(s\) \['ecr.dockr'\]"),
    ("network.flow_log_retention_days", 31, r"network.flow_log_retention_days: 31 is not a CloudWatch Logs retention period; allowed days: 1, 3"),
    ("network.flow_logs", True, r"network.flow_logs: unknown key"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD_CONFIGS, ids=[f"{p}={v!r}" for p, v, _ in BAD_CONFIGS])
def test_bad_config_is_refused_with_a_message_naming_the_key(path, value, message):
    with pytest.raises(ConfigError, match=message):
        load_environment("dev", with_change(path, value))


def test_unknown_environment_is_refused():
    with pytest.raises(ConfigError, match=r"unknown environment 'qa'; defined: dev, staging, prod"):
        load_environments(scenario_context(), only="qa")


def test_environment_names_are_checked():
    with pytest.raises(ConfigError, match=r"environment 'Prod!'"):
        load_environment("Prod!", BASE)


def test_missing_environments_block_is_refused():
    with pytest.raises(ConfigError, match=r"environments: cdk.json context must hold an object of environments"):
        load_environments({})


BAD_CAPACITY = [
    ("capacity.instance_types", ["g5.xlarg"], r"capacity.instance_types\[0\]: 'g5.xlarg' is not a known GPU instance type; known: g4dn.12xlarge"),
    ("capacity.instance_types", ["g5.xlarge", "m5.xlarge"], r"capacity.instance_types\[1\]: 'm5.xlarge' is not a known GPU instance type"),
    ("capacity.instance_types", ["g6e.xlarge"], None),  # us-east-1 offers g6e: accepted
    ("capacity.instance_types", ["g5.xlarge", "g4dn.2xlarge"], r"capacity.instance_types\[1\]: g4dn.2xlarge has shape \(8 vCPU, 32 GiB, 1 GPU\) but g5.xlarge has \(4 vCPU, 16 GiB, 1 GPU\)"),
    ("capacity.instance_types", [], r"capacity.instance_types: list at least one GPU instance type"),
    ("capacity.instance_types", ["g5.xlarge", "g5.xlarge"], r"capacity.instance_types: \['g5.xlarge', 'g5.xlarge'\] repeats a type"),
    ("capacity.instance_weights", {"g5.xlarge": 1, "g4dn.2xlarge": 2}, r"capacity.instance_weights: ECS capacity providers do not support instance weighting"),
    ("capacity.on_demand_base_capacity", 9, r"capacity.on_demand_base_capacity: 9 is greater than max_capacity 8"),
    ("capacity.on_demand_percentage_above_base", 150, r"capacity.on_demand_percentage_above_base: 150 is out of range; allowed 0 to 100"),
    ("capacity.min_capacity", 9, r"capacity.min_capacity: 9 is greater than max_capacity 8; min must be <= max"),
    ("capacity.target_capacity_percent", 0, r"capacity.target_capacity_percent: 0 is out of range; allowed 1 to 100"),
    ("capacity.root_volume_gib", 8, r"capacity.root_volume_gib: 8 is out of range; allowed 30 to 16384"),
    ("capacity.root_volume_throughput_mib_s", 2000, r"capacity.root_volume_throughput_mib_s: 2000 is out of range; allowed 125 to 1000"),
    ("capacity.managed_termination_protection", "yes", r"capacity.managed_termination_protection: expected true or false"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD_CAPACITY, ids=[f"{p}={v!r}" for p, v, _ in BAD_CAPACITY])
def test_bad_capacity_config_is_refused(path, value, message):
    if message is None:
        load_environment("dev", with_change(path, value))
        return
    with pytest.raises(ConfigError, match=rf"environment 'dev': {message}"):
        load_environment("dev", with_change(path, value))


def test_an_instance_type_the_catalog_does_not_list_in_the_region_loads():
    """The catalog's region table is behind AWS: GpuCapacity warns at synth (test_team_scenarios), the loader does not refuse."""
    data = with_change("region", "eu-west-3")
    data["network"]["availability_zone_ids"] = ["euw3-az1", "euw3-az2"]
    data["load_balancer"]["certificate_arn"] = data["load_balancer"]["certificate_arn"].replace("us-east-1", "eu-west-3")
    assert load_environment("dev", data).region == "eu-west-3"


def test_an_unknown_instance_type_name_is_still_refused():
    with pytest.raises(ConfigError, match=r"environment 'dev': capacity.instance_types\[0\]: 'g9.xlarge' is not a known GPU instance type"):
        load_environment("dev", with_change("capacity.instance_types", ["g9.xlarge"]))


def many_models(count: int, max_tasks: int = 2, **model_keys):
    """The dev config serving ``count`` copies of its first model (and a group big enough for them)."""
    data = copy.deepcopy(BASE)
    data["models"] = [{**data["models"][0], "name": f"model-{index}", "max_tasks": max_tasks, **model_keys} for index in range(count)]
    data["capacity"]["max_capacity"] = 10_000
    return data


def model_change(index: int, key: str, value):
    return with_change(f"models.{index}.{key}", value)


BAD_SERVICE = [
    (model_change(1, "name", "minilm"), r"models\[1\].name: 'minilm' is listed twice; model names must be unique"),
    (model_change(0, "name", "MiniLM"), r"models\[0\].name: 'MiniLM' is not URL-safe"),
    (model_change(0, "name", "mini/lm"), r"models\[0\].name: 'mini/lm' is not URL-safe"),
    (model_change(0, "memory_mib", 16384), r"models\[0\].memory_mib: 16512 MiB does not fit on g5.xlarge \(16 GiB; at most 14745 MiB"),
    (model_change(0, "cpu", 4096), r"models\[0\].cpu: 4160 CPU units does not fit on g5.xlarge"),
    (model_change(0, "task", "text-generation"), r"models\[0\].task: 'text-generation' is not supported; use one of: text-classification, text-embedding, torch-export, image-classification"),
    (model_change(0, "min_tasks", 5), r"models\[0\].min_tasks: 5 must be between 1 and max_tasks \(2\)"),
    (model_change(0, "min_tasks", 0), r"models\[0\].min_tasks: 0 with max_tasks 2: a service at 0 tasks has no requests per target.* set min_tasks to at least 1"),
    (with_change("capacity.max_capacity", 2), r"capacity.max_capacity: 2 instances cannot hold the shared-GPU models deploying at peak: their max_tasks add "
     r"up to 6 tasks and deploying 'minilm' runs 4; packed by GPU memory, CPU and memory onto g5.xlarge \(1 x 15360 MiB of GPU memory\) "
     r"they need 3; raise max_capacity to at least 3"),
    (model_change(0, "max_batch_wait_ms", 50.5), r"models\[0\].max_batch_wait_ms: expected a whole number"),
    (model_change(0, "environment", {"MODEL_URI": "s3://elsewhere/"}), r"models\[0\].environment: \['MODEL_URI'\] are set by the bundled preset from its own keys"),
    (model_change(0, "environment", {"WORKERS": "0"}), r"models\[0\].environment.WORKERS: '0' is not a worker count: set a whole number from 1 to 256"),
    (with_change("models", []), r"models: list at least one model to serve"),
    (with_change("load_balancer.certificate_arn", DELETE), r"load_balancer.certificate_arn: is not set and allow_http is false"),
    (plain_http_from_anywhere(), r"load_balancer.allow_http: plain HTTP on an internet-facing load balancer open to 0.0.0.0/0 would carry "
     r"every client's API key across the internet in cleartext; set certificate_arn .* or narrow ingress_cidrs .* or set internet_facing: false"),
    (with_change("load_balancer.certificate_arn", "arn:aws:acm:eu-west-1:111111111111:certificate/abc"), r"load_balancer.certificate_arn: .* is not in region 'us-east-1'"),
    (with_change("load_balancer.certificate_arn", "my-cert"), r"load_balancer.certificate_arn: 'my-cert' is not an ACM certificate ARN"),
    (with_change("load_balancer.ingress_cidrs", ["10.0.0.0/33"]), r"load_balancer.ingress_cidrs\[0\]: '10.0.0.0/33' is not a CIDR block"),
    (with_change("load_balancer.waf_rate_limit_per_5_minutes", 11999), r"load_balancer.waf_rate_limit_per_5_minutes: 11999 is below minilm's configured peak "
     r"\(2400 requests a minute at max_tasks = 12000 in 5 minutes\): WAF would answer one client 403 before the model scales to its maximum; set at least 12000"),
    (many_models(101), r"models\[100\].load_balancer: on load balancer 1, 101 listener rules \(one per model\) exceed the load balancer's quota of 100: "
     r"serve fewer models or tasks on this load balancer .*; to serve 'model-100' from another, set models\[100\].load_balancer: 2 \(no other model moves\)"),
    (many_models(51, deployment={"strategy": "blue_green"}), r"models\[50\].load_balancer: on load balancer 1, 102 target groups \(one per model, two with canary, linear or blue/green\) exceed the load balancer's quota of 100"),
    (many_models(100, max_tasks=10), r"models\[99\].load_balancer: on load balancer 1, 1010 targets at peak while one model deploys \(one per task\) exceed the load balancer's quota of 1000"),
    (model_change(2, "load_balancer", 3), r"models: no model is on load balancer 2: number the load balancers 1 to 3 without gaps"),
    (model_change(0, "load_balancer", 21), r"models\[0\].load_balancer: 21 is out of range; allowed 1 to 20"),
    (with_change("service.keep_alive_seconds", 60), r"service.keep_alive_seconds: 60 must exceed the load balancer's idle timeout \(60 s\)"),
    (with_change("load_balancer.idle_timeout_seconds", 19), r"load_balancer.idle_timeout_seconds: 19 s is shorter than minilm's longest request \(10 s\) \+ 10 s: "
     r"the load balancer would answer 504 before the server does; set at least 20"),
    (model_change(0, "request_timeout_seconds", 3991), r"models\[0\].request_timeout_seconds: 3991 is out of range; allowed 1 to 3990 \(the load balancer's idle timeout, at most 4000 s"),
    (with_change("service.stop_timeout_seconds", 110), r"service.stop_timeout_seconds: deregistration_delay_seconds \(20\) \+ stop_timeout_seconds \(110\) = 130 s exceeds the 120 s Spot interruption notice"),
    (with_change("service.drain_timeout_seconds", 70), r"service.drain_timeout_seconds: is no longer an environment key: the drain is the bundled server's own, models\[\].drain_seconds"),
    (model_change(0, "drain_seconds", 80), r"service.stop_timeout_seconds: 90 s is shorter than the 95 s the bundled server needs after SIGTERM \(drain 80 \+ exit 15\): "
     r"ECS would SIGKILL it mid-drain; raise stop_timeout_seconds to 95 or shorten the drain \(models\[0\], minilm\)"),
    (model_change(0, "compile", True), r"models\[0\].compile: is no longer a key: use runtime: \"compile\""),
    (with_change("model_store.noncurrent_versions_to_infrequent_access_days", 7), r"model_store.noncurrent_versions_to_infrequent_access_days: 7 is too short"),
    (with_change("log_retention_days", 10), r"log_retention_days: 10 is not a CloudWatch Logs retention period"),
]


@pytest.mark.parametrize(("data", "message"), BAD_SERVICE, ids=[m.split(":")[0].replace("\\", "") for _, m in BAD_SERVICE])
def test_bad_service_config_is_refused(data, message):
    with pytest.raises(ConfigError, match=rf"environment 'dev': {message}"):
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
    (schedule_change("cron", "0 19 * * MON-FRI"), r"scaling.schedules\[0\].cron: '0 19 \* \* MON-FRI' is not a 6-field cron expression"),
    (schedule_change("cron", "0 19 * * MON-FRI *"), r"scaling.schedules\[0\].cron: .*exactly one of day-of-month and day-of-week must be '\?'"),
    (schedule_change("cron", "0 25 ? * MON-FRI *"), r"scaling.schedules\[0\].cron: hour 25 is out of range 0-23"),
    (schedule_change("time_zone", "Europe/Atlantis"), r"scaling.schedules\[0\].time_zone: 'Europe/Atlantis' is not an IANA time zone"),
    (schedule_change("min_tasks", 3), r"scaling.schedules\[0\].min_tasks: 3 is greater than max_tasks 0"),
    (schedule_change("min_tasks", DELETE), r"scaling.schedules\[0\].min_tasks: set min_tasks: 0 too: a schedule with max_tasks 0 turns the service off"),
    (second_schedule_change("min_tasks", 0), r"scaling.schedules\[1\].min_tasks: 0 with max_tasks inherited: a service at 0 tasks has no requests per target"),
    (second_schedule_change("min_tasks", 3), r"scaling.schedules\[1\].min_tasks: 3 is greater than max_tasks 2 for model 'minilm' \(its own range is 1-2\)"),
    (schedule_change("name", "workday-on"), r"scaling.schedules: schedule names must be unique; repeated: \['workday-on'\]"),
    (with_change("scaling.predictive.mode", "Forecast"), r"scaling.predictive.mode: 'Forecast' is not allowed; use one of: 'off', 'ForecastOnly', 'ForecastAndScale'"),
    (with_change("scaling.predictive", {"mode": "ForecastOnly", "scheduling_buffer_seconds": 3600}), r"scaling.predictive.scheduling_buffer_seconds: 3600 is out of range"),
    (with_change("scaling.capacity_prewarm", [{"name": "am", "cron": "0 7 * * *", "min_capacity": 9}]), r"scaling.capacity_prewarm\[0\].min_capacity: 9 is greater than capacity.max_capacity 8"),
    (with_change("scaling.capacity_prewarm", [{"name": "am", "cron": "0 7 * * *", "min_capacity": 1, "desired_capacity": 2}]), r"scaling.capacity_prewarm\[0\].desired_capacity: unknown key"),
    (model_change(0, "scaling", {"requests_per_target_per_minute": 0}), r"models\[0\].scaling.requests_per_target_per_minute: 0 must be greater than 0"),
    (model_change(0, "scaling", {"gpu_utilization_percent": 120}), r"models\[0\].scaling.gpu_utilization_percent: 120 is out of range; allowed 1 to 100"),
    (with_change("monitoring", {"latency_p95_ms": 1000}), r"monitoring.latency_p95_ms: is no longer an environment setting: each model pages at its own latency goal"),
    (model_change(0, "alarms", {"latency_p95_ms": 100}), r"models\[0\].alarms.latency_p95_ms: 100 ms is below the model's scaling.latency_p95_ms \(250 ms\)"),
    (model_change(0, "alarms", {"latency_p95_ms": 5000, "latency_p99_ms": 3000}), r"models\[0\].alarms.latency_p95_ms: 5000 is above latency_p99_ms 3000"),
    (with_change("monitoring", {"target_5xx_percent": 0}), r"monitoring.target_5xx_percent: 0.0 is out of range"),
    (with_change("monitoring", {"spot_price_fraction": 1.5}), r"monitoring.spot_price_fraction: 1.5 is out of range"),
]


@pytest.mark.parametrize(("data", "message"), BAD_SCALING, ids=[m.split(":")[0].replace("\\", "") + str(i) for i, (_, m) in enumerate(BAD_SCALING)])
def test_bad_scaling_and_monitoring_config_is_refused(data, message):
    with pytest.raises(ConfigError, match=rf"environment 'dev': {message}"):
        load_environment("dev", data)


@pytest.mark.parametrize("task", ["torch-export", "image-classification"])
def test_non_text_tasks_are_accepted_for_a_model(task):
    environment = load_environment("dev", model_change(0, "task", task))
    bundled = environment.server_config(environment.models[0]).bundled
    assert bundled is not None  # dev's first model runs on the bundled server
    assert bundled.task == task


def test_a_capacity_group_holds_a_multi_gpu_models_deployment_at_peak_counted_in_gpus():
    """staging's llama-13b: 4 GPUs a task, max_tasks 2, canary (a second full set while it deploys): 16 GPUs, 4 g5.12xlarge."""
    data = scenario_environment("staging")
    data["capacity_groups"]["llm"]["capacity"]["max_capacity"] = 3
    with pytest.raises(ConfigError, match=r"environment 'staging': capacity_groups.llm.capacity.max_capacity: 3 instances cannot hold a "
                                          r"deployment at peak: the models' max_tasks add up to 8 tasks, and deploying 'llama-13b' runs "
                                          r"up to 16 of its tasks \(200% of 8\), so 16 GPUs = 4 instances of 4 GPU are needed"):
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
    assert streamed is not None and (streamed.weights, streamed.stream_buffer_mib, streamed.model_source().mode) == ("stream", 8192, "server_streams")
    llama["vllm"]["weights"] = "copied"
    with pytest.raises(ConfigError, match=rf"models\[{index}\]\.vllm\.weights: 'copied' is not allowed; use one of: 'copy', 'stream'"):
        load_environment("staging", staging)
