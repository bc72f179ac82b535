"""How busy the model process's inference thread is: the wall time it spends in forwards (ModelBusyPercent)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator


class BusyTime:
    """The wall time the inference thread spends in forwards (requests' and warm-ups'), and its share of each
    interval between two take_percent() calls; a forward still running counts up to now."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._done = 0.0
        self._running_since: float | None = None
        self._mark = (clock(), 0.0)  # (when, busy seconds then) at the last take_percent()

    @contextlib.contextmanager
    def forward(self) -> Iterator[None]:
        started = self._clock()
        with self._lock:
            self._running_since = started
        try:
            yield
        finally:
            with self._lock:
                self._done += self._clock() - started
                self._running_since = None

    def take_percent(self) -> float:
        """Percent of the wall time since the last call spent in forwards."""
        with self._lock:
            now = self._clock()
            busy = self._done + (now - self._running_since if self._running_since is not None else 0.0)
            (then, busy_then), self._mark = self._mark, (now, busy)
        return round(min(100.0, 100.0 * (busy - busy_then) / (now - then)), 2) if now > then else 0.0
