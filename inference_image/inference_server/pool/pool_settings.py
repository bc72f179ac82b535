"""A pool server's settings, each an environment variable (the CDK side sets them; docs/server.md lists them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__, facts
from ..env_settings import env_field, values_from_env
from ..settings import (
    SettingsError,
    _api_keys,
    _bool,
    _choice,
    _float,
    _fraction,
    _int,
    _log_level,
    _model_name,
    _opt_str,
    _opt_url,
    _str,
    traces_endpoint,
)
from .affinity import DEFAULT_HOT_SHARE
from .peers import split_address
from .registry import RegistryError, pool_prefix

MIB = 1024 * 1024


def _addresses(raw: str) -> tuple[str, ...]:
    addresses = tuple(part.strip() for part in raw.split(",") if part.strip())
    for address in addresses:
        split_address(address)
    return addresses


@dataclass(frozen=True)
class PoolSettings:
    pool_name: str = env_field("POOL_NAME", _model_name, "", required=True)  # the route prefix /<pool>/ too
    # s3://<bucket>/pools/<pool>/ or a local directory laid out alike: the only place the pool reads models from.
    store_uri: str = env_field("MODEL_STORE_URI", _str, "", required=True)
    # The bound on a registry change reaching this task (plus one S3 GET): seconds, not a deployment.
    registry_poll_s: float = env_field("POOL_REGISTRY_POLL_SECONDS", _float(0, exclusive=True), 10.0)
    # Device memory for resident models: weights plus each model's batch plan (activations of MAX_BATCH_SIZE inputs
    # of MAX_SEQUENCE_LENGTH tokens). 0: no byte budget (the CPU, or a GPU bounded by POOL_MAX_RESIDENT_MODELS).
    gpu_memory_mib: int = env_field("POOL_GPU_MEMORY_MIB", _int(0), 0)
    # Host memory for models evicted from the device, kept for a fast reload (a host-to-device copy).
    host_memory_mib: int = env_field("POOL_HOST_MEMORY_MIB", _int(0), 4096)
    # Local disk for fetched versions (below host memory, above S3); least recently used versions are deleted.
    disk_cache_mib: int = env_field("POOL_DISK_CACHE_MIB", _int(1), 20480)
    max_resident_models: int = env_field("POOL_MAX_RESIDENT_MODELS", _int(0), 0)  # 0: no count limit
    # After a failed load the model answers 503 with this Retry-After without loading again; doubles per failure.
    load_backoff_s: float = env_field("POOL_LOAD_BACKOFF_S", _float(0, exclusive=True), 30.0)
    max_load_backoff_s: float = env_field("POOL_MAX_LOAD_BACKOFF_S", _float(0, exclusive=True), 600.0)
    load_threads: int = env_field("POOL_LOAD_THREADS", _int(1, 64), 2)
    # What deadline admission expects a load to take before this task has measured one.
    load_estimate_s: float = env_field("POOL_LOAD_ESTIMATE_S", _float(0, exclusive=True), 2.0)
    model_handler: str | None = env_field("MODEL_HANDLER", _opt_str, None)  # every pool model's handler, module:Class
    cache_dir: Path = env_field("MODEL_CACHE_DIR", lambda raw: Path(_str(raw)), Path("/tmp/model-cache"))
    host: str = env_field("HOST", _str, "0.0.0.0")
    port: int = env_field("PORT", _int(1, 65535), facts.PORT)
    device: str = env_field("DEVICE", _choice("auto", "cpu", "cuda"), "auto")
    precision: str = env_field("PRECISION", _choice("auto", "fp32", "fp16", "bf16"), "auto")
    max_batch_size: int = env_field("MAX_BATCH_SIZE", _int(1, 4096), 32)
    max_queue_size: int = env_field("MAX_QUEUE_SIZE", _int(1), 256)  # per model
    max_sequence_length: int = env_field("MAX_SEQUENCE_LENGTH", _int(8, 65536), 256)
    max_client_batch: int = env_field("MAX_CLIENT_BATCH", _int(1, 4096), 64)
    request_timeout_s: float = env_field("REQUEST_TIMEOUT_S", _float(0, exclusive=True), 10.0)
    # On SIGTERM: readiness fails and new requests get 503 at once; the accepted ones get this long to finish (a load
    # in progress is not waited for past it). The library sets it with the task's stopTimeout (bundled_stop).
    drain_timeout_s: float = env_field("DRAIN_TIMEOUT_S", _float(0), float(facts.DRAIN_TIMEOUT_S))
    keep_alive_s: float = env_field("KEEP_ALIVE_S", _float(0, exclusive=True), 75.0)  # above the ALB's idle timeout
    api_keys: tuple[tuple[str, str], ...] = env_field("API_KEYS", _api_keys, ())
    deployment_env: str = env_field("DEPLOYMENT_ENV", _str, "local")
    log_level: str = env_field("LOG_LEVEL", _log_level, "INFO")
    metrics_interval_s: float = env_field("METRICS_INTERVAL_S", _float(0, exclusive=True), 10.0)
    # The scale-out signal (QueueDepth, high resolution, the deepest queue since the last): keep at most half the
    # scaling alarms' 10 s period, so each period holds a datapoint.
    signal_interval_s: float = env_field("SIGNAL_INTERVAL_S", _float(0, exclusive=True), 5.0)
    # The shared result cache (Valkey/ElastiCache), as the single-model server reads it (settings.py): keys name the
    # pool, the model and its registered version; unset: no shared cache.
    shared_cache_endpoint: str | None = env_field("SHARED_CACHE_ENDPOINT", _opt_str, None)
    shared_cache_tls: bool = env_field("SHARED_CACHE_TLS", _bool, True)
    shared_cache_cluster: bool = env_field("SHARED_CACHE_CLUSTER", _bool, False)
    shared_cache_auth_token: str | None = dataclasses.field(
        default=None,
        repr=False,
        metadata={"variable": "SHARED_CACHE_AUTH_TOKEN", "parse": _opt_str, "required": False},
    )
    shared_cache_iam_user: str | None = env_field("SHARED_CACHE_IAM_USER", _opt_str, None)
    shared_cache_name: str | None = env_field("SHARED_CACHE_NAME", _opt_str, None)
    shared_cache_ttl_s: int = env_field("SHARED_CACHE_TTL_S", _int(1, 30 * 86400), 3600)
    shared_cache_max_value_bytes: int = env_field("SHARED_CACHE_MAX_VALUE_BYTES", _int(64, 16 * 1048576), 65536)
    shared_cache_timeout_ms: float = env_field("SHARED_CACHE_TIMEOUT_MS", _float(0, exclusive=True), 50.0)
    # Request spans over OTLP/HTTP to the task's collector (the `tracing` extra); unset: nothing traced.
    otel_exporter_otlp_endpoint: str | None = env_field("OTEL_EXPORTER_OTLP_ENDPOINT", _opt_url, None)
    otel_exporter_otlp_traces_endpoint: str | None = env_field("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", _opt_url, None)
    trace_sample_ratio: float = env_field("TRACE_SAMPLE_RATIO", _fraction, facts.TRACE_SAMPLE_RATIO)
    # Model affinity (peer_router.py): the pool's tasks, each owning the models rendezvous hashing gives it. Either
    # a fixed list of host:port (comma-separated), or the DNS name whose A records are the pool service's tasks
    # (ECS service discovery in Cloud Map: what the CDK side sets). Neither: every request is served where it lands.
    peers: tuple[str, ...] = env_field("POOL_PEERS", _addresses, ())
    peer_dns_name: str | None = env_field("POOL_PEER_DNS_NAME", _opt_str, None)
    peer_refresh_s: float = env_field("POOL_PEER_REFRESH_SECONDS", _float(0, exclusive=True), 5.0)  # DNS look-ups
    # A peer that does not take a connection within this is left out, and the request served here.
    peer_connect_timeout_s: float = env_field("POOL_PEER_CONNECT_TIMEOUT_S", _float(0, exclusive=True), 0.5)
    # How long a peer that failed a hop is left out (its models fall to the next-ranked task) before it is tried again.
    peer_down_s: float = env_field("POOL_PEER_DOWN_SECONDS", _float(0, exclusive=True), 10.0)
    # A model whose traffic would put more than this share of a task's even load on one owner gets more owners (its
    # next-ranked tasks); 0: one owner a model.
    peer_hot_share: float = env_field("POOL_PEER_HOT_SHARE", _float(0), DEFAULT_HOT_SHARE)

    def __post_init__(self) -> None:
        if self.peers and self.peer_dns_name:
            raise SettingsError("POOL_PEERS", "set POOL_PEERS or POOL_PEER_DNS_NAME, not both")
        if not self.store_uri.rstrip("/").endswith(pool_prefix(self.pool_name).rstrip("/")):
            raise SettingsError(
                "MODEL_STORE_URI",
                f"must end in {pool_prefix(self.pool_name)} (the pool's own prefix), got {self.store_uri!r}",
            )

    @property
    def traces_endpoint(self) -> str | None:
        return traces_endpoint(self.otel_exporter_otlp_endpoint, self.otel_exporter_otlp_traces_endpoint)

    @property
    def trace_service(self) -> tuple[str, str]:
        return self.pool_name, __version__

    @property
    def trace_attributes(self) -> dict[str, str]:
        """A request's model is an attribute of its own span (model.name, model.version), set once it is known."""
        return {"pool.name": self.pool_name}

    @property
    def gpu_memory_bytes(self) -> int | None:
        return self.gpu_memory_mib * MIB or None

    @property
    def host_memory_bytes(self) -> int:
        return self.host_memory_mib * MIB

    @property
    def disk_cache_bytes(self) -> int:
        return self.disk_cache_mib * MIB

    def replace(self, **changes: Any) -> PoolSettings:
        return dataclasses.replace(self, **changes)


def load_pool_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> PoolSettings:
    """Settings from the environment (and keyword overrides, for tests); SettingsError names the variable."""
    values = values_from_env(PoolSettings, env, overrides, "a pool server")
    try:
        return PoolSettings(**values)
    except RegistryError as exc:
        raise SettingsError("POOL_NAME", str(exc)) from None
