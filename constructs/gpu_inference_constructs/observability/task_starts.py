"""ECS's side of every task start, measured from ECS's own events: how long each task of a cluster's services waited
for a place (and for a new instance to register), pulled its images and ran its init containers before RUNNING. The
server's side (imports, fetch, load, warm-up to ready) is its own start metrics; together they are the measured
timeline after deploy that ``sizing.timeline`` estimates before it."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_events as events
from aws_cdk import aws_kms as kms
from constructs import Construct

from ..shared.cdk_interfaces import as_function, lambda_target
from ..shared.environment import DEFAULT_LOG_RETENTION_DAYS
from ..shared.inline_function import inline_function
from . import task_start_handler

HANDLER_SOURCE = Path(task_start_handler.__file__).read_text()


class TaskStarts(Construct):
    """An EventBridge rule for ``cluster``'s service tasks that reach RUNNING, and a small function (standard library
    only, no AWS call, no VPC) that writes each one's phases as CloudWatch metrics in namespace ``GpuInference``
    with the dimensions ``ClusterName`` and ``ServiceName``: ``TaskWaitSeconds`` (created to image pull started),
    ``TaskPullSeconds``, ``TaskStartSeconds`` (pull stopped to RUNNING: the init containers, such as model-fetch,
    and the containers' start) and ``TaskCreatedToRunningSeconds``.

    ``logs_key`` encrypts the function's log group (the key must let CloudWatch Logs use it:
    ``network.grant_logs_service``); ``log_retention_days`` defaults to 90.

    The same function counts each service task that stopped on its own (its essential container exited, or it failed
    to start) as ``TaskFailures`` (a second rule, ``failure_rule``); scale-in, deployments and Spot stops do not count.

    Attributes: ``rule``, ``failure_rule``, ``function``, ``log_group``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ecs.ICluster,
        logs_key: kms.IKey | None = None,
        log_retention_days: int = DEFAULT_LOG_RETENTION_DAYS,
    ) -> None:
        super().__init__(scope, construct_id)
        made = inline_function(
            self,
            source=HANDLER_SOURCE,
            timeout_seconds=10,
            logs_key=logs_key,
            log_retention_days=log_retention_days,
            description="ECS task starts of this cluster's services, as CloudWatch metrics (created, "
            "image pull, RUNNING)",
            role_description="Writes the task-start function's own log streams, and nothing else",
            no_dead_letter_queue="A dead-letter queue would keep a lost task-start event, which is one metric point: "
            "the queue and its key cost more to run than the point is worth",
            not_in_vpc="Not in the VPC: the function calls no AWS API and reaches nothing; it only prints to its log "
            "group, which Lambda writes outside the function's network",
        )
        self.function, self.log_group = made.function, made.log_group
        self.rule = events.Rule(
            self,
            "Rule",
            description="ECS tasks of this cluster's services that reach RUNNING: their start phases become metrics",
            event_pattern=task_running_pattern(cluster),
            targets=[lambda_target(as_function(self.function), retry_attempts=2, max_event_age=cdk.Duration.hours(1))],
        )
        self.failure_rule = events.Rule(
            self,
            "FailureRule",
            description="ECS tasks of this cluster's services that stopped on their own: TaskFailures per service",
            event_pattern=task_failed_pattern(cluster),
            targets=[lambda_target(as_function(self.function), retry_attempts=2, max_event_age=cdk.Duration.hours(1))],
        )


def task_running_pattern(cluster: ecs.ICluster) -> events.EventPattern:
    """Task State Change events of ``cluster``'s service tasks (``group`` ``service:<name>``) that report RUNNING
    and are meant to run: the event a stopping task sends (``desiredStatus`` STOPPED, still RUNNING) would count its
    start twice."""
    return events.EventPattern(
        source=["aws.ecs"],
        detail_type=["ECS Task State Change"],
        detail={
            "clusterArn": [cluster.cluster_arn],
            "lastStatus": ["RUNNING"],
            "desiredStatus": ["RUNNING"],
            "group": events.Match.prefix("service:"),
        },
    )


def task_failed_pattern(cluster: ecs.ICluster) -> events.EventPattern:
    """Task State Change events of ``cluster``'s service tasks that stopped with a failure code
    (task_start_handler.FAILURE_STOP_CODES)."""
    return events.EventPattern(
        source=["aws.ecs"],
        detail_type=["ECS Task State Change"],
        detail={
            "clusterArn": [cluster.cluster_arn],
            "lastStatus": ["STOPPED"],
            "stopCode": list(task_start_handler.FAILURE_STOP_CODES),
            "group": events.Match.prefix("service:"),
        },
    )
