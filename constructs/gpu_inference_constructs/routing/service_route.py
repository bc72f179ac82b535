"""How requests reach a ModelService's tasks (its ``route``), as an open type in CDK's idiom: ``ServiceRoute``,
whose ``bind`` returns what the service needs (``BoundRoute``: the listener, the rule's priority and conditions, how
the load balancer reaches the tasks, what is known of its idle timeout and openness). The built-in choices: an
InferenceLoadBalancer and ``LoadBalancerRoute`` on it (load_balancer.py, load_balancer_route.py), and
``ListenerRoute`` for a listener of your own (``ServiceRoute.from_listener``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from constructs import Construct

from ..core.errors import require, require_cdk
from ..core.server_contract import MAX_RULE_CONDITION_VALUES
from .listener_rules import check_rule_priority, model_path_patterns
from .target_group_metrics import load_balancer_full_name, load_balancer_name_from_listener_arn


def check_priority(priority: object, key: str = "priority") -> None:
    require(
        isinstance(priority, int) and not isinstance(priority, bool),
        key,
        f"{priority!r}: a whole number, unique on the listener",
    )
    assert isinstance(priority, int)
    check_rule_priority(priority, key)


@dataclass(frozen=True)
class RouteRule:
    """The listener rule a ModelService asks its route for, once its target groups exist."""

    model_name: str
    """The model: its requests arrive under ``/<model_name>/``. Required."""
    target_groups: Sequence[elbv2.IApplicationTargetGroup]
    """The production target group, and the alternate one where a deployment shifts traffic. Required."""
    paths: Sequence[str] = ()
    """The server's public paths below the model's prefix (such as ``/v1/*``). Default: () (the whole prefix)."""
    prediction_routes: Sequence[str] = ()
    """The server's prediction routes, which a web ACL's body rules must leave alone. Default: ()."""

    def path_patterns(self) -> list[str]:
        """``/<model>`` and ``/<model>/*``, or each of ``paths`` below ``/<model>``."""
        return model_path_patterns(self.model_name, self.paths)

    def action(self) -> elbv2.ListenerAction:
        """Forward to the one target group, or weighted 100 / 0 to both (deployments shift the weights)."""
        if len(self.target_groups) == 1:
            return elbv2.ListenerAction.forward(list(self.target_groups))
        production, alternate = self.target_groups
        return elbv2.ListenerAction.weighted_forward(
            [
                elbv2.WeightedTargetGroup(target_group=production, weight=100),
                elbv2.WeightedTargetGroup(target_group=alternate, weight=0),
            ]
        )


@dataclass(frozen=True)
class BoundRoute:
    """What a ModelService needs of its route: what ``ServiceRoute.bind`` returns. As written, a rule on ``listener``
    at ``priority`` that matches the model's paths and ``conditions``, with the listener's security group let in on
    the tasks' ports; a route that does more (an InferenceLoadBalancer's) overrides :meth:`add_rule`,
    :meth:`allow_traffic` and :meth:`allow_port`."""

    listener: elbv2.IApplicationListener
    """The listener the model's rule is on. One model name per listener (its path is the model's). Required."""
    priority: int | None = None
    """The rule's priority (1-50000), claimed per listener across the app: two models on one listener never share
    one. Default: None (for a route whose :meth:`add_rule` claims its own, as an InferenceLoadBalancer does)."""
    conditions: Sequence[elbv2.ListenerCondition] = ()
    """What a request must match besides the model's paths (a host header, a source IP range). Default: ()."""
    load_balancer_full_name: str | None = None
    """``app/<name>/<id>`` of the listener's load balancer, which dimensions the target groups' metrics. Default:
    None (parsed from the listener's ARN, which CloudFormation may not accept inside ``Fn::Split`` when the ARN is
    another stack's output)."""
    idle_timeout_seconds: int | None = None
    """The load balancer's idle timeout, where known. Default: None (the ALB default, 60 s, is assumed, and a model
    whose requests may take longer gets a warning)."""
    open_to_the_internet: bool | None = None
    """Whether anyone on the internet reaches the listener, where known. Default: None (unknown: a model without API
    keys gets a warning rather than a refusal)."""

    def __post_init__(self) -> None:
        require_cdk(self.listener, ("listener_arn", "connections"), "route.listener", "an elbv2.IApplicationListener")
        if self.priority is not None:
            check_priority(self.priority, "route.priority")
        require(
            isinstance(self.conditions, (tuple, list))
            and all(isinstance(c, elbv2.ListenerCondition) for c in self.conditions),
            "route.conditions",
            f"{self.conditions!r}: pass elbv2.ListenerCondition values (ListenerCondition.host_headers([...]))",
        )

    def metrics_load_balancer_name(self) -> str:
        """What dimensions the target groups' metrics: ``load_balancer_full_name``, else parsed from the listener's
        ARN."""
        if self.load_balancer_full_name is not None:
            return self.load_balancer_full_name
        return load_balancer_name_from_listener_arn(self.listener.listener_arn)

    def add_rule(self, service: Construct, rule: RouteRule) -> elbv2.ApplicationListenerRule:
        """The model's rule, made in ``service``'s scope (so it lives and goes with the model)."""
        require(
            self.priority is not None,
            "route.priority",
            "is None: a rule on a listener needs a priority (1-50000, unused on the listener)",
        )
        assert self.priority is not None  # required above
        patterns = rule.path_patterns()
        raw = [c.render_raw_condition() for c in self.conditions]
        fields = [condition.get("field") if isinstance(condition, dict) else None for condition in raw]
        twice = sorted(f for f, most in ONE_PER_RULE.items() if fields.count(f) > most)
        require(
            not twice,
            "route.conditions",
            f"{', '.join(map(str, twice))}: an ALB rule takes one condition of each of {', '.join(ONE_PER_RULE)}, and "
            "the model's path patterns are the route's own: match several values in one condition instead",
        )
        values = len(patterns) + sum(_match_values(condition) for condition in raw)
        require(
            values <= MAX_RULE_CONDITION_VALUES,
            "route.conditions",
            f"{values} match values with the model's {len(patterns)} path patterns: an ALB rule holds at most "
            f"{MAX_RULE_CONDITION_VALUES}; match fewer values, or give the server fewer public paths",
        )
        return elbv2.ApplicationListenerRule(
            service,
            "Route",
            listener=self.listener,
            priority=self.priority,
            conditions=[elbv2.ListenerCondition.path_patterns(patterns), *self.conditions],
            action=rule.action(),
        )

    def allow_traffic(self, tasks: ec2.SecurityGroup, port: int) -> None:
        """Let the load balancer reach the tasks on ``port``, the one the target groups register."""
        tasks.connections.allow_from(self.listener, ec2.Port.tcp(port), "load balancer")

    def allow_port(self, tasks: ec2.SecurityGroup, port: int, why: str) -> None:
        """Let the load balancer reach the tasks on another ``port`` (the Target Optimizer's control port, the
        server's for health checks), ``why`` said in the rule."""
        tasks.connections.allow_from(self.listener, ec2.Port.tcp(port), f"load balancer: {why}")


# ALB: "Each rule can optionally include up to one of each of the following conditions" (rule-condition-types); the
# model's path patterns are the rule's one path-pattern condition. Field -> how many a route's conditions may add.
ONE_PER_RULE = {"host-header": 1, "http-request-method": 1, "path-pattern": 0, "source-ip": 1}


def _match_values(raw: object) -> int:
    """How many values a rendered listener condition matches (ALB counts each toward its limit per rule)."""
    if isinstance(raw, dict):
        return sum(len(v) if k == "values" and isinstance(v, list) else _match_values(v) for k, v in raw.items())
    return 0


class ServiceRoute:
    """How requests reach a ModelService's tasks (its ``route``). An InferenceLoadBalancer is one (the rule's priority
    derived from the model's name); ``LoadBalancerRoute(load_balancer, priority)`` is one at a priority of your
    choosing; ``ServiceRoute.from_listener(listener, priority)`` is a rule on a listener of your own. Subclass it and
    return a BoundRoute from :meth:`bind` for a route of any other kind."""

    @staticmethod
    def from_listener(
        listener: elbv2.IApplicationListener,
        priority: int,
        load_balancer: elbv2.IApplicationLoadBalancer | None = None,
    ) -> ListenerRoute:
        """A rule at ``priority`` on ``listener`` (``load_balancer``: the listener's, whose name dimensions metrics)."""
        return ListenerRoute(listener, priority, load_balancer)

    def bind(self, service: Construct) -> BoundRoute:
        """What ``service`` (the ModelService behind this route) needs of it."""
        raise NotImplementedError(f"{type(self).__name__}.bind: return a BoundRoute")


@dataclass(frozen=True)
class ListenerRoute(ServiceRoute):
    """A rule on a listener of your own (the other options are an InferenceLoadBalancer, or a LoadBalancerRoute);
    the listener's connections reach the tasks."""

    listener: elbv2.IApplicationListener
    """Any ALB listener (an imported one: ``ApplicationListener.from_lookup`` or
    ``from_application_listener_attributes``). Required."""
    priority: int
    """The rule's priority, unique on that listener (1-50000). Required."""
    load_balancer: elbv2.IApplicationLoadBalancer | None = None
    """The listener's load balancer, whose name dimensions the target-group metrics (an imported one, or another
    stack's). Default: parsed from the listener's ARN, which CloudFormation may not accept inside ``Fn::Split`` when
    the ARN is another stack's output."""

    def __post_init__(self) -> None:
        require_cdk(self.listener, ("listener_arn", "connections"), "listener", "an elbv2.IApplicationListener")
        check_priority(self.priority)
        if self.load_balancer is not None:
            require_cdk(
                self.load_balancer,
                ("load_balancer_arn", "metrics"),
                "load_balancer",
                "the listener's elbv2.IApplicationLoadBalancer "
                "(ApplicationLoadBalancer.from_application_load_balancer_attributes)",
            )

    def bind(self, service: Construct) -> BoundRoute:
        return BoundRoute(
            self.listener,
            self.priority,
            load_balancer_full_name=None if self.load_balancer is None else load_balancer_full_name(self.load_balancer),
        )
