"""The adapter-sync sidecar's settings, each an environment variable (the library sets them; docs/lora-adapters.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.artifacts import ArtifactError, parse_s3_uri
from ..env_settings import env_field, values_from_env
from ..registry.document import REGISTRY_FILE, RegistryError
from ..settings import SettingsError, _choice, _float, _int, _log_level, _opt_str, _str
from .registry import base_prefix

SERVER_KINDS = ("vllm", "sglang")


def _opt_int(raw: str) -> int | None:
    return _int(1)(raw) if raw.strip() else None


@dataclass(frozen=True)
class SidecarSettings:
    # s3://<bucket>/adapters/<base-model>/registry.json: the only registry it reads; versions are read beside it.
    registry_uri: str = env_field("ADAPTER_REGISTRY_URI", _str, "", required=True)
    adapter_dir: Path = env_field("ADAPTER_DIR", lambda raw: Path(_str(raw)), Path("/adapters"))  # the shared volume
    server_url: str = env_field("ADAPTER_SERVER_URL", _str, "http://127.0.0.1:8000")
    server_kind: str = env_field("ADAPTER_SERVER_KIND", _choice(*SERVER_KINDS), "vllm")
    server_api_key: str | None = env_field("ADAPTER_SERVER_API_KEY", _opt_str, None)
    # The bound on a registry change reaching this task is poll + download + load.
    poll_s: float = env_field("ADAPTER_POLL_SECONDS", _float(0, exclusive=True), 10.0)
    max_rank: int | None = env_field("ADAPTER_MAX_RANK", _opt_int, None)  # None: the server's own check alone
    ready_port: int = env_field("ADAPTER_READY_PORT", _int(1, 65535), 8081)
    # After a failed load (or download) the adapter is not tried again for this long; doubles per failure, to the cap.
    backoff_s: float = env_field("ADAPTER_LOAD_BACKOFF_SECONDS", _float(0, exclusive=True), 10.0)
    max_backoff_s: float = env_field("ADAPTER_MAX_LOAD_BACKOFF_SECONDS", _float(0, exclusive=True), 600.0)
    request_timeout_s: float = env_field("ADAPTER_SERVER_TIMEOUT_SECONDS", _float(0, exclusive=True), 120.0)
    deployment_env: str = env_field("DEPLOYMENT_ENV", _str, "local")  # the Environment dimension of its metrics
    log_level: str = env_field("LOG_LEVEL", _log_level, "INFO")

    def __post_init__(self) -> None:
        try:
            bucket, key = parse_s3_uri(self.registry_uri)
        except ArtifactError as exc:
            raise SettingsError("ADAPTER_REGISTRY_URI", str(exc)) from None
        prefix = key.rstrip("/").removesuffix(REGISTRY_FILE)
        try:
            good = bool(bucket) and key.rstrip("/").endswith("/" + REGISTRY_FILE) and base_prefix(self.base) == prefix
        except RegistryError:
            good = False
        if not good:
            raise SettingsError(
                "ADAPTER_REGISTRY_URI",
                f"must be s3://<bucket>/adapters/<base-model>/registry.json, got {self.registry_uri!r}",
            )

    @property
    def bucket(self) -> str:
        return parse_s3_uri(self.registry_uri)[0]

    @property
    def registry_key(self) -> str:
        return parse_s3_uri(self.registry_uri)[1].rstrip("/")

    @property
    def base(self) -> str:
        """The base model: the registry's folder, adapters/<base>/."""
        parts = self.registry_key.split("/")
        return parts[-2] if len(parts) == 3 and parts[0] == "adapters" else ""


def load_sidecar_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> SidecarSettings:
    """Settings from the environment (and keyword overrides, for tests); SettingsError names the variable."""
    return SidecarSettings(**values_from_env(SidecarSettings, env, overrides, "the adapter sidecar"))
