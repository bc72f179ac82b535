"""The load balancer's props (:class:`LoadBalancerProps`), the account's quotas it checks, and the ALB's timing limits
the models' longest requests must fit."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from .errors import ConfigError, require, require_range

RATE_WINDOW_MINUTES = 5
# An ALB closes a connection on which nothing was sent for its idle timeout (1-4000 s, default 60; Elastic Load
# Balancing user guide, "Connection idle timeout"): a non-streamed response that takes longer gets an ELB 504. The
# derived timeout is the longest request behind the load balancer plus IDLE_TIMEOUT_MARGIN_SECONDS (the server's
# own timeout answer, queueing and the trip back), and never below the ALB's default.
ALB_MAX_IDLE_TIMEOUT_SECONDS = 4000
ALB_DEFAULT_IDLE_TIMEOUT_SECONDS = 60
IDLE_TIMEOUT_MARGIN_SECONDS = 10


@dataclass(frozen=True)
class ConfiguredLoad:
    """What the models behind the load balancer are configured to serve, in requests per minute: one task of the
    busiest model (its ``requests_per_target_per_minute``) and the busiest model at ``max_tasks``."""

    one_task: int
    one_model_at_peak: int
    busiest_model: str = "the busiest model"
    """The busiest model's name, in messages. Default: "the busiest model"."""


@dataclass(frozen=True)
class LoadBalancerQuotas:
    """Elastic Load Balancing quotas of the account (defaults: 100 rules besides the default ones, 100 target
    groups, 1000 targets per Application Load Balancer); raise them in Service Quotas and say so here."""

    listener_rules: int = 100
    """Listener rules besides the default ones. Default: 100."""
    target_groups: int = 100
    """Target groups per load balancer. Default: 100."""
    targets: int = 1000
    """Targets per Application Load Balancer. Default: 1000."""

    def check(self, rules: int, target_groups: int, targets: int, key: str = "models") -> None:
        for count, limit, what, field_name in (
            (rules, self.listener_rules, "listener rules (one per model)", "listener_rules"),
            (
                target_groups,
                self.target_groups,
                "target groups (one per model, two with canary, linear or blue/green)",
                "target_groups",
            ),
            (targets, self.targets, "targets at peak while one model deploys (one per task)", "targets"),
        ):
            require(
                count <= limit,
                key,
                f"{count} {what} exceed the load balancer's quota of {limit}: serve fewer models or tasks on this load "
                "balancer (spread them over more), or raise the quota with AWS and set "
                f"load_balancer.quotas.{field_name}",
            )


@dataclass(frozen=True)
class LoadBalancerProps:
    """The environment's load balancer: who reaches it, over what, its timeouts, WAF and quotas. Defaults: each
    field's, below."""

    internet_facing: bool = True
    """Reachable from the internet (else only inside the VPC). Default: true."""
    certificate_arn: str | None = None
    """An ACM certificate in the load balancer's region: HTTPS, and port 80 only redirects. Default: None (set
    allow_http for plain HTTP)."""
    allow_http: bool = False
    """Serve plain HTTP without a certificate (development; refused where open to the internet). Default: false."""
    ingress_cidrs: tuple[str, ...] = ("0.0.0.0/0",)
    """The CIDR blocks that may reach the listeners. Default: ("0.0.0.0/0",)."""
    idle_timeout_seconds: int | None = None
    """The ALB idle timeout (1-4000). Default: None (derived from the longest request of the models behind it,
    ``idle_timeout_for``)."""
    deletion_protection: bool = True
    """The load balancer refuses deletion. Default: true."""
    waf: bool = False
    """An AWS WAF web ACL with rate limits and AWS's managed rule groups. Default: false."""
    waf_rate_limit_per_5_minutes: int | None = None
    """Requests per client IP in 5 minutes (100-2000000000). Default: None (what the busiest model serves at
    max_tasks)."""
    quotas: LoadBalancerQuotas = LoadBalancerQuotas()
    """The account's Elastic Load Balancing quotas. Default: LoadBalancerQuotas()."""

    def __post_init__(self) -> None:
        require(
            self.certificate_arn is not None or self.allow_http,
            "certificate_arn",
            "is not set and allow_http is false; set an ACM certificate ARN for HTTPS, or allow_http: true for a "
            "development environment",
        )
        if self.certificate_arn is not None:
            require(
                self.certificate_arn.startswith("arn:aws")
                and ":acm:" in self.certificate_arn
                and ":certificate/" in self.certificate_arn,
                "certificate_arn",
                f"{self.certificate_arn!r} is not an ACM certificate ARN "
                "(arn:aws:acm:<region>:<account>:certificate/<id>)",
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
        return self.internet_facing and any(
            open_to_the_world(ipaddress.ip_network(cidr)) for cidr in self.ingress_cidrs
        )

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
            f"{model}'s longest request ({longest_request_seconds} s) + {IDLE_TIMEOUT_MARGIN_SECONDS} s is more than "
            f"the {ALB_MAX_IDLE_TIMEOUT_SECONDS} s idle timeout an Application Load Balancer allows: a response that "
            "sends nothing for that long gets an ELB 504; bound the request (its request timeout, "
            "max_tokens) or stream the response",
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
            f"{self.waf_rate_limit_per_5_minutes} is below {load.busiest_model}'s configured peak "
            f"({load.one_model_at_peak} requests a minute at max_tasks = {peak} in 5 minutes): WAF would answer one "
            f"client 403 before the model scales to its maximum; set at least {peak}, "
            "or leave it out to derive it from the peak",
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


def peak_rate_limit(load: ConfiguredLoad) -> int:
    """The busiest model's configured peak over WAF's 5-minute window, within what WAF accepts (100 to 2e9 here)."""
    return min(2_000_000_000, max(100, load.one_model_at_peak * RATE_WINDOW_MINUTES))
