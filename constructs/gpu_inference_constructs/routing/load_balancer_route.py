"""A route on an InferenceLoadBalancer's listener at a priority of your choosing."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from constructs import Construct

from ..core.errors import require
from .load_balancer import InferenceLoadBalancer
from .service_route import BoundRoute, ServiceRoute, check_priority


@dataclass(frozen=True)
class LoadBalancerRoute(ServiceRoute):
    """A route on an InferenceLoadBalancer's listener at a priority of your choosing (an InferenceLoadBalancer
    passed alone as ``route`` derives the priority from the model's name)."""

    load_balancer: InferenceLoadBalancer
    """The load balancer. Required."""
    priority: int | None = None
    """The listener rule's priority (1-50000). Default: derived from the model's name; two names that give one
    priority are refused."""

    def __post_init__(self) -> None:
        require(
            isinstance(self.load_balancer, InferenceLoadBalancer),
            "load_balancer",
            f"got {type(self.load_balancer).__name__}: pass an InferenceLoadBalancer, or use ListenerRoute for your "
            "own listener",
        )
        if self.priority is not None:
            check_priority(self.priority)

    @property
    def listener(self) -> elbv2.IApplicationListener:
        """The load balancer's listener the route's rule is on."""
        return self.load_balancer.listener

    def bind(self, service: Construct) -> BoundRoute:
        return self.load_balancer.bind(service, priority=self.priority)
