"""The FireLens router's second output (:class:`LogArchive`): its Fluent Bit configuration file as a CDK file asset,
read by the ECS agent with the execution role (``config-file-type`` ``s3``, ECS on EC2), and the task role's
least-privilege writes to the archive bucket (its key) and the Firehose stream."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from ..core.log_archive_props import (
    ARCHIVE_BUCKET_VARIABLE,
    ARCHIVE_REGION_VARIABLE,
    FIREHOSE_STREAM_VARIABLE,
    LogArchive,
    archive_config,
    archive_key_prefix,
)

CONFIG_FILE_NAME = "log-archive.conf"
UNKNOWN_ENCRYPTION_WARNING_ID = "gpu-inference:archive-bucket-encryption"


def archive_config_asset(scope: Construct, config_text: str) -> s3_assets.Asset:
    """The configuration file as a file asset: ``cdk deploy`` uploads it to the bootstrap bucket with the templates,
    so no function or custom resource copies it (an s3 BucketDeployment would add both)."""
    return s3_assets.Asset(scope, "LogArchiveConfig", path=str(written_config(config_text)))


def written_config(config_text: str) -> Path:
    """``config_text`` in a file named by its content under the system's temporary folder: every synth of one
    configuration reuses one file instead of leaving a folder behind, and parallel synths write it atomically."""
    digest = hashlib.sha256(config_text.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / "gpu-inference-log-archive" / digest / CONFIG_FILE_NAME
    if not path.exists() or path.read_text() != config_text:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{CONFIG_FILE_NAME}.{os.getpid()}")
        partial.write_text(config_text)
        os.replace(partial, path)
    return path


def firelens_config_with_archive(
    scope: Construct,
    task_definition: ecs.TaskDefinition,
    archive: LogArchive,
    *,
    server_container: str,
    environment_name: str,
    model_name: str,
) -> ecs.FirelensConfig:
    """The router's FireLens configuration naming the file, and the execution role's reads of it: ``s3:GetObject`` on
    the object and ``s3:GetBucketLocation`` on its bucket (ECS developer guide, task execution role, "Amazon S3 file
    storage permissions"). CDK adds the second on ``value.split("/")[0]``, which in an environment-agnostic stack (a
    token ARN) is the object ARN again, where GetBucketLocation is never allowed: the statement on the bucket is
    added here (identical to CDK's in a stack with its account and region, and merged with it)."""
    if archive.firehose_stream_arn is not None:
        cdk.Annotations.of(scope).add_warning_v2(
            "gpu-inference:firehose-endpoint",
            "The log router sends to Firehose: a VPC without NAT needs the com.amazonaws.<region>.kinesis-firehose "
            "interface endpoint (interface_endpoints: kinesis-firehose), or the records stay in the router.",
        )
    asset = archive_config_asset(scope, archive_config(archive, server_container, environment_name, model_name))
    object_arn = asset.bucket.arn_for_objects(asset.s3_object_key)
    task_definition.add_to_execution_role_policy(
        iam.PolicyStatement(actions=["s3:GetBucketLocation"], resources=[asset.bucket.bucket_arn])
    )
    return ecs.FirelensConfig(
        type=ecs.FirelensLogRouterType.FLUENTBIT,
        options=ecs.FirelensOptions(
            config_file_type=ecs.FirelensConfigFileType.S3, config_file_value=object_arn, enable_ecs_log_metadata=True
        ),
    )


def archive_environment(archive: LogArchive, bucket: s3.IBucket | None, region: str) -> dict[str, str]:
    """The router's variables the configuration file reads."""
    environment = {ARCHIVE_REGION_VARIABLE: region}
    if archive.s3 and bucket is not None:
        environment[ARCHIVE_BUCKET_VARIABLE] = bucket.bucket_name
    if archive.firehose_stream_name is not None:
        environment[FIREHOSE_STREAM_VARIABLE] = archive.firehose_stream_name
    return environment


def grant_archive_writes(
    scope: Construct,
    task_role: iam.Role,
    archive: LogArchive,
    bucket: s3.IBucket | None,
    region: str,
    *,
    environment_name: str,
    model_name: str,
) -> None:
    """The task role (Fluent Bit's credentials) may put objects under this model's prefix only, use the bucket's KMS
    key for that through S3 only (PutObject with SSE-KMS needs ``kms:GenerateDataKey``; the key's policy must let
    the account's IAM policies grant it, as kms.Key's default policy does), and put record batches into the one
    stream. Identity statements only: an imported bucket or key is never changed. A bucket imported without its key
    (``Bucket.from_bucket_name``) may still be SSE-KMS, which the app cannot see: a warning names the fix."""
    if archive.s3 and bucket is not None:
        task_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject"],
                resources=[bucket.arn_for_objects(f"{archive_key_prefix(archive, environment_name, model_name)}*")],
            )
        )
        if bucket.encryption_key is not None:
            task_role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["kms:GenerateDataKey"],
                    resources=[bucket.encryption_key.key_arn],
                    conditions={"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}},
                )
            )
        elif not isinstance(bucket, s3.Bucket):
            cdk.Annotations.of(scope).add_warning_v2(
                UNKNOWN_ENCRYPTION_WARNING_ID,
                f"ServiceLogs.archive_bucket {bucket.node.id!r} is imported without its encryption key, so the task "
                "role gets no kms:GenerateDataKey: if the bucket's default encryption is SSE-KMS, Fluent Bit's "
                "PutObject is denied at run time. Import it with s3.Bucket.from_bucket_attributes(..., "
                "encryption_key=<its key>) (the grant is then added), "
                "or acknowledge this warning for an SSE-S3 bucket.",
            )
    if archive.firehose_stream_arn is not None:
        task_role.add_to_principal_policy(
            iam.PolicyStatement(actions=["firehose:PutRecordBatch"], resources=[archive.firehose_stream_arn])
        )
