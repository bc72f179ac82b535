"""A pool server put together from its settings: the store, the loader, the pool, the registry's polling, the peers
and the router of model affinity (when POOL_PEERS or POOL_PEER_DNS_NAME names them), the EMF interval documents and
the scale-out signal, the request spans, and the drain on SIGTERM (front/draining.py asks it what is in flight); run by
python -m inference_server.pool."""

from __future__ import annotations

import logging
import threading

from .. import emf
from ..facts import POOL_MODEL_MESSAGE
from ..front.shared_cache import SharedCache, config_from_settings
from ..front.tracing import tracing_from
from ..queue_signal import signal_document
from .app import PoolApp
from .loaded import Loader, StoreLoader
from .metrics import pool_document
from .peer_router import PeerRouter
from .peers import DnsPeers, Peers, StaticPeers
from .pool_settings import PoolSettings
from .resident import Budgets, ModelPool
from .store import ModelStore

log = logging.getLogger(__name__)


class PoolServer:
    def __init__(self, settings: PoolSettings, loader: Loader | None = None, store: ModelStore | None = None) -> None:
        s = self.settings = settings
        self.store = store or ModelStore(s.store_uri, s.cache_dir, s.disk_cache_bytes)
        loader = loader or StoreLoader(
            self.store,
            device_setting=s.device,
            precision=s.precision,
            max_batch_size=s.max_batch_size,
            max_sequence_length=s.max_sequence_length,
            model_handler=s.model_handler,
        )
        budgets = Budgets(
            s.gpu_memory_bytes,
            s.host_memory_bytes,
            s.max_resident_models,
            s.load_backoff_s,
            s.max_load_backoff_s,
            s.load_estimate_s,
        )
        self.pool = ModelPool(
            s.pool_name,
            loader,
            budgets,
            max_batch_size=s.max_batch_size,
            max_queue_size=s.max_queue_size,
            load_threads=s.load_threads,
        )
        self.tracing = tracing_from(s)  # None: no OTLP endpoint, nothing traced
        shared = config_from_settings(s)
        self.shared_cache = None if shared is None else SharedCache(shared)  # None: no SHARED_CACHE_ENDPOINT
        self.peers = peers_of(s)
        self.router = (
            PeerRouter(
                self.peers,
                connect_timeout_s=s.peer_connect_timeout_s,
                down_s=s.peer_down_s,
                hot_share=s.peer_hot_share,
            )
            if self.peers is not None
            else None
        )
        self.app = PoolApp(
            self.pool,
            request_timeout_s=s.request_timeout_s,
            max_client_batch=s.max_client_batch,
            api_keys=s.api_keys,
            tracing=self.tracing,
            drain_timeout_s=s.drain_timeout_s,
            shared_cache=self.shared_cache,
            router=self.router,
        )
        self._etag: str | None = None
        self._stop = threading.Event()
        self._draining = threading.Event()

    def start(self) -> None:
        self.pool.start()
        if self.peers is not None:
            self.peers.start()
        self.poll_registry()
        threading.Thread(target=self._poll_loop, name="pool-registry", daemon=True).start()
        emf.start_emitting("pool-metrics", self.settings.metrics_interval_s, self._stop, self.emit_metrics)
        emf.start_emitting("pool-signals", self.settings.signal_interval_s, self._stop, self.emit_signals)

    def stop(self, timeout_s: float = 10.0) -> None:
        """The last interval's figures, then the pool (a load in progress is left to the process's exit, not waited
        for) and the spans not sent yet; within about ``timeout_s``."""
        if not self._stop.is_set():
            self._stop.set()
            if self.peers is not None:
                self.peers.stop()
            self.emit_metrics()
            self.pool.stop(timeout_s)
            if self.tracing is not None:
                self.tracing.shutdown()

    # -- draining: what front/draining.py asks (a Drainable) ---------------------------------------------------

    @property
    def drain_timeout_s(self) -> float:
        return self.settings.drain_timeout_s

    @property
    def in_flight(self) -> int:
        return self.app.gate.in_flight

    def begin_drain(self) -> None:
        """No new requests (503), readiness fails, and no registry change starts a load."""
        self._draining.set()
        self.app.gate.begin_drain()

    async def wait_drained(self, timeout: float) -> bool:
        return await self.app.gate.wait_drained(timeout)

    def poll_registry(self) -> bool:
        """Read the registry (a conditional GET: unchanged costs no body) and apply a change; False on a failed read,
        which keeps the registry this task has."""
        try:
            registry, etag = self.store.read_registry(self._etag)
            if registry is not None:
                self.pool.apply_registry(registry)
            self._etag = etag
        except Exception as exc:
            log.error("pool registry not read; keeping the one this task has", extra={"error": str(exc)})
            return False
        return True

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.settings.registry_poll_s):
            if not self._draining.is_set():
                self.poll_registry()

    def emit_metrics(self) -> None:
        values, properties, per_model = self.pool.metrics.take(self.pool.resident)
        if self.shared_cache is not None:
            values.update(self.shared_cache.metrics.take_interval())
        properties.update(
            self.pool.figures(),
            disk_cache_mib=round(self.store.disk_bytes / 2**20, 1),
            disk_evictions=self.store.disk_evictions,
        )
        if self.router is not None:
            properties.update({f"peer_{name}": count for name, count in self.router.take().items()})
        log.info(
            "metrics",
            extra={"fields": pool_document(self.settings.deployment_env, self.settings.pool_name, values, properties)},
        )
        for fields in per_model:
            log.info(POOL_MODEL_MESSAGE, extra={"fields": fields})

    def emit_signals(self) -> None:
        """The scale-out signal, every SIGNAL_INTERVAL_S at high resolution: the deepest queue (every model's inputs
        together) since the last one, as the single-model server's model process writes it (queue_signal.py)."""
        s = self.settings
        peak = self.pool.scheduler.queue_peak.take(self.pool.scheduler.total_queued)
        log.info("metrics", extra={"fields": signal_document(s.deployment_env, s.pool_name, peak, {"process": "pool"})})


def peers_of(settings: PoolSettings) -> Peers | None:
    """The pool's tasks from POOL_PEERS or POOL_PEER_DNS_NAME; None when neither is set (no affinity)."""
    if settings.peers:
        return StaticPeers(settings.peers, settings.port)
    if settings.peer_dns_name:
        return DnsPeers(settings.peer_dns_name, settings.port, refresh_s=settings.peer_refresh_s)
    return None
