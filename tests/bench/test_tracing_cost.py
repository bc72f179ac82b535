"""The tracing comparison's statistic (bench/tracing_cost.py): a round pair's geometric mean cancels what running
first does for a process, then the median of the pairs."""

from __future__ import annotations

import pytest

from bench.tracing_cost import _ratio


def test_running_first_cancels_within_a_round_pair():
    # off ran first in even rounds and won by 5 %, on ran first in odd ones and won by 5 %: no difference between them
    assert _ratio([0.95, 1 / 0.95] * 4) == pytest.approx(1.0)
    assert _ratio([0.95, 1 / 0.95, 0.97, 1 / 0.97, 0.90]) == pytest.approx(1.0)  # a round left over joins the median


def test_a_real_difference_survives_the_pairing():
    assert _ratio([0.92, 0.96] * 3) == pytest.approx((0.92 * 0.96) ** 0.5)
