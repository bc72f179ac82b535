"""ECS's side of every task start, as metrics: the function's code on ECS's documented event, the code the template
deploys run on its own, the rule run through EventBridge's matcher, and who may call what, evaluated by AWS's rules."""

from __future__ import annotations

import copy
import importlib.util
import json
from typing import cast

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ecs as ecs
from moto.events.models import EventPattern
from moto.events.utils import EventMessageType

from gpu_inference_constructs.observability import task_start_handler
from gpu_inference_constructs.observability.task_starts import HANDLER_SOURCE, TaskStarts
from tests.infra.aws_policies import TemplateWorld
from tests.infra.conftest import ENVIRONMENTS

OTHER_ACCOUNT = "999999999999"
# ECS developer guide, "Amazon ECS task state change events": the example event, as a service's task on EC2.
DOCUMENTED = {
    "version": "0",
    "id": "3317b2af-7005-947d-b652-f55e762e571a",
    "detail-type": "ECS Task State Change",
    "source": "aws.ecs",
    "account": "111122223333",
    "time": "2020-01-23T17:57:58Z",
    "region": "us-west-2",
    "resources": ["arn:aws:ecs:us-west-2:111122223333:task/FargateCluster/c13b4cb40f1f4fe4a2971f76ae5a47ad"],
    "detail": {
        "clusterArn": "arn:aws:ecs:us-west-2:111122223333:cluster/FargateCluster",
        "createdAt": "2020-01-23T17:57:34.402Z",
        "desiredStatus": "RUNNING",
        "group": "service:sample",
        "lastStatus": "RUNNING",
        "launchType": "EC2",
        "connectivityAt": "2020-01-23T17:57:38.453Z",
        "pullStartedAt": "2020-01-23T17:57:52.103Z",
        "startedAt": "2020-01-23T17:57:58.103Z",
        "pullStoppedAt": "2020-01-23T17:57:55.103Z",
        "updatedAt": "2020-01-23T17:57:58.103Z",
        "taskArn": "arn:aws:ecs:us-west-2:111122223333:task/FargateCluster/c13b4cb40f1f4fe4a2971f76ae5a47ad",
        "version": 4,
    },
}
EXPECTED = {
    "TaskWaitSeconds": 17.701,
    "TaskPullSeconds": 3.0,
    "TaskStartSeconds": 3.0,
    "TaskCreatedToRunningSeconds": 23.701,
}
EMF_UNITS = {"Seconds", "Microseconds", "Milliseconds", "Bytes", "Count", "Percent", "None"}


def event(**detail) -> dict:
    changed = copy.deepcopy(DOCUMENTED)
    changed["detail"].update(detail)
    return {**changed, "detail": {k: v for k, v in changed["detail"].items() if v is not None}}


def emf_problems(document: dict) -> list[str]:
    """What CloudWatch would refuse in an embedded-metric-format document (EMF specification: every dimension and
    metric named in a directive is a root member, a dimension a string, a metric a number; Timestamp in ms)."""
    problems = []
    meta = document.get("_aws", {})
    if not isinstance(meta.get("Timestamp"), int):
        problems.append("_aws.Timestamp is not an integer of milliseconds")
    for directive in meta.get("CloudWatchMetrics", []):
        if not isinstance(directive.get("Namespace"), str) or not directive["Namespace"]:
            problems.append("a directive has no Namespace")
        for dimension_set in directive.get("Dimensions", []):
            for name in dimension_set:
                if not isinstance(document.get(name), str):
                    problems.append(f"dimension {name} is not a string member")
        for metric in directive.get("Metrics", []):
            if metric.get("Unit", "None") not in EMF_UNITS:
                problems.append(f"{metric['Name']}: unit {metric.get('Unit')}")
            if not isinstance(document.get(metric["Name"]), int | float):
                problems.append(f"metric {metric['Name']} is not a number member")
    return problems


def test_the_documented_event_gives_each_phase_as_a_valid_emf_document(capsys):
    document = task_start_handler.handler(DOCUMENTED)
    assert document is not None and emf_problems(document) == []
    assert {name: document[name] for name in EXPECTED} == EXPECTED
    assert document["ClusterName"] == "FargateCluster" and document["ServiceName"] == "sample"
    assert document["_aws"]["Timestamp"] == 1579802278103  # startedAt, in ms
    assert json.loads(capsys.readouterr().out) == document  # stdout is what the log group receives


def test_the_emf_check_finds_a_missing_member():
    document = task_start_handler.handler(DOCUMENTED)
    assert document is not None
    del document["TaskPullSeconds"], document["ServiceName"]
    assert emf_problems(document) == [
        "dimension ServiceName is not a string member",
        "metric TaskPullSeconds is not a number member",
    ]


