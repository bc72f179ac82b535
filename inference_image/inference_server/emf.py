"""CloudWatch Embedded Metric Format: a JSON log line that CloudWatch turns into metrics, no agent needed."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import facts as m

MILLISECONDS = "Milliseconds"
COUNT = "Count"
PERCENT = "Percent"
MEGABYTES = "Megabytes"
SECONDS = "Seconds"

UNITS = {
    m.REQUEST_LATENCY: MILLISECONDS,
    m.QUEUE_WAIT: MILLISECONDS,
    m.INFERENCE_TIME: MILLISECONDS,
    m.BATCH_SIZE: COUNT,
    m.QUEUE_DEPTH: COUNT,
    m.REJECTED_REQUESTS: COUNT,
    m.TIMED_OUT_REQUESTS: COUNT,
    m.GPU_UTILIZATION: PERCENT,
    m.GPU_MEMORY_UTILIZATION: PERCENT,
    m.GPU_MEMORY_USED_MIB: MEGABYTES,
    m.MODEL_BUSY_PERCENT: PERCENT,
    m.CACHE_HITS: COUNT,
    m.CACHE_MISSES: COUNT,
    m.SHARED_CACHE_HITS: COUNT,
    m.SHARED_CACHE_MISSES: COUNT,
    m.SHARED_CACHE_ERRORS: COUNT,
    m.SHARED_CACHE_SKIPPED: COUNT,
    m.SHARED_CACHE_OVERSIZED: COUNT,
    m.SHARED_CACHE_STORED: COUNT,
    m.SHARED_CACHE_OPEN: COUNT,
    m.SHARED_CACHE_LATENCY: MILLISECONDS,
    m.STARTUP_SECONDS: SECONDS,
    m.STARTUP_FETCH_SECONDS: SECONDS,
    m.STARTUP_LOAD_SECONDS: SECONDS,
    m.STARTUP_WARMUP_SECONDS: SECONDS,
    m.STARTUP_COMPILE_SECONDS: SECONDS,
    m.POOL_RESIDENT_MODELS: COUNT,
    m.POOL_HIT_RATE: PERCENT,
    m.POOL_LOADS: COUNT,
    m.POOL_LOAD_TIME: MILLISECONDS,
    m.POOL_EVICTIONS: COUNT,
    m.POOL_FAILED_LOADS: COUNT,
    m.ADAPTER_LOADS: COUNT,
    m.ADAPTER_LOAD_SECONDS: SECONDS,
    m.ADAPTER_FAILED_LOADS: COUNT,
    m.ADAPTERS_REGISTERED: COUNT,
    m.ADAPTERS_LOADED: COUNT,
}


# The signals that drive scale-out: stored at 1-second resolution (StorageResolution 1), so alarms can evaluate them
# in 10-30 s periods (CloudWatch PutMetricAlarm: periods of 10, 20 or 30 s need StorageResolution-1 metrics).
HIGH_RESOLUTION = frozenset({m.QUEUE_DEPTH})


def _definition(name: str) -> dict[str, Any]:
    definition: dict[str, Any] = {"Name": name, "Unit": UNITS[name]}
    if name in HIGH_RESOLUTION:
        definition["StorageResolution"] = 1
    return definition


def document(
    environment: str,
    model_name: str,
    values: Mapping[str, float | list[float]],
    fields: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An EMF document: `values` become metrics (units from UNITS), `fields` ride along as log properties."""
    doc: dict[str, Any] = dict(fields or {})
    doc["_aws"] = {
        "Timestamp": int(time.time() * 1000),
        "CloudWatchMetrics": [
            {
                "Namespace": m.NAMESPACE,
                "Dimensions": [[m.DIMENSION_ENVIRONMENT, m.DIMENSION_MODEL]],
                "Metrics": [_definition(name) for name in values],
            }
        ],
    }
    doc[m.DIMENSION_ENVIRONMENT] = environment
    doc[m.DIMENSION_MODEL] = model_name
    doc.update(values)
    return doc


def start_emitting(name: str, interval_s: float, stop: threading.Event, emit: Callable[[], None]) -> None:
    """A daemon thread that calls emit every interval_s until stop is set; a failed emission is logged, not fatal."""

    def loop() -> None:
        while not stop.wait(interval_s):
            try:
                emit()
            except Exception:
                logging.getLogger(__name__).exception("metrics emission failed")

    threading.Thread(target=loop, name=name, daemon=True).start()
