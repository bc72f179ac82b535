"""Which requests get an access log line: errors and slow requests up to a rate each, and a sample of the rest."""

from __future__ import annotations

import random
import time

__all__ = ["ERROR_LINES_PER_S", "SLOW_LINES_PER_S", "AccessLog"]

ERROR_LINES_PER_S = 20
SLOW_LINES_PER_S = 2


class _LinesPerSecond:
    """At most `limit` lines in each second of the monotonic clock."""

    __slots__ = ("limit", "_second", "_lines")

    def __init__(self, limit: int) -> None:
        self.limit, self._second, self._lines = limit, 0, 0

    def take(self) -> bool:
        second = int(time.monotonic())
        if second != self._second:
            self._second, self._lines = second, 0
        if self._lines < self.limit:
            self._lines += 1
            return True
        return False


class AccessLog:
    """Which requests get a line: errors and slow requests up to a rate each (the rest counted: a server that is
    slow for everyone logs a few examples a second, not every request), and a sample of the rest."""

    def __init__(
        self, sample: float, slow_ms: float, errors_per_s: int = ERROR_LINES_PER_S, slow_per_s: int = SLOW_LINES_PER_S
    ) -> None:
        self.sample, self.slow_ms = sample, slow_ms
        self._errors, self._slow = _LinesPerSecond(errors_per_s), _LinesPerSecond(slow_per_s)
        self.suppressed = 0
        self._random = random.random

    def wants(self, status: int, ms: float) -> bool:
        budget = self._errors if status >= 400 else self._slow if ms >= self.slow_ms else None
        if budget is None:
            return self.sample > 0 and self._random() < self.sample
        if budget.take():
            return True
        self.suppressed += 1
        return False

    def take_suppressed(self) -> int:
        n, self.suppressed = self.suppressed, 0
        return n
