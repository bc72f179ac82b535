"""The sidecar's figures per poll, as one EMF document whose metrics do not grow with the adapter count: loads, load
time (each load's, so CloudWatch has its p95), failed loads, adapters registered and loaded. Which adapters loaded or
failed ride along as properties of the same line, for Logs Insights:

    filter AdapterLoads > 0 | stats sum(AdapterLoads) by bin(5m)
"""

from __future__ import annotations

import threading
from typing import Any

from .. import emf
from .. import facts as m


class SyncMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.load_seconds: list[float] = []
        self.loaded_names: list[str] = []
        self.failed_names: list[str] = []

    def record_load(self, name: str, seconds: float) -> None:
        with self._lock:
            self.load_seconds.append(round(seconds, 3))
            self.loaded_names.append(name)

    @property
    def events(self) -> bool:
        """Whether a load or a failure happened since the last take()."""
        with self._lock:
            return bool(self.load_seconds or self.failed_names)

    def record_failure(self, name: str) -> None:
        with self._lock:
            self.failed_names.append(name)

    def take(self, registered: int, loaded: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """(metric values, properties) of the interval since the last call."""
        with self._lock:
            values: dict[str, Any] = {
                m.ADAPTER_LOADS: len(self.load_seconds),
                m.ADAPTER_FAILED_LOADS: len(self.failed_names),
                m.ADAPTERS_REGISTERED: registered,
                m.ADAPTERS_LOADED: loaded,
            }
            if self.load_seconds:
                values[m.ADAPTER_LOAD_SECONDS] = list(self.load_seconds)
            properties = {
                "adapters_loaded_now": list(self.loaded_names),
                "adapters_failed_now": list(self.failed_names),
            }
            self._reset()
        return values, properties


def sync_document(environment: str, base: str, values: dict[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    return emf.document(environment, base, values, {"process": "adapter-sync", **properties})
