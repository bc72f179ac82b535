"""The scale-out signal both servers write (the single model's model process, a pool's server): the deepest queue
since the last document, every SIGNAL_INTERVAL_S, as its own EMF document at high resolution (emf.HIGH_RESOLUTION),
so a scaling alarm of 10 s periods has a datapoint in each and a burst between two samples still counts."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from . import emf
from . import facts as m


class QueuePeak:
    """The deepest queue seen since the last take(); any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._peak = 0

    def observe(self, queued: int) -> None:
        if queued > self._peak:
            with self._lock:
                self._peak = max(self._peak, queued)

    def take(self, queued: int) -> int:
        """The peak since the last take (``queued`` now, at least); the next interval starts from ``queued``."""
        with self._lock:
            peak, self._peak = max(self._peak, queued), queued
        return peak


def signal_document(environment: str, model_name: str, peak: int, fields: Mapping[str, Any]) -> dict[str, Any]:
    return emf.document(environment, model_name, {m.QUEUE_DEPTH: peak}, fields)
