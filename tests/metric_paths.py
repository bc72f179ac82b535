"""Every metric a scaling policy, an alarm or a dashboard reads, followed back to what delivers it: AWS for its own
namespaces (ECS/ContainerInsights only where the cluster turns it on), else the container of the model's task that
emits it, through the path it takes: the server's EMF lines through its log driver (awslogs, or FireLens's
cloudwatch_logs output sending the line as written, ``log_key log``), or the task's collector (its configuration
selects the metric for its EMF exporter). Which container emits what is the library's own declaration: the
contract's ``emf_metrics`` (the server writes them) and its Prometheus ``metrics`` (the collector brings them).

A read over periods under a minute (a high-resolution alarm: the queue's scale-out) needs more than delivery: the
server must store the metric at 1-second resolution and write it at least twice a period, or some periods hold no
datapoint. How often and at which resolution the bundled servers write each metric is read off the servers
themselves, as the task's environment configures them (:func:`server_emissions`): a pool's documents are made by its
own PoolServer."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, cast

import aws_cdk as cdk

from gpu_inference_constructs.core import metric_names
from gpu_inference_constructs.core.prometheus_metrics import PrometheusMetrics
from gpu_inference_constructs.observability import task_start_handler, task_starts
from gpu_inference_constructs.service.model_service import ModelService
from gpu_inference_constructs.task_telemetry.otel_collector import OTEL_CONFIG_VARIABLE
from gpu_inference_constructs.task_telemetry.telemetry import FIRELENS_LOG_KEY

CONTAINER_INSIGHTS = "ECS/ContainerInsights"
SEARCH = re.compile(r"SEARCH\('\{([^,}]+)[^}]*\}([^']*)'")
DIMENSION = re.compile(r'(\w+)="([^"]*)"')
METRICS_INSIGHTS = re.compile(r'SELECT\s+\w+\(([^)]+)\)\s+FROM\s+SCHEMA\("([^"]+)"[^)]*\)(.*)', re.IGNORECASE)
MODEL_CONDITION = re.compile(rf"{metric_names.DIMENSION_MODEL}\s*=\s*'([^']*)'")


@dataclass(frozen=True)
class MetricRead:
    reader: str
    """What reads it: ``<resource type> <logical id>``."""
    namespace: str
    name: str
    model: str | None
    """Its ModelName dimension; None where it has none (a SEARCH over every model, a per-service metric)."""
    search: bool = False
    """A dashboard's SEARCH: it graphs whatever matches, nothing where the environment runs no server that emits it."""
    period_s: int | None = None
    """The alarm's period; None where the reader sets none (a target tracking policy, a dashboard)."""


@dataclass(frozen=True)
class ModelTask:
    """One model's task as the library declared it: the metrics its server writes as EMF and those its collector
    brings in, and its task definition in the template."""

    model: str
    task_definition: dict
    emf_metrics: frozenset[str]
    collected_metrics: frozenset[str]
    emissions: dict[str, tuple[float, int]] | None = None
    """metric -> (seconds between two of its datapoints, its storage resolution) as the bundled server (single model
    or pool) the task's environment configures writes it; None for another server."""


def model_tasks(stage, template: dict) -> list[ModelTask]:
    """Each ModelService of ``stage``: its contract's declarations and its task definition in ``template``."""
    tasks = []
    for service in (c for c in stage.node.find_all() if isinstance(c, ModelService)):
        resource = service.task_definition.node.default_child
        assert isinstance(resource, cdk.CfnResource)
        logical_id = cdk.Stack.of(service).resolve(resource.logical_id)
        contract = service.contract
        histograms = {cloudwatch for _, cloudwatch in contract.metrics.histograms} if contract.metrics else set()
        definition = template["Resources"][logical_id]
        tasks.append(
            ModelTask(
                service.model.name,
                definition,
                frozenset(contract.emf_metrics),
                frozenset(contract.metric_names) | histograms,
                server_emissions(server_environment(definition)) if contract.emf_metrics else None,
            )
        )
    return tasks


def server_environment(task_definition: dict) -> dict[str, str]:
    (server,) = [c for c in task_definition["Properties"]["ContainerDefinitions"] if c["Name"] == "server"]
    return {e["Name"]: _text(e["Value"]) for e in server.get("Environment", [])}


