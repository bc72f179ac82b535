"""The library does not depend on the consuming app's feature flags.

Every environment is synthesized again in an app that has only the environments' settings and
none of cdk.json's feature flags (aws-cdk-lib 2.275's defaults). It must synthesize, pass cdk-nag,
and hold the same resources with the same meaning as under cdk.json's flags. The only differences
allowed are spellings the flags change without changing what AWS does: partition literals,
statement merging and action order in policies, how cross-stack references are written, and
deployment settings written out at their CloudFormation defaults.
"""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from cdk_nag import AwsSolutionsChecks

from tests.conftest import scenario_context
from tests.infra.conftest import ENVIRONMENTS

POLICY_PROPERTIES = ("PolicyDocument", "KeyPolicy", "AssumeRolePolicyDocument")


@pytest.fixture(scope="module")
def default_flags(tmp_path_factory):
    from stacks.config import load_environments
    from stacks.stage import InferenceStage

    context = {"environments": scenario_context()["environments"]}
    app = cdk.App(context=context, outdir=str(tmp_path_factory.mktemp("default-flags")))
    stages = {config.name: InferenceStage(app, config) for config in load_environments(context)}
    app.synth()
    templates = {}
    for name, stage in stages.items():
        for stack in stage.synth().stacks:
            templates[(name, stack.hierarchical_id.split("/")[-1])] = stack.template
    return app, stages, templates


def test_the_app_has_no_feature_flag_set(default_flags):
    app, _, _ = default_flags
    assert not cdk.FeatureFlags.of(app).is_enabled("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy")
    assert scenario_context()["@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"] is True


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_cdk_nag_passes_under_default_flags(default_flags, environment):
    _, stages, _ = default_flags
    report = AwsSolutionsChecks().validate_scope(stages[environment])
    unacknowledged = [
        v.rule_name
        for v in report.violations
        for r in v.violating_resources
        if f"AwsSolutions::{v.rule_name}" not in _acknowledged(stages[environment], r.construct_path)
    ]
    assert unacknowledged == []


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_same_resources_with_the_same_meaning_under_both_flag_sets(synthesized, default_flags, environment):
    _, _, templates = default_flags
    stacks = sorted(stack for env, stack in templates if env == environment)
    assert stacks == sorted(stack for env, stack in synthesized.templates if env == environment)
    for stack in stacks:
        flagged = synthesized.template(environment, stack)["Resources"]
        default = templates[(environment, stack)]["Resources"]
        assert sorted(flagged) == sorted(default), f"{environment}/{stack}: different logical IDs"
        for logical_id in flagged:
            assert meaning(flagged[logical_id]) == meaning(default[logical_id]), (
                f"{environment}/{stack}: {logical_id} differs"
            )


def test_the_model_bucket_logs_by_bucket_policy_not_acl_under_default_flags(default_flags):
    _, _, templates = default_flags
    for (environment, _), template in templates.items():
        for resource in template["Resources"].values():
            if resource["Type"] == "AWS::S3::Bucket":
                assert "AccessControl" not in resource["Properties"], environment
                assert resource["Properties"]["OwnershipControls"] == {
                    "Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]
                }


def meaning(resource: dict) -> dict:
    """A resource with the spellings that differ between flag sets made canonical."""
    resource = _canonical(resource)
    properties = resource.get("Properties", {})
    for name in POLICY_PROPERTIES:
        if name in properties:
            properties[name] = sorted(_grants(properties[name]))
    for name in ("Policies",):
        for policy in properties.get(name, []):
            policy["PolicyDocument"] = sorted(_grants(policy["PolicyDocument"]))
    if resource["Type"] == "AWS::ECS::Service":
        if properties.get("DeploymentController") == {"Type": "ECS"}:
            del properties["DeploymentController"]
        alarms = properties.get("DeploymentConfiguration", {}).get("Alarms")
        if alarms is not None and alarms.get("Enable") is False and not alarms.get("AlarmNames"):
            del properties["DeploymentConfiguration"]["Alarms"]
    return resource


def _canonical(node: Any) -> Any:
    if isinstance(node, dict):
        if node == {"Ref": "AWS::Partition"}:
            return "aws"
        if node == {"Ref": "AWS::URLSuffix"}:
            return "amazonaws.com"
        if set(node) in ({"Fn::GetStackOutput"}, {"Fn::ImportValue"}):
            return "<cross-stack reference>"
        out = {key: _canonical(value) for key, value in node.items()}
        if "Fn::Join" in out:
            separator, parts = out["Fn::Join"]
            merged: list = []
            for part in parts:
                if isinstance(part, str) and merged and isinstance(merged[-1], str):
                    merged[-1] = merged[-1] + separator + part
                else:
                    merged.append(part)
            if all(isinstance(part, str) for part in merged):
                return separator.join(merged)
            out["Fn::Join"] = [separator, merged] if separator == "" else [separator, parts]
        return out
    if isinstance(node, list):
        return [_canonical(value) for value in node]
    return node


def _grants(document: dict) -> set[str]:
    """A policy as its atomic grants: one (effect, principal, action, resource, condition) per combination."""
    grants = set()
    for statement in document["Statement"]:
        principals = [json.dumps(statement.get("Principal"), sort_keys=True)]
        if isinstance(statement.get("Principal"), dict):
            principals = [
                f"{kind}:{json.dumps(value, sort_keys=True)}"
                for kind, values in statement["Principal"].items()
                for value in (values if isinstance(values, list) else [values])
            ]
        actions = statement.get("Action", [])
        resources = statement.get("Resource", [])
        for principal in principals:
            for action in actions if isinstance(actions, list) else [actions]:
                for resource in resources if isinstance(resources, list) else [resources]:
                    grants.add(
                        json.dumps(
                            [statement["Effect"], principal, action, resource, statement.get("Condition")],
                            sort_keys=True,
                        )
                    )
    return grants


def _acknowledged(stage, construct_path: str | None) -> set[str]:
    assert construct_path is not None  # cdk-nag names each construct it flags
    construct = stage
    for part in construct_path.split("/")[1:]:
        construct = construct.node.find_child(part)
    return {
        rule
        for entry in construct.node.metadata
        if entry.type == cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
        for rule in entry.data
    }
