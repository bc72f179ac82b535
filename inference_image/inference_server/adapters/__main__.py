"""python -m inference_server.adapters: the adapter-sync sidecar of an LLM task (docs/lora-adapters.md). Every
ADAPTER_POLL_SECONDS it reads the adapter registry (a conditional GET: unchanged costs no body) and brings the server in
step with it (sync.py); GET /ready answers from the last step; each step's figures are one EMF line. While the server
does not answer yet (it is starting) it tries every second, so a new task is ready as soon as its adapters are loaded.
SIGTERM stops it at once: the task is stopping, and the server's adapters go with the server."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time

from ..engine.artifacts import s3_client
from ..logs import configure_logging
from ..registry.s3 import read_if_changed
from ..settings import SettingsError
from .files import AdapterFiles
from .metrics import SyncMetrics, sync_document
from .ready import ready_server
from .registry import AdapterRegistry
from .server_api import server_api
from .sidecar_settings import SidecarSettings, load_sidecar_settings
from .sync import AdapterSync

log = logging.getLogger("inference_server.adapters")

STARTING_POLL_S = 1.0  # while the server does not answer, or adapters are still to be loaded


class Sidecar:
    def __init__(self, settings: SidecarSettings, client=None) -> None:
        self.settings = settings
        self.client = client or s3_client()
        self.files = AdapterFiles(self.client, settings.bucket, settings.base, settings.adapter_dir)
        self.metrics = SyncMetrics()
        self.sync = AdapterSync(
            self.files,
            server_api(settings.server_kind, settings.server_url, settings.server_api_key, settings.request_timeout_s),
            self.metrics,
            max_rank=settings.max_rank,
            backoff_s=settings.backoff_s,
            max_backoff_s=settings.max_backoff_s,
        )
        self.etag: str | None = None
        self.stop = threading.Event()
        self.last_emitted: float | None = None

    def poll(self) -> None:
        """One step: the registry read (kept as it was when the read fails), the server brought in step, the figures."""
        registry = None
        try:
            registry, self.etag = read_if_changed(
                self.client,
                self.settings.bucket,
                self.settings.registry_key,
                AdapterRegistry,
                self.settings.base,
                self.etag,
            )
        except Exception as exc:  # noqa: BLE001 - S3 or a malformed document: keep the registry this task has
            log.error("adapter registry not read; keeping the one this task has", extra={"error": str(exc)})
        status = self.sync.step(registry)
        now = time.monotonic()
        if self.last_emitted is not None and now - self.last_emitted < self.settings.poll_s and not self.metrics.events:
            # while it tries every second (starting), one line per ADAPTER_POLL_SECONDS unless something happened
            return
        self.last_emitted = now
        values, properties = self.metrics.take(len(status.registered), status.to_json()["loaded"])
        properties.update(missing=status.missing, failed=sorted(status.failed))
        document = sync_document(self.settings.deployment_env, self.settings.base, values, properties)
        log.info("metrics", extra={"fields": document})

    def run(self) -> None:
        self.settings.adapter_dir.mkdir(parents=True, exist_ok=True)
        self.files.clear_partial()
        server = ready_server("0.0.0.0", self.settings.ready_port, lambda: self.sync.status)
        try:
            while not self.stop.is_set():
                self.poll()
                status = self.sync.status
                self.stop.wait(self.settings.poll_s if status.ready else min(STARTING_POLL_S, self.settings.poll_s))
        finally:
            server.shutdown()


def main() -> int:
    try:
        settings = load_sidecar_settings()
    except SettingsError as exc:
        configure_logging()
        log.error("invalid setting", extra={"setting": exc.variable, "error": str(exc)})
        return 2
    configure_logging(settings.log_level, {"base_model": settings.base, "process": "adapter-sync"})
    sidecar = Sidecar(settings)
    signal.signal(signal.SIGTERM, lambda *_: sidecar.stop.set())
    signal.signal(signal.SIGINT, lambda *_: sidecar.stop.set())
    sidecar.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
