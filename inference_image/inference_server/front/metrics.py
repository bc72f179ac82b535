"""Server metrics: Prometheus for /metrics (per process), and per-interval distributions and counts for the
interval EMF document, so no request needs a log line of its own."""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .. import facts as m
from ..interval_stats import IntervalStats

PROMETHEUS_CONTENT_TYPE = CONTENT_TYPE_LATEST
disable_created_metrics()  # no *_created series: they double the output for nothing here
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """One HTTP worker's metrics."""

    def __init__(self, model_name: str, model_version: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        Gauge("model_info", "The served model", ["model", "version"], registry=r).labels(model_name, model_version).set(
            1
        )
        self.requests = Counter(
            "requests", "Predict requests by endpoint and status", ["endpoint", "status"], registry=r
        )
        self.request_latency = Histogram(
            "request_latency_seconds", "Latency of successful predict requests", registry=r, buckets=_LATENCY_BUCKETS
        )
        self.queue_wait = Histogram(
            "queue_wait_seconds", "Time a request spent queued", registry=r, buckets=_LATENCY_BUCKETS
        )
        self.inference_time = Histogram(
            "inference_seconds", "Model time of a request's batches", registry=r, buckets=_LATENCY_BUCKETS
        )
        self.key_requests = Counter(
            "key_requests",
            "Requests by API key name ('-': no valid key, a 401) and status; never the key itself",
            ["key", "status"],
            registry=r,
        )
        self.rejected = Counter("rejected_requests", "503s from a full queue or draining", registry=r)
        self.timed_out = Counter("timed_out_requests", "504s: requests past their deadline", registry=r)
        self.cache_hits = Counter("cache_hits", "Result cache hits", registry=r)
        self.cache_misses = Counter("cache_misses", "Result cache misses", registry=r)
        self.queue_depth = Gauge("queue_depth", "Inputs waiting for the model", registry=r)
        self.ready = Gauge("ready", "1 when the server is ready for traffic", registry=r)
        self.gpu_memory_used = Gauge(
            "gpu_memory_used_mib",
            "GPU memory the model process holds (torch's reserved "
            "memory, MiB; 0 on CPU), as of its last metrics interval",
            registry=r,
        )
        self.model_busy = Gauge(
            "model_busy_percent",
            "Percent of the model process's last metrics interval its inference thread spent in forwards",
            registry=r,
        )
        self._lock = threading.Lock()
        self._interval = {m.REJECTED_REQUESTS: 0, m.TIMED_OUT_REQUESTS: 0, m.CACHE_HITS: 0, m.CACHE_MISSES: 0}
        self._statuses: Tally = Tally()
        self._keys: Tally = Tally()
        self._request_counters: dict[tuple[str, int], Any] = {}
        self.latency = IntervalStats(exact=False)
        self.queue_wait_ms = IntervalStats(exact=False)
        self.inference_ms = IntervalStats(exact=False)

    def bind_gauges(self, queue_depth: Callable[[], float], ready: Callable[[], bool]) -> None:
        self.queue_depth.set_function(queue_depth)
        self.ready.set_function(lambda: float(ready()))

    def bind_model_gauges(self, gpu_memory_used_mib: Callable[[], float], busy_percent: Callable[[], float]) -> None:
        """The model process's own figures, which it publishes in the status page."""
        self.gpu_memory_used.set_function(gpu_memory_used_mib)
        self.model_busy.set_function(busy_percent)

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._interval[name] += n

    def observe_request(self, endpoint: str, status: int, latency_s: float) -> None:
        counter = self._request_counters.get((endpoint, status))
        if counter is None:  # labels() costs more than the rest of a shed request's bookkeeping: once per pair
            counter = self._request_counters[(endpoint, status)] = self.requests.labels(endpoint, str(status))
        counter.inc()
        with self._lock:
            self._statuses[status] += 1
        if status == 200:
            self.request_latency.observe(latency_s)
            self.latency.observe(latency_s * 1000)

    def observe_key(self, key_name: str, status: int) -> None:
        """A request that needed a key: which key's name it carried (NO_KEY without a valid one)."""
        self.key_requests.labels(key_name, str(status)).inc()
        with self._lock:
            self._keys[key_name] += 1

    def take_key_counts(self) -> dict[str, int]:
        """Requests by key name since the last call, reset."""
        with self._lock:
            keys, self._keys = self._keys, Tally()
        return dict(sorted(keys.items()))

    def observe_model_time(self, queue_wait_s: float, inference_s: float) -> None:
        self.queue_wait.observe(queue_wait_s)
        self.inference_time.observe(inference_s)
        self.queue_wait_ms.observe(queue_wait_s * 1000)
        self.inference_ms.observe(inference_s * 1000)

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

    def take_interval(self) -> tuple[dict[str, Any], dict[str, int]]:
        """(metric values, requests by status) since the last call, reset."""
        with self._lock:
            values: dict[str, Any] = dict(self._interval)
            self._interval = dict.fromkeys(self._interval, 0)
            statuses, self._statuses = self._statuses, Tally()
        for name, stats in (
            (m.REQUEST_LATENCY, self.latency),
            (m.QUEUE_WAIT, self.queue_wait_ms),
            (m.INFERENCE_TIME, self.inference_ms),
        ):
            distribution = stats.take()
            if distribution is not None:
                values[name] = distribution
        return values, {str(status): count for status, count in sorted(statuses.items())}

    def prometheus_text(self) -> bytes:
        return generate_latest(self.registry)
