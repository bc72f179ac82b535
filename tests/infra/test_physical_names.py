"""A resource with a fixed physical name is never kept after a failed create: the retry would fail with "already exists"."""

import json

from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

# Kept after a failed create as well as on delete (CloudFormation DeletionPolicy attribute); RetainExceptOnCreate
# (CDK's RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE) deletes what a failed create made.
KEPT_AFTER_FAILED_CREATE = {"Retain", "Snapshot"}


def physical_name_properties(resource_type: str) -> list[str]:
    """The create-only top-level properties of the type that name it (LogGroupName, BucketName, Name, ...)."""
    try:
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource_type).schema
    except Exception:  # a custom resource: no schema, no name CloudFormation owns
        return []
    kind = resource_type.split("::")[-1]
    names = [p.removeprefix("/properties/") for p in schema.get("createOnlyProperties", [])]
    # Its own name (a Role's RoleName, a SecurityGroup's GroupName), not another resource's (a FlowLog's LogGroupName).
    return [n for n in names if "/" not in n and n.endswith("Name") and (n == "Name" or kind.endswith(n.removesuffix("Name")))]


def named_and_kept(template: dict) -> list[str]:
    found = []
    for logical_id, resource in template.get("Resources", {}).items():
        named = [n for n in physical_name_properties(resource["Type"]) if n in resource.get("Properties", {})]
        if named and resource.get("DeletionPolicy") in KEPT_AFTER_FAILED_CREATE:
            found.append(f"{logical_id} ({resource['Type']}, {named[0]}): DeletionPolicy {resource['DeletionPolicy']}")
    return found


def test_no_resource_with_a_fixed_name_is_kept_after_a_failed_create(synthesized):
    paths = synthesized.template_paths()
    templates = {p.name: json.loads(p.read_text()) for p in paths}
    named = [(name, logical_id) for name, t in templates.items() for logical_id, r in t["Resources"].items()
             if any(n in r.get("Properties", {}) for n in physical_name_properties(r["Type"]))]
    assert sum(1 for _, logical_id in named if "Logs" in logical_id) >= 8  # each model's log group has its name
    assert {name: found for name, t in templates.items() if (found := named_and_kept(t))} == {}


def test_the_walk_finds_a_planted_named_retained_log_group():
    template = {"Resources": {
        "Named": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Retain", "Properties": {"LogGroupName": "/x"}},
        "Safe": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "RetainExceptOnCreate", "Properties": {"LogGroupName": "/y"}},
        "Unnamed": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Retain", "Properties": {}},
    }}
    assert named_and_kept(template) == ["Named (AWS::Logs::LogGroup, LogGroupName): DeletionPolicy Retain"]