@pytest.mark.parametrize(
    "changed",
    [{"lastStatus": "PENDING"}, {"desiredStatus": "STOPPED"}, {"group": "family:sample"}, {"startedAt": None}],
)
def test_events_that_are_not_a_service_task_reaching_running_are_ignored(changed, capsys):
    assert task_start_handler.handler(event(**changed)) is None
    assert capsys.readouterr().out == ""


def test_an_event_without_pull_times_reports_what_it_has():
    """A task whose images the agent did not pull (ECS_IMAGE_PULL_BEHAVIOR=prefer-cached) may carry no pull times."""
    document = task_start_handler.handler(event(pullStartedAt=None, pullStoppedAt=None))
    assert document is not None and emf_problems(document) == []
    assert [m["Name"] for m in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]] == ["TaskCreatedToRunningSeconds"]


@pytest.fixture(scope="module", params=ENVIRONMENTS)
def world(request, synthesized) -> TemplateWorld:
    config = synthesized.stages[request.param].config
    return TemplateWorld(synthesized.inference_template(request.param), config.account, config.region)


def only_function(world: TemplateWorld) -> str:
    (function,) = [k for k in world.of_type("AWS::Lambda::Function") if k.startswith("MonitoringTaskStarts")]
    return function


def test_the_deployed_code_is_the_tested_module_and_runs_on_its_own(world, tmp_path):
    """The template's inline code (Lambda saves it as index.py) imports nothing of the library: loaded alone from
    the template, it answers the documented event as the module does."""
    properties = world.resources[only_function(world)]["Properties"]
    assert properties["Code"]["ZipFile"] == HANDLER_SOURCE and properties["Handler"] == "index.handler"
    (tmp_path / "index.py").write_text(properties["Code"]["ZipFile"])
    spec = importlib.util.spec_from_file_location("index", tmp_path / "index.py")
    assert spec is not None and spec.loader is not None
    index = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(index)
    assert index.handler(DOCUMENTED) == task_start_handler.handler(DOCUMENTED)


def cluster_event(world: TemplateWorld, cluster_arn: str, **detail) -> EventMessageType:
    changed = event(clusterArn=cluster_arn, **detail)
    return cast(EventMessageType, {**changed, "account": world.account, "region": world.region})  # moto's TypedDict


def rules_of(world: TemplateWorld, function: str) -> dict[str, str]:
    """The rules that invoke ``function``, by the task status they match: RUNNING (starts), STOPPED (failures)."""
    rules = {}
    for key, rule in world.of_type("AWS::Events::Rule").items():
        if {"Fn::GetAtt": [function, "Arn"]} in [t["Arn"] for t in rule["Properties"]["Targets"]]:
            (status,) = rule["Properties"]["EventPattern"]["detail"]["lastStatus"]
            rules[status] = key
    assert sorted(rules) == ["RUNNING", "STOPPED"]
    return rules


def pattern_of(world: TemplateWorld, rule: str) -> EventPattern:
    return EventPattern.load(json.dumps(world.resolve(world.resources[rule]["Properties"]["EventPattern"])))


def test_the_rule_matches_this_clusters_service_tasks_reaching_running_and_nothing_else(world):
    pattern = pattern_of(world, rules_of(world, only_function(world))["RUNNING"])
    cluster = world.arn(world.only("AWS::ECS::Cluster"))
    assert pattern.matches_event(cluster_event(world, cluster))
    assert not pattern.matches_event(cluster_event(world, cluster, lastStatus="PENDING"))
    assert not pattern.matches_event(cluster_event(world, cluster, desiredStatus="STOPPED"))  # a task that stops
    assert not pattern.matches_event(cluster_event(world, cluster, group="family:one-off"))
    assert not pattern.matches_event(cluster_event(world, cluster.replace(world.account, OTHER_ACCOUNT)))
    assert not pattern.matches_event(cluster_event(world, f"{cluster}-other"))


