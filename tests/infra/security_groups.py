"""Whether EC2 lets one network interface open a TCP connection to another, from a synthesized template's security
groups.

EC2's rules, as the VPC user guide states them: an interface's groups are one set of rules (any rule of any group
allows); the sender needs an egress rule and the receiver an ingress rule, each naming the other side by a group it
carries or by a CIDR that holds its address; traffic is stateful, so the reply needs no rule. And the one that CDK
hides: a group created with no inline egress rule (no ``SecurityGroupEgress``) gets EC2's default allow-all egress,
which standalone ``AWS::EC2::SecurityGroupEgress`` rules added later do not remove (CloudFormation,
AWS::EC2::SecurityGroup: "When you create a security group, if you do not add egress rules, we add egress rules that
allow all outbound IPv4 and IPv6 traffic").
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_EGRESS = {
    "IpProtocol": "-1",
    "CidrIp": "0.0.0.0/0",
    "Description": "EC2's default: the group has no inline egress rule",
}


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    why: str

    def __bool__(self) -> bool:
        return self.allowed


def group_id(value) -> str | None:
    """The logical ID a GroupId-like value points at ({"Fn::GetAtt": [id, "GroupId"]} or {"Ref": id}), else None."""
    if isinstance(value, dict) and list(value) == ["Fn::GetAtt"]:
        return value["Fn::GetAtt"][0]
    if isinstance(value, dict) and list(value) == ["Ref"]:
        return value["Ref"]
    return None


def rules(resources: dict) -> dict[str, dict[str, list[dict]]]:
    """Security group logical ID -> {"ingress": [...], "egress": [...]}: inline rules, standalone rules, EC2's
    default."""
    found: dict[str, dict[str, list[dict]]] = {}
    for logical_id, resource in resources.items():
        if resource["Type"] == "AWS::EC2::SecurityGroup":
            properties = resource["Properties"]
            entry = found.setdefault(logical_id, {"ingress": [], "egress": []})
            entry["ingress"] += properties.get("SecurityGroupIngress", [])
            entry["egress"] += properties.get("SecurityGroupEgress") or [DEFAULT_EGRESS]
    for resource in resources.values():
        direction = {"AWS::EC2::SecurityGroupIngress": "ingress", "AWS::EC2::SecurityGroupEgress": "egress"}.get(
            resource["Type"]
        )
        if direction is not None:
            target = group_id(resource["Properties"]["GroupId"])
            assert target is not None, f"a rule on a group outside the template: {resource['Properties']['GroupId']}"
            found.setdefault(target, {"ingress": [], "egress": []})[direction].append(resource["Properties"])
    return found


def covers_port(rule: dict, port: int) -> bool:
    protocol = str(rule["IpProtocol"])
    if protocol in ("-1", "all"):
        return True
    return protocol in ("tcp", "6") and int(rule["FromPort"]) <= port <= int(rule["ToPort"])


def names_peer(
    rule: dict, peer_groups: set[str], peer_ip: str | None, group_key: str, cidrs: Mapping[str, str]
) -> bool:
    if group_id(rule.get(group_key)) in peer_groups:
        return True
    cidr = rule.get("CidrIp")
    if cidr is not None and not isinstance(cidr, str):  # a reference (the VPC's CIDR block): what the caller says it is
        cidr = cidrs.get(json.dumps(cidr, sort_keys=True))
    if cidr is None:
        return False
    network = ipaddress.ip_network(cidr)
    return network.prefixlen == 0 or (peer_ip is not None and ipaddress.ip_address(peer_ip) in network)


def may_connect(
    resources: dict,
    source_groups: list[str],
    target_groups: list[str],
    port: int,
    source_ip: str | None = None,
    target_ip: str | None = None,
    cidrs: Mapping[str, str] | None = None,
) -> Verdict:
    """Whether an interface carrying ``source_groups`` (at ``source_ip``) may open TCP ``port`` on one carrying
    ``target_groups`` (at ``target_ip``; no groups: an address outside the template). ``cidrs``: what a CIDR given by
    reference stands for, keyed by the reference's JSON (sorted keys); an unknown reference matches nothing."""
    cidrs = cidrs or {}
    table = rules(resources)
    for group in [*source_groups, *target_groups]:
        assert group in table, f"{group} is not a security group of the template"
    sources, targets = set(source_groups), set(target_groups)
    egress = [
        (g, r)
        for g in source_groups
        for r in table[g]["egress"]
        if covers_port(r, port) and names_peer(r, targets, target_ip, "DestinationSecurityGroupId", cidrs)
    ]
    if not egress:
        return Verdict(
            False, f"no egress rule of {sorted(sources)} allows tcp/{port} to {sorted(targets) or target_ip}"
        )
    if not target_groups:
        return Verdict(True, f"egress by {egress[0][0]}: {egress[0][1]}")
    ingress = [
        (g, r)
        for g in target_groups
        for r in table[g]["ingress"]
        if covers_port(r, port) and names_peer(r, sources, source_ip, "SourceSecurityGroupId", cidrs)
    ]
    if not ingress:
        return Verdict(False, f"no ingress rule of {sorted(targets)} admits tcp/{port} from {sorted(sources)}")
    return Verdict(True, f"egress by {egress[0][0]}, ingress by {ingress[0][0]}")


def inbound_rule_count(resources: dict, group: str) -> int:
    """The inbound rules EC2 counts against the group's quota (60 by default): one per rule, inline or standalone."""
    return len(rules(resources)[group]["ingress"])


def service_groups(resources: dict, service: str) -> list[str]:
    """The groups an ECS service's tasks (awsvpc: each task's interface) carry."""
    groups = resources[service]["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]["SecurityGroups"]
    ids = [group_id(g) for g in groups]
    assert None not in ids, f"{service}: a group that is not in the template: {groups}"
    return [i for i in ids if i is not None]


def serverless_cache_groups(resources: dict, cache: str) -> list[str]:
    ids = [group_id(g) for g in resources[cache]["Properties"]["SecurityGroupIds"]]
    assert None not in ids
    return [i for i in ids if i is not None]
