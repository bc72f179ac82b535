"""ALB Target Optimizer for one model, opted into with ``ModelProps.target_optimizer``: the load balancer sends a task
at most ``max_concurrency`` requests at once, so a full GPU task is skipped instead of answering 503 while another
idles.

How it works (Elastic Load Balancing user guide, "Register targets with your Application Load Balancer target
group", section Target Optimizer): the target group is created with a ``TargetControlPort`` (set only at creation;
CloudFormation reference, AWS::ElasticLoadBalancingV2::TargetGroup TargetControlPort), and AWS's target-control agent
runs beside the server as an inline proxy. The load balancer sends application traffic to the agent's data port (the
target group's port), keeps control channels to the agent on the control port, and the agent proxies to the server's
port over the task's loopback, signalling the load balancer whenever the server has fewer than ``max_concurrency``
requests in flight. So the target group's port and the tasks' security group follow the agent's ports; the load
balancer reaches the server's own port only for its readiness health check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from constructs import Construct

from ..core.errors import ConfigError, require
from ..core.target_optimizer_props import AGENT_CPU, AGENT_MEMORY_MIB, TargetOptimizerProps
from ..shared.acknowledgements import default_child
from .choices import ListenerRoute, LoadBalancerRoute

if TYPE_CHECKING:
    from ..core.model_props import ModelProps
    from ..core.server_contract import ServerContract, ServerDefinition

AGENT_CONTAINER_NAME = "target-control-agent"
# A user no image defines by name: the agent listens above 1024 and writes nothing (its TLS key is kept in memory).
AGENT_USER = "65534"
# ALB CloudWatch metrics, target optimizer table: dimensions LoadBalancer (and AvailabilityZone), not TargetGroup.
REJECT_METRIC = "TargetControlRequestRejectCount"
REQUEST_METRIC = "TargetControlRequestCount"


def check_target_optimizer(
    scope: Construct, server: ServerDefinition, model: ModelProps, contract: ServerContract
) -> None:
    """Refuse what cannot work (ports the server already uses, a cap above the server's own limit); warn where the
    server already sheds load itself."""
    optimizer = model.target_optimizer
    if optimizer is None:
        return
    taken: dict[int | None, str] = {contract.port: "the server's port"}
    if contract.metrics is not None:
        taken.setdefault(contract.metrics.port, "the server's metrics port")
    for key in ("data_port", "control_port"):
        port = getattr(optimizer, key)
        require(
            port not in taken,
            f"models[{model.name}].target_optimizer.{key}",
            f"{port} is {taken.get(port)} in the same task (one network namespace): choose another port",
        )
    own = server.concurrency_limit()
    if own is not None and optimizer.max_concurrency > own[1]:
        limit_key, own_limit = own
        raise ConfigError(
            f"models[{model.name}].target_optimizer.max_concurrency",
            f"{optimizer.max_concurrency} is above the server's own {limit_key} ({own_limit}): the server "
            f"would queue what the load balancer thinks it runs; give at most {own_limit}",
        )
    if server.sheds_load_itself:
        cdk.Annotations.of(scope).add_warning_v2(
            "gpu-inference:target-optimizer-beside-admission",
            f"models[{model.name}].target_optimizer: the {server.name} server sheds load itself (it answers 503 once full, and "
            "least-outstanding-requests routing already favours idle tasks); the agent adds a proxy hop and a second "
            "cap. Remove target_optimizer unless you mean both.",
        )


def target_group_id(construct_id: str, optimizer: TargetOptimizerProps | None) -> str:
    """A target group with a control port is another resource: TargetControlPort is set only at creation."""
    return construct_id if optimizer is None else f"{construct_id}Controlled"


def traffic_port(server_port: int, optimizer: TargetOptimizerProps | None) -> int:
    """Where the load balancer sends requests: the agent's data port, else the server's. Health checks go to the
    server's readiness directly either way: the guide does not say whether the agent counts one against
    ``max_concurrency``, and a health check held behind a long request would fail a busy task."""
    return server_port if optimizer is None else optimizer.data_port


def set_control_port(target_group: elbv2.ApplicationTargetGroup, optimizer: TargetOptimizerProps | None) -> None:
    """``TargetControlPort`` on the target group (aws-cdk-lib 2.275's L2 has no prop for it; its L1 does)."""
    if optimizer is None:
        return
    default_child(target_group, elbv2.CfnTargetGroup).target_control_port = optimizer.control_port


def admit_agent_ports(
    security_group: ec2.SecurityGroup,
    route: LoadBalancerRoute | ListenerRoute,
    optimizer: TargetOptimizerProps | None,
    health_check_port: int,
) -> None:
    """The load balancer in on the control port, and on the server's own port for health checks, beside the data
    port (which attaching the target group admits)."""
    if optimizer is None:
        return
    for port, why in ((optimizer.control_port, "target control"), (health_check_port, "health checks")):
        admit_port(security_group, route, port, f"load balancer: {why}")


def admit_port(
    security_group: ec2.SecurityGroup, route: LoadBalancerRoute | ListenerRoute, port: int, why: str
) -> None:
    """The route's load balancer in on ``port`` (and, for an InferenceLoadBalancer, its egress rule to it)."""
    if isinstance(route, LoadBalancerRoute):
        route.load_balancer.allow_to_targets_on(port)
        security_group.connections.allow_from(route.load_balancer.load_balancer, ec2.Port.tcp(port), why)
    else:
        security_group.connections.allow_from(route.listener, ec2.Port.tcp(port), why)


def registered_container(
    server: ecs.ContainerDefinition, optimizer: TargetOptimizerProps | None, server_port: int
) -> tuple[str, int]:
    """(container name, port) the service registers in the target groups: the agent's data port when it runs."""
    if optimizer is None:
        return server.container_name, server_port
    return AGENT_CONTAINER_NAME, optimizer.data_port


def add_target_control_agent(
    scope: Construct,
    task: ecs.TaskDefinition,
    server: ecs.ContainerDefinition,
    model: ModelProps,
    contract: ServerContract,
    logging: ecs.LogDriver,
) -> ecs.ContainerDefinition | None:
    """The agent container in ``task`` when ``model`` opts in: essential (a task without it receives no traffic),
    non-root, read-only root, every capability dropped, no AWS permissions (it calls no AWS API). The server starts
    after it and, as ECS stops containers in reverse dependency order, stops before it: the agent passes the server's
    last responses while it drains."""
    optimizer = model.target_optimizer
    if optimizer is None:
        return None
    parameters = ecs.LinuxParameters(scope, "TargetControlLinuxParameters", init_process_enabled=True)
    parameters.drop_capabilities(ecs.Capability.ALL)
    agent = task.add_container(
        AGENT_CONTAINER_NAME,
        image=ecs.ContainerImage.from_registry(optimizer.agent_image),
        essential=True,
        cpu=AGENT_CPU,
        memory_reservation_mib=AGENT_MEMORY_MIB,
        environment=optimizer.environment(contract.port),
        port_mappings=[
            ecs.PortMapping(container_port=optimizer.data_port, protocol=ecs.Protocol.TCP, name="target-data"),
            ecs.PortMapping(container_port=optimizer.control_port, protocol=ecs.Protocol.TCP, name="target-control"),
        ],
        logging=logging,
        readonly_root_filesystem=True,
        privileged=False,
        user=AGENT_USER,
        linux_parameters=parameters,
    )
    server.add_container_dependencies(
        ecs.ContainerDependency(container=agent, condition=ecs.ContainerDependencyCondition.START)
    )
    return agent


def reject_metric(load_balancer_full_name: str) -> cloudwatch.Metric:
    """Requests the load balancer rejected because no target had capacity: per load balancer (AWS publishes no
    TargetGroup dimension), so every opted-in model behind it counts together."""
    return cloudwatch.Metric(
        namespace="AWS/ApplicationELB",
        metric_name=REJECT_METRIC,
        dimensions_map={"LoadBalancer": load_balancer_full_name},
        statistic="Sum",
        period=cdk.Duration.minutes(1),
        label="rejected: no target had capacity",
    )


def add_reject_widget(dashboard: cloudwatch.Dashboard, model_name: str, load_balancer_full_name: str) -> None:
    """The reject metric, and what was forwarded, on the environment's dashboard for an opted-in model."""
    forwarded = cloudwatch.Metric(
        namespace="AWS/ApplicationELB",
        metric_name=REQUEST_METRIC,
        dimensions_map={"LoadBalancer": load_balancer_full_name},
        statistic="Sum",
        period=cdk.Duration.minutes(1),
        label="forwarded to agents",
    )
    dashboard.add_widgets(
        cloudwatch.GraphWidget(
            title=f"{model_name}: Target Optimizer requests per minute (per load balancer)",
            left=[reject_metric(load_balancer_full_name)],
            right=[forwarded],
            width=24,
            height=6,
        )
    )
