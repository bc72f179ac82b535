"""One Application Load Balancer in front of every model service, routing by URL path."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from ..core.errors import ConfigError
from ..core.load_balancer_props import (
    ALB_DEFAULT_IDLE_TIMEOUT_SECONDS as ALB_DEFAULT_IDLE_TIMEOUT_SECONDS,
)
from ..core.load_balancer_props import (
    ALB_MAX_IDLE_TIMEOUT_SECONDS as ALB_MAX_IDLE_TIMEOUT_SECONDS,
)
from ..core.load_balancer_props import (
    IDLE_TIMEOUT_MARGIN_SECONDS as IDLE_TIMEOUT_MARGIN_SECONDS,
)
from ..core.load_balancer_props import (
    RATE_WINDOW_MINUTES as RATE_WINDOW_MINUTES,
)
from ..core.load_balancer_props import (
    ConfiguredLoad,
    LoadBalancerProps,
    peak_rate_limit,
)
from ..core.load_balancer_props import (
    LoadBalancerQuotas as LoadBalancerQuotas,
)
from ..core.load_balancer_props import (
    open_to_the_world as open_to_the_world,
)
from ..networking.subnet_selection import private_subnets, public_subnets
from ..servers.prediction_routes import SHIPPED_PREDICTION_ROUTES, ordered_routes
from ..shared.acknowledgements import acknowledge, default_child, skip_checkov
from .listener_rules import (
    MAX_PATH_PATTERN_CHARS as MAX_PATH_PATTERN_CHARS,
)
from .listener_rules import (
    MAX_RULE_PRIORITY as MAX_RULE_PRIORITY,
)
from .listener_rules import (
    ListenerPriorities,
    model_path_patterns,
)
from .listener_rules import (
    check_rule_priority as check_rule_priority,
)
from .listener_rules import (
    duplicate_priority_detail as duplicate_priority_detail,
)
from .listener_rules import (
    priority_from_name as priority_from_name,
)
from .service_route import BoundRoute, RouteRule, ServiceRoute
from .web_acl import (
    API_KEY_HEADERS as API_KEY_HEADERS,
)
from .web_acl import (
    BODY_RULES as BODY_RULES,
)
from .web_acl import (
    COUNTED_RULES as COUNTED_RULES,
)
from .web_acl import (
    add_web_acl,
    web_acl_rules,
)
from .web_acl import (
    prediction_path_regexes as prediction_path_regexes,
)

NOT_FOUND_BODY = json.dumps(
    {"error": {"code": "not_found", "message": "No model is served at this path; use /<model-name>/predict"}}
)


def default_subnets(vpc: ec2.IVpc, *, internet_facing: bool) -> ec2.SubnetSelection:
    """Public subnets for an internet-facing load balancer; an internal one in the VPC's isolated subnets where it has
    them (InferenceNetwork's), else its private subnets with egress (a team's VPC, imported without isolated ones)."""
    if internet_facing:
        return public_subnets(vpc, "InferenceLoadBalancer")
    if vpc.isolated_subnets:
        return ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
    return private_subnets(vpc, "InferenceLoadBalancer (internal)")


class InferenceLoadBalancer(Construct, ServiceRoute):
    """Attributes: ``load_balancer``, ``listener`` (the one that routes to models), ``security_group``,
    ``web_acl`` (or None), ``idle_timeout_seconds``, ``waf_rate_limit`` (per client IP) and ``waf_rate_limit_per_key``
    (per API key, in x-api-key or Authorization: Bearer), both per 5 minutes. Models attach with
    :meth:`add_model_route`.

    ``longest_request_seconds`` is the longest request of the models it will carry
    (``ModelProps.longest_request_seconds``): the idle timeout is derived from it
    (:meth:`LoadBalancerProps.idle_timeout_for`), and a ModelService whose server
    takes longer, or keeps connections alive for less, is refused when it attaches. ``subnets`` (default: public
    subnets when internet-facing; else the VPC's isolated subnets, or its private ones where it has none) is where
    the load balancer's nodes are.

    A ServiceRoute: a ModelService given it as ``route`` gets a rule on ``listener`` whose priority is derived from the
    model's name (``LoadBalancerRoute(load_balancer, priority)`` for one of your choosing)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        props: LoadBalancerProps,
        access_logs_bucket: s3.IBucket,
        configured_load: ConfiguredLoad | None = None,
        longest_request_seconds: int | None = None,
        subnets: ec2.SubnetSelection | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        props.check_certificate_region(cdk.Stack.of(self).region)
        self.props = props
        self.idle_timeout_seconds = props.idle_timeout_for(longest_request_seconds)
        self.waf_rate_limit = props.waf_rate_limit(configured_load)
        # Per API key: the busiest model's configured peak (one key may drive one model to its peak), whatever the
        # per-IP limit (which may be raised for many clients behind one address).
        self.waf_rate_limit_per_key = (
            peak_rate_limit(configured_load) if configured_load is not None else self.waf_rate_limit
        )
        self._vpc = vpc
        self._target_ports: set[int] = set()
        self._target_groups: set[str] = set()
        self._rules = 0
        self.security_group = self._client_security_group(vpc, props)
        self.load_balancer = self._application_load_balancer(vpc, props, access_logs_bucket, subnets)
        self.listener = self._listener(props)
        self._acknowledge_openness(props)
        self.prediction_routes: tuple[str, ...] = SHIPPED_PREDICTION_ROUTES
        self.web_acl = add_web_acl(self, self.load_balancer, self._web_acl_rules()) if props.waf else None
        self._priorities = ListenerPriorities()

    def _client_security_group(self, vpc: ec2.IVpc, props: LoadBalancerProps) -> ec2.SecurityGroup:
        """The load balancer's own group: the listener ports from the configured clients, no egress until a model's
        port is allowed (:meth:`allow_to_targets_on`)."""
        security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="Inference load balancer: HTTP(S) from the configured clients",
            allow_all_outbound=False,
        )
        ports = [ec2.Port.tcp(443)] if props.certificate_arn else []
        ports += [ec2.Port.tcp(80)]
        for cidr in props.ingress_cidrs:
            peer = ec2.Peer.ipv4(cidr) if ":" not in cidr else ec2.Peer.ipv6(cidr)
            for port in ports:
                security_group.add_ingress_rule(peer, port, "clients")
        return security_group

    def _application_load_balancer(
        self,
        vpc: ec2.IVpc,
        props: LoadBalancerProps,
        access_logs_bucket: s3.IBucket,
        subnets: ec2.SubnetSelection | None,
    ) -> elbv2.ApplicationLoadBalancer:
        load_balancer = elbv2.ApplicationLoadBalancer(
            self,
            "LoadBalancer",
            vpc=vpc,
            internet_facing=props.internet_facing,
            vpc_subnets=subnets or default_subnets(vpc, internet_facing=props.internet_facing),
            # The balancer sees its group as immutable, so attaching a target group adds no egress rule per model
            # (a group holds 60 rules by default); allow_to_targets_on adds one rule to the VPC instead.
            security_group=ec2.SecurityGroup.from_security_group_id(
                self, "SecurityGroupAsSeenByTargets", self.security_group.security_group_id, mutable=False
            ),
            drop_invalid_header_fields=True,
            deletion_protection=props.deletion_protection,
            idle_timeout=cdk.Duration.seconds(self.idle_timeout_seconds),
            http2_enabled=True,
        )
        load_balancer.log_access_logs(access_logs_bucket, prefix="alb")
        return load_balancer

    def _listener(self, props: LoadBalancerProps) -> elbv2.ApplicationListener:
        """The listener models attach to: HTTPS (port 80 redirects) with a certificate, else HTTP; unknown paths 404."""
        not_found = elbv2.ListenerAction.fixed_response(
            404, content_type="application/json", message_body=NOT_FOUND_BODY
        )
        if props.certificate_arn:
            listener = self.load_balancer.add_listener(
                "Https",
                port=443,
                protocol=elbv2.ApplicationProtocol.HTTPS,
                certificates=[acm.Certificate.from_certificate_arn(self, "Certificate", props.certificate_arn)],
                ssl_policy=elbv2.SslPolicy.RECOMMENDED_TLS,
                default_action=not_found,
                open=False,
            )
            self.load_balancer.add_listener(
                "HttpRedirect",
                port=80,
                protocol=elbv2.ApplicationProtocol.HTTP,
                default_action=elbv2.ListenerAction.redirect(protocol="HTTPS", port="443", permanent=True),
                open=False,
            )
        else:
            listener = self.load_balancer.add_listener(
                "Http", port=80, protocol=elbv2.ApplicationProtocol.HTTP, default_action=not_found, open=False
            )
        return listener

    def _acknowledge_openness(self, props: LoadBalancerProps) -> None:
        """The scanners' findings that plain HTTP (dev) and an internet-facing endpoint are meant."""
        if not props.certificate_arn:
            for check in ("CKV_AWS_2", "CKV_AWS_103"):
                skip_checkov(
                    self.listener,
                    check,
                    "Plain HTTP only where the config says allow_http and gives no certificate (dev); staging and prod "
                    "serve HTTPS with a TLS 1.2+ policy and redirect port 80 (tests/infra/test_service.py).",
                )
        if props.internet_facing and "0.0.0.0/0" in props.ingress_cidrs:
            skip_checkov(
                self.security_group,
                "CKV_AWS_260",
                "An internet-facing endpoint takes clients from anywhere; with a certificate, port 80 only answers a "
                "301 redirect to HTTPS; without one (dev, allow_http) it is the endpoint. "
                "Narrow ingress_cidrs to restrict.",
            )
            acknowledge(
                default_child(self.security_group),
                "AwsSolutions-EC23",
                "An internet-facing inference endpoint must accept clients from anywhere on its listener ports; "
                "narrow ingress_cidrs in config for a partner-only endpoint. WAF (config: waf) filters requests.",
            )

    def add_prediction_routes(self, routes: Sequence[str]) -> None:
        """Keep the web ACL's body rules off ``routes`` too (a model's server contract's ``prediction_routes``)."""
        merged = ordered_routes((*self.prediction_routes, *routes))
        if merged == self.prediction_routes:
            return
        self.prediction_routes = merged
        if self.web_acl is not None:
            self.web_acl.rules = self._web_acl_rules()

    def _web_acl_rules(self) -> list[wafv2.CfnWebACL.RuleProperty | cdk.IResolvable]:
        return web_acl_rules(self.waf_rate_limit, self.waf_rate_limit_per_key, self.prediction_routes)

    def add_model_route(
        self,
        model_name: str,
        target_group: elbv2.IApplicationTargetGroup,
        alternate_target_group: elbv2.IApplicationTargetGroup | None = None,
        *,
        scope: Construct | None = None,
        paths: Sequence[str] = (),
        priority: int | None = None,
        prediction_routes: Sequence[str] = (),
    ) -> elbv2.ApplicationListenerRule:
        """Forward ``/<model_name>`` and ``/<model_name>/*`` to ``target_group`` (the server serves under that prefix);
        with ``paths`` (patterns below the prefix, such as ``/v1/*``) only those.

        The rule is created in ``scope`` (default: this construct); a model in its own stack passes itself,
        so the rule lives, and is replaced or deleted, with the model.

        With ``alternate_target_group`` the rule forwards weighted to both (100 / 0): ECS's canary, linear and
        blue/green deployments shift those weights. CloudFormation rewrites a rule's weights only when the rule's
        own template changes (aws/aws-cdk#36649), so nothing in it may depend on other models: its priority is
        ``priority`` when given, else derived from the name alone. Two models with one priority are an error
        naming both, never resolved by moving one (which would depend on which model came first).

        ``prediction_routes`` (the server contract's) are kept clear of the web ACL's body rules
        (:meth:`add_prediction_routes`).
        """
        self.add_prediction_routes(prediction_routes)
        self._rules += 1
        self._target_groups.update(
            cdk.Names.unique_id(t) for t in (target_group, alternate_target_group) if t is not None
        )
        self.props.quotas.check(self._rules, len(self._target_groups), 0, key=f"models ({model_name})")
        if alternate_target_group is None:
            action = elbv2.ListenerAction.forward([target_group])
        else:
            action = elbv2.ListenerAction.weighted_forward(
                [
                    elbv2.WeightedTargetGroup(target_group=target_group, weight=100),
                    elbv2.WeightedTargetGroup(target_group=alternate_target_group, weight=0),
                ]
            )
        return elbv2.ApplicationListenerRule(
            scope or self,
            f"Route-{model_name}" if scope is None else "Route",
            listener=self.listener,
            priority=self._priorities.claim(model_name, priority, f"models[{model_name}].listener_priority"),
            conditions=[elbv2.ListenerCondition.path_patterns(model_path_patterns(model_name, paths))],
            action=action,
        )

    def bind(self, service: Construct, priority: int | None = None) -> BoundRoute:
        """``service``'s route on this load balancer: its rule at ``priority``, else derived from the model's name."""
        return LoadBalancerBinding(
            self.listener,
            load_balancer_full_name=self.load_balancer.load_balancer_full_name,
            idle_timeout_seconds=self.idle_timeout_seconds,
            open_to_the_internet=self.props.open_to_the_internet,
            balancer=self,
            rule_priority=priority,
        )

    def allow_to(self, peer: ec2.IConnectable, port: ec2.Port) -> None:
        self.security_group.connections.allow_to(peer, port, "load balancer to model tasks")

    def allow_to_targets_on(self, port: int) -> None:
        """One egress rule to the VPC on a targets' port, however many models: a rule per model's security group
        would pass the 60 rules a security group holds by default. Each model's group admits only this one."""
        if port not in self._target_ports:
            try:
                cidr = self._vpc.vpc_cidr_block
            except RuntimeError:  # jsii: an imported VPC without vpc_cidr_block
                raise ConfigError(
                    "vpc",
                    "the load balancer's egress rule to the model tasks needs the VPC's CIDR; "
                    "pass vpc_cidr_block to ec2.Vpc.from_vpc_attributes",
                ) from None
            self._target_ports.add(port)
            self.security_group.add_egress_rule(ec2.Peer.ipv4(cidr), ec2.Port.tcp(port), "model tasks in the VPC")

    @property
    def base_url(self) -> str:
        scheme = "https" if self.props.certificate_arn else "http"
        return f"{scheme}://{self.load_balancer.load_balancer_dns_name}"


@dataclass(frozen=True, kw_only=True)
class LoadBalancerBinding(BoundRoute):
    """A model's route on an InferenceLoadBalancer: the load balancer makes the rule and claims its priority
    (``rule_priority``, else derived from the model's name) and keeps one egress rule per task port."""

    balancer: InferenceLoadBalancer
    """The load balancer. Required."""
    rule_priority: int | None = None
    """The rule's priority. Default: None (derived from the model's name)."""

    def add_rule(self, service: Construct, rule: RouteRule) -> elbv2.ApplicationListenerRule:
        return self.balancer.add_model_route(
            rule.model_name,
            *rule.target_groups,
            scope=service,
            paths=rule.paths,
            priority=self.rule_priority,
            prediction_routes=rule.prediction_routes,
        )

    def allow_traffic(self, tasks: ec2.SecurityGroup, port: int) -> None:
        # Attaching the target group admits the balancer's group on the traffic port; it needs one egress rule.
        self.balancer.allow_to_targets_on(port)

    def allow_port(self, tasks: ec2.SecurityGroup, port: int, why: str) -> None:
        self.balancer.allow_to_targets_on(port)
        tasks.connections.allow_from(self.balancer.load_balancer, ec2.Port.tcp(port), f"load balancer: {why}")