class _Documents(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.documents: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and "_aws" in fields:
            self.documents.append(fields)


def _definitions(documents: list[dict[str, Any]]) -> dict[str, int]:
    """metric -> its storage resolution, from EMF documents (60 where the definition names none: EMF's default)."""
    return {
        metric["Name"]: metric.get("StorageResolution", 60)
        for document in documents
        for directive in document["_aws"]["CloudWatchMetrics"]
        for metric in directive["Metrics"]
    }


def _pool_emissions(environment: dict[str, str]) -> dict[str, tuple[float, int]]:
    """The pool server's documents for one idle interval, each of its two emitters once: the scale-out signal's
    (every SIGNAL_INTERVAL_S) and the interval's (every METRICS_INTERVAL_S)."""
    from inference_server.pool.pool_settings import load_pool_settings
    from inference_server.pool.server import PoolServer

    settings = load_pool_settings(environment)
    server = PoolServer(settings, loader=cast(Any, object()))  # no model is loaded: only its emitters run
    logger, capture = logging.getLogger("inference_server.pool.server"), _Documents()
    logger.addHandler(capture)
    level, logger.level = logger.level, logging.INFO
    try:
        server.emit_signals()
        signals, capture.documents = capture.documents, []
        server.emit_metrics()
        interval = capture.documents
    finally:
        logger.removeHandler(capture)
        logger.setLevel(level)
    return {
        **{name: (settings.metrics_interval_s, resolution) for name, resolution in _definitions(interval).items()},
        **{name: (settings.signal_interval_s, resolution) for name, resolution in _definitions(signals).items()},
    }


def _single_model_emissions(environment: dict[str, str]) -> dict[str, tuple[float, int]]:
    """The single-model server: the model process's signal document (every SIGNAL_INTERVAL_S) holds the high-resolution
    metrics, every other document comes every METRICS_INTERVAL_S (inference_server/engine/model_runner.py)."""
    from inference_server import emf
    from inference_server.settings import load_settings

    settings = load_settings([], environment)
    return {
        name: (settings.signal_interval_s, 1) if name in emf.HIGH_RESOLUTION else (settings.metrics_interval_s, 60)
        for name in emf.UNITS
    }


def server_emissions(environment: dict[str, str]) -> dict[str, tuple[float, int]]:
    """metric -> (seconds between two datapoints, storage resolution) of the bundled server ``environment`` runs."""
    if "POOL_NAME" in environment:
        return _pool_emissions(environment)
    return _single_model_emissions(environment)


def resolution_problem(task: ModelTask, metric: str, period_s: int | None) -> str | None:
    """Why a read of ``metric`` over ``period_s`` periods finds some without a datapoint, or None: under a minute the
    server must store it at 1-second resolution (CloudWatch: a 10, 20 or 30 s period needs a high-resolution metric)
    and write it at least twice a period (a timer's drift moves a datapoint per period across the boundary)."""
    if period_s is None or period_s >= 60 or task.emissions is None or metric not in task.emf_metrics:
        return None
    if metric not in task.emissions:
        return f"a {period_s} s period reads it, but the server writes it in no document"
    interval, resolution = task.emissions[metric]
    if resolution != 1:
        return f"a {period_s} s period reads it, but the server stores it at {resolution}-second resolution"
    if interval > period_s / 2:
        return (
            f"a {period_s} s period reads it, but the server writes it every {interval:g} s: periods without a "
            f"datapoint (write it at least every {period_s / 2:g} s)"
        )
    return None


def metric_reads(template: dict) -> list[MetricRead]:
    """Every metric an alarm, a target tracking policy or a dashboard widget reads (step policies read alarms)."""
    reads = []
    for logical_id, resource in template["Resources"].items():
        kind, properties = resource["Type"], resource.get("Properties", {})
        reader = f"{kind} {logical_id}"
        if kind == "AWS::CloudWatch::Alarm":
            reads += _metric_specification(reader, properties)
        elif kind == "AWS::ApplicationAutoScaling::ScalingPolicy":
            tracking = properties.get("TargetTrackingScalingPolicyConfiguration", {})
            if "CustomizedMetricSpecification" in tracking:
                reads += _metric_specification(reader, tracking["CustomizedMetricSpecification"])
        elif kind == "AWS::CloudWatch::Dashboard":
            reads += _dashboard_reads(reader, properties["DashboardBody"])
    return reads


def _dimensions(dimensions) -> dict:
    if isinstance(dimensions, dict):
        return dimensions
    return {d["Name"]: d["Value"] for d in dimensions or []}


def _metric_specification(reader: str, spec: dict) -> list[MetricRead]:
    """An alarm's or a customized metric specification's metrics: one metric, or metric math (stats and SEARCHes)."""
    if "MetricName" in spec:
        model = _model(_dimensions(spec.get("Dimensions")))
        return [MetricRead(reader, spec["Namespace"], spec["MetricName"], model, period_s=spec.get("Period"))]
    reads = []
    for query in spec.get("Metrics", []):
        if "MetricStat" in query:
            metric = query["MetricStat"]["Metric"]
            reads.append(
                MetricRead(
                    reader,
                    metric["Namespace"],
                    metric["MetricName"],
                    _model(_dimensions(metric.get("Dimensions"))),
                    period_s=query["MetricStat"].get("Period"),
                )
            )
        elif isinstance(query.get("Expression"), str):
            reads += _search_reads(reader, query["Expression"])
    return reads


def _model(dimensions: dict) -> str | None:
    value = dimensions.get(metric_names.DIMENSION_MODEL)
    return value if isinstance(value, str) else None


def _search_reads(reader: str, expression: str) -> list[MetricRead]:
    """The metrics of a SEARCH expression, or of a Metrics Insights query (``SELECT f(name) FROM SCHEMA(...)``)."""
    insights = METRICS_INSIGHTS.match(expression.strip())
    if insights:
        name, namespace, where = insights.groups()
        model = MODEL_CONDITION.search(where)
        return [MetricRead(reader, namespace, name.strip('"'), model.group(1) if model else None)]
    reads = []
    for namespace, query in SEARCH.findall(expression):
        terms = dict(DIMENSION.findall(query))
        if "MetricName" in terms:
            reads.append(
                MetricRead(
                    reader,
                    namespace,
                    terms["MetricName"],
                    terms.get(metric_names.DIMENSION_MODEL),
                    search=reader.startswith("AWS::CloudWatch::Dashboard"),
                )
            )
    return reads


def _text(value) -> str:
    """A template string, an Fn::Join's tokens read as a placeholder."""
    if isinstance(value, dict) and "Fn::Join" in value:
        return value["Fn::Join"][0].join(part if isinstance(part, str) else "TOKEN" for part in value["Fn::Join"][1])
    return str(value)


def _dashboard_reads(reader: str, body) -> list[MetricRead]:
    """A dashboard body's metric arrays and SEARCH expressions (tokens in it read as a placeholder)."""
    reads = []
    for widget in json.loads(_text(body))["widgets"]:
        for entry in widget.get("properties", {}).get("metrics", []):
            strings = [item for item in entry if isinstance(item, str)]
            options = [item for item in entry if isinstance(item, dict)]
            if len(strings) >= 2:
                dimensions = dict(zip(strings[2::2], strings[3::2], strict=False))
                reads.append(MetricRead(reader, strings[0], strings[1], dimensions.get(metric_names.DIMENSION_MODEL)))
            for option in options:
                reads += _search_reads(reader, option.get("expression", ""))
    return reads


def _containers(task: ModelTask) -> dict[str, dict]:
    return {c["Name"]: c for c in task.task_definition["Properties"]["ContainerDefinitions"]}


def emf_route_problem(task: ModelTask) -> str | None:
    """Why the server's EMF lines cannot become metrics, or None: awslogs sends each line as written; FireLens's
    cloudwatch_logs output sends the whole record (the line as an escaped string under ``log``) unless ``log_key``
    names that key (Fluent Bit docs, outputs/cloudwatch; the EMF specification's ``_aws`` root object)."""
    server = _containers(task)["server"]
    logging = server.get("LogConfiguration", {})
    driver, options = logging.get("LogDriver"), logging.get("Options", {})
    if driver == "awslogs":
        return None
    if driver == "awsfirelens":
        if options.get("Name") not in ("cloudwatch_logs", "cloudwatch"):
            return f"FireLens sends the server's lines to {options.get('Name')!r}, not CloudWatch Logs"
        if options.get("log_key") != FIRELENS_LOG_KEY:
            return (
                f"FireLens's cloudwatch_logs output has log_key {options.get('log_key')!r}: each EMF line arrives "
                f"as a string under {FIRELENS_LOG_KEY!r}, not the JSON object CloudWatch extracts metrics from"
            )
        return None
    return f"the server logs with {driver!r}, which delivers nothing to CloudWatch Logs"


def collector_problem(task: ModelTask, metric: str) -> str | None:
    """Why the task's collector does not send ``metric`` to CloudWatch, or None: its configuration (ADOT's awsemf
    exporter's selectors, or the CloudWatch agent's EMF processor's) must select it, in the GpuInference namespace."""
    collector = _containers(task).get("metrics-collector")
    if collector is None:
        return "the task has no collector"
    environment = {e["Name"]: _text(e["Value"]) for e in collector.get("Environment", [])}
    if OTEL_CONFIG_VARIABLE in environment:
        config = json.loads(environment[OTEL_CONFIG_VARIABLE])
        exporter = config["exporters"].get("awsemf", {})
        if "awsemf" not in config["service"]["pipelines"].get("metrics", {}).get("exporters", []):
            return "the ADOT collector's metrics pipeline has no awsemf exporter"
        selectors = [s for d in exporter.get("metric_declarations", []) for s in d["metric_name_selectors"]]
        namespace = exporter.get("namespace")
    elif "CW_CONFIG_CONTENT" in environment:
        processor = json.loads(environment["CW_CONFIG_CONTENT"])["logs"]["metrics_collected"]["prometheus"][
            "emf_processor"
        ]
        selectors = [s for d in processor["metric_declaration"] for s in d["metric_selectors"]]
        namespace = processor["metric_namespace"]
    else:
        return "the collector has no metrics configuration"
    if namespace != metric_names.NAMESPACE:
        return f"the collector sends to namespace {namespace!r}"
    if not any(re.fullmatch(selector.strip("^$"), metric) for selector in selectors):
        return f"the collector's configuration does not select {metric}"
    return None


def delivery_problem(task: ModelTask, metric: str) -> str | None:
    """Why ``metric`` cannot reach CloudWatch from ``task``, or None."""
    if metric in task.emf_metrics:
        problem = emf_route_problem(task)
        return None if problem is None else f"the server writes it as EMF, but {problem}"
    if metric in task.collected_metrics or metric in {
        PrometheusMetrics.cloudwatch_name(m) for m in task.collected_metrics
    }:
        return collector_problem(task, metric)
    return "no container of its task emits it (neither the server's emf_metrics nor its collector's metrics)"


@functools.cache
def task_start_metrics() -> frozenset[str]:
    """The metrics the task-start function writes (TaskStarts: EMF on its stdout, which Lambda sends to its log group
    as written), read off the documents its handler makes for a task that started and one that failed."""
    stamps = {
        "createdAt": "2026-01-01T00:00:00Z",
        "pullStartedAt": "2026-01-01T00:00:01Z",
        "pullStoppedAt": "2026-01-01T00:00:02Z",
        "startedAt": "2026-01-01T00:00:03Z",
    }
    started = {"group": "service:s", "lastStatus": "RUNNING", "desiredStatus": "RUNNING", **stamps}
    failed = {
        "group": "service:s",
        "lastStatus": "STOPPED",
        "stopCode": task_start_handler.FAILURE_STOP_CODES[0],
        **stamps,
    }
    with contextlib.redirect_stdout(io.StringIO()):  # the handler prints each document
        documents = [task_start_handler.handler({"detail": detail}) for detail in (started, failed)]
    return frozenset(
        metric["Name"]
        for document in documents
        if document is not None
        for metric in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]
    )


