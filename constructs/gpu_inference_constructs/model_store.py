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

from .errors import require

MODELS_PREFIX = "models"


def model_prefix(model_name: str, version: str) -> str:
    return f"{MODELS_PREFIX}/{model_name}/{version}/"


@dataclass(frozen=True)
class ModelStoreProps:
    noncurrent_versions_to_infrequent_access_days: int = 30
    noncurrent_versions_expire_days: int = 365
    access_log_retention_days: int = 365
    retain_on_delete: bool = True

    def __post_init__(self) -> None:
        require(
            self.noncurrent_versions_to_infrequent_access_days >= 30,
            "noncurrent_versions_to_infrequent_access_days",
            f"{self.noncurrent_versions_to_infrequent_access_days} is too short; S3 moves objects to Standard-IA after 30 days at the earliest",
        )
        require(
            self.noncurrent_versions_expire_days > self.noncurrent_versions_to_infrequent_access_days,
            "noncurrent_versions_expire_days",
            f"{self.noncurrent_versions_expire_days} must be greater than noncurrent_versions_to_infrequent_access_days "
            f"({self.noncurrent_versions_to_infrequent_access_days})",
        )
        require(self.access_log_retention_days >= 1, "access_log_retention_days", f"{self.access_log_retention_days} must be at least 1")


class ModelStore(Construct):
    """Attributes: ``bucket`` (models), ``access_logs_bucket`` (S3 server access logs and ALB access logs)."""

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
            versioned=False,
            lifecycle_rules=[s3.LifecycleRule(id="expire-logs", expiration=cdk.Duration.days(props.access_log_retention_days))],
            removal_policy=removal,
        )

        self.bucket = s3.Bucket(
            self,
            "Models",
            versioned=True,
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_logs_bucket,
            server_access_logs_prefix="s3/models/",
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
                s3.LifecycleRule(id="abort-incomplete-uploads", abort_incomplete_multipart_upload_after=cdk.Duration.days(7)),
            ],
            removal_policy=removal,
        )

    def uri(self, model_name: str, version: str) -> str:
        return f"s3://{self.bucket.bucket_name}/{model_prefix(model_name, version)}"

    def grant_read_model(self, grantee: iam.IGrantable, model_name: str) -> None:
        """Read every version of one model, and nothing else in the bucket."""
        prefix = f"{MODELS_PREFIX}/{model_name}/"
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[self.bucket.arn_for_objects(f"{prefix}*")])
        )
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}},
            )
        )
