"""Justified, narrow acknowledgements of cdk-nag (AwsSolutions) findings.

Each one names a single rule (with its exact finding where the rule has one) on a single
resource, and its reason says why the finding does not apply or which test covers the concern.
They live in aws-cdk-lib's validation API, so the library needs no cdk-nag dependency.
"""

from __future__ import annotations

import aws_cdk as cdk
from constructs import IConstruct


def acknowledge(resource: IConstruct, finding: str, reason: str) -> None:
    """Acknowledge ``finding`` (e.g. ``AwsSolutions-IAM5[Resource::*]``) on ``resource`` only."""
    cdk.Validations.of(resource).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions::{finding}", reason=reason))


def default_policy(role: IConstruct) -> IConstruct:
    """The CfnPolicy that grants add to a role."""
    return role.node.find_child("DefaultPolicy").node.default_child


def nag_reference(scope: IConstruct, value: object) -> str:
    """``value`` (a token such as a bucket ARN) as cdk-nag writes it in a finding's id
    (``<Logical.Arn>``, ``<AWS::Partition>``, literals as they are), for same-stack and literal values."""
    resolved = cdk.Stack.of(scope).resolve(value)

    def visit(node: object) -> str:
        if isinstance(node, str):
            return node.replace("${", "<").replace("}", ">")
        if isinstance(node, dict) and "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return delimiter.join(visit(item) for item in items)
        if isinstance(node, dict) and "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{visit(resource)}.{visit(attribute)}>"
        if isinstance(node, dict) and "Fn::ImportValue" in node:
            return visit(node["Fn::ImportValue"])
        if isinstance(node, dict) and "Ref" in node:
            return f"<{visit(node['Ref'])}>"
        raise ValueError(f"cannot name {node!r} as cdk-nag does")

    return visit(resolved)
