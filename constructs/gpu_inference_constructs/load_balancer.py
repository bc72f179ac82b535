"""One Application Load Balancer in front of every model service, routing by URL path."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from .acknowledgements import acknowledge, default_child, skip_checkov
from .errors import ConfigError, require, require_range
from .load_balancer_limits import (
    ALB_DEFAULT_IDLE_TIMEOUT_SECONDS,
    ALB_MAX_IDLE_TIMEOUT_SECONDS,
    IDLE_TIMEOUT_MARGIN_SECONDS,
)
from .subnet_selection import private_subnets, public_subnets

MAX_RULE_PRIORITY = 50_000
# Paths, below a model's prefix, whose bodies are prediction inputs: texts that may hold HTML, paths or URLs, which
# the common rule set's body rules block. Those rules count everywhere and block only off these paths (rule
# BodyRulesOffPredictions). The bundled server's routes (/predict, /predict/batch, OpenAI /v1/embeddings, Open
# Inference Protocol /v2/models/<m>[/versions/<v>]/infer) and vLLM's OpenAI routes; ``{name}`` is one path segment.
# tests/infra/test_service.py derives the bundled server's POST routes from its own app and proves each is here.
PREDICTION_PATHS = (
    "/predict",
    "/predict/batch",
    "/v1/embeddings",
    "/v1/completions",
    "/v1/chat/completions",
    "/v2/models/{model}/infer",
    "/v2/models/{model}/versions/{version}/infer",
)
COMMON_RULE_SET = "AWSManagedRulesCommonRuleSet"
KNOWN_BAD_INPUTS = "AWSManagedRulesKnownBadInputsRuleSet"
CORE_RULE_SET_LABEL = "awswaf:managed:aws:core-rule-set:"
KNOWN_BAD_INPUTS_LABEL = "awswaf:managed:aws:known-bad-inputs:"
# Every rule, in the managed rule groups the web ACL uses, that inspects the request body, with the label it adds
# (AWS WAF developer guide, "Baseline rule groups": core rule set, known bad inputs). Each counts (it only labels), and
# BodyRulesOffPredictions blocks on its label everywhere but on the prediction paths: prediction bodies are texts, and
# a legitimate one may hold HTML (cross-site scripting), paths or URLs (file inclusion, the metadata address), a
# Log4Shell string (a security model classifying logs) or Java code (a code model's prompt). The size rule is only
# counted: inference payloads exceed 8 KB and the server enforces its own limit (413).
BODY_RULES = {
    COMMON_RULE_SET: {
        "SizeRestrictions_BODY": None,
        "CrossSiteScripting_BODY": CORE_RULE_SET_LABEL + "CrossSiteScripting_Body",
        "GenericLFI_BODY": CORE_RULE_SET_LABEL + "GenericLFI_Body",
        "GenericRFI_BODY": CORE_RULE_SET_LABEL + "GenericRFI_Body",
        "EC2MetaDataSSRF_BODY": CORE_RULE_SET_LABEL + "EC2MetaDataSSRF_Body",
    },
    KNOWN_BAD_INPUTS: {
        "Log4JRCE_BODY": KNOWN_BAD_INPUTS_LABEL + "Log4JRCE_Body",
        "JavaDeserializationRCE_BODY": KNOWN_BAD_INPUTS_LABEL + "JavaDeserializationRCE_Body",
    },
}
# Managed rules that count everywhere, and why. NoUserAgent_HEADER blocks a request without a User-Agent header: API
# clients need not send one (a service's own HTTP client, curl -A '', many SDK-less integrations), and on an API that
# authenticates every inference request with its key, a missing User-Agent tells nothing about the caller.
# The headers a client's API key arrives in (the bundled server takes both; vLLM takes the bearer form), with the
# text transformations that make each key one aggregation instance of its rate-based rule: x-api-key is compared
# exactly by the servers, so as sent; "Authorization: Bearer <key>" is taken with the scheme in any case and the key
# trimmed, so lowercased (the scheme; a generated key differing only in case is no other valid key) and with
# whitespace runs compressed. Without them one leaked key would be many instances (BEARER, bearer, extra spaces),
# each with the full limit.
API_KEY_HEADERS = (
    ("RateLimitPerApiKey", "x-api-key", ("NONE",)),
    ("RateLimitPerBearerToken", "authorization", ("LOWERCASE", "COMPRESS_WHITE_SPACE")),
)
COUNTED_RULES = {
    COMMON_RULE_SET: {"NoUserAgent_HEADER": "API clients need not send a User-Agent; the API key, not the header, says who calls"},
}
RATE_WINDOW_MINUTES = 5


@dataclass(frozen=True)
class ConfiguredLoad:
    """What the models behind the load balancer are configured to serve, in requests per minute: one task of the
    busiest model (its ``requests_per_target_per_minute``) and the busiest model at ``max_tasks``."""

    one_task: int
    one_model_at_peak: int
    busiest_model: str = "the busiest model"


@dataclass(frozen=True)
class LoadBalancerQuotas:
    """Elastic Load Balancing quotas of the account (defaults: 100 rules besides the default ones, 100 target
    groups, 1000 targets per Application Load Balancer); raise them in Service Quotas and say so here."""

    listener_rules: int = 100
    target_groups: int = 100
    targets: int = 1000

    def check(self, rules: int, target_groups: int, targets: int, key: str = "models") -> None:
        for count, limit, what, field_name in (
            (rules, self.listener_rules, "listener rules (one per model)", "listener_rules"),
            (target_groups, self.target_groups, "target groups (one per model, two with canary, linear or blue/green)", "target_groups"),
            (targets, self.targets, "targets at peak while one model deploys (one per task)", "targets"),
        ):
            require(
                count <= limit,
                key,
                f"{count} {what} exceed the load balancer's quota of {limit}: serve fewer models or tasks on this load "
                f"balancer (spread them over more), or raise the quota with AWS and set load_balancer.quotas.{field_name}",
            )
NOT_FOUND_BODY = json.dumps({"error": {"code": "not_found", "message": "No model is served at this path; use /<model-name>/predict"}})


@dataclass(frozen=True)
class LoadBalancerProps:
    internet_facing: bool = True
    certificate_arn: str | None = None
    allow_http: bool = False
    ingress_cidrs: tuple[str, ...] = ("0.0.0.0/0",)
    # Default: derived from the longest request of the models behind the load balancer (idle_timeout_for).
    idle_timeout_seconds: int | None = None
    deletion_protection: bool = True
    waf: bool = False
    # Requests per client IP in 5 minutes; default: what the busiest model serves at max_tasks.
    waf_rate_limit_per_5_minutes: int | None = None
    quotas: LoadBalancerQuotas = LoadBalancerQuotas()

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
        if self.idle_timeout_seconds is not None:
            require_range(self.idle_timeout_seconds, 1, ALB_MAX_IDLE_TIMEOUT_SECONDS, "idle_timeout_seconds")
        require(bool(self.ingress_cidrs), "ingress_cidrs", "list at least one CIDR that may reach the load balancer")
        networks = []
        for index, cidr in enumerate(self.ingress_cidrs):
            try:
                networks.append(ipaddress.ip_network(cidr, strict=True))
            except ValueError as error:
                raise ConfigError(f"ingress_cidrs[{index}]", f"{cidr!r} is not a CIDR block ({error})") from None
        world = [str(network) for network in networks if open_to_the_world(network)]
        require(
            self.certificate_arn is not None or not self.open_to_the_internet,
            "allow_http",
            f"plain HTTP on an internet-facing load balancer open to {', '.join(world)} would carry every client's API "
            "key across the internet in cleartext; set certificate_arn (an ACM certificate in the load balancer's "
            "region: HTTPS, and port 80 only redirects), or narrow ingress_cidrs to the team's own network, or set "
            "internet_facing: false for a load balancer reachable only inside the VPC",
        )
        if self.waf_rate_limit_per_5_minutes is not None:
            require(
                100 <= self.waf_rate_limit_per_5_minutes <= 2_000_000_000,
                "waf_rate_limit_per_5_minutes",
                f"{self.waf_rate_limit_per_5_minutes} is out of range; WAF allows 100 to 2000000000",
            )

    @property
    def open_to_the_internet(self) -> bool:
        """Internet-facing, and some ingress CIDR takes in a good part of the internet (open_to_the_world)."""
        return self.internet_facing and any(open_to_the_world(ipaddress.ip_network(cidr)) for cidr in self.ingress_cidrs)

    def idle_timeout_for(self, longest_request_seconds: int | None, model: str = "a model") -> int:
        """The ALB idle timeout for models whose longest request (the server's request timeout, vLLM's longest
        generation) is ``longest_request_seconds`` (None: no model yet): ``idle_timeout_seconds`` when set, else that
        request plus the margin, at least the ALB's default 60 s. A request the ALB cannot carry (past 4000 s less the
        margin), or an explicit timeout it would outlast, is refused naming ``model``."""
        if longest_request_seconds is None:
            return self.idle_timeout_seconds or ALB_DEFAULT_IDLE_TIMEOUT_SECONDS
        need = longest_request_seconds + IDLE_TIMEOUT_MARGIN_SECONDS
        require(
            need <= ALB_MAX_IDLE_TIMEOUT_SECONDS,
            "idle_timeout_seconds",
            f"{model}'s longest request ({longest_request_seconds} s) + {IDLE_TIMEOUT_MARGIN_SECONDS} s is more than the "
            f"{ALB_MAX_IDLE_TIMEOUT_SECONDS} s idle timeout an Application Load Balancer allows: a response that sends "
            "nothing for that long gets an ELB 504; bound the request (its request timeout, max_tokens) or stream the response",
        )
        if self.idle_timeout_seconds is None:
            return max(ALB_DEFAULT_IDLE_TIMEOUT_SECONDS, need)
        require(
            self.idle_timeout_seconds >= need,
            "idle_timeout_seconds",
            f"{self.idle_timeout_seconds} s is shorter than {model}'s longest request ({longest_request_seconds} s) + "
            f"{IDLE_TIMEOUT_MARGIN_SECONDS} s: the load balancer would answer 504 before the server does; set at least "
            f"{need}, or leave idle_timeout_seconds out to derive it from the models",
        )
        return self.idle_timeout_seconds

    def waf_rate_limit(self, load: ConfiguredLoad | None) -> int:
        """The per-IP limit: as configured, else the busiest model's configured peak (``requests_per_target_per_minute``
        at ``max_tasks``, over WAF's 5-minute window); never below that peak: one client (a backend behind one NAT
        address, say) may drive a model to its peak, and a lower limit answers it 403 before scaling reaches it."""
        if load is None:
            return self.waf_rate_limit_per_5_minutes or 2000
        if self.waf_rate_limit_per_5_minutes is None:
            return peak_rate_limit(load)
        peak = load.one_model_at_peak * RATE_WINDOW_MINUTES
        require(
            self.waf_rate_limit_per_5_minutes >= peak,
            "waf_rate_limit_per_5_minutes",
            f"{self.waf_rate_limit_per_5_minutes} is below {load.busiest_model}'s configured peak ({load.one_model_at_peak} "
            f"requests a minute at max_tasks = {peak} in 5 minutes): WAF would answer one client 403 before the model scales "
            f"to its maximum; set at least {peak}, or leave it out to derive it from the peak",
        )
        return self.waf_rate_limit_per_5_minutes

    def check_certificate_region(self, region: str) -> None:
        if self.certificate_arn is not None:
            require(
                self.certificate_arn.split(":")[3] == region,
                "certificate_arn",
                f"{self.certificate_arn!r} is not in region {region!r}; an ALB needs a certificate from its own region",
            )


def open_to_the_world(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    """A CIDR that takes in a good part of the internet: any IPv4 block wider than a /8 (16.7 million addresses),
    any IPv6 block wider than a /32 (a regional registry's allocation to one network); a team's network is
    narrower."""
    return network.prefixlen < (8 if network.version == 4 else 32) and not network.is_private


def default_subnets(vpc: ec2.IVpc, *, internet_facing: bool) -> ec2.SubnetSelection:
    """Public subnets for an internet-facing load balancer; an internal one in the VPC's isolated subnets where it has
    them (InferenceNetwork's), else its private subnets with egress (a team's VPC, imported without isolated ones)."""
    if internet_facing:
        return public_subnets(vpc, "InferenceLoadBalancer")
    if vpc.isolated_subnets:
        return ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
    return private_subnets(vpc, "InferenceLoadBalancer (internal)")


class InferenceLoadBalancer(Construct):
    """Attributes: ``load_balancer``, ``listener`` (the one that routes to models), ``security_group``,
    ``web_acl`` (or None), ``idle_timeout_seconds``, ``waf_rate_limit`` (per client IP) and ``waf_rate_limit_per_key``
    (per API key, in x-api-key or Authorization: Bearer), both per 5 minutes. Models attach with :meth:`add_model_route`.

    ``longest_request_seconds`` is the longest request of the models it will carry (``ModelProps.longest_request_seconds``):
    the idle timeout is derived from it (:meth:`LoadBalancerProps.idle_timeout_for`), and a ModelService whose server
    takes longer, or keeps connections alive for less, is refused when it attaches. ``subnets`` (default: public
    subnets when internet-facing; else the VPC's isolated subnets, or its private ones where it has none) is where
    the load balancer's nodes are."""

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
        self.waf_rate_limit_per_key = peak_rate_limit(configured_load) if configured_load is not None else self.waf_rate_limit
        self._vpc = vpc
        self._target_ports: set[int] = set()
        self._target_groups: set[str] = set()
        self._rules = 0
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

        if not props.certificate_arn:
            for check in ("CKV_AWS_2", "CKV_AWS_103"):
                skip_checkov(
                    self.listener, check,
                    "Plain HTTP only where the config says allow_http and gives no certificate (dev); staging and prod "
                    "serve HTTPS with a TLS 1.2+ policy and redirect port 80 (tests/infra/test_service.py).",
                )
        if props.internet_facing and "0.0.0.0/0" in props.ingress_cidrs:
            skip_checkov(
                self.security_group, "CKV_AWS_260",
                "An internet-facing endpoint takes clients from anywhere; with a certificate, port 80 only answers a "
                "301 redirect to HTTPS; without one (dev, allow_http) it is the endpoint. Narrow ingress_cidrs to restrict.",
            )
            acknowledge(
                default_child(self.security_group),
                "AwsSolutions-EC23",
                "An internet-facing inference endpoint must accept clients from anywhere on its listener ports; "
                "narrow ingress_cidrs in config for a partner-only endpoint. WAF (config: waf) filters requests.",
            )
        self.web_acl = self._add_web_acl(props) if props.waf else None
        self._priorities: dict[int, str] = {}  # priority -> the model whose rule has it

    def add_model_route(
        self,
        model_name: str,
        target_group: elbv2.IApplicationTargetGroup,
        alternate_target_group: elbv2.IApplicationTargetGroup | None = None,
        *,
        scope: Construct | None = None,
        paths: Sequence[str] = (),
        priority: int | None = None,
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
        """
        self._rules += 1
        self._target_groups.update(cdk.Names.unique_id(t) for t in (target_group, alternate_target_group) if t is not None)
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
            priority=claim_priority(self._priorities, model_name, priority, f"models[{model_name}].listener_priority"),
            conditions=[elbv2.ListenerCondition.path_patterns(model_path_patterns(model_name, paths))],
            action=action,
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
                    "vpc", "the load balancer's egress rule to the model tasks needs the VPC's CIDR; "
                    "pass vpc_cidr_block to ec2.Vpc.from_vpc_attributes"
                ) from None
            self._target_ports.add(port)
            self.security_group.add_egress_rule(ec2.Peer.ipv4(cidr), ec2.Port.tcp(port), "model tasks in the VPC")

    @property
    def base_url(self) -> str:
        scheme = "https" if self.props.certificate_arn else "http"
        return f"{scheme}://{self.load_balancer.load_balancer_dns_name}"

    def _add_web_acl(self, props: LoadBalancerProps) -> wafv2.CfnWebACL:
        def managed(name: str, priority: int) -> wafv2.CfnWebACL.RuleProperty:
            counted = [*BODY_RULES.get(name, {}), *COUNTED_RULES.get(name, {})]
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
                            for rule in counted
                        ]
                        or None,
                    )
                ),
                visibility_config=_visibility(name),
            )

        rules = [
            *self._rate_limits(),
            managed("AWSManagedRulesAmazonIpReputationList", 0),
            managed(COMMON_RULE_SET, 0),
            managed(KNOWN_BAD_INPUTS, 0),
            # After both groups, so their body rules' labels are on the request.
            self._body_rules_off_predictions(priority=0),
        ]
        acl = wafv2.CfnWebACL(
            self,
            "WebAcl",
            scope="REGIONAL",
            default_action=wafv2.CfnWebACL.DefaultActionProperty(allow={}),
            visibility_config=_visibility("InferenceWebAcl"),
            rules=[_with_priority(rule, priority) for priority, rule in enumerate(rules)],
        )
        wafv2.CfnWebACLAssociation(self, "WebAclAssociation", resource_arn=self.load_balancer.load_balancer_arn, web_acl_arn=acl.attr_arn)
        return acl

    def _rate_limits(self) -> list[wafv2.CfnWebACL.RuleProperty]:
        """Per client IP, and per API key in each header the servers take it from: a leaked key used from many
        addresses is held to one model's configured peak. A custom-key rule skips requests without its header (AWS
        WAF developer guide, rate-based rule aggregation), so each header form needs its own rule."""
        def rule(name: str, **statement) -> wafv2.CfnWebACL.RuleProperty:
            return wafv2.CfnWebACL.RuleProperty(
                name=name, priority=0, action=wafv2.CfnWebACL.RuleActionProperty(block={}),
                statement=wafv2.CfnWebACL.StatementProperty(rate_based_statement=wafv2.CfnWebACL.RateBasedStatementProperty(**statement)),
                visibility_config=_visibility(name),
            )

        per_key = [
            rule(name, limit=self.waf_rate_limit_per_key, aggregate_key_type="CUSTOM_KEYS", custom_keys=[
                wafv2.CfnWebACL.RateBasedStatementCustomKeyProperty(header=wafv2.CfnWebACL.RateLimitHeaderProperty(
                    name=header,
                    text_transformations=[wafv2.CfnWebACL.TextTransformationProperty(priority=p, type=t) for p, t in enumerate(transformations)],
                ))
            ])
            for name, header, transformations in API_KEY_HEADERS
        ]
        return [rule("RateLimitPerClientIp", limit=self.waf_rate_limit, aggregate_key_type="IP"), *per_key]

    @staticmethod
    def _body_rules_off_predictions(priority: int) -> wafv2.CfnWebACL.RuleProperty:
        statement = wafv2.CfnWebACL.StatementProperty

        def label(key: str) -> wafv2.CfnWebACL.StatementProperty:
            return statement(label_match_statement=wafv2.CfnWebACL.LabelMatchStatementProperty(scope="LABEL", key=key))

        # A regex match on the URI path per prediction path (3 WCUs each), each anchored and without groups or
        # alternation (AWS WAF rejects capturing groups and limits '|' branches). The path as sent: no query string,
        # no transformation.
        predictions = statement(or_statement=wafv2.CfnWebACL.OrStatementProperty(statements=[
            statement(regex_match_statement=wafv2.CfnWebACL.RegexMatchStatementProperty(
                field_to_match=wafv2.CfnWebACL.FieldToMatchProperty(uri_path={}),
                regex_string=regex,
                text_transformations=[wafv2.CfnWebACL.TextTransformationProperty(priority=0, type="NONE")],
            ))
            for regex in prediction_path_regexes()
        ]))
        found = [label(key) for rules in BODY_RULES.values() for key in rules.values() if key is not None]
        return wafv2.CfnWebACL.RuleProperty(
            name="BodyRulesOffPredictions",
            priority=priority,
            action=wafv2.CfnWebACL.RuleActionProperty(block={}),
            statement=statement(and_statement=wafv2.CfnWebACL.AndStatementProperty(statements=[
                statement(or_statement=wafv2.CfnWebACL.OrStatementProperty(statements=found)),
                statement(not_statement=wafv2.CfnWebACL.NotStatementProperty(statement=predictions)),
            ])),
            visibility_config=_visibility("BodyRulesOffPredictions"),
        )


def _with_priority(rule: wafv2.CfnWebACL.RuleProperty, priority: int) -> wafv2.CfnWebACL.RuleProperty:
    """``rule`` at ``priority``: the web ACL's rules run in list order."""
    return wafv2.CfnWebACL.RuleProperty(
        name=rule.name, priority=priority, action=rule.action, override_action=rule.override_action,
        statement=rule.statement, visibility_config=rule.visibility_config,
    )


def peak_rate_limit(load: ConfiguredLoad) -> int:
    """The busiest model's configured peak over WAF's 5-minute window, within what WAF accepts (100 to 2e9 here)."""
    return min(2_000_000_000, max(100, load.one_model_at_peak * RATE_WINDOW_MINUTES))


def prediction_path_regexes(paths: Sequence[str] = PREDICTION_PATHS) -> list[str]:
    """The URI paths ``/<model><path>`` for each of ``paths`` (``{name}``: one path segment), each as an anchored
    regex in the syntax AWS WAF supports (PCRE without groups or alternation here; at most 512 characters)."""
    regexes = ["^/[^/]+" + re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(path)) + "$" for path in paths]
    for regex in regexes:
        require(len(regex) <= 512 and "(" not in regex and "|" not in regex, "prediction paths", f"{regex!r} is not a regex AWS WAF accepts")
    return regexes


def _visibility(name: str) -> wafv2.CfnWebACL.VisibilityConfigProperty:
    return wafv2.CfnWebACL.VisibilityConfigProperty(cloud_watch_metrics_enabled=True, metric_name=name, sampled_requests_enabled=True)


def priority_from_name(model_name: str) -> int:
    """A listener rule priority (1 to 50000) from the model's name alone."""
    return 1 + int.from_bytes(hashlib.sha256(model_name.encode()).digest()[:4], "big") % MAX_RULE_PRIORITY


def check_rule_priority(priority: int, key: str) -> None:
    require_range(priority, 1, MAX_RULE_PRIORITY, key)


def claim_priority(claimed: dict[int, str], model_name: str, priority: int | None, key: str,
                   fix_keys: Callable[[str], str] | None = None) -> int:
    """``model_name``'s listener rule priority (``priority``, else derived from its name), recorded in ``claimed``
    (priority -> model name). One already claimed is an error under ``key`` naming both models and the keys to set
    (``fix_keys(other model)``, default: listener_priority on either)."""
    chosen = priority_from_name(model_name) if priority is None else priority
    check_rule_priority(chosen, key)
    other = claimed.get(chosen)
    if other is not None:
        keys = {} if fix_keys is None else {"keys": fix_keys(other)}
        raise ConfigError(key, duplicate_priority_detail(model_name, priority, other, chosen, **keys))
    claimed[chosen] = model_name
    return chosen


def duplicate_priority_detail(model_name: str, priority: int | None, other: str, chosen: int,
                              keys: str = "listener_priority on one of the two models") -> str:
    how = "its listener_priority" if priority is not None else "derived from its name"
    return (
        f"listener rule priority {chosen} of {model_name!r} ({how}) is already {other!r}'s: set {keys} "
        f"(1-{MAX_RULE_PRIORITY}, unused on the listener). Priorities never move by themselves: moving one would "
        "rewrite that model's rule and reset its traffic weights (aws/aws-cdk#36649)"
    )


MAX_PATH_PATTERN_CHARS = 128  # each path-pattern value (CloudFormation, ListenerRule PathPatternConfig)


def model_path_patterns(model_name: str, paths: Sequence[str] = ()) -> list[str]:
    """The listener rule's path patterns of a model: its whole prefix, or just ``paths`` below it."""
    patterns = [f"/{model_name}{path}" for path in paths] if paths else [f"/{model_name}", f"/{model_name}/*"]
    for pattern in patterns:
        require(len(pattern) <= MAX_PATH_PATTERN_CHARS, "server.public_paths",
                f"{pattern!r} is {len(pattern)} characters; an ALB path pattern holds at most {MAX_PATH_PATTERN_CHARS}")
    return patterns
