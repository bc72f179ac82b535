"""Refuse a change that would replace a resource another stack reads through a weak reference.

With ``defaultCrossStackReferences: weak`` a model stack reads the shared stack's outputs with ``Fn::GetStackOutput``,
resolved when the model stack is created or updated, never again by itself (CloudFormation template reference,
Fn::GetStackOutput). A change that keeps a consumed resource's logical ID but replaces it (a new security group
description, cluster name, load balancer scheme) gives it a new physical ID while every model stack's template stays
the same: `cdk deploy` reports them unchanged and they keep the old, deleted identifier. A change of logical ID is
safe: the output's name changes, so every consumer's template changes and is updated in the same deploy.

So synth records, per consumed output, the producing resource's replacement-causing properties (and, recursively,
those of what they reference) in ``references.lock.json``, and refuses a change to a recorded one until it is
accepted (``-c acceptReplacement=true``) with the migration below. New outputs are recorded as they appear.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Properties whose change replaces the resource (its new physical ID is a new output value): the resource types'
# createOnlyProperties in CloudFormation's registry schemas (as cfn-lint 1.58 ships them; tests/infra checks they
# agree). A KMS key has none: CloudFormation refuses a change of KeySpec, KeyUsage, Origin or MultiRegion instead.
REPLACED_BY: dict[str, tuple[str, ...]] = {
    "AWS::EC2::SecurityGroup": ("GroupDescription", "GroupName", "VpcId"),
    "AWS::ElasticLoadBalancingV2::Listener": ("LoadBalancerArn",),
    "AWS::ElasticLoadBalancingV2::LoadBalancer": ("Name", "Type", "Scheme"),
    "AWS::ECS::Cluster": ("ClusterName",),
    "AWS::ECS::CapacityProvider": ("AutoScalingGroupProvider/AutoScalingGroupArn", "Name", "ClusterName"),
    "AWS::KMS::Key": (),
    "AWS::ElastiCache::ServerlessCache": (
        "ServerlessCacheName",
        "KmsKeyId",
        "SnapshotArnsToRestore",
        "SubnetIds",
        "NetworkType",
        "ConnectionType",
    ),
    "AWS::ElastiCache::User": ("UserId", "UserName"),
    "AWS::SecretsManager::Secret": ("Name",),
    "AWS::SNS::Topic": ("TopicName", "FifoTopic"),
    "AWS::S3::Bucket": ("BucketName", "BucketNamePrefix", "BucketNamespace"),
    "AWS::EC2::VPC": ("CidrBlock", "Ipv4IpamPoolId", "Ipv4NetmaskLength", "VpcEncryptionControl"),
    "AWS::EC2::Subnet": (
        "VpcId",
        "AvailabilityZone",
        "AvailabilityZoneId",
        "CidrBlock",
        "OutpostArn",
        "Ipv6Native",
        "Ipv4IpamPoolId",
        "Ipv4NetmaskLength",
        "Ipv6IpamPoolId",
        "Ipv6NetmaskLength",
    ),
}
LOCK_FILE = "references.lock.json"
ACCEPT_CONTEXT_KEY = "acceptReplacement"
# Where the lock is, when not beside app.py: a generated environment (tests/infra/many_models.py) keeps its own.
LOCK_CONTEXT_KEY = "referenceLock"
MIGRATION = (
    "the model stacks read it through a weak reference (Fn::GetStackOutput) and would keep the old, deleted "
    "identifier, losing their traffic. Migrate without an outage: add the new resource under a new construct id beside "
    "the old one and point the consumers at it (a new logical ID renames the output, so `cdk deploy --all` updates "
    "every model stack), deploy, then remove the old one and deploy again. To accept an outage instead, synth with "
    f"-c {ACCEPT_CONTEXT_KEY}=true (it records the change in {LOCK_FILE}) and deploy every model stack after the "
    "shared one"
)


class ReplacementRefused(Exception):
    pass


def consumed_fingerprints(templates: Mapping[str, dict]) -> dict[str, dict]:
    """``<producer stack>/<output name>`` -> the consumed resource and what would replace it, for every output
    another stack of ``templates`` (stack name -> template) reads with ``Fn::GetStackOutput``."""
    consumers: dict[tuple[str, str], set[str]] = {}
    for stack_name, template in templates.items():
        for stack, output in _stack_outputs_read(template):
            consumers.setdefault((stack, output), set()).add(stack_name)
    found = {}
    for (stack, output), readers in sorted(consumers.items()):
        if stack not in templates or output not in templates[stack].get("Outputs", {}):
            continue
        value = templates[stack]["Outputs"][output]["Value"]
        found[f"{stack}/{output}"] = {"consumers": sorted(readers), **_fingerprint(templates, stack, value, depth=0)}
    return found


def check(lock: Mapping[str, dict], current: Mapping[str, dict]) -> list[str]:
    """What would be replaced under a consumer: one line per recorded output whose resource's replacing properties
    changed."""
    problems = []
    for key, now in current.items():
        before = lock.get(key)
        if before is None or before.get("resource") != now["resource"]:
            continue  # a new output, or another resource: the output name changes with it, so consumers update
        changed = sorted(
            p
            for p in {*before["replaced_by"], *now["replaced_by"]}
            if before["replaced_by"].get(p) != now["replaced_by"].get(p)
        )
        if changed:
            problems.append(
                f"{now['type']} {now['resource']} in {key.split('/')[0]} would be replaced ({', '.join(changed)} "
                f"changed) under {', '.join(now['consumers'])}: {MIGRATION}"
            )
    return problems


def guard(templates: Mapping[str, dict], lock_path: Path, accept: bool = False) -> None:
    """Refuse (ReplacementRefused) a replacement under a consumer unless ``accept``; record the fingerprints."""
    lock = json.loads(lock_path.read_text()) if lock_path.exists() else {}
    current = consumed_fingerprints(templates)
    problems = check(lock, current)
    if problems and not accept:
        raise ReplacementRefused("\n".join(problems))
    merged = {**{k: v for k, v in lock.items() if k.split("/")[0] not in {c.split("/")[0] for c in current}}, **current}
    text = json.dumps(merged, indent=1, sort_keys=True) + "\n"
    if not lock_path.exists() or lock_path.read_text() != text:
        lock_path.write_text(text)


def _stack_outputs_read(value: Any):
    if isinstance(value, dict):
        if "Fn::GetStackOutput" in value:
            reference = value["Fn::GetStackOutput"]
            yield reference["StackName"], reference["OutputName"]
            return
        for item in value.values():
            yield from _stack_outputs_read(item)
    elif isinstance(value, list):
        for item in value:
            yield from _stack_outputs_read(item)


def _fingerprint(templates: Mapping[str, dict], stack: str, value: Any, depth: int) -> dict:
    """The resource ``value`` (a Ref or GetAtt in ``stack``) names, and its replacing properties with what they
    reference resolved the same way (a referenced resource's replacement changes the value too)."""
    logical_id = value["Ref"] if "Ref" in value else value["Fn::GetAtt"][0]
    resource = templates[stack]["Resources"][logical_id]
    properties = resource.get("Properties", {})
    replaced_by = {}
    for path in REPLACED_BY.get(resource["Type"], ()):
        item: Any = properties
        for part in path.split("/"):
            item = item.get(part) if isinstance(item, dict) else None
        if item is not None:
            replaced_by[path] = _resolve(templates, stack, item, depth + 1)
    return {"resource": logical_id, "type": resource["Type"], "replaced_by": replaced_by}


def _resolve(templates: Mapping[str, dict], stack: str, value: Any, depth: int) -> Any:
    if depth > 8:
        return value
    if isinstance(value, dict):
        if list(value) == ["Fn::GetStackOutput"]:
            reference = value["Fn::GetStackOutput"]
            output = templates.get(reference["StackName"], {}).get("Outputs", {}).get(reference["OutputName"])
            return _resolve(templates, reference["StackName"], output["Value"], depth + 1) if output else value
        if (list(value) == ["Ref"] and value["Ref"] in templates[stack]["Resources"]) or list(value) == ["Fn::GetAtt"]:
            return _fingerprint(templates, stack, value, depth + 1)
        return {k: _resolve(templates, stack, v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(templates, stack, v, depth + 1) for v in value]
    return value
