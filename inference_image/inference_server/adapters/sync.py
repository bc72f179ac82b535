"""The registry against what the server has loaded, one step per poll:

- removed from the registry: unloaded from the server, then its files deleted (never the other way round);
- added, or moved to another version: its manifest read, refused without a download where its rank is above
  ADAPTER_MAX_RANK or it is not an adapter of this base; else downloaded and verified (files.py), then loaded (a move
  replaces the old version: in place on vLLM, so a failed move leaves the old one serving) and the old version's files
  deleted;
- a failed download or load is named in the status and the logs and not tried again before its backoff (doubling per
  failure, capped), nor again at all while the registry still names the refused version of a refused adapter;
- a server that no longer lists an adapter this sidecar loaded (it restarted) gets it loaded again.

Readiness (ready.py): the server answers, the registry has been read, and every registered adapter is loaded at its
registered version, or failed or refused (named in the body). A failure does not hold readiness: one bad adapter must
not
take every task of the service out of its target group; its requests get the server's 404 until a retry loads it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..manifest import Manifest
from .files import AdapterFiles
from .metrics import SyncMetrics
from .registry import AdapterRegistry
from .server_api import ServerApi, ServerError

log = logging.getLogger(__name__)

FETCH_THREADS = 4  # adapters downloaded at once (each over several ranged GETs)


@dataclass(frozen=True)
class Failure:
    version: str
    error: str
    attempts: int = 1
    retry_at: float = float("inf")  # inf: refused, not retried while the registry names this version


@dataclass(frozen=True)
class Status:
    server_up: bool = False
    revision: int | None = None  # the registry's revision; None until it has been read
    registered: dict[str, str] = field(default_factory=dict)
    loaded: dict[str, str] = field(default_factory=dict)
    failed: dict[str, Failure] = field(default_factory=dict)
    now: float = 0.0

    @property
    def missing(self) -> list[str]:
        """Registered adapters neither loaded at their version nor failed at it: still to be loaded."""
        return sorted(
            name
            for name, version in self.registered.items()
            if self.loaded.get(name) != version and (name not in self.failed or self.failed[name].version != version)
        )

    @property
    def ready(self) -> bool:
        return self.server_up and self.revision is not None and not self.missing

    def to_json(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "server": "up" if self.server_up else "not answering",
            "registry_revision": self.revision,
            "registered": len(self.registered),
            "loaded": sum(1 for n, v in self.registered.items() if self.loaded.get(n) == v),
            "missing": self.missing,
            "failed": {
                name: {
                    "version": f.version,
                    "error": f.error,
                    "attempts": f.attempts,
                    "retry_in_s": None if f.retry_at == float("inf") else max(0.0, round(f.retry_at - self.now, 1)),
                }
                for name, f in sorted(self.failed.items())
            },
        }


class AdapterSync:
    def __init__(
        self,
        files: AdapterFiles,
        server: ServerApi,
        metrics: SyncMetrics,
        *,
        max_rank: int | None,
        backoff_s: float,
        max_backoff_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.files, self.server, self.metrics = files, server, metrics
        self.max_rank, self.backoff_s, self.max_backoff_s, self.clock = max_rank, backoff_s, max_backoff_s, clock
        self.registry: AdapterRegistry | None = None
        self.loaded: dict[str, str] = {}  # what this sidecar loaded into the server: name -> version
        self.failed: dict[str, Failure] = {}
        self.fetched: dict[tuple[str, str], Path] = {}  # verified on disk, not yet loaded
        self.status = Status()

    def step(self, registry: AdapterRegistry | None) -> Status:
        """Apply a newly read registry (None: unchanged) and bring the server in step with it. Files are fetched while
        the server is still starting, so a new task's downloads overlap its server's start."""
        if registry is not None:
            if registry.base != self.files.base:
                log.error("registry of another base model ignored", extra={"base": registry.base})
            else:
                self.registry = registry
        try:
            listed, up = self.server.loaded(), True
        except ServerError as exc:
            log.debug("server not answering", extra={"error": str(exc)})
            listed, up = None, False
        if listed is not None:
            for name in [n for n in self.loaded if n not in listed]:
                log.warning("the server no longer serves an adapter; loading it again", extra={"adapter": name})
                del self.loaded[name]
        if self.registry is None:
            return self._status(up)
        wanted = dict(self.registry.adapters)
        if up:
            for name in sorted(set(self.loaded) - set(wanted)):
                self._remove(name)
        self.failed = {n: f for n, f in self.failed.items() if wanted.get(n) == f.version}
        for name, version in [k for k in self.fetched if wanted.get(k[0]) != k[1]]:
            del self.fetched[(name, version)]  # fetched for a version the registry moved away from before it loaded
            if self.loaded.get(name) != version:
                self.files.delete(name, version)
        now = self.clock()
        todo = [
            (name, version)
            for name, version in sorted(wanted.items())
            if self.loaded.get(name) != version and (name not in self.failed or self.failed[name].retry_at <= now)
        ]
        missing = [item for item in todo if item not in self.fetched]
        if missing:
            with ThreadPoolExecutor(FETCH_THREADS) as pool:
                for item, (path, error, refused) in zip(
                    missing, pool.map(lambda i: self._fetch(*i), missing), strict=True
                ):
                    if path is None:
                        self._fail(*item, error, refused=refused)
                    else:
                        self.fetched[item] = path
        if up:
            for name, version in todo:
                path = self.fetched.get((name, version))
                if path is not None:
                    self._load(name, version, path, in_server=listed is not None and name in listed)
        return self._status(up)

    # -- one adapter -------------------------------------------------------------------------------------------

    def _fetch(self, name: str, version: str) -> tuple[Path | None, str, bool]:
        """(its verified directory, "", False), or (None, why, whether it is refused rather than failed)."""
        started = self.clock()
        try:
            manifest = self.files.manifest(name, version)
            refusal = self._refusal(manifest)
            if refusal:
                return None, refusal, True
            path = self.files.fetch(name, version, manifest)
        except Exception as exc:  # noqa: BLE001 - S3, the disk, a manifest mismatch: each named in the status
            return None, f"fetch: {exc}", False
        log.info("adapter files ready", extra={"adapter": name, "version": version, "seconds": self.clock() - started})
        return path, "", False

    def _refusal(self, manifest: Manifest) -> str:
        facts = manifest.adapter
        if facts is None:
            return "its manifest is not a LoRA adapter's (publish it with --adapter)"
        if facts.base_model != self.files.base:
            return f"it was published for base model {facts.base_model!r}, not {self.files.base!r}"
        if self.max_rank is not None and facts.rank > self.max_rank:
            return (
                f"its LoRA rank {facts.rank} is above this server's ADAPTER_MAX_RANK {self.max_rank}: publish it "
                f"at a lower rank, or raise the service's max LoRA rank"
            )
        return ""

    def _load(self, name: str, version: str, path: Path, *, in_server: bool) -> None:
        old = self.loaded.get(name)
        started = self.clock()
        try:
            self.server.load(name, str(path), replacing=old is not None or in_server)
        except ServerError as exc:
            if old is not None and not self.server.keeps_previous_on_failure:
                del self.loaded[name]  # unloaded before the failed load
                self.files.delete(name, old)
            self._fail(name, version, f"load: {exc}")
            return
        seconds = self.clock() - started
        self.loaded[name] = version
        self.fetched.pop((name, version), None)
        self.failed.pop(name, None)
        self.metrics.record_load(name, seconds)
        log.info("adapter loaded", extra={"adapter": name, "version": version, "previous": old, "seconds": seconds})
        if old is not None and old != version:
            self.files.delete(name, old)

    def _remove(self, name: str) -> None:
        version = self.loaded[name]
        try:
            self.server.unload(name)
        except ServerError as exc:
            log.error("adapter not unloaded; its files stay", extra={"adapter": name, "error": str(exc)})
            return
        del self.loaded[name]
        self.files.delete(name, version)
        log.info("adapter removed", extra={"adapter": name, "version": version})

    def _fail(self, name: str, version: str, error: str, *, refused: bool = False) -> None:
        previous = self.failed.get(name)
        attempts = previous.attempts + 1 if previous and previous.version == version else 1
        delay = min(self.backoff_s * 2 ** (attempts - 1), self.max_backoff_s)
        retry_at = float("inf") if refused else self.clock() + delay
        self.failed[name] = Failure(version, error, attempts, retry_at)
        self.metrics.record_failure(name)
        log.error(
            "adapter refused" if refused else "adapter not loaded; retried after its backoff",
            extra={
                "adapter": name,
                "version": version,
                "error": error,
                "attempts": attempts,
                "retry_in_s": None if refused else delay,
            },
        )

    def _status(self, server_up: bool) -> Status:
        self.status = Status(
            server_up,
            self.registry.revision if self.registry is not None else None,
            dict(self.registry.adapters) if self.registry is not None else {},
            dict(self.loaded),
            dict(self.failed),
            self.clock(),
        )
        return self.status
