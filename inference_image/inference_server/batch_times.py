"""The model's measured batch times, shared through the status page: the model process (engine) times its batches
(an EWMA per batch-size bucket and sequence-length bucket, and one per batch-size bucket over whatever lengths ran)
and writes the table and the batch it is running; the HTTP workers (front) read it to admit by deadline."""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, MutableSequence, Sequence
from typing import overload

ALPHA = 0.2  # weight of the newest batch in the EWMA
MAX_BUCKETS = 16
# Slots (int64) of the table: counts, what runs now, the bucket sizes, then the EWMA nanoseconds.
_NB, _NL, _BUSY_SINCE, _BUSY_NS, _BUSY_SIZE = range(5)
_SIZES = 5
_LENGTHS = _SIZES + MAX_BUCKETS
_CELLS = _LENGTHS + MAX_BUCKETS  # [batch bucket][length bucket]
_MIX = _CELLS + MAX_BUCKETS * MAX_BUCKETS  # [batch bucket], any length
_DEV = _MIX + MAX_BUCKETS  # [batch bucket]: EWMA of how far a batch's time strays from its cell's
SLOTS = _DEV + MAX_BUCKETS
DEVIATIONS = 2  # a batch is planned at its EWMA plus this many mean deviations (as TCP plans its retransmits)
_COMPILING = -1  # _BUSY_SIZE while the model compiles a shape (BatchTimes.occupied)


