"""Interval distributions (EMF): what CloudWatch accepts (at most 100 Values, each once, finite, within +-2^360)
and percentiles from Values/Counts close to the exact ones."""

from __future__ import annotations

import math
import random

import orjson
import pytest

from inference_server.interval_stats import MAX_ABS_VALUE, MAX_DISTINCT_VALUES, IntervalStats


def nearest_rank(sorted_values: list[float], q: float) -> float:
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def weighted_nearest_rank(values: list[float], counts: list[int], q: float) -> float:
    """The percentile of a Values/Counts distribution, each value standing for its count of observations."""
    rank, seen = max(1, math.ceil(q * sum(counts))), 0
    for value, count in zip(values, counts, strict=False):
        seen += count
        if seen >= rank:
            return value
    raise AssertionError("rank beyond the counts")


def assert_cloudwatch_accepts(distribution: dict) -> None:
    values, counts = distribution["Values"], distribution["Counts"]
    assert 1 <= len(values) <= MAX_DISTINCT_VALUES and len(counts) == len(values)
    assert values == sorted(set(values))  # each value once
    assert all(math.isfinite(v) and abs(v) <= MAX_ABS_VALUE for v in values)
    assert all(isinstance(c, int) and c > 0 for c in counts)
    assert sum(counts) == distribution["Count"]
    for key in ("Min", "Max", "Sum"):
        assert math.isfinite(distribution[key]) and abs(distribution[key]) <= MAX_ABS_VALUE
    orjson.dumps(distribution)  # plain JSON numbers


def test_far_more_than_100_distinct_latencies_keep_percentiles_within_the_stated_error():
    rng = random.Random(14)
    # 20,000 latencies from 0.8 ms to 3.2 s, log-normal around 40 ms with a long tail: ~12 doublings.
    latencies = [min(3200.0, max(0.8, rng.lognormvariate(math.log(40), 1.2))) for _ in range(20_000)]
    assert len(set(latencies)) > 10 * MAX_DISTINCT_VALUES
    stats = IntervalStats(exact=False)
    for latency in latencies:
        stats.observe(latency)
    distribution = stats.take()
    assert distribution is not None  # values were observed

    assert_cloudwatch_accepts(distribution)
    assert distribution["Count"] == len(latencies)
    assert distribution["Min"] == min(latencies) and distribution["Max"] == max(latencies)
    assert distribution["Sum"] == pytest.approx(math.fsum(latencies), rel=1e-12)
    # The stated error: a bucket of at most S/98 + 1/64 doublings for values spanning S doublings, its middle
    # within half of that of any value in it; plus the rounding of Values to 4 decimals.
    span = math.log2(max(latencies) / min(latencies))
    bound = 2 ** ((span / 98 + 1 / 64) / 2) - 1 + 1e-4 / min(latencies)
    assert bound < 0.06
    exact = sorted(latencies)
    for q in (0.01, 0.1, 0.5, 0.9, 0.95, 0.99, 0.999):
        estimate = weighted_nearest_rank(distribution["Values"], distribution["Counts"], q)
        truth = nearest_rank(exact, q)
        assert abs(estimate / truth - 1) <= bound, (q, estimate, truth, bound)
    assert stats.take() is None  # the interval was reset


def test_exact_values_stay_exact_up_to_100_distinct_and_are_bucketed_beyond():
    stats = IntervalStats()
    for size in [1, 1, 4, 32, 32, 32]:
        stats.observe(size)
    assert stats.take() == {"Values": [1, 4, 32], "Counts": [2, 1, 3], "Min": 1, "Max": 32, "Sum": 102, "Count": 6}

    for size in range(1, 301):  # a MAX_BATCH_SIZE above 100
        stats.observe(size)
    distribution = stats.take()
    assert distribution is not None  # values were observed
    assert_cloudwatch_accepts(distribution)
    assert distribution["Count"] == 300 and distribution["Min"] == 1 and distribution["Max"] == 300
    assert distribution["Sum"] == sum(range(1, 301))


def test_values_cloudwatch_would_reject_never_reach_the_document():
    stats = IntervalStats(exact=False)
    for value in (math.nan, math.inf, -math.inf):
        stats.observe(value)  # not a number CloudWatch takes: not observed (and no error on the request path)
    assert stats.take() is None
    for value in (0.0, -0.5, 1e-9, 2e-9, 3e-9, 1e-7, 1.0, 2.0**400):
        stats.observe(value)
    distribution = stats.take()
    assert distribution is not None  # values were observed
    assert_cloudwatch_accepts(distribution)  # the tiny ones, rounded to 0, are one value with their counts
    assert distribution["Values"][0] == 0.0 and distribution["Counts"][0] == 6
    assert distribution["Max"] == MAX_ABS_VALUE and distribution["Min"] == -0.5 and distribution["Count"] == 8
