"""The load generator against the bare ASGI app: keep-alive connections, every response counted."""

from __future__ import annotations

import sys

import pytest

from bench.loadgen import encode_requests, run_load
from bench.processes import HOST, free_port, start_server


@pytest.fixture(scope="module")
def bare_server(tmp_path_factory):
    port = free_port()
    server = start_server(
        "bare",
        [sys.executable, "-m", "bench.bare_asgi", "--port", str(port)],
        {},
        port,
        tmp_path_factory.mktemp("logs"),
    )
    server.wait_ready("/", 30)
    yield server
    server.stop()


@pytest.mark.parametrize("concurrency", [1, 16])
def test_closed_loop_over_keep_alive_connections(bare_server, concurrency):
    requests = encode_requests(HOST, bare_server.port, "/predict", [b'{"text":"a"}', b'{"text":"b c"}'])
    result = run_load(
        HOST, bare_server.port, requests, concurrency, warmup_s=0.2, duration_s=0.5, server_pid=bare_server.pid
    )
    assert result.errors == 0 and result.requests > 0
    assert result.connections == concurrency
    assert 0 < result.p50_ms <= result.p95_ms <= result.p99_ms
    assert result.server_cpu_s is not None and result.client_cpu_s > 0


def test_reports_the_cores_of_each_named_process(bare_server):
    requests = encode_requests(HOST, bare_server.port, "/predict", [b'{"text":"a"}'])
    result = run_load(
        HOST,
        bare_server.port,
        requests,
        8,
        warmup_s=0.2,
        duration_s=0.5,
        server_pid=bare_server.pid,
        processes={bare_server.pid: "app"},
    )
    cores = result.cores_by_process
    assert cores is not None
    assert set(cores) == {"app", "generator"}
    assert 0 < cores["app"] <= 1.05 and 0 < cores["generator"] <= 1.05  # both busy: a closed loop on one app


def test_counts_refused_connections_as_errors():
    port = free_port()  # nothing listens there
    with pytest.raises(ConnectionError):
        run_load(HOST, port, encode_requests(HOST, port, "/", [b"{}"]), 2, warmup_s=0.1, duration_s=0.1)
