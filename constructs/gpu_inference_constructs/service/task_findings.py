"""cdk-nag's findings on a model's task (its definition, execution role and task role), each acknowledged with its
reason (:func:`acknowledge_task_findings`)."""

from __future__ import annotations

from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from ..core.log_archive_props import archive_key_prefix
from ..shared.acknowledgements import (
    acknowledge,
    acknowledge_when_resolved,
    default_child,
    default_policy,
    nag_rendering,
)
from ..task_telemetry.telemetry import FireLensProps


def acknowledge_task_findings(
    scope: Construct,
    task_role: iam.Role,
    task_definition: ecs.TaskDefinition,
    bucket: s3.IBucket,
    *,
    read_prefix: str,
    firelens: FireLensProps | None,
    archive_bucket: s3.IBucket | None,
    environment_name: str,
    model_name: str,
    compile_cache_prefix: str | None,
) -> None:
    """cdk-nag's findings on the task definition, the execution role and the task role, each with its reason."""
    acknowledge(
        default_policy(task_role),
        "AwsSolutions-IAM5[Resource::*]",
        "The collector sends traces with xray:PutTraceSegments and xray:PutTelemetryRecords only "
        "(AWSXrayWriteOnlyAccess less its sampling reads), which support no resource-level permissions. Asserted "
        "by tests/infra/test_telemetry.py::test_the_task_role_may_only_write_traces.",
    )
    acknowledge(
        default_child(task_definition),
        "AwsSolutions-ECS2",
        "Only non-secret settings (model name, version, S3 URI, batch and timeout limits) are plain environment; "
        "API keys come from Secrets Manager. Asserted by "
        "tests/infra/test_service.py::test_secrets_are_injected_not_in_environment.",
    )
    execution_policy = default_policy(task_definition.obtain_execution_role())
    acknowledge(
        execution_policy,
        "AwsSolutions-IAM5[Resource::*]",
        "Added by aws-cdk-lib for the ECS execution role: ecr:GetAuthorizationToken has no resource-level "
        "permissions. Image pulls, log writes and secret reads are scoped to their ARNs.",
    )
    objects = f"{read_prefix}*"
    acknowledge_when_resolved(
        default_policy(task_role),
        lambda: f"AwsSolutions-IAM5[Resource::{nag_rendering(scope, bucket.arn_for_objects(objects))}]",
        "The task reads every object under its own model's prefix (versions are folders under it); "
        "nothing else in the bucket. Asserted by "
        "tests/infra/test_service.py::test_task_role_reads_only_its_model_prefix.",
    )
    if firelens is not None and firelens.archive is not None and firelens.archive.s3 and archive_bucket is not None:
        archived = archive_bucket.arn_for_objects(
            f"{archive_key_prefix(firelens.archive, environment_name, model_name)}*"
        )
        acknowledge_when_resolved(
            default_policy(task_role),
            lambda: f"AwsSolutions-IAM5[Resource::{nag_rendering(scope, archived)}]",
            "Fluent Bit's S3 output puts objects with generated names (time and a UUID) under this model's own "
            "archive prefix, nowhere else, and reads nothing. Asserted by tests/infra/test_log_archive.py.",
        )
    if compile_cache_prefix is not None:
        cache_objects = bucket.arn_for_objects(f"{compile_cache_prefix}*")
        acknowledge_when_resolved(
            default_policy(task_role),
            lambda: f"AwsSolutions-IAM5[Resource::{nag_rendering(scope, cache_objects)}]",
            "The server creates its compile cache, one archive per torch version, GPU kind and compile settings, "
            "under its own model version's .compile-cache/ folder, never replacing one (s3:if-none-match); it "
            "writes nowhere else. Asserted by "
            "tests/consumer/test_compile_cache.py::test_the_task_may_read_its_cache_and_only_create_one_and_write_nothing_else.",
        )
