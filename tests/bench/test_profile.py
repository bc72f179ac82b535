"""Summaries of py-spy's collapsed stacks (py-spy itself is not needed here)."""

from __future__ import annotations

import pytest

from bench.profile import by_component, hottest

COLLAPSED = """\
main (app.py:1);Runner.run (asyncio/runners.py:118) 2
main (app.py:1);predict (fastapi/routing.py:10);submit (inference_server/batcher.py:140) 3
main (app.py:1);predict (fastapi/routing.py:10) 5
"""


def test_hottest_functions_by_self_and_total_share():
    samples, rows = hottest(COLLAPSED)
    assert samples == 10
    assert rows[0] == ("predict (fastapi/routing.py:10)", pytest.approx(0.5), pytest.approx(0.8))


def test_self_time_by_component():
    assert dict(by_component(COLLAPSED)) == {
        "fastapi": pytest.approx(0.5),
        "inference_server/batcher.py": pytest.approx(0.3),
        "event loop (uvloop C code, syscalls)": pytest.approx(0.2),
    }
