"""A pool's figures per interval, as one EMF document whose metrics do not grow with the model count: resident
models, hit rate, loads, load time (each load's, so CloudWatch has its p95), evictions and failed loads. Each model
with requests in the interval gets one plain JSON log line (no metric), for Logs Insights and Contributor Insights:

    {"message": "pool model", "PoolModel": "<model>", "PoolModelRequests": n, "PoolModelLatencyP95": ms,
     "PoolModelErrors": n}

    filter message = "pool model" | stats sum(PoolModelRequests) as requests by PoolModel | sort requests desc
"""

from __future__ import annotations

import threading
from typing import Any

from .. import emf
from .. import facts as m
from ..interval_stats import IntervalStats
from .loaded import DEVICE


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class PoolMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        # The single server's aggregate signals too, over every model: the pool scales on them as a model does.
        self.latency = IntervalStats(exact=False)
        self.load_times = IntervalStats(exact=False)
        self.timed_out = 0
        self.requests = 0
        self.cached = 0  # answered by the shared result cache
        self.hits = 0
        self.misses_by_tier: dict[str, int] = {}
        self.loads = 0
        self.evictions = 0
        self.failed_loads = 0
        self.refused = 0  # requests answered 503 for a model in its failed-load backoff
        self.shed = 0
        self.latency_by_model: dict[str, list[float]] = {}
        self.errors_by_model: dict[str, int] = {}

    def record_request(self, model: str, tier: str, latency_s: float) -> None:
        with self._lock:
            self.requests += 1
            if tier == DEVICE:
                self.hits += 1
            else:
                self.misses_by_tier[tier] = self.misses_by_tier.get(tier, 0) + 1
            self.latency_by_model.setdefault(model, []).append(latency_s * 1000)
            self.latency.observe(latency_s * 1000)

    def record_cached(self, model: str, latency_s: float) -> None:
        """A request the shared result cache answered whole: no model ran, so it is no hit or miss of the pool's."""
        with self._lock:
            self.cached += 1
            self.latency_by_model.setdefault(model, []).append(latency_s * 1000)
            self.latency.observe(latency_s * 1000)

    def record_error(self, model: str) -> None:
        """A request for a registered model that got no prediction (a failed load, shed, timeout, bad input)."""
        with self._lock:
            self.errors_by_model[model] = self.errors_by_model.get(model, 0) + 1

    def record_load(self, tier: str, seconds: float) -> None:
        with self._lock:
            self.loads += 1
            self.load_times.observe(seconds * 1000)

    def record_eviction(self) -> None:
        with self._lock:
            self.evictions += 1

    def record_failed_load(self) -> None:
        with self._lock:
            self.failed_loads += 1

    def record_refused(self) -> None:
        with self._lock:
            self.refused += 1

    def record_shed(self) -> None:
        with self._lock:
            self.shed += 1

    def record_timed_out(self) -> None:
        with self._lock:
            self.timed_out += 1

    def take(self, resident: int) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
        """(metric values, properties, one line's fields per model) of the interval since the last call."""
        with self._lock:
            values: dict[str, Any] = {
                m.POOL_RESIDENT_MODELS: resident,
                m.POOL_LOADS: self.loads,
                m.POOL_EVICTIONS: self.evictions,
                m.POOL_FAILED_LOADS: self.failed_loads,
            }
            if self.requests:
                values[m.POOL_HIT_RATE] = round(100 * self.hits / self.requests, 2)
            values[m.REJECTED_REQUESTS] = self.shed + self.refused
            values[m.TIMED_OUT_REQUESTS] = self.timed_out
            for name, stats in ((m.POOL_LOAD_TIME, self.load_times), (m.REQUEST_LATENCY, self.latency)):
                distribution = stats.take()
                if distribution is not None:
                    values[name] = distribution
            per_model = [
                {
                    "PoolModel": name,
                    "PoolModelRequests": len(ms),
                    "PoolModelLatencyP95": round(_percentile(ms, 0.95), 2),
                    "PoolModelErrors": self.errors_by_model.get(name, 0),
                }
                for name, ms in self.latency_by_model.items()
            ]
            per_model += [
                {"PoolModel": name, "PoolModelRequests": 0, "PoolModelLatencyP95": None, "PoolModelErrors": errors}
                for name, errors in self.errors_by_model.items()
                if name not in self.latency_by_model
            ]
            properties = {
                "requests": self.requests,
                "cached_requests": self.cached,
                "misses_by_tier": dict(self.misses_by_tier),
                "refused_failed_model": self.refused,
                "shed": self.shed,
            }
            self._reset()
        return values, properties, per_model


def pool_document(environment: str, pool: str, values: dict[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    return emf.document(environment, pool, values, {"process": "pool", **properties})
