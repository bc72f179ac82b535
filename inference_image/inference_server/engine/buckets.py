"""The buckets a batcher files work into: batch sizes and sequence lengths, powers of two up to a limit."""

from __future__ import annotations

import bisect

__all__ = ["bucket_of", "size_buckets"]


def size_buckets(limit: int, smallest: int = 1) -> list[int]:
    """Powers of two from `smallest` below limit, then limit itself."""
    sizes, size = [], smallest
    while size < limit:
        sizes.append(size)
        size *= 2
    return [*sizes, limit]


def bucket_of(buckets: list[int], value: int) -> int:
    """The smallest bucket that holds value; the largest for a value past them all."""
    return buckets[min(bisect.bisect_left(buckets, value), len(buckets) - 1)]
