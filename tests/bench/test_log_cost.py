"""A load level's log cost: the lines its requests caused, plus the interval documents at their steady rate."""

from __future__ import annotations

import orjson
import pytest

from bench.log_cost import LevelLog, interval_bytes_per_s, request_line_bytes


def _line(**fields) -> bytes:
    return orjson.dumps(fields) + b"\n"


def test_a_level_is_charged_the_interval_documents_rate_not_the_ones_that_fell_in_its_window(tmp_path):
    small_model = _line(message="metrics", pid=1, _aws={"Timestamp": 0}, QueueDepth=0)
    big_worker = _line(message="metrics", pid=2, _aws={"Timestamp": 0}, Latency={"Values": list(range(100))})
    small_worker = _line(message="metrics", pid=2, _aws={"Timestamp": 0})
    access = _line(message="request", status=500, path="/predict")
    startup = _line(message="model loaded")
    log = tmp_path / "server.log"
    log.write_bytes(startup + small_worker + big_worker + access + small_model)
    start = len(startup + small_worker)
    end = start + len(big_worker + access)

    assert request_line_bytes(log, start, end) == len(access)  # the document inside the window is not counted
    rate = interval_bytes_per_s(log, 10.0)
    assert rate == pytest.approx((len(big_worker) + len(small_model)) / 10.0)  # each process's largest
    level = LevelLog(start, end, seconds=2.0, requests=40)
    assert level.bytes_per_request(log, rate) == pytest.approx((len(access) + 2.0 * rate) / 40)
    assert LevelLog(start, end, 2.0, requests=0).bytes_per_request(log, rate) is None


def test_lines_that_are_not_json_objects_count_as_request_lines(tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b'Traceback "_aws" (most recent call last):\n' + b'["_aws"]\n' + b'"_aws"\n' + _line(message="x"))
    assert request_line_bytes(log, 0, log.stat().st_size) == log.stat().st_size
    assert interval_bytes_per_s(log, 10.0) == 0
