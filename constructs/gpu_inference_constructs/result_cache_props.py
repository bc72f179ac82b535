"""The shared result cache's props (an environment's ``cache``) and one model's use of it (its ``shared_cache``):
plain data and checks, without aws_cdk, for the constructs and the sizing advisor's cost estimate alike."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import require


@dataclass(frozen=True)
class ResultCacheProps:
    """An environment's cache. Usage limits cap the bill: ``max_data_storage_gb`` (1-5000, default 10) and
    ``max_ecpu_per_second`` (1000-15 000 000, default 100 000). Alarms: any eviction (the limit is too low),
    storage above ``memory_alarm_percent`` (80) of the limit, read latency p99 above ``read_latency_alarm_us``
    (2000 µs), throttled commands, and ``errors_alarm_per_minute`` (10) failed calls from the model servers (a
    cache they cannot reach). Prices (us-east-1, Valkey Serverless; DESIGN-ADDITIONS-25): ``storage_usd_per_gb_hour``
    0.084 with 0.1 GB metered at least, ``usd_per_million_ecpu`` 0.0023."""

    major_engine_version: str = "8"
    max_data_storage_gb: int = 10
    max_ecpu_per_second: int = 100000
    snapshot_retention_days: int = 0  # a cache of results needs no backups; they cost storage
    memory_alarm_percent: int = 80
    read_latency_alarm_us: int = 2000
    errors_alarm_per_minute: int = 10
    storage_usd_per_gb_hour: float = 0.084
    minimum_metered_gb: float = 0.1
    usd_per_million_ecpu: float = 0.0023

    def __post_init__(self) -> None:
        require(self.major_engine_version in ("7", "8"), "major_engine_version",
                "must be '7' or '8' (IAM authentication needs Valkey 7.2 or later)")
        require(1 <= self.max_data_storage_gb <= 5000, "max_data_storage_gb", "must be 1-5000 (GB)")
        require(1000 <= self.max_ecpu_per_second <= 15_000_000, "max_ecpu_per_second", "must be 1000-15000000")
        require(0 <= self.snapshot_retention_days <= 35, "snapshot_retention_days", "must be 0-35")
        require(1 <= self.memory_alarm_percent <= 100, "memory_alarm_percent", "must be 1-100")
        require(self.read_latency_alarm_us >= 100, "read_latency_alarm_us", "must be at least 100 (µs)")
        require(self.errors_alarm_per_minute >= 1, "errors_alarm_per_minute", "must be at least 1")


@dataclass(frozen=True)
class ModelCacheProps:
    """One model's use of the environment's cache: ``enabled`` (default: on for our server, off for vLLM, which
    has no such client; true on a vLLM model is refused), ``ttl_seconds`` (3600, at most 30 days),
    ``max_value_bytes`` (65536: larger predictions are not stored; at most 16 MiB)."""

    enabled: bool | None = None
    ttl_seconds: int = 3600
    max_value_bytes: int = 65536

    def __post_init__(self) -> None:
        require(1 <= self.ttl_seconds <= 30 * 86400, "ttl_seconds", "must be 1 s to 30 days (2592000)")
        require(64 <= self.max_value_bytes <= 16 * 1048576, "max_value_bytes", "must be 64 to 16777216")
