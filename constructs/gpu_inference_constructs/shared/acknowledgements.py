"""Justified, narrow acknowledgements of cdk-nag (AwsSolutions) findings.

Each one names a single rule (with its exact finding where the rule has one) on a single
resource, and its reason says why the finding does not apply or which test covers the concern.
They live in aws-cdk-lib's validation API, so the library needs no cdk-nag dependency.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import aws_cdk as cdk
import jsii
from constructs import IConstruct, IValidation

C = TypeVar("C", bound=cdk.CfnResource)


def default_child(construct: IConstruct, kind: type[C] = cdk.CfnResource) -> C:
    """The CloudFormation resource ``construct`` wraps (its ``node.default_child``), as a ``kind``."""
    child = construct.node.default_child
    assert isinstance(child, kind), f"{construct.node.path} wraps no {kind.__name__}: {child!r}"
    return child


def acknowledge(resource: IConstruct, finding: str, reason: str) -> None:
    """Acknowledge ``finding`` (e.g. ``AwsSolutions-IAM5[Resource::*]``) on ``resource`` only."""
    cdk.Validations.of(resource).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions::{finding}", reason=reason))


def default_policy(role: IConstruct) -> IConstruct:
    """The CfnPolicy that grants add to a role."""
    return default_child(role.node.find_child("DefaultPolicy"))


def acknowledge_when_resolved(resource: IConstruct, finding: Callable[[], str], reason: str) -> None:
    """Acknowledge the finding that ``finding()`` names once cross-stack references are resolved.

    A finding on a resource that refers to another stack names that reference as the template shows it
    (``Fn::GetStackOutput`` or ``Fn::ImportValue``), which exists only after CDK's prepare phase; construct
    validations run after it and before the validation plugins, so the acknowledgement is added there.
    """
    resource.node.add_validation(_AcknowledgeWhenResolved(resource, finding, reason))


@jsii.implements(IValidation)
class _AcknowledgeWhenResolved:
    def __init__(self, resource: IConstruct, finding: Callable[[], str], reason: str) -> None:
        self._resource, self._finding, self._reason = resource, finding, reason

    def validate(self) -> list[str]:
        acknowledge(self._resource, self._finding(), self._reason)
        return []


def nag_rendering(scope: IConstruct, value: Any) -> str:
    """``value`` (a token) as cdk-nag writes it in a finding (its ``flattenCfnReference``): ``<Id.Attr>`` for
    GetAtt, ``<Id>`` for Ref, joins flattened, an import as its export name, anything else as compact JSON."""

    def visit(node: Any) -> str:
        if isinstance(node, str):
            return node.replace("${", "<").replace("}", ">")
        if isinstance(node, dict) and "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return delimiter.join(visit(item) for item in items)
        if isinstance(node, dict) and "Fn::Sub" in node:
            return visit(node["Fn::Sub"])
        if isinstance(node, dict) and "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{visit(resource)}.{visit(attribute)}>"
        if isinstance(node, dict) and "Fn::ImportValue" in node:
            return visit(node["Fn::ImportValue"])
        if isinstance(node, dict) and "Ref" in node:
            return f"<{visit(node['Ref'])}>"
        return json.dumps(node, separators=(",", ":"))

    return visit(cdk.Stack.of(scope).resolve(value))


def skip_checkov(resource: IConstruct, check_id: str, reason: str) -> None:
    """Skip one checkov check on one CloudFormation resource, with the reason a reviewer reads
    (``Metadata.checkov.skip``)."""
    cfn = resource if isinstance(resource, cdk.CfnResource) else default_child(resource)
    skips = list((cfn.get_metadata("checkov") or {}).get("skip", []))
    skips.append({"id": check_id, "comment": reason})
    cfn.add_metadata("checkov", {"skip": skips})
