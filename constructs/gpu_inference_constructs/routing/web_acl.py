"""The load balancer's AWS WAF web ACL: rate limits per client IP and per API key, AWS's managed rule groups, and
their body rules kept off the prediction routes that the models' server contracts declare."""

from __future__ import annotations

import re
from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from ..core.errors import require

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
    COMMON_RULE_SET: {
        "NoUserAgent_HEADER": "API clients need not send a User-Agent; the API key, not the header, says who calls"
    },
}


def add_web_acl(
    scope: Construct,
    load_balancer: elbv2.IApplicationLoadBalancer,
    rules: list[wafv2.CfnWebACL.RuleProperty | cdk.IResolvable],
) -> wafv2.CfnWebACL:
    """The regional web ACL ``WebAcl`` (in ``scope``) with ``rules``, associated with ``load_balancer``."""
    acl = wafv2.CfnWebACL(
        scope,
        "WebAcl",
        scope="REGIONAL",
        default_action=wafv2.CfnWebACL.DefaultActionProperty(allow={}),
        visibility_config=_visibility("InferenceWebAcl"),
        rules=rules,
    )
    wafv2.CfnWebACLAssociation(
        scope, "WebAclAssociation", resource_arn=load_balancer.load_balancer_arn, web_acl_arn=acl.attr_arn
    )
    return acl


def web_acl_rules(
    rate_limit: int, rate_limit_per_key: int, prediction_routes: Sequence[str]
) -> list[wafv2.CfnWebACL.RuleProperty | cdk.IResolvable]:
    """The web ACL's rules in the order they run: rate limits, the managed rule groups, then the body rules' block
    off the prediction routes."""

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
        *rate_limits(rate_limit, rate_limit_per_key),
        managed("AWSManagedRulesAmazonIpReputationList", 0),
        managed(COMMON_RULE_SET, 0),
        managed(KNOWN_BAD_INPUTS, 0),
        # After both groups, so their body rules' labels are on the request.
        body_rules_off_predictions(prediction_routes),
    ]
    ordered: list[wafv2.CfnWebACL.RuleProperty | cdk.IResolvable] = [
        _with_priority(rule, priority) for priority, rule in enumerate(rules)
    ]
    return ordered


def rate_limits(rate_limit: int, rate_limit_per_key: int) -> list[wafv2.CfnWebACL.RuleProperty]:
    """Per client IP, and per API key in each header the servers take it from: a leaked key used from many
    addresses is held to one model's configured peak. A custom-key rule skips requests without its header (AWS
    WAF developer guide, rate-based rule aggregation), so each header form needs its own rule."""

    def rule(name: str, **statement) -> wafv2.CfnWebACL.RuleProperty:
        return wafv2.CfnWebACL.RuleProperty(
            name=name,
            priority=0,
            action=wafv2.CfnWebACL.RuleActionProperty(block={}),
            statement=wafv2.CfnWebACL.StatementProperty(
                rate_based_statement=wafv2.CfnWebACL.RateBasedStatementProperty(**statement)
            ),
            visibility_config=_visibility(name),
        )

    per_key = [
        rule(
            name,
            limit=rate_limit_per_key,
            aggregate_key_type="CUSTOM_KEYS",
            custom_keys=[
                wafv2.CfnWebACL.RateBasedStatementCustomKeyProperty(
                    header=wafv2.CfnWebACL.RateLimitHeaderProperty(
                        name=header,
                        text_transformations=[
                            wafv2.CfnWebACL.TextTransformationProperty(priority=p, type=t)
                            for p, t in enumerate(transformations)
                        ],
                    )
                )
            ],
        )
        for name, header, transformations in API_KEY_HEADERS
    ]
    return [rule("RateLimitPerClientIp", limit=rate_limit, aggregate_key_type="IP"), *per_key]


def body_rules_off_predictions(prediction_routes: Sequence[str]) -> wafv2.CfnWebACL.RuleProperty:
    """Blocks on the body rules' labels everywhere but on the prediction routes (below any model's prefix)."""
    statement = wafv2.CfnWebACL.StatementProperty

    def label(key: str) -> wafv2.CfnWebACL.StatementProperty:
        return statement(label_match_statement=wafv2.CfnWebACL.LabelMatchStatementProperty(scope="LABEL", key=key))

    # A regex match on the URI path per prediction path (3 WCUs each), each anchored and without groups or
    # alternation (AWS WAF rejects capturing groups and limits '|' branches). The path as sent: no query string,
    # no transformation.
    predictions = statement(
        or_statement=wafv2.CfnWebACL.OrStatementProperty(
            statements=[
                statement(
                    regex_match_statement=wafv2.CfnWebACL.RegexMatchStatementProperty(
                        field_to_match=wafv2.CfnWebACL.FieldToMatchProperty(uri_path={}),
                        regex_string=regex,
                        text_transformations=[wafv2.CfnWebACL.TextTransformationProperty(priority=0, type="NONE")],
                    )
                )
                for regex in prediction_path_regexes(prediction_routes)
            ]
        )
    )
    found = [label(key) for rules in BODY_RULES.values() for key in rules.values() if key is not None]
    return wafv2.CfnWebACL.RuleProperty(
        name="BodyRulesOffPredictions",
        priority=0,
        action=wafv2.CfnWebACL.RuleActionProperty(block={}),
        statement=statement(
            and_statement=wafv2.CfnWebACL.AndStatementProperty(
                statements=[
                    statement(or_statement=wafv2.CfnWebACL.OrStatementProperty(statements=found)),
                    statement(not_statement=wafv2.CfnWebACL.NotStatementProperty(statement=predictions)),
                ]
            )
        ),
        visibility_config=_visibility("BodyRulesOffPredictions"),
    )


def _with_priority(rule: wafv2.CfnWebACL.RuleProperty, priority: int) -> wafv2.CfnWebACL.RuleProperty:
    """``rule`` at ``priority``: the web ACL's rules run in list order."""
    return wafv2.CfnWebACL.RuleProperty(
        name=rule.name,
        priority=priority,
        action=rule.action,
        override_action=rule.override_action,
        statement=rule.statement,
        visibility_config=rule.visibility_config,
    )


def prediction_path_regexes(paths: Sequence[str]) -> list[str]:
    """The URI paths ``/<model><path>`` for each of ``paths`` (``{name}``: one path segment), each as an anchored
    regex in the syntax AWS WAF supports (PCRE without groups or alternation here; at most 512 characters)."""
    regexes = ["^/[^/]+" + re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(path)) + "$" for path in paths]
    for regex in regexes:
        require(
            len(regex) <= 512 and "(" not in regex and "|" not in regex,
            "prediction paths",
            f"{regex!r} is not a regex AWS WAF accepts",
        )
    return regexes


def _visibility(name: str) -> wafv2.CfnWebACL.VisibilityConfigProperty:
    return wafv2.CfnWebACL.VisibilityConfigProperty(
        cloud_watch_metrics_enabled=True, metric_name=name, sampled_requests_enabled=True
    )
