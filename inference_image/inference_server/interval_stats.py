"""Per-interval distributions and counts for each process's EMF document (the HTTP workers' and the model
process's), so no request needs a log line of its own."""

from __future__ import annotations

import math
import threading
from collections import Counter as Tally
from typing import Any

# What CloudWatch accepts of a distribution: an EMF metric's value array has at most 100 members (PutMetricData's
# Values/Counts: 150); values within +-2^360, never NaN or infinite; each value listed once with its count.
MAX_DISTINCT_VALUES = 100
MAX_ABS_VALUE = 2.0**360
_RESOLUTION = 64  # log buckets per doubling as observed (1.1 % wide); merged k at a time to fit
_DECIMALS = 4  # of each representative value in Values (Min, Max and Sum are not rounded)


class IntervalStats:
    """A distribution of one interval: exact values while there are few distinct ones (batch sizes), else
    log-spaced buckets (latencies), coarsened until at most MAX_DISTINCT_VALUES remain. take() gives the EMF
    value {"Values", "Counts", "Min", "Max", "Sum", "Count"}, from which CloudWatch computes percentiles.

    Each of the Values stands for a bucket of k/_RESOLUTION doublings (its geometric middle), k the smallest
    merge that leaves at most MAX_DISTINCT_VALUES buckets: a percentile read from Values/Counts is within a factor
    2^(k/(2 _RESOLUTION)) of the true one. For values spanning S doublings, k/_RESOLUTION <= S/98 + 1/_RESOLUTION
    (12 doublings, 1 ms to 4 s: 5 %). Non-finite values are not observed; others are clamped into CloudWatch's
    range."""

    def __init__(self, exact: bool = True) -> None:
        self.exact = exact
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._counts: Tally = Tally()
        self._n, self._sum, self._min, self._max = 0, 0.0, math.inf, -math.inf

    def observe(self, value: float) -> None:
        if not math.isfinite(value):
            return
        value = min(max(value, -MAX_ABS_VALUE), MAX_ABS_VALUE)
        key = value if self.exact else _log_index(value)
        with self._lock:
            self._counts[key] += 1
            self._n += 1
            self._sum += value
            if value < self._min:
                self._min = value
            if value > self._max:
                self._max = value

    def take(self) -> dict[str, Any] | None:
        with self._lock:
            if not self._n:
                return None
            counts, n, total, low, high = self._counts, self._n, self._sum, self._min, self._max
            self._reset()
        pairs = _rounded(counts.items()) if self.exact else []
        if not self.exact or len(pairs) > MAX_DISTINCT_VALUES:
            if self.exact:  # too many distinct values: bucket them too
                logs: Tally = Tally()
                for value, count in counts.items():
                    logs[_log_index(value)] += count
                counts = logs
            pairs = _log_pairs(counts)
        return {
            "Values": [v for v, _ in pairs],
            "Counts": [c for _, c in pairs],
            "Min": low,
            "Max": high,
            "Sum": min(max(total, -MAX_ABS_VALUE), MAX_ABS_VALUE),
            "Count": n,
        }


def _log_index(value: float) -> int | None:
    """The value's bucket at _RESOLUTION per doubling; None for zero and below (one bucket, shown as 0)."""
    return math.floor(math.log2(value) * _RESOLUTION) if value > 0 else None


def _rounded(pairs) -> list[tuple[float, int]]:
    """Sorted (value, count) with values rounded for the log line, counts of values that became equal merged."""
    merged: Tally = Tally()
    for value, count in pairs:
        merged[round(value, _DECIMALS)] += count
    return sorted(merged.items())


def _log_pairs(buckets: Tally) -> list[tuple[float, int]]:
    zero = buckets.pop(None, 0)
    k = 1
    while True:
        merged: Tally = Tally()
        for index, count in buckets.items():
            merged[index // k] += count
        pairs = _rounded(
            [(min(2 ** ((index + 0.5) * k / _RESOLUTION), MAX_ABS_VALUE), count) for index, count in merged.items()]
            + ([(0.0, zero)] if zero else [])
        )
        if len(pairs) <= MAX_DISTINCT_VALUES:
            return pairs
        k += 1