def task_start_function_problem(template: dict) -> str | None:
    """Why the task-start function writes nothing, or None: the environment must have it (its inline code the
    library's handler) and an EventBridge rule that invokes it."""
    functions = [
        logical_id
        for logical_id, r in template["Resources"].items()
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"].get("Code", {}).get("ZipFile") == task_starts.HANDLER_SOURCE
    ]
    if not functions:
        return "the environment has no task-start function"
    targets = {
        json.dumps(t.get("Arn"))
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Events::Rule"
        for t in r["Properties"].get("Targets", [])
    }
    if not any(json.dumps({"Fn::GetAtt": [f, "Arn"]}) in targets for f in functions):
        return "no EventBridge rule invokes the task-start function"
    return None


def undeliverable(template: dict, tasks: list[ModelTask]) -> list[str]:
    """``<reader> reads <namespace>/<metric> [of <model>]: <why it never arrives>`` for each read that nothing
    delivers."""
    by_model = {task.model: task for task in tasks}
    function_problem = task_start_function_problem(template)
    insights = any(
        setting.get("Name") == "containerInsights" and setting.get("Value") in ("enabled", "enhanced")
        for r in template["Resources"].values()
        if r["Type"] == "AWS::ECS::Cluster"
        for setting in r.get("Properties", {}).get("ClusterSettings", [])
    )
    found = []
    for read in metric_reads(template):
        what = f"{read.reader} reads {read.namespace}/{read.name}" + (f" of {read.model}" if read.model else "")
        if read.namespace == CONTAINER_INSIGHTS:
            if not insights:
                found.append(f"{what}: the cluster does not turn Container Insights on")
        elif read.namespace.startswith("AWS/"):
            continue  # the service publishes its own namespace
        elif read.namespace != metric_names.NAMESPACE:
            found.append(f"{what}: no container or service of this app publishes that namespace")
        elif read.name in task_start_metrics():
            if function_problem is not None:
                found.append(f"{what}: the task-start function writes it, but {function_problem}")
        elif read.model is not None:
            task = by_model.get(read.model)
            problem = (
                "no model of that name has a task"
                if task is None
                else delivery_problem(task, read.name) or resolution_problem(task, read.name, read.period_s)
            )
            if problem is not None:
                found.append(f"{what}: {problem}")
        elif read.search and not any(read.name in task.emf_metrics | task.collected_metrics for task in tasks):
            continue  # a graph of a server kind this environment does not run: empty, and nothing depends on it
        else:
            problems = {delivery_problem(task, read.name) for task in tasks}
            if None not in problems:
                found.append(f"{what}: no model's task delivers it ({'; '.join(sorted(str(p) for p in problems))})")
    return found
