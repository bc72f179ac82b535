"""The versioned S3 bucket that holds model artifacts, and the bucket that keeps access logs.

Layout: ``models/<model-name>/<version>/`` holds a model's files and the ``manifest.json``
(SHA-256 of each file) that the publishing command writes and the server verifies.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from ..core.errors import require
from ..shared.acknowledgements import default_child, skip_checkov
from ..shared.cdk_interfaces import service_principal
from .model_bucket import MODELS_PREFIX as MODELS_PREFIX
from .model_bucket import BoundModelSource, ModelSource
from .published_files import MANIFEST_FILE as MANIFEST_FILE
from .published_files import SHA256PIECES_FILE as SHA256PIECES_FILE
from .published_files import SHA256SUMS_FILE as SHA256SUMS_FILE

ACCESS_LOGS_PREFIX = "s3/models/"


def model_prefix(model_name: str, version: str) -> str:
    return f"{MODELS_PREFIX}/{model_name}/{version}/"


@dataclass(frozen=True)
class ModelStoreProps:
    """How long the model bucket keeps replaced versions and the access logs, and whether both buckets outlive their
    stack."""

    noncurrent_versions_to_infrequent_access_days: int = 30
    """Days after which a replaced (noncurrent) model file moves to S3 Standard-IA, 30 or more (S3's earliest).
    Default: 30."""
    noncurrent_versions_expire_days: int = 365
    """Days after which a replaced model file is deleted, more than ``noncurrent_versions_to_infrequent_access_days``.
    Default: 365."""
    access_log_retention_days: int = 365
    """Days the access logs bucket keeps each log (and a replaced or deleted one), 1 or more. Default: 365."""
    retain_on_delete: bool = True
    """Keep both buckets when the stack is deleted (``RemovalPolicy.RETAIN``); False destroys them. Default: True."""

    def __post_init__(self) -> None:
        require(
            self.noncurrent_versions_to_infrequent_access_days >= 30,
            "noncurrent_versions_to_infrequent_access_days",
            f"{self.noncurrent_versions_to_infrequent_access_days} is too short; S3 moves objects to Standard-IA after "
            "30 days at the earliest",
        )
        require(
            self.noncurrent_versions_expire_days > self.noncurrent_versions_to_infrequent_access_days,
            "noncurrent_versions_expire_days",
            f"{self.noncurrent_versions_expire_days} must be greater than "
            f"noncurrent_versions_to_infrequent_access_days ({self.noncurrent_versions_to_infrequent_access_days})",
        )
        require(
            self.access_log_retention_days >= 1,
            "access_log_retention_days",
            f"{self.access_log_retention_days} must be at least 1",
        )


class ModelStore(Construct, ModelSource):
    """Attributes: ``bucket`` (models), ``access_logs_bucket`` (S3 server access logs and ALB access logs).

    A ModelSource: a ModelService given it as ``model_source`` reads its model under ``models/`` of ``bucket``."""

    def __init__(self, scope: Construct, construct_id: str, *, props: ModelStoreProps) -> None:
        super().__init__(scope, construct_id)
        removal = cdk.RemovalPolicy.RETAIN if props.retain_on_delete else cdk.RemovalPolicy.DESTROY

        # ALB access logs support only SSE-S3, so this bucket uses it too.
        self.access_logs_bucket = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            # Versioned, so a deleted or overwritten log survives as a noncurrent version until the logs' retention.
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-logs",
                    expiration=cdk.Duration.days(props.access_log_retention_days),
                    noncurrent_version_expiration=cdk.Duration.days(props.access_log_retention_days),
                )
            ],
            removal_policy=removal,
        )
        skip_checkov(
            self.access_logs_bucket,
            "CKV_AWS_18",
            "This is the access-log bucket (S3 server access logs of the model bucket, ALB access logs): logging it "
            "into itself would log each log delivery, and into another bucket would only move the question there.",
        )

        self.bucket = s3.Bucket(
            self,
            "Models",
            versioned=True,
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="age-out-noncurrent-versions",
                    noncurrent_version_transitions=[
                        s3.NoncurrentVersionTransition(
                            storage_class=s3.StorageClass.INFREQUENT_ACCESS,
                            transition_after=cdk.Duration.days(props.noncurrent_versions_to_infrequent_access_days),
                        )
                    ],
                    noncurrent_version_expiration=cdk.Duration.days(props.noncurrent_versions_expire_days),
                ),
                s3.LifecycleRule(
                    id="abort-incomplete-uploads", abort_incomplete_multipart_upload_after=cdk.Duration.days(7)
                ),
            ],
            removal_policy=removal,
        )
        self._log_access_to(self.access_logs_bucket, ACCESS_LOGS_PREFIX)

    def _log_access_to(self, target: s3.Bucket, prefix: str) -> None:
        """S3 server access logging, granted by bucket policy whatever the app's feature flags.

        ``server_access_logs_bucket`` grants by ACL (LogDeliveryWrite) unless the consuming app sets
        ``@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy``, and an ACL fails on a bucket whose
        ownership is BucketOwnerEnforced. So the logging configuration and its bucket-policy grant
        are written here, exactly as that flag would write them.
        """
        bucket = default_child(self.bucket, s3.CfnBucket)
        bucket.logging_configuration = s3.CfnBucket.LoggingConfigurationProperty(
            destination_bucket_name=target.bucket_name, log_file_prefix=prefix
        )
        target.add_to_resource_policy(
            iam.PolicyStatement(
                effect=iam.Effect.ALLOW,
                principals=[service_principal("logging.s3.amazonaws.com")],
                actions=["s3:PutObject"],
                resources=[target.arn_for_objects(f"{prefix}*")],
                conditions={
                    "ArnLike": {"aws:SourceArn": self.bucket.bucket_arn},
                    "StringEquals": {"aws:SourceAccount": cdk.Stack.of(self).account},
                },
            )
        )

    def bind(self, service: Construct) -> BoundModelSource:
        return BoundModelSource(self.bucket, MODELS_PREFIX)

    def uri(self, model_name: str, version: str) -> str:
        return f"s3://{self.bucket.bucket_name}/{model_prefix(model_name, version)}"

    def grant_read_model(self, grantee: iam.IGrantable, model_name: str) -> None:
        """Read every version of one model, and nothing else in the bucket."""
        grant_read_prefix(self.bucket, grantee, f"{MODELS_PREFIX}/{model_name}/")


def model_uri(bucket: s3.IBucket, models_prefix: str, model_name: str, version: str) -> str:
    """``s3://<bucket>/<models_prefix>/<name>/<version>/``: where a model version's files live."""
    return f"s3://{bucket.bucket_name}/{_join_prefix(models_prefix, model_name)}{version}/"


def grant_read_prefix(bucket: s3.IBucket, grantee: iam.IGrantable, prefix: str) -> None:
    """GetObject under ``prefix`` and ListBucket limited to it; nothing else in ``bucket``."""
    grantee.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{prefix}*")])
    )
    grantee.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(
            actions=["s3:ListBucket"],
            resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}},
        )
    )


def compile_cache_prefix(models_prefix: str, model_name: str, version: str) -> str:
    """Where a model version's compile cache lives: beside its versions, under the model's own prefix, in a folder
    no version can be named (versions never start with a dot)."""
    return f"{_join_prefix(models_prefix, model_name)}.compile-cache/{version}/"


def model_read_prefix(models_prefix: str, model_name: str) -> str:
    return _join_prefix(models_prefix, model_name)


def _join_prefix(models_prefix: str, model_name: str) -> str:
    base = models_prefix.strip("/")
    return f"{base}/{model_name}/" if base else f"{model_name}/"
