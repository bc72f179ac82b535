"""One Application Load Balancer in front of every model service, routing by URL path."""

from __future__ import annotations

import hashlib
import ipaddress
import json
from dataclasses import dataclass
from typing import Optional

import aws_cdk as cdk
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from .acknowledgements import acknowledge
from .errors import ConfigError, require, require_range

MAX_RULE_PRIORITY = 50_000
NOT_FOUND_BODY = json.dumps({"error": {"code": "not_found", "message": "No model is served at this path; use /<model-name>/predict"}})


@dataclass(frozen=True)
class LoadBalancerProps:
    internet_facing: bool = True
    certificate_arn: Optional[str] = None
    allow_http: bool = False
    ingress_cidrs: tuple[str, ...] = ("0.0.0.0/0",)
    idle_timeout_seconds: int = 60
    deletion_protection: bool = True
    waf: bool = False
    waf_rate_limit_per_5_minutes: int = 2000

    def __post_init__(self) -> None:
        require(
            self.certificate_arn is not None or self.allow_http,
            "certificate_arn",
            "is not set and allow_http is false; set an ACM certificate ARN for HTTPS, or allow_http: true for a development environment",
        )
        if self.certificate_arn is not None:
            require(
                self.certificate_arn.startswith("arn:aws") and ":acm:" in self.certificate_arn and ":certificate/" in self.certificate_arn,
                "certificate_arn",
                f"{self.certificate_arn!r} is not an ACM certificate ARN (arn:aws:acm:<region>:<account>:certificate/<id>)",
            )
        require_range(self.idle_timeout_seconds, 1, 4000, "idle_timeout_seconds")
        require(bool(self.ingress_cidrs), "ingress_cidrs", "list at least one CIDR that may reach the load balancer")
        for index, cidr in enumerate(self.ingress_cidrs):
            try:
                ipaddress.ip_network(cidr, strict=True)
            except ValueError as error:
                raise ConfigError(f"ingress_cidrs[{index}]", f"{cidr!r} is not a CIDR block ({error})") from None
        require(
            100 <= self.waf_rate_limit_per_5_minutes <= 2_000_000_000,
            "waf_rate_limit_per_5_minutes",
            f"{self.waf_rate_limit_per_5_minutes} is out of range; WAF allows 100 to 2000000000",
        )

    def check_certificate_region(self, region: str) -> None:
        if self.certificate_arn is not None:
            require(
                self.certificate_arn.split(":")[3] == region,
                "certificate_arn",
                f"{self.certificate_arn!r} is not in region {region!r}; an ALB needs a certificate from its own region",
            )