class BatchTimes:
    """The measured batch times over int64 slots that the model process writes and the workers read (a status
    page's table, or a plain list in tests). Aligned 8-byte stores are atomic: a reader never sees half a value."""

    def __init__(
        self, slots: MutableSequence[int] | memoryview, clock_ns: Callable[[], int] = time.monotonic_ns
    ) -> None:
        if len(slots) < SLOTS:
            raise ValueError(f"the batch-time table needs {SLOTS} slots, got {len(slots)}")
        self.slots = slots
        self._clock_ns = clock_ns
        self._seeded: set[tuple[int, int]] = set()  # cells holding only a warm-up time (model process side)

    # -- the model process ---------------------------------------------------------------------------------------

    def configure(self, batch_sizes: Sequence[int], lengths: Sequence[int]) -> None:
        if len(batch_sizes) > MAX_BUCKETS or len(lengths) > MAX_BUCKETS:
            raise ValueError(f"at most {MAX_BUCKETS} batch and length buckets")
        s = self.slots
        s[_BUSY_SINCE] = 0
        for i in range(_SIZES, SLOTS):
            s[i] = 0
        for i, size in enumerate(batch_sizes):
            s[_SIZES + i] = size
        for i, length in enumerate(lengths):
            s[_LENGTHS + i] = length
        s[_NL] = len(lengths)
        s[_NB] = len(batch_sizes)

    def seed(self, size: int, length: int, seconds: float) -> None:
        """A warm-up time: the first real batch of that shape replaces it (warm-up's first calls run slow)."""
        b, lb = self._bucket(size, length)
        self.slots[_CELLS + b * MAX_BUCKETS + lb] = max(1, int(seconds * 1e9))
        self._seeded.add((b, lb))

    def observe(self, size: int, length: int, seconds: float) -> None:
        b, lb = self._bucket(size, length)
        replace = (b, lb) in self._seeded
        self._seeded.discard((b, lb))
        self._set(b, lb, seconds, replace)

    def started(self, size: int, length: int) -> None:
        b, lb = self._bucket(size, length)
        self.slots[_BUSY_NS] = self._cell(b, lb)
        self.slots[_BUSY_SIZE] = size
        self.slots[_BUSY_SINCE] = self._clock_ns()

    def occupied(self, seconds: float) -> None:
        """The model compiles a shape, for about `seconds` (0: no estimate yet), with no inputs of its own: a request
        that cannot wait that long is refused at once rather than answered after its deadline, and the workers'
        readiness knows why their test inference waits."""
        self.slots[_BUSY_NS] = max(1, int(seconds * 1e9))
        self.slots[_BUSY_SIZE] = _COMPILING
        self.slots[_BUSY_SINCE] = self._clock_ns()

    def finished(self) -> None:
        self.slots[_BUSY_SINCE] = 0

    def _set(self, b: int, lb: int, seconds: float, replace: bool) -> None:
        """The cell's EWMA (or the time itself, replacing a seed), and the row's mix of lengths (real batches
        only: warm-up runs every length alike, and its first call runs slow)."""
        ns = max(1, int(seconds * 1e9))
        s = self.slots
        cell = _CELLS + b * MAX_BUCKETS + lb
        if not replace and s[cell]:
            s[_DEV + b] = int(s[_DEV + b] + ALPHA * (abs(ns - s[cell]) - s[_DEV + b]))
        s[cell] = ns if replace or not s[cell] else int(s[cell] + ALPHA * (ns - s[cell]))
        mix = _MIX + b
        s[mix] = ns if not s[mix] else int(s[mix] + ALPHA * (ns - s[mix]))

    # -- both sides ----------------------------------------------------------------------------------------------

    @property
    def configured(self) -> bool:
        return self.slots[_NB] > 0

    @property
    def running(self) -> int:
        """Inputs in the batch running now (0: none)."""
        return max(0, self.slots[_BUSY_SIZE]) if self.slots[_BUSY_SINCE] else 0

    @property
    def served(self) -> bool:
        """Whether the model has run a real batch (warm-up and compiles do not count)."""
        s = self.slots
        return any(s[_MIX : _MIX + s[_NB]])

    def compiling_s(self) -> float | None:
        """Seconds the model has been compiling a shape, or None when it is not."""
        since = self.slots[_BUSY_SINCE]
        if not since or self.slots[_BUSY_SIZE] != _COMPILING:
            return None
        return (self._clock_ns() - since) / 1e9

    @overload
    def _bucket(self, size: int, length: int) -> tuple[int, int]: ...

    @overload
    def _bucket(self, size: int, length: None) -> tuple[int, None]: ...

    def _bucket(self, size: int, length: int | None) -> tuple[int, int | None]:
        s = self.slots
        nb, nl = s[_NB], s[_NL]
        b = min(bisect.bisect_left(s[_SIZES : _SIZES + nb], size), nb - 1)
        if length is None:
            return b, None
        return b, min(bisect.bisect_left(s[_LENGTHS : _LENGTHS + nl], length), nl - 1)

    def _cell(self, b: int, lb: int | None) -> int:
        """EWMA nanoseconds of a batch of bucket b at length bucket lb (None: the recent mix of lengths); the mix
        where that shape has not run; before any real batch of bucket b, its shortest length's (the check before
        the body must not refuse what the check after it would admit). Plus DEVIATIONS mean deviations."""
        s = self.slots
        spread = DEVIATIONS * s[_DEV + b]
        if lb is not None:
            ns = s[_CELLS + b * MAX_BUCKETS + lb]
            if ns:
                return ns + spread
        ns = s[_MIX + b]
        if ns:
            return ns + spread
        row = _CELLS + b * MAX_BUCKETS
        return min((v for v in s[row : row + s[_NL]] if v), default=0) + spread

    # -- a worker ------------------------------------------------------------------------------------------------

    def estimate_s(self, queued: int, inputs: int, length: int | None = None) -> float:
        """Seconds until `inputs` more inputs (of that token length, or of the recent mix) would be done, behind
        `queued` queued inputs and the batch running now. An idle model runs them at once, as one batch of their
        own size; a busy one runs the queue in full batches back to back, the inputs in the last: full too, since
        whatever arrives before it starts joins it. 0 before the model has published its buckets."""
        s = self.slots
        nb = s[_NB]
        if not nb:
            return 0.0
        lb = self._bucket(1, length)[1] if length is not None else None
        since = s[_BUSY_SINCE]
        if not since and not queued:
            return self._cell(self._bucket(inputs, None)[0], lb) / 1e9
        largest = s[_SIZES + nb - 1]
        batches = -(-(queued + inputs) // largest)
        ns = batches * self._cell(nb - 1, lb)
        if since:
            ns += max(0, s[_BUSY_NS] - (self._clock_ns() - since))
        return ns / 1e9
