"""A resource with a fixed physical name is never kept after a failed create: the retry would fail with "already
exists"."""

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
    return [
        n
        for n in names
        if "/" not in n and n.endswith("Name") and (n == "Name" or kind.endswith(n.removesuffix("Name")))
    ]


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
    named = [
        (name, logical_id)
        for name, t in templates.items()
        for logical_id, r in t["Resources"].items()
        if any(n in r.get("Properties", {}) for n in physical_name_properties(r["Type"]))
    ]
    assert sum(1 for _, logical_id in named if "Logs" in logical_id) >= 8  # each model's log group has its name
    assert {name: found for name, t in templates.items() if (found := named_and_kept(t))} == {}


def test_the_walk_finds_a_planted_named_retained_log_group():
    template = {
        "Resources": {
            "Named": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Retain", "Properties": {"LogGroupName": "/x"}},
            "Safe": {
                "Type": "AWS::Logs::LogGroup",
                "DeletionPolicy": "RetainExceptOnCreate",
                "Properties": {"LogGroupName": "/y"},
            },
            "Unnamed": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Retain", "Properties": {}},
        }
    }
    assert named_and_kept(template) == ["Named (AWS::Logs::LogGroup, LogGroupName): DeletionPolicy Retain"]


# CloudFormation adopts such a resource when a stack that names it is deployed with ImportExistingResources
# (`cdk deploy --import-existing-resources`; CloudFormation user guide, "Import AWS resources into a CloudFormation
# stack automatically"): a static custom name, DeletionPolicy Retain or RetainExceptOnCreate, a type that supports
# import, and its primary identifier in the template.
AUTO_IMPORTABLE_POLICIES = {"Retain", "RetainExceptOnCreate"}


def not_auto_importable(template: dict) -> list[str]:
    """Each kept, named resource that a re-created stack could not adopt (and so would fail with "already exists")."""
    found = []
    for logical_id, resource in template.get("Resources", {}).items():
        named = [n for n in physical_name_properties(resource["Type"]) if n in resource.get("Properties", {})]
        if not named or resource.get("DeletionPolicy") not in AUTO_IMPORTABLE_POLICIES:
            continue
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource["Type"]).schema
        name = resource["Properties"][named[0]]
        if not isinstance(name, str):
            found.append(f"{logical_id}: {named[0]} is not a static name ({json.dumps(name)[:80]})")
        elif schema.get("primaryIdentifier") != [f"/properties/{named[0]}"]:
            found.append(
                f"{logical_id}: {resource['Type']} is identified by {schema.get('primaryIdentifier')}, not its name"
            )
    return found


def test_a_removed_models_kept_log_group_is_adopted_when_the_model_comes_back(synthesized):
    templates = {p.name: json.loads(p.read_text()) for p in synthesized.template_paths()}
    kept = [
        (name, logical_id)
        for name, t in templates.items()
        for logical_id, r in t["Resources"].items()
        if r["Type"] == "AWS::Logs::LogGroup"
        and r.get("DeletionPolicy") in AUTO_IMPORTABLE_POLICIES
        and "Model" in name
    ]
    assert len(kept) >= 8
    assert {name: found for name, t in templates.items() if (found := not_auto_importable(t))} == {}


def test_the_import_walk_finds_a_kept_group_with_a_computed_name():
    template = {
        "Resources": {
            "Computed": {
                "Type": "AWS::Logs::LogGroup",
                "DeletionPolicy": "RetainExceptOnCreate",
                "Properties": {"LogGroupName": {"Fn::Join": ["", ["/x/", {"Ref": "AWS::StackName"}]]}},
            },
            "Static": {
                "Type": "AWS::Logs::LogGroup",
                "DeletionPolicy": "RetainExceptOnCreate",
                "Properties": {"LogGroupName": "/y"},
            },
        }
    }
    assert [line.split(":")[0] for line in not_auto_importable(template)] == ["Computed"]


def test_every_documented_deploy_adopts_kept_resources():
    """Each `cdk deploy` in a shell block of the README and docs carries --import-existing-resources."""
    import re

    from tests.conftest import ROOT

    pages = [ROOT / "README.md", ROOT / "constructs" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    blocks = "\n".join(re.findall(r"```(?:bash|sh)\n(.*?)```", "\n".join(p.read_text() for p in pages), re.S))
    deploys = [line for line in blocks.splitlines() if re.search(r"\bcdk deploy\b", line)]
    assert deploys and all("--import-existing-resources" in line for line in deploys), deploys
