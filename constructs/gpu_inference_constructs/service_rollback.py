"""The alarms that roll a model's deployment back: the built-in ones (latency, 5xx), the never-healthy one of a
deployment that shifts traffic, and those its deployment props name, all in the service's deployment alarms.

Built in the ModelService's own scope, with the construct IDs it always had, so every logical ID stays."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from .acknowledgements import acknowledge, default_child
from .deployment import DeploymentProps, RollbackAlarmNames, RollbackAlarms, RollbackThresholds
from .model_props import ModelProps
from .revision_health import NeverHealthyAlarm
from .target_group_metrics import TargetGroupMetrics


def add_rollback_alarms(scope: Construct, *, names: RollbackAlarmNames, model: ModelProps, thresholds: RollbackThresholds,
                        target_groups: list[TargetGroupMetrics], service: ecs.Ec2Service, cluster_name: str,
                        never_healthy_name: str, container_insights_on: bool) -> tuple[RollbackAlarms, NeverHealthyAlarm | None]:
    """The model's RollbackAlarms and, for a deployment that shifts traffic, its NeverHealthyAlarm (named
    ``never_healthy_name``), each added to ``names`` (the service's deployment alarms) with the deployment's own.
    ``container_insights_on``: whether the cluster is known to have Container Insights (else a warning: the
    never-healthy alarm reads its metrics)."""
    deployment = model.deployment
    rollback_alarms = RollbackAlarms(
        scope, "RollbackAlarms", model_name=model.name, target_groups=target_groups,
        thresholds=thresholds, enabled=deployment.rollback_alarms,
    )
    for alarm in rollback_alarms.alarms.values():
        names.add(alarm.alarm_name)
    never_healthy = None
    if deployment.shifts_traffic:
        never_healthy = NeverHealthyAlarm(
            scope, "NeverHealthy", model_name=model.name, cluster_name=cluster_name, alarm_name=never_healthy_name,
            service_name=service.service_name, target_groups=target_groups,
            health_check_grace_seconds=model.health_check_grace_seconds)
        names.add(never_healthy_name)  # by its name: the alarm itself refers to the service
        if not container_insights_on:
            cdk.Annotations.of(scope).add_warning_v2(
                "gpu-inference:container-insights",
                f"models[{model.name}] rolls a {deployment.strategy} deployment back when its new tasks never become "
                "healthy by Container Insights' DeploymentCount and DesiredTaskCount: turn Container Insights on for "
                "your cluster (containerInsightsV2 enabled or enhanced), or that rollback alarm never fires.")
    for name in deployment.alarm_names:
        names.add(name)
    return rollback_alarms, never_healthy


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
