"""A small inline Python function of this library's (standard library only): its own log group, a role that writes
only that group, and the checkov findings such a function always raises, answered."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from .acknowledgements import skip_checkov
from .cdk_interfaces import as_role, service_principal
from .log_retention import retention_days

RUNTIME = lambda_.Runtime.PYTHON_3_14
NO_RESERVED_CONCURRENCY = (
    "No reserved concurrency: Lambda lets a function reserve only what leaves 100 of the "
    "account's concurrency unreserved (Lambda developer guide, reserved concurrency), and a new "
    "account may start at 10, where any reservation fails the deploy; one event at a time needs "
    "no guarantee"
)


@dataclass(frozen=True)
class InlineFunction:
    function: lambda_.Function
    role: iam.Role
    log_group: logs.LogGroup


def inline_function(
    scope: Construct,
    *,
    source: str,
    description: str,
    role_description: str,
    timeout_seconds: int,
    no_dead_letter_queue: str,
    not_in_vpc: str,
    logs_key: kms.IKey | None = None,
    log_retention_days: int = 90,
    statements: Sequence[iam.PolicyStatement] = (),
) -> InlineFunction:
    """The function (``Function``), its role (``Role``) and log group (``Logs``) in ``scope``; ``statements`` add to
    the role; the two reasons answer checkov's dead-letter-queue and VPC checks for this function."""
    log_group = logs.LogGroup(
        scope, "Logs", encryption_key=logs_key, retention=retention_days(log_retention_days, "log_retention_days")
    )
    role = iam.Role(scope, "Role", assumed_by=service_principal("lambda.amazonaws.com"), description=role_description)
    role.add_to_policy(
        iam.PolicyStatement(actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn])
    )
    for statement in statements:
        role.add_to_policy(statement)
    function = lambda_.Function(
        scope,
        "Function",
        description=description,
        runtime=RUNTIME,
        handler="index.handler",
        code=lambda_.Code.from_inline(source),
        memory_size=128,
        timeout=cdk.Duration.seconds(timeout_seconds),
        role=as_role(role),
        log_group=log_group,
    )
    for check, reason in (
        ("CKV_AWS_116", no_dead_letter_queue),
        ("CKV_AWS_115", NO_RESERVED_CONCURRENCY),
        ("CKV_AWS_117", not_in_vpc),
    ):
        skip_checkov(function, check, reason)
    return InlineFunction(function, role, log_group)
