"""A ModelService's optional knobs, grouped by what they are about: its logs, and who may reach its tasks."""

from __future__ import annotations

from dataclasses import dataclass, field

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager

from ..core.errors import require
from ..shared.log_retention import retention_days
from ..task_telemetry.telemetry import TelemetryProps
from .checks import DEFAULT_NAME_PREFIX, check_name_prefix
from .choices import require_cdk


@dataclass(frozen=True)
class ServiceLogs:
    """A model's log group: ``/<name_prefix>/<environment>/<model>``, encrypted, kept ``retention_days``; the route
    its server's logs take there and the share of its requests traced to X-Ray (``telemetry``)."""

    key: kms.IKey
    """The KMS key that encrypts the log group (it must let CloudWatch Logs use it: ``grant_logs_service``).
    Required."""
    retention_days: int = 90
    """How long log events are kept, one of CloudWatch Logs' retention periods. Default: 90."""
    name_prefix: str = DEFAULT_NAME_PREFIX
    """Starts the log group's and the alarms' fixed names: give each team's app its own where two share an account.
    Default: ``"gpu-inference"``."""
    telemetry: TelemetryProps = field(default_factory=TelemetryProps)
    """Trace sampling and the log route (awslogs, or FireLens). Default: TelemetryProps() (1 % traced, awslogs)."""
    archive_bucket: s3.IBucket | None = None
    """The bucket a FireLens ``LogArchive`` with ``s3`` writes to (yours: ``s3.Bucket.from_bucket_attributes``, with
    its ``encryption_key`` if a KMS key encrypts it). Default: None (required only by such an archive)."""

    def __post_init__(self) -> None:
        require(
            isinstance(self.telemetry, TelemetryProps),
            "telemetry",
            f"got {type(self.telemetry).__name__}: pass a TelemetryProps",
        )
        firelens = self.telemetry.firelens
        if firelens is not None and firelens.archive is not None and firelens.archive.s3:
            require_cdk(
                self.archive_bucket,
                ("bucket_arn",),
                "archive_bucket",
                "an s3.IBucket for telemetry.firelens.archive (s3.Bucket.from_bucket_attributes for your own)",
            )
        require_cdk(self.key, ("key_arn",), "key", "a kms.IKey (kms.Key.from_key_arn for an imported one)")
        retention_days(self.retention_days, "retention_days")
        check_name_prefix(self.name_prefix)


@dataclass(frozen=True)
class ServiceAccess:
    """Who may reach a model's tasks: the subnets their network interfaces are in, and the API keys callers show."""

    api_keys_secret: secretsmanager.ISecret | None = None
    """A secret holding a JSON object of key names to keys, given to the server contract's ``api_keys_variable``
    (whole, or only its ``api_key_field`` key: vLLM's one key). Default: None; then a model behind an
    InferenceLoadBalancer open to the internet is refused (behind your own listener, a warning), unless
    ``allow_unauthenticated``."""
    allow_unauthenticated: bool = False
    """True where something else decides who may call the model (an authenticating proxy or WAF rule in front, or
    a network only your clients reach). Default: False."""
    subnets: ec2.SubnetSelection | None = None
    """Where the tasks' network interfaces go. Default: the cluster VPC's private subnets."""

    def __post_init__(self) -> None:
        if self.api_keys_secret is not None:
            require_cdk(self.api_keys_secret, ("secret_arn",), "api_keys_secret", "a secretsmanager.ISecret, or None")
        require(
            isinstance(self.allow_unauthenticated, bool),
            "allow_unauthenticated",
            f"{self.allow_unauthenticated!r}: True or False",
        )
        require(
            self.subnets is None or isinstance(self.subnets, ec2.SubnetSelection),
            "subnets",
            f"got {type(self.subnets).__name__}: pass an ec2.SubnetSelection, or None",
        )
