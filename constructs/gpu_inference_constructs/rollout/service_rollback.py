"""The alarms that roll a model's deployment back: the built-in ones (latency, 5xx), the never-healthy one of a
deployment that shifts traffic, and those its deployment props name, all in the service's deployment alarms; and, for
a deployment that shifts traffic, the lifecycle hook that fails a new revision never healthy before traffic moves.

Built in the ModelService's own scope, with the construct IDs it always had, so every logical ID stays."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_kms as kms
from constructs import Construct

from ..core.model_props import ModelProps
from ..routing.target_group_metrics import TargetGroupMetrics
from ..shared.acknowledgements import acknowledge, default_child
from .deployment import DeploymentProps, RollbackAlarmNames, RollbackAlarms, RollbackThresholds
from .revision_health import NeverHealthyAlarm
from .revision_hook import RevisionHealthHook


def add_rollback_alarms(
    scope: Construct,
    *,
    names: RollbackAlarmNames,
    model: ModelProps,
    thresholds: RollbackThresholds,
    target_groups: list[TargetGroupMetrics],
    service: ecs.Ec2Service,
    cluster: ecs.ICluster,
    never_healthy_prefix: str,
    container_insights_on: bool,
    logs_key: kms.IKey | None,
    log_retention_days: int = 90,
) -> tuple[RollbackAlarms, NeverHealthyAlarm | None, RevisionHealthHook | None]:
    """The model's RollbackAlarms and, for a deployment that shifts traffic, its NeverHealthyAlarm (named
    ``never_healthy_prefix`` and its logical ID) and RevisionHealthHook (its function's logs under ``logs_key``, kept
    ``log_retention_days``, the environment's); the
    alarms are added to ``names`` (the service's deployment alarms) with the deployment's own.
    ``container_insights_on``: whether the cluster is known to have Container Insights (else a warning: the
    never-healthy alarm reads its metrics)."""
    deployment = model.deployment
    rollback_alarms = RollbackAlarms(
        scope,
        "RollbackAlarms",
        model_name=model.name,
        target_groups=target_groups,
        thresholds=thresholds,
        enabled=deployment.rollback_alarms,
    )
    for alarm in rollback_alarms.alarms.values():
        names.add(alarm.alarm_name)
    never_healthy, hook = None, None
    if deployment.shifts_traffic:
        never_healthy = NeverHealthyAlarm(
            scope,
            "NeverHealthy",
            model_name=model.name,
            cluster_name=cluster.cluster_name,
            name_prefix=never_healthy_prefix,
            service_name=service.service_name,
            target_groups=target_groups,
            health_check_grace_seconds=model.health_check_grace_seconds,
        )
        names.add(never_healthy.alarm_name)  # by its name: the alarm itself refers to the service
        hook = RevisionHealthHook(
            scope,
            "RevisionHealthHook",
            model_name=model.name,
            service=service,
            cluster=cluster,
            start_window_seconds=never_healthy.start_window_seconds,
            logs_key=logs_key,
            log_retention_days=log_retention_days,
        )
        if not container_insights_on:
            cdk.Annotations.of(scope).add_warning_v2(
                "gpu-inference:container-insights",
                f"models[{model.name}] rolls a {deployment.strategy} deployment back when a target group stays without "
                "a healthy target by Container Insights' DeploymentCount: turn Container Insights on for "
                "your cluster (containerInsightsV2 enabled or enhanced), or that rollback alarm never fires.",
            )
    for name in deployment.alarm_names:
        names.add(name)
    return rollback_alarms, never_healthy, hook


def acknowledge_traffic_shifting(service: ecs.Ec2Service, deployment: DeploymentProps) -> None:
    """cdk-nag's and aws-cdk-lib's findings on a service whose deployments shift traffic between target groups."""
    if not deployment.uses_circuit_breaker:
        cdk.Annotations.of(service).acknowledge_warning(
            "@aws-cdk/aws-ecs:shouldUseCircuitBreaker",
            "AWS documents the circuit breaker for rolling and blue/green deployments only; this service's rollback "
            "alarms, the never-healthy one among them, stop a canary or linear deployment "
            "(tests/infra/test_never_healthy_rollback.py).",
        )
    acknowledge(
        default_child(service.node.find_child("AlternateTargetRole")),
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonECSInfrastructureRolePolicyForLoadBalancers]",
        "The role ECS assumes to shift the listener rule's weights and register tasks: the AWS managed policy "
        "is the one the ECS developer guide prescribes for blue/green, linear and canary deployments.",
    )