class InferenceLoadBalancer(Construct):
    """Attributes: ``load_balancer``, ``listener`` (the one that routes to models), ``security_group``,
    ``web_acl`` (or None). Models attach with :meth:`add_model_route`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        props: LoadBalancerProps,
        access_logs_bucket: s3.IBucket,
    ) -> None:
        super().__init__(scope, construct_id)
        props.check_certificate_region(cdk.Stack.of(self).region)
        self.props = props
        self.security_group = ec2.SecurityGroup(
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
                self.security_group.add_ingress_rule(peer, port, "clients")

        self.load_balancer = elbv2.ApplicationLoadBalancer(
            self,
            "LoadBalancer",
            vpc=vpc,
            internet_facing=props.internet_facing,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC if props.internet_facing else ec2.SubnetType.PRIVATE_ISOLATED),
            security_group=self.security_group,
            drop_invalid_header_fields=True,
            deletion_protection=props.deletion_protection,
            idle_timeout=cdk.Duration.seconds(props.idle_timeout_seconds),
            http2_enabled=True,
        )
        self.load_balancer.log_access_logs(access_logs_bucket, prefix="alb")

        not_found = elbv2.ListenerAction.fixed_response(404, content_type="application/json", message_body=NOT_FOUND_BODY)
        if props.certificate_arn:
            self.listener = self.load_balancer.add_listener(
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
            self.listener = self.load_balancer.add_listener(
                "Http", port=80, protocol=elbv2.ApplicationProtocol.HTTP, default_action=not_found, open=False
            )

        if props.internet_facing and "0.0.0.0/0" in props.ingress_cidrs:
            acknowledge(
                self.security_group.node.default_child,
                "AwsSolutions-EC23",
                "An internet-facing inference endpoint must accept clients from anywhere on its listener ports; "
                "narrow ingress_cidrs in config for a partner-only endpoint. WAF (config: waf) filters requests.",
            )
        self.web_acl = self._add_web_acl(props) if props.waf else None
        self._priorities: set[int] = set()

    def add_model_route(
        self,
        model_name: str,
        target_group: elbv2.IApplicationTargetGroup,
        alternate_target_group: Optional[elbv2.IApplicationTargetGroup] = None,
        *,
        scope: Optional[Construct] = None,
    ) -> elbv2.ApplicationListenerRule:
        """Forward ``/<model_name>`` and ``/<model_name>/*`` to ``target_group`` (the server serves under that prefix).

        The rule is created in ``scope`` (default: this construct); a model in its own stack passes itself,
        so the rule lives, and is replaced or deleted, with the model.

        With ``alternate_target_group`` the rule forwards weighted to both (100 / 0): ECS's canary, linear and
        blue/green deployments shift those weights. CloudFormation rewrites a rule's weights only when the rule's
        own template changes (aws/aws-cdk#36649), so nothing in it may depend on anything but the model's name:
        its priority is derived from the name, not from the order models are added in.
        """
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
            priority=self._priority_for(model_name),
            conditions=[elbv2.ListenerCondition.path_patterns([f"/{model_name}", f"/{model_name}/*"])],
            action=action,
        )

    def _priority_for(self, model_name: str) -> int:
        """A listener rule priority (1 to 50000) from the model's name alone; the next free one on a collision."""
        priority = 1 + int.from_bytes(hashlib.sha256(model_name.encode()).digest()[:4], "big") % MAX_RULE_PRIORITY
        while priority in self._priorities:
            priority = priority % MAX_RULE_PRIORITY + 1
        self._priorities.add(priority)
        return priority

    def allow_to(self, peer: ec2.IConnectable, port: ec2.Port) -> None:
        self.security_group.connections.allow_to(peer, port, "load balancer to model tasks")

    @property
    def base_url(self) -> str:
        scheme = "https" if self.props.certificate_arn else "http"
        return f"{scheme}://{self.load_balancer.load_balancer_dns_name}"

    def _add_web_acl(self, props: LoadBalancerProps) -> wafv2.CfnWebACL:
        def managed(name: str, priority: int, overrides: tuple[str, ...] = ()) -> wafv2.CfnWebACL.RuleProperty:
            return wafv2.CfnWebACL.RuleProperty(
                name=name,
                priority=priority,
                override_action=wafv2.CfnWebACL.OverrideActionProperty(none={}),
                statement=wafv2.CfnWebACL.StatementProperty(
                    managed_rule_group_statement=wafv2.CfnWebACL.ManagedRuleGroupStatementProperty(
                        vendor_name="AWS",
                        name=name,
                        rule_action_overrides=[
                            wafv2.CfnWebACL.RuleActionOverrideProperty(
                                name=rule, action_to_use=wafv2.CfnWebACL.RuleActionProperty(count={})
                            )
                            for rule in overrides
                        ]
                        or None,
                    )
                ),
                visibility_config=_visibility(name),
            )

        rate_limit = wafv2.CfnWebACL.RuleProperty(
            name="RateLimitPerClientIp",
            priority=0,
            action=wafv2.CfnWebACL.RuleActionProperty(block={}),
            statement=wafv2.CfnWebACL.StatementProperty(
                rate_based_statement=wafv2.CfnWebACL.RateBasedStatementProperty(
                    limit=props.waf_rate_limit_per_5_minutes, aggregate_key_type="IP"
                )
            ),
            visibility_config=_visibility("RateLimitPerClientIp"),
        )
        acl = wafv2.CfnWebACL(
            self,
            "WebAcl",
            scope="REGIONAL",
            default_action=wafv2.CfnWebACL.DefaultActionProperty(allow={}),
            visibility_config=_visibility("InferenceWebAcl"),
            rules=[
                rate_limit,
                managed("AWSManagedRulesAmazonIpReputationList", 1),
                # Inference payloads exceed the common rule set's 8 KB body limit: count, don't block.
                # The server enforces its own limit (MAX_BODY_BYTES) and answers 413.
                managed("AWSManagedRulesCommonRuleSet", 2, overrides=("SizeRestrictions_BODY",)),
                managed("AWSManagedRulesKnownBadInputsRuleSet", 3),
            ],
        )
        wafv2.CfnWebACLAssociation(self, "WebAclAssociation", resource_arn=self.load_balancer.load_balancer_arn, web_acl_arn=acl.attr_arn)
        return acl


def _visibility(name: str) -> wafv2.CfnWebACL.VisibilityConfigProperty:
    return wafv2.CfnWebACL.VisibilityConfigProperty(cloud_watch_metrics_enabled=True, metric_name=name, sampled_requests_enabled=True)