def test_the_failure_rule_matches_tasks_that_stopped_on_their_own_and_nothing_else(world):
    """A crash (the essential container exited: on a shared GPU, a co-tenant's fatal GPU error) or a failed start;
    not a scale-in, a deployment, a Spot interruption or a failed health check (other stop codes)."""
    pattern = pattern_of(world, rules_of(world, only_function(world))["STOPPED"])
    cluster = world.arn(world.only("AWS::ECS::Cluster"))
    stopped = {"lastStatus": "STOPPED", "desiredStatus": "STOPPED"}
    for code in task_start_handler.FAILURE_STOP_CODES:
        assert pattern.matches_event(cluster_event(world, cluster, **stopped, stopCode=code)), code
    for code in ("ServiceSchedulerInitiated", "SpotInterruption", "UserInitiated", "TerminationNotice"):
        assert not pattern.matches_event(cluster_event(world, cluster, **stopped, stopCode=code)), code
    assert not pattern.matches_event(
        cluster_event(world, cluster, stopCode="EssentialContainerExited")
    )  # still RUNNING
    assert not pattern.matches_event(
        cluster_event(
            world, cluster.replace(world.account, OTHER_ACCOUNT), **stopped, stopCode="EssentialContainerExited"
        )
    )


def test_a_failed_task_becomes_one_valid_task_failures_point_and_a_scale_in_none(capsys):
    crashed = event(
        lastStatus="STOPPED",
        desiredStatus="STOPPED",
        stopCode="EssentialContainerExited",
        stoppedReason="Essential container in task exited",
        stoppedAt="2026-12-05T10:00:30.000Z",
    )
    document = task_start_handler.handler(crashed)
    assert document is not None and document["TaskFailures"] == 1 and emf_problems(document) == []
    assert json.loads(capsys.readouterr().out) == document
    assert (
        task_start_handler.handler(
            {**crashed, "detail": {**crashed["detail"], "stopCode": "ServiceSchedulerInitiated"}}
        )
        is None
    )


@pytest.mark.parametrize("status", ["RUNNING", "STOPPED"])
def test_eventbridge_may_invoke_the_function_for_this_rule_only(world, status):
    function = only_function(world)
    rule = rules_of(world, function)[status]
    arn = world.arn(function)
    assert world.service_may(
        "events.amazonaws.com",
        "lambda:InvokeFunction",
        function,
        arn,
        {"aws:SourceArn": world.arn(rule), "aws:SourceAccount": world.account},
    )
    other_rule = world.arn(rule).replace("rule/", "rule/another-")
    assert not world.service_may(
        "events.amazonaws.com",
        "lambda:InvokeFunction",
        function,
        arn,
        {"aws:SourceArn": other_rule, "aws:SourceAccount": world.account},
    )


def test_the_function_writes_its_own_encrypted_log_group_and_nothing_else(world):
    function = only_function(world)
    properties = world.resources[function]["Properties"]
    log_group = properties["LoggingConfig"]["LogGroup"]["Ref"]
    role = properties["Role"]["Fn::GetAtt"][0]
    stream = world.arn(log_group).removesuffix("*") + "log-stream:2026/12/05/[$LATEST]abc"
    for action in ("logs:CreateLogStream", "logs:PutLogEvents"):
        assert world.role_may(role, action, stream, {}), action
    model_group = next(k for k in world.of_type("AWS::Logs::LogGroup") if k != log_group)
    assert not world.role_may(role, "logs:PutLogEvents", world.arn(model_group).removesuffix("*") + "log-stream:x", {})
    assert not world.role_may(role, "cloudwatch:PutMetricData", "*", {})  # EMF: the metrics come from the log group
    key = world.resources[log_group]["Properties"]["KmsKeyId"]["Fn::GetAtt"][0]
    context = {"kms:EncryptionContext:aws:logs:arn": world.log_group_arn(log_group)}
    assert world.service_may(f"logs.{world.region}.amazonaws.com", "kms:GenerateDataKey", key, world.arn(key), context)


def test_the_dashboard_graphs_the_phases_the_function_writes(synthesized):
    body = json.dumps(synthesized.inference_template("prod"))
    for name, _, _ in task_start_handler.PHASES:
        assert f'MetricName=\\\\\\"{name}\\\\\\"' in body, name


def test_a_team_app_records_task_starts_of_its_imported_cluster():
    app = cdk.App()
    stack = cdk.Stack(app, "Team", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    cluster = ecs.Cluster.from_cluster_arn(stack, "Cluster", "arn:aws:ecs:eu-west-1:123456789012:cluster/team-gpu")
    starts = TaskStarts(stack, "TaskStarts", cluster=cluster, log_retention_days=30)
    template = assertions.Template.from_stack(stack)
    template.has_resource_properties(
        "AWS::Events::Rule",
        {"EventPattern": {"detail": {"clusterArn": ["arn:aws:ecs:eu-west-1:123456789012:cluster/team-gpu"]}}},
    )
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 30})
    template.resource_count_is("AWS::IAM::ManagedPolicy", 0)
    assert starts.function and starts.rule and starts.log_group
