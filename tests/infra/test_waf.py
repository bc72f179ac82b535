"""What the web ACL does to a request, decided rule by rule as AWS WAF evaluates it: which managed-rule matches may
block a legitimate prediction text or API client (they count, and block only off the prediction paths), and which
still block."""

from __future__ import annotations

import re

import pytest

from tests.infra.test_service import web_acl_rules

# The managed rules a request below can match, per rule group, with the label each adds (AWS WAF developer guide,
# "Baseline rule groups": core rule set and known bad inputs). Written out here, not imported, so a wrong label in the
# library fails these tests.
MANAGED = {
    "AWSManagedRulesCommonRuleSet": {
        "NoUserAgent_HEADER": "awswaf:managed:aws:core-rule-set:NoUserAgent_Header",
        "CrossSiteScripting_BODY": "awswaf:managed:aws:core-rule-set:CrossSiteScripting_Body",
        "GenericLFI_BODY": "awswaf:managed:aws:core-rule-set:GenericLFI_Body",
        "GenericRFI_BODY": "awswaf:managed:aws:core-rule-set:GenericRFI_Body",
        "EC2MetaDataSSRF_BODY": "awswaf:managed:aws:core-rule-set:EC2MetaDataSSRF_Body",
        "SizeRestrictions_BODY": "awswaf:managed:aws:core-rule-set:SizeRestrictions_Body",
        "UserAgent_BadBots_HEADER": "awswaf:managed:aws:core-rule-set:BadBots_Header",
    },
    "AWSManagedRulesKnownBadInputsRuleSet": {
        "Log4JRCE_BODY": "awswaf:managed:aws:known-bad-inputs:Log4JRCE_Body",
        "Log4JRCE_HEADER": "awswaf:managed:aws:known-bad-inputs:Log4JRCE_Header",
        "JavaDeserializationRCE_BODY": "awswaf:managed:aws:known-bad-inputs:JavaDeserializationRCE_Body",
        "JavaDeserializationRCE_HEADER": "awswaf:managed:aws:known-bad-inputs:JavaDeserializationRCE_Header",
    },
    "AWSManagedRulesAmazonIpReputationList": {},
}


def decide(rules: dict, path: str, matches: set[str]) -> str:
    """BLOCK or ALLOW for a request to ``path`` whose content the managed rules ``matches`` (rule names) detect."""
    labels: set[str] = set()
    for rule in sorted(rules.values(), key=lambda r: r["Priority"]):
        statement = rule["Statement"]
        if "RateBasedStatement" in statement:
            continue  # one request is never over a rate
        if "ManagedRuleGroupStatement" in statement:
            group = statement["ManagedRuleGroupStatement"]
            counted = {o["Name"] for o in group.get("RuleActionOverrides", []) if o["ActionToUse"] == {"Count": {}}}
            for name in sorted(matches & set(MANAGED[group["Name"]])):
                labels.add(MANAGED[group["Name"]][name])
                if name not in counted and rule["OverrideAction"] == {"None": {}}:
                    return "BLOCK"
            continue
        if evaluate(statement, path, labels) and "Block" in rule["Action"]:
            return "BLOCK"
    return "ALLOW"


def evaluate(statement: dict, path: str, labels: set[str]) -> bool:
    ((kind, body),) = statement.items()
    if kind == "AndStatement":
        return all(evaluate(s, path, labels) for s in body["Statements"])
    if kind == "OrStatement":
        return any(evaluate(s, path, labels) for s in body["Statements"])
    if kind == "NotStatement":
        return not evaluate(body["Statement"], path, labels)
    if kind == "LabelMatchStatement":
        assert body["Scope"] == "LABEL"
        return body["Key"] in labels
    assert kind == "RegexMatchStatement" and body["FieldToMatch"] == {"UriPath": {}}, kind
    return re.search(body["RegexString"], path) is not None


def prediction_path(config, model) -> str:
    if config.server_config(model).vllm is not None:
        return f"/{model.name}/v1/completions"
    return f"/{model.name}/predict"


# (what the request is, the managed rules its content matches, expected on a prediction path, expected elsewhere)
REQUESTS = [
    ("a text that quotes a Log4Shell string (a security model classifying logs)", {"Log4JRCE_BODY"}, "ALLOW", "BLOCK"),
    ("a prompt with Java code calling Runtime.getRuntime().exec", {"JavaDeserializationRCE_BODY"}, "ALLOW", "BLOCK"),
    ("a text with HTML and a file path", {"CrossSiteScripting_BODY", "GenericLFI_BODY"}, "ALLOW", "BLOCK"),
    ("a text that names the instance metadata address", {"EC2MetaDataSSRF_BODY"}, "ALLOW", "BLOCK"),
    ("an inference payload over 8 KB", {"SizeRestrictions_BODY"}, "ALLOW", "ALLOW"),
    ("an API client that sends no User-Agent", {"NoUserAgent_HEADER"}, "ALLOW", "ALLOW"),
    ("a Log4Shell string in a header", {"Log4JRCE_HEADER"}, "BLOCK", "BLOCK"),
    ("a Java deserialization attempt in a header", {"JavaDeserializationRCE_HEADER"}, "BLOCK", "BLOCK"),
    ("a known scanner's User-Agent", {"UserAgent_BadBots_HEADER"}, "BLOCK", "BLOCK"),
]


@pytest.mark.parametrize("what, matches, on_predictions, elsewhere", REQUESTS, ids=[r[0] for r in REQUESTS])
def test_managed_rule_matches_block_attacks_but_not_prediction_texts_or_api_clients(
    env, what, matches, on_predictions, elsewhere
):
    config, template = env
    rules = web_acl_rules(config, template)
    if rules is None:
        pytest.skip(f"{config.name} has no web ACL")
    for model in config.models:
        assert decide(rules, prediction_path(config, model), matches) == on_predictions, (model.name, what)
        assert decide(rules, f"/{model.name}/ready", matches) == elsewhere, (model.name, what)


