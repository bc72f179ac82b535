"""A ModelService's optional knobs, grouped by what they are about: its logs, and who may reach its tasks."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager

from ..core.errors import require
from ..shared.environment import (
    DEFAULT_LOG_RETENTION_DAYS,
    DEFAULT_NAME_PREFIX,
    InferenceEnvironment,
    check_name_prefix,
    require_identity,
)
from ..shared.log_retention import retention_days
from ..task_telemetry.telemetry import TelemetryProps
from .choices import require_cdk


@dataclass(frozen=True)
class ServiceLogs:
    """A model's log group: ``/<name_prefix>/<environment>/<model>``, encrypted, kept ``retention_days``; the route
    its server's logs take there and the share of its requests traced to X-Ray (``telemetry``). With
    ``ModelService(environment=...)`` the key, retention and prefix are the environment's (leave them unset here);
    without one, ``key`` is required."""

    key: kms.IKey | None = None
    """The KMS key that encrypts the log group (it must let CloudWatch Logs use it: ``grant_logs_service``). Default:
    None (the environment's ``logs_key``; required without ``environment=``)."""
    retention_days: int | None = None
    """How long log events are kept, one of CloudWatch Logs' retention periods. Default: None (the environment's
    ``log_retention_days``, else 90)."""
    name_prefix: str | None = None
    """Starts the log group's and the alarms' fixed names: give each team's app its own where two share an account.
    Default: None (the environment's ``name_prefix``, else ``"gpu-inference"``)."""
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
        if self.key is not None:
            require_cdk(self.key, ("key_arn",), "key", "a kms.IKey (kms.Key.from_key_arn for an imported one)")
        if self.retention_days is not None:
            retention_days(self.retention_days, "retention_days")
        if self.name_prefix is not None:
            check_name_prefix(self.name_prefix)

    def of_environment(self, environment: InferenceEnvironment | None) -> ServiceLogs:
        """These logs with their key, retention and prefix said once: the ``environment``'s (none of them given here),
        or, without one, this object's own (``key`` required; 90 days and ``"gpu-inference"`` by default)."""
        if environment is not None:
            InferenceEnvironment.refuse_beside(
                "the model's logs",
                **{
                    "logs.key": self.key,
                    "logs.retention_days": self.retention_days,
                    "logs.name_prefix": self.name_prefix,
                },
            )
            return replace(
                self,
                key=environment.logs_key,
                retention_days=environment.log_retention_days,
                name_prefix=environment.name_prefix,
            )
        require_identity("ModelService", {"logs=ServiceLogs(key)": self.key})
        return replace(
            self,
            retention_days=DEFAULT_LOG_RETENTION_DAYS if self.retention_days is None else self.retention_days,
            name_prefix=DEFAULT_NAME_PREFIX if self.name_prefix is None else self.name_prefix,
        )


def service_identity(
    environment: InferenceEnvironment | str | None, logs: ServiceLogs | None
) -> tuple[str, ServiceLogs]:
    """(the environment's name, the model's complete logs) for a ModelService: from ``environment``, an
    InferenceEnvironment, or from the environment's name with ``logs`` (``key`` set), 0.2's form."""
    require(
        logs is None or isinstance(logs, ServiceLogs),
        "logs",
        f"got {type(logs).__name__}: pass ServiceLogs(key=None, retention_days=None, name_prefix=None, telemetry=...)",
    )
    if isinstance(environment, InferenceEnvironment):
        return environment.name, (logs or ServiceLogs()).of_environment(environment)
    require(
        environment is None or isinstance(environment, str),
        "environment",
        f"got {type(environment).__name__}: pass an InferenceEnvironment (or the environment's name, such as 'prod')",
    )
    require_identity(
        "ModelService", {"the environment's name as environment=": environment, "logs=ServiceLogs(key)": logs}
    )
    assert environment is not None and logs is not None  # required above
    return environment, logs.of_environment(None)


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
