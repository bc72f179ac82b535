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
