"""Server metrics: Prometheus for /metrics, and per-interval totals for the periodic EMF line."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from . import metric_names as m

PROMETHEUS_CONTENT_TYPE = CONTENT_TYPE_LATEST
disable_created_metrics()  # no *_created series: they double the output for nothing here
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_MAX_BATCH_SAMPLES = 10_000


class Metrics:
    def __init__(self, model_name: str, model_version: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        Gauge("model_info", "The served model", ["model", "version"], registry=r).labels(model_name, model_version).set(1)
        self.requests = Counter("requests", "Predict requests by endpoint and status", ["endpoint", "status"],
                                registry=r)
        self.request_latency = Histogram("request_latency_seconds", "Latency of successful predict requests", registry=r,
                                         buckets=_LATENCY_BUCKETS)
        self.queue_wait = Histogram("queue_wait_seconds", "Time a request spent queued", registry=r,
                                    buckets=_LATENCY_BUCKETS)
        self.inference_time = Histogram("inference_seconds", "Model time of a request's batches", registry=r,
                                        buckets=_LATENCY_BUCKETS)
        self.batch_size = Histogram("batch_size", "Inputs per model batch", registry=r,
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
        self.rejected = Counter("rejected_requests", "503s from a full queue or draining", registry=r)
        self.timed_out = Counter("timed_out_requests", "504s: requests past their deadline", registry=r)
        self.cache_hits = Counter("cache_hits", "Result cache hits", registry=r)
        self.cache_misses = Counter("cache_misses", "Result cache misses", registry=r)
        self.queue_depth = Gauge("queue_depth", "Inputs waiting for the model", registry=r)
        self.ready = Gauge("ready", "1 when the server is ready for traffic", registry=r)
        self._lock = threading.Lock()
        self._interval = {m.REJECTED_REQUESTS: 0, m.TIMED_OUT_REQUESTS: 0, m.CACHE_HITS: 0, m.CACHE_MISSES: 0}
        self._batch_sizes: list[int] = []

    def bind_gauges(self, queue_depth: Callable[[], float], ready: Callable[[], bool]) -> None:
        self.queue_depth.set_function(queue_depth)
        self.ready.set_function(lambda: float(ready()))

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._interval[name] += n

    def observe_request(self, endpoint: str, status: int, latency_s: float) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        if status == 200:
            self.request_latency.observe(latency_s)

    def observe_model_time(self, queue_wait_s: float, inference_s: float) -> None:
        self.queue_wait.observe(queue_wait_s)
        self.inference_time.observe(inference_s)

    def observe_batch(self, size: int) -> None:
        self.batch_size.observe(size)
        with self._lock:
            if len(self._batch_sizes) < _MAX_BATCH_SAMPLES:
                self._batch_sizes.append(size)

    def record_rejected(self) -> None:
        self.rejected.inc()
        self._count(m.REJECTED_REQUESTS)

    def record_timed_out(self) -> None:
        self.timed_out.inc()
        self._count(m.TIMED_OUT_REQUESTS)

    def record_cache(self, hits: int, misses: int) -> None:
        if hits:
            self.cache_hits.inc(hits)
            self._count(m.CACHE_HITS, hits)
        if misses:
            self.cache_misses.inc(misses)
            self._count(m.CACHE_MISSES, misses)

    def take_interval(self, max_batch_values: int = 100) -> dict[str, float | list[float]]:
        """Totals since the last call, reset; batch sizes as a uniform sample of at most max_batch_values."""
        with self._lock:
            values: dict[str, float | list[float]] = dict(self._interval)
            self._interval = dict.fromkeys(self._interval, 0)
            sizes, self._batch_sizes = self._batch_sizes, []
        if sizes:
            values[m.BATCH_SIZE] = random.sample(sizes, max_batch_values) if len(sizes) > max_batch_values else sizes
        return values

    def prometheus_text(self) -> bytes:
        return generate_latest(self.registry)
