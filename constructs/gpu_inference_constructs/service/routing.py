"""How requests reach a model's tasks: the tasks' security group, the target groups (two where a deployment shifts
traffic), the listener rule on the route's listener (rewriting ``/<model>/`` away for a server that serves at its
root) and the service's attachment with its alternate target.

Built in the ModelService's own scope, with the construct IDs it always had, so every logical ID stays."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from constructs import Construct

from ..core.server_contract import ServerContract
from ..routing.service_route import BoundRoute, RouteRule
from ..routing.target_group_metrics import TargetGroupMetrics
from ..routing.target_health import TARGET_HEALTH_CHECK
from ..shared.acknowledgements import default_child
from .target_optimizer import (
    TargetOptimizerProps,
    admit_agent_ports,
    registered_container,
    set_control_port,
    target_group_id,
    traffic_port,
)


def task_security_group(
    scope: Construct,
    *,
    vpc: ec2.IVpc,
    model_name: str,
    port: int,
    route: BoundRoute,
    target_optimizer: TargetOptimizerProps | None = None,
    health_check_port: int | None = None,
) -> ec2.SecurityGroup:
    """The tasks' group: the load balancer in on the container port (the agent's data and control ports with a
    ``target_optimizer``, and the server's port for health checks only), and on ``health_check_port`` where the
    health checks go elsewhere (the adapter sidecar's ``/ready``); HTTPS out to the VPC endpoints."""
    health_check_port, port = health_check_port or port, traffic_port(port, target_optimizer)
    security_group = ec2.SecurityGroup(
        scope,
        "SecurityGroup",
        vpc=vpc,
        description=f"{model_name} tasks: the load balancer on the container port; HTTPS out to VPC endpoints",
        allow_all_outbound=False,
    )
    security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to VPC endpoints and the S3 gateway")
    route.allow_traffic(security_group, port)
    admit_agent_ports(security_group, route, target_optimizer, health_check_port)
    if target_optimizer is None and health_check_port != port:
        route.allow_port(security_group, health_check_port, "health checks")
    return security_group


class ServiceTargets:
    """The target groups and the listener rule of one model. Attributes: ``target_groups`` (with the alternate one
    where ``shifts_traffic``), ``target_group`` (production), ``listener_rule``, ``load_balancer_full_name``,
    ``target_group_metrics``. With a ``target_optimizer`` both target groups get its control port."""

    def __init__(
        self,
        scope: Construct,
        *,
        model_name: str,
        contract: ServerContract,
        route: BoundRoute,
        vpc: ec2.IVpc,
        deregistration_delay_seconds: int,
        shifts_traffic: bool,
        target_optimizer: TargetOptimizerProps | None = None,
    ) -> None:
        self._contract = contract
        self._shifts_traffic = shifts_traffic
        self._target_optimizer = target_optimizer
        # Both target groups health-check readiness and drain alike: either may be production after a deployment.
        target_group_ids = ("TargetGroup", "AlternateTargetGroup") if shifts_traffic else ("TargetGroup",)
        self.target_groups = [
            _target_group(scope, target_group_id, vpc, contract, deregistration_delay_seconds, target_optimizer)
            for target_group_id in target_group_ids
        ]
        self.target_group = self.target_groups[0]
        self.listener_rule = _listener_rule(scope, model_name, contract, route, self.target_groups)
        self.load_balancer_full_name = route.metrics_load_balancer_name()
        self.target_group_metrics = [TargetGroupMetrics(tg, self.load_balancer_full_name) for tg in self.target_groups]

    def attach(self, service: ecs.Ec2Service, container: ecs.ContainerDefinition) -> None:
        """Register ``service``'s tasks (``container``'s port) in production, and in the alternate target group
        that canary, linear and blue/green deployments shift the rule's weights to."""
        alternate = None
        if self._shifts_traffic:
            alternate = ecs.AlternateTarget(
                "AlternateTarget",
                alternate_target_group=self.target_groups[1],
                production_listener=ecs.ListenerRuleConfiguration.application_listener_rule(self.listener_rule),
            )
        container_name, port = registered_container(container, self._target_optimizer, self._contract.port)
        service.load_balancer_target(
            container_name=container_name, container_port=port, alternate_target=alternate
        ).attach_to_application_target_group(self.target_group)


def _target_group(
    scope: Construct,
    construct_id: str,
    vpc: ec2.IVpc,
    contract: ServerContract,
    deregistration_delay_seconds: int,
    target_optimizer: TargetOptimizerProps | None,
) -> elbv2.ApplicationTargetGroup:
    port = traffic_port(contract.port, target_optimizer)
    target_group = elbv2.ApplicationTargetGroup(
        scope,
        target_group_id(construct_id, target_optimizer),
        vpc=vpc,
        port=port,
        protocol=elbv2.ApplicationProtocol.HTTP,
        target_type=elbv2.TargetType.IP,
        deregistration_delay=cdk.Duration.seconds(deregistration_delay_seconds),
        load_balancing_algorithm_type=elbv2.TargetGroupLoadBalancingAlgorithmType.LEAST_OUTSTANDING_REQUESTS,
        health_check=elbv2.HealthCheck(
            path=contract.health_check_path,
            port=str(contract.health_check_port),
            healthy_http_codes="200",
            interval=cdk.Duration.seconds(TARGET_HEALTH_CHECK.interval_seconds),
            timeout=cdk.Duration.seconds(TARGET_HEALTH_CHECK.timeout_seconds),
            healthy_threshold_count=TARGET_HEALTH_CHECK.healthy_threshold,
            unhealthy_threshold_count=TARGET_HEALTH_CHECK.unhealthy_threshold,
        ),
    )
    set_control_port(target_group, target_optimizer)
    return target_group


def _listener_rule(
    scope: Construct,
    model_name: str,
    contract: ServerContract,
    route: BoundRoute,
    target_groups: Sequence[elbv2.ApplicationTargetGroup],
) -> elbv2.ApplicationListenerRule:
    """``/<model>`` and ``/<model>/*`` (or only the contract's public paths below it) to the target groups."""
    rule = route.add_rule(
        scope,
        RouteRule(model_name, tuple(target_groups), tuple(contract.public_paths), tuple(contract.prediction_routes)),
    )
    if contract.serves_at_root:
        default_child(rule, elbv2.CfnListenerRule).transforms = [
            elbv2.CfnListenerRule.TransformProperty(
                type="url-rewrite",
                url_rewrite_config=elbv2.CfnListenerRule.RewriteConfigObjectProperty(
                    rewrites=[elbv2.CfnListenerRule.RewriteConfigProperty(regex=f"^/{model_name}/(.*)$", replace="/$1")]
                ),
            )
        ]
    return rule