def test_the_decision_walk_blocks_what_an_unoverridden_rule_matches(env):
    """The evaluator can fail: with the overrides removed, a Log4Shell string in a prediction text is blocked."""
    config, template = env
    rules = web_acl_rules(config, template)
    if rules is None:
        pytest.skip(f"{config.name} has no web ACL")
    stripped = {
        name: {
            **rule,
            "Statement": {
                "ManagedRuleGroupStatement": {
                    k: v
                    for k, v in rule["Statement"]["ManagedRuleGroupStatement"].items()
                    if k != "RuleActionOverrides"
                }
            },
        }
        if "ManagedRuleGroupStatement" in rule["Statement"]
        else rule
        for name, rule in rules.items()
    }
    assert decide(stripped, prediction_path(config, config.models[0]), {"Log4JRCE_BODY"}) == "BLOCK"
    assert decide(stripped, prediction_path(config, config.models[0]), {"NoUserAgent_HEADER"}) == "BLOCK"


def waf_transform(value: str, transformations: list[dict]) -> str:
    """AWS WAF's text transformations used here, in priority order (AWS WAF developer guide, "Text transformations":
    COMPRESS_WHITE_SPACE turns tab, newline, carriage return, form feed, vertical tab and non-breaking space into a
    space and runs of spaces into one)."""
    for step in sorted(transformations, key=lambda t: t["Priority"]):
        if step["Type"] == "LOWERCASE":
            value = value.lower()
        elif step["Type"] == "COMPRESS_WHITE_SPACE":
            value = re.sub(" +", " ", re.sub("[\t\n\r\f\v\xa0]", " ", value))
        else:
            assert step["Type"] == "NONE", step
    return value


def server_accepts(header: str, value: str, key: str = "k1") -> bool:
    """Whether the bundled server's front door (inference_server.front.middleware.FrontDoor._key_name, what it checks
    before any route) takes ``value`` in ``header`` as the API key ``key``."""
    from inference_server.front.middleware import FrontDoor

    door = FrontDoor.__new__(FrontDoor)
    door.api_keys = [("client", key.encode())]
    return door._key_name([(header.encode(), value.encode())]) == "client"


def key_rules(rules: dict) -> dict:
    """Header name -> the rate-based rule that aggregates on it (custom keys: that header alone)."""
    found = {}
    for rule in rules.values():
        statement = rule["Statement"].get("RateBasedStatement")
        if statement is not None and statement["AggregateKeyType"] == "CUSTOM_KEYS":
            (key,) = statement["CustomKeys"]
            found[key["Header"]["Name"]] = {
                **statement,
                "TextTransformations": key["Header"]["TextTransformations"],
                "Action": rule["Action"],
            }
    return found


def bearer_variants(key: str = "k1") -> list[str]:
    """Authorization values a client may send for one key: the scheme in every case, spaces and tabs around the key."""
    schemes = ["".join(c.upper() if mask >> i & 1 else c for i, c in enumerate("bearer")) for mask in range(64)]
    return [
        f"{scheme} {before}{key}{after}"
        for scheme in schemes
        for before in ("", " ", "  ", "\t", " \t ")
        for after in ("", " ", "\t ")
    ]


def test_each_api_key_is_rate_limited_in_both_header_forms_at_the_busiest_models_peak(env):
    """A leaked key used from many addresses passes any per-IP limit: a rate-based rule per key, on x-api-key and on
    Authorization (a custom-key rule skips requests without its header, so one rule per form), each blocking at the
    busiest model's configured peak over 5 minutes."""
    config, template = env
    rules = web_acl_rules(config, template)
    if rules is None:
        pytest.skip(f"{config.name} has no web ACL")
    by_header = key_rules(rules)
    assert set(by_header) == {"x-api-key", "authorization"}
    peak = 5 * max(m.max_tasks * m.scaling.requests_per_target_per_minute for m in config.models)
    for header, rule in by_header.items():
        assert rule["Limit"] == peak and rule["Action"] == {"Block": {}}, header
        assert "ScopeDownStatement" not in rule, "every request that carries the header counts"
    assert server_accepts("x-api-key", "k1") and server_accepts("authorization", "Bearer k1")


def test_one_key_is_one_aggregation_instance_whichever_way_the_client_writes_it(env):
    """The server takes 'Authorization: BEARER  k1 ' as k1: without the transformations each spelling would be its own
    instance with the whole limit. With LOWERCASE and COMPRESS_WHITE_SPACE the hundreds of spellings the server takes
    for one key collapse to at most two (a trailing space survives), and x-api-key, compared exactly, has one."""
    config, template = env
    rules = web_acl_rules(config, template)
    if rules is None:
        pytest.skip(f"{config.name} has no web ACL")
    by_header = key_rules(rules)
    variants = [v for v in bearer_variants() if server_accepts("authorization", v)]
    assert len(variants) == len(bearer_variants()) > 900
    instances = {waf_transform(v, by_header["authorization"]["TextTransformations"]) for v in variants}
    assert instances <= {"bearer k1", "bearer k1 "}
    assert len({waf_transform(v, [{"Priority": 0, "Type": "NONE"}]) for v in variants}) == len(variants), (
        "the twin: untransformed"
    )
    assert [v for v in ("K1", "k1 ", " k1") if server_accepts("x-api-key", v)] == []
    assert by_header["x-api-key"]["TextTransformations"] == [{"Priority": 0, "Type": "NONE"}]
