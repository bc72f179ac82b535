"""The start-up phase: phases read from our server's JSON log (a planted one); the bare script really runs."""

from __future__ import annotations

import time

import orjson
import pytest

from bench.startup import _wait_for_message, first_client_medians, logged, phases


def _line(pid, message, at, **fields):
    return orjson.dumps({"timestamp": at, "pid": pid, "message": message, **fields}).decode()


def test_phases_are_seconds_from_the_start_by_role_first_of_each(tmp_path):
    log = tmp_path / "ours.log"
    lines = [
        _line(2, "process started", "2026-12-04T03:00:00.200Z", role="worker"),
        _line(3, "Application startup complete.", "2026-12-04T03:00:01.000Z"),  # the model's: not a phase
        _line(2, "Application startup complete.", "2026-12-04T03:00:02.000Z"),
        _line(3, "model has no manifest; files not verified", "2026-12-04T03:00:04.500Z"),
        "not json",
        _line(2, "ready for traffic", "2026-12-04T03:00:12.000Z"),
        _line(2, "ready for traffic", "2026-12-04T03:00:30.000Z"),
    ]
    log.write_text("\n".join([_line(3, "process started", "2026-12-04T03:00:00.100Z", role="model"), *lines]))
    started = 1796353200.0  # 2026-12-04T03:00:00Z
    assert phases(log, started) == {
        "Application startup complete.": 2.0,
        "model fetched": 4.5,
        "ready for traffic": 12.0,
    }


def test_waiting_for_a_message_reads_the_json_log_and_gives_up_at_the_timeout(tmp_path):
    log = tmp_path / "ours.log"
    log.write_text(_line(3, "compile cache restored", "2026-12-04T03:00:04.500Z") + "\n")
    started = time.monotonic()
    seconds, message = _wait_for_message(log, ("compile cache saved", "compile cache restored"), started, 5)
    assert 0 <= seconds < 5 and message == "compile cache restored"
    with pytest.raises(TimeoutError, match="compile cache saved"):
        _wait_for_message(log, ("compile cache saved",), started, 0.1)


def test_a_logged_field_is_read_from_the_first_line_with_its_message(tmp_path):
    log = tmp_path / "ours.log"
    log.write_text(
        "\n".join(
            [
                "not json",
                _line(3, "compile cache restored", "2026-12-04T03:00:04.500Z", seconds=1.25),
                _line(3, "compile cache restored", "2026-12-04T03:00:05.500Z", seconds=9.0),
            ]
        )
    )
    assert logged(log, "compile cache restored", "seconds") == 1.25
    assert logged(log, "compile cache saved", "seconds") is None


def _client(first_p95, settled_p95, warm_up_over_s=0.0):
    return {
        "window_s": 10.0,
        "first": {"p50_ms": first_p95 / 2, "p95_ms": first_p95, "p99_ms": first_p95 * 2},
        "settled": {"p50_ms": settled_p95 / 2, "p95_ms": settled_p95, "p99_ms": settled_p95 * 2},
        "warm_up_over_s": warm_up_over_s,
    }


def test_the_first_clients_figures_are_medians_over_the_starts_and_their_ratio():
    medians = first_client_medians([_client(50.0, 20.0, 5.5), _client(30.0, 10.0, 6.0), _client(400.0, 16.0, 7.5)])
    assert medians == {
        "starts": 3,
        "window_s": 10.0,
        "first_p50_ms": 25.0,
        "first_p95_ms": 50.0,
        "first_p99_ms": 100.0,
        "settled_p50_ms": 8.0,
        "settled_p95_ms": 16.0,
        "settled_p99_ms": 32.0,
        "p95_over_settled": 3.125,
        "warm_up_over_s": 6.0,
    }
