"""Every metric a scaling policy, an alarm or a dashboard of the app as cdk.json configures it reads reaches
CloudWatch: each is followed back to the container that emits it and the path it takes (tests/metric_paths.py), in
every environment; a planted twin of each broken path is caught."""

import copy
import dataclasses
import re

import pytest

from gpu_inference_constructs.servers.pool import POOL_METRICS
from inference_server import emf, facts
from tests.app.test_checks import ENVIRONMENTS
from tests.metric_paths import metric_reads, model_tasks, server_emissions, server_environment, undeliverable

POOL = "tenants"  # dev's pool


@pytest.fixture(scope="module")
def environments(app_synthesized):
    """environment -> (its template, shared and model stacks together; its model tasks)."""
    found = {}
    for name in ENVIRONMENTS:
        template = app_synthesized.inference_template(name)
        found[name] = template, model_tasks(app_synthesized.stages[name], template)
    return found


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_every_metric_that_scales_alarms_or_graphs_is_delivered(environments, environment):
    template, tasks = environments[environment]
    reads = metric_reads(template)
    assert {read.namespace for read in reads} >= {"GpuInference", "AWS/ApplicationELB"}
    assert undeliverable(template, tasks) == []


def test_the_server_declares_every_metric_it_writes_as_emf(environments):
    """The emitter map's bundled half is the server's own: the metrics its EMF documents can hold, but the adapter
    sidecar's (the same EMF writer, another process: no alarm, scaling policy or dashboard reads those)."""
    (bundled,) = {task.emf_metrics for _, tasks in environments.values() for task in tasks if task.emf_metrics}
    assert bundled == set(emf.UNITS) - set(facts.ADAPTER_METRIC_NAMES)
    read = {r.name for template, _ in environments.values() for r in metric_reads(template)}
    assert not read & set(facts.ADAPTER_METRIC_NAMES), "an adapter metric is read: follow it in tests/metric_paths.py"


def _server_options(task) -> dict:
    (server,) = [c for c in task.task_definition["Properties"]["ContainerDefinitions"] if c["Name"] == "server"]
    return server["LogConfiguration"].get("Options", {})


@pytest.fixture
def staging_without_log_key(environments):
    template, tasks = copy.deepcopy(environments["staging"])
    firelens = [task for task in tasks if _server_options(task).get("Name") == "cloudwatch_logs" and task.emf_metrics]
    assert firelens, "staging routes a bundled server's logs through FireLens"
    for task in firelens:
        del _server_options(task)["log_key"]
    return template, tasks


def test_the_planted_firelens_twin_without_log_key_is_caught(staging_without_log_key):
    """Staging as it was: FireLens's cloudwatch_logs output without log_key; the queue, GPU and shared-cache metrics
    its policies and alarms read never arrive."""
    found = undeliverable(*staging_without_log_key)
    for metric in ("QueueDepth", "GpuUtilization", "RejectedRequests", "SharedCacheErrors"):
        assert any(re.search(rf"GpuInference/{metric}\b", line) and "log_key" in line for line in found), metric


def _renamed(value, old: str, new: str):
    """A template value (a string, or an Fn::Join of strings and tokens) with ``old`` replaced in its strings."""
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_renamed(item, old, new) for item in value]
    if isinstance(value, dict):
        return {key: _renamed(item, old, new) for key, item in value.items()}
    return value


def test_a_collector_that_does_not_select_a_read_metric_is_caught(environments):
    template, tasks = copy.deepcopy(environments["staging"])
    collected = [task for task in tasks if task.collected_metrics]
    assert collected
    for task in collected:
        for container in task.task_definition["Properties"]["ContainerDefinitions"]:
            for variable in container.get("Environment", []):
                if variable["Name"] in ("AOT_CONFIG_CONTENT", "CW_CONFIG_CONTENT"):
                    variable["Value"] = _renamed(variable["Value"], "vllm_num_requests_running", "renamed_away")
    found = undeliverable(template, tasks)
    assert any("vllm_num_requests_running" in line and "does not select" in line for line in found)


def test_a_metric_no_container_emits_is_caught(environments):
    template, tasks = environments["staging"]
    template = copy.deepcopy(template)
    template["Resources"]["PlantedAlarm"] = {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "Namespace": "GpuInference",
            "MetricName": "NoSuchMetric",
            "Dimensions": [{"Name": "Environment", "Value": "staging"}, {"Name": "ModelName", "Value": tasks[0].model}],
        },
    }
    assert any("NoSuchMetric" in line and "no container" in line for line in undeliverable(template, tasks))


def test_the_pools_metrics_are_followed_and_its_queue_signal_fits_its_scale_out_alarm(environments):
    """The pool's reads are in the walk (its alarms, its scaling on the queue at 10 s periods), and its server writes
    the queue as the single-model server does: at 1-second resolution, every 5 s (the pool's own PoolServer, as the
    task's environment configures it; it wrote it every 10 s in its interval document before)."""
    template, tasks = environments["dev"]
    (pool,) = [task for task in tasks if task.model == POOL]
    reads = [read for read in metric_reads(template) if read.model == POOL]
    assert {read.name for read in reads} >= {"QueueDepth", *POOL_METRICS}
    assert any(read.name == "QueueDepth" and read.period_s == 10 for read in reads)  # the queue's scale-out alarm
    assert pool.emissions is not None and pool.emissions["QueueDepth"] == (5.0, 1)
    assert {name for name, (_, resolution) in pool.emissions.items() if resolution == 1} == {"QueueDepth"}
    single = next(task for task in tasks if task.emissions is not None and task.model != POOL)
    assert single.emissions is not None and single.emissions["QueueDepth"] == pool.emissions["QueueDepth"]


def test_a_pool_writing_its_queue_once_a_period_is_caught(environments):
    """The planted twin: the pool's queue signal every 10 s, as its interval document carried it, under the 10 s
    periods of its scale-out alarm."""
    template, tasks = environments["dev"]
    (pool,) = [task for task in tasks if task.model == POOL]
    definition = copy.deepcopy(pool.task_definition)
    (server,) = [c for c in definition["Properties"]["ContainerDefinitions"] if c["Name"] == "server"]
    server["Environment"].append({"Name": "SIGNAL_INTERVAL_S", "Value": "10"})
    emissions = server_emissions(server_environment(definition))
    slow = dataclasses.replace(pool, task_definition=definition, emissions=emissions)
    found = undeliverable(template, [slow if task is pool else task for task in tasks])
    assert any(f"GpuInference/QueueDepth of {POOL}" in line and "every 10 s" in line for line in found), found
