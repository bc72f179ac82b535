"""The shared result cache's props (an environment's ``cache``) and one model's use of it (its ``shared_cache``):
plain data and checks, without aws_cdk, for the constructs and the sizing advisor's cost estimate alike."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import require


@dataclass(frozen=True)
class ResultCacheProps:
    """An environment's cache (Valkey Serverless): its usage limits, which cap the bill, its alarms (any eviction,
    storage near the limit, slow reads, throttled commands, failed calls from the model servers) and the prices its
    cost estimate uses (us-east-1, Valkey Serverless; DESIGN-ADDITIONS-25)."""

    major_engine_version: str = "8"
    """Valkey's major version, "7" or "8" (IAM authentication needs Valkey 7.2 or later). Default: "8"."""
    max_data_storage_gb: int = 10
    """The data storage usage limit, 1-5000 GB; an eviction alarms that it is too low. Default: 10."""
    max_ecpu_per_second: int = 100000
    """The ElastiCache Processing Units per second usage limit, 1000-15000000. Default: 100000."""
    snapshot_retention_days: int = 0
    """Days of daily snapshots kept, 0-35. Default: 0 (none: a cache of results needs no backups; they cost
    storage)."""
    memory_alarm_percent: int = 80
    """The storage alarm's threshold, in percent of ``max_data_storage_gb``, 1-100. Default: 80."""
    read_latency_alarm_us: int = 2000
    """The read latency alarm's p99 threshold, in µs, 100 or more. Default: 2000."""
    errors_alarm_per_minute: int = 10
    """Failed cache calls from the model servers per minute (a cache they cannot reach) that alarm, 1 or more.
    Default: 10."""
    storage_usd_per_gb_hour: float = 0.084
    """The storage price for the cost estimate, USD per GB-hour. Default: 0.084 (us-east-1)."""
    minimum_metered_gb: float = 0.1
    """The least storage metered, GB, for the cost estimate. Default: 0.1."""
    usd_per_million_ecpu: float = 0.0023
    """The ECPU price for the cost estimate, USD per million. Default: 0.0023 (us-east-1)."""

    def __post_init__(self) -> None:
        require(
            self.major_engine_version in ("7", "8"),
            "major_engine_version",
            "must be '7' or '8' (IAM authentication needs Valkey 7.2 or later)",
        )
        require(1 <= self.max_data_storage_gb <= 5000, "max_data_storage_gb", "must be 1-5000 (GB)")
        require(1000 <= self.max_ecpu_per_second <= 15_000_000, "max_ecpu_per_second", "must be 1000-15000000")
        require(0 <= self.snapshot_retention_days <= 35, "snapshot_retention_days", "must be 0-35")
        require(1 <= self.memory_alarm_percent <= 100, "memory_alarm_percent", "must be 1-100")
        require(self.read_latency_alarm_us >= 100, "read_latency_alarm_us", "must be at least 100 (µs)")
        require(self.errors_alarm_per_minute >= 1, "errors_alarm_per_minute", "must be at least 1")


@dataclass(frozen=True)
class ModelCacheProps:
    """One model's use of the environment's cache."""

    enabled: bool | None = None
    """Whether the model's server stores and reads results in the cache (true on a vLLM model is refused: it has no
    such client). Default: None (on for the bundled server, off for vLLM)."""
    ttl_seconds: int = 3600
    """Seconds a stored result lives, 1 to 2592000 (30 days). Default: 3600."""
    max_value_bytes: int = 65536
    """The largest result stored, 64 to 16777216 bytes (16 MiB); larger ones are not stored. Default: 65536."""

    def __post_init__(self) -> None:
        require(1 <= self.ttl_seconds <= 30 * 86400, "ttl_seconds", "must be 1 s to 30 days (2592000)")
        require(64 <= self.max_value_bytes <= 16 * 1048576, "max_value_bytes", "must be 64 to 16777216")
