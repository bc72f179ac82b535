"""Two real server processes sharing one real Valkey: a result computed by one is a hit on the other, and the
cache stopped under load costs no request (only 200s), bounded latency, and is used again once it returns."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from ..test_process import free_port, request, server_env, start, wait_until_ready
from ..valkey_server import ValkeyServer

pytestmark = [pytest.mark.slow, pytest.mark.timing]


def shared_cache_events(port: int) -> dict[str, float]:
    status, body = request(port, "GET", "/metrics")
    assert status == 200
    return {
        event: float(value)
        for event, value in re.findall(r'shared_cache_events_total\{event="(\w+)"\} ([0-9.e+]+)', body.decode())
    }


@pytest.fixture(scope="module")
def two_servers(tiny_classifier_dir, tmp_path_factory):
    """Started once for the module (two model loads are the slow part)."""
    tmp_path = tmp_path_factory.mktemp("two-servers")
    valkey = ValkeyServer(tmp_path).start()
    processes, ports = [], []
    try:
        for name in ("a", "b"):
            port = free_port()
            env = server_env(
                tiny_classifier_dir,
                port,
                tmp_path / f"cache-{name}",
                MODEL_TASK="text-classification",
                WORKERS="1",
                RESULT_CACHE_SIZE="0",
                MAX_BATCH_SIZE="8",
                MAX_SEQUENCE_LENGTH="64",
                SHARED_CACHE_ENDPOINT=valkey.endpoint,
                SHARED_CACHE_TLS="false",
                SHARED_CACHE_TIMEOUT_MS="50",
            )
            processes.append((start(env, tmp_path / f"server-{name}.log"), port, tmp_path / f"server-{name}.log"))
            ports.append(port)
        for process, port, log in processes:
            wait_until_ready(process, port, log)
        yield valkey, ports
    finally:
        for process, _, _ in processes:
            process.terminate()
        for process, _, _ in processes:
            process.wait(60)
        valkey.stop()


def predict(port: int, text: str, timeout: float = 30.0) -> tuple[int, dict]:
    status, body = request(port, "POST", "/predict", {"text": text}, timeout=timeout)
    return status, json.loads(body)


def until(condition, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.1)


def test_a_result_computed_by_one_process_is_a_hit_on_the_other(two_servers):
    valkey, (a, b) = two_servers
    until(
        lambda: predict(a, "warm")[0] == 200 and shared_cache_events(a).get("stored", 0) >= 1,
        30,
        "process a never stored a prediction",
    )
    status, from_a = predict(a, "computed once")
    until(lambda: valkey.client().dbsize() >= 2, 10, "process a's prediction was not stored")
    probes = iter(range(1000))

    def b_looked_up() -> bool:
        events = shared_cache_events(b)
        return predict(b, f"connect b {next(probes)}")[0] == 200 and events.get("misses", 0) >= 1

    until(b_looked_up, 30, "process b never reached the cache")
    status, from_b = predict(b, "computed once")
    assert status == 200 and from_b == from_a
    assert shared_cache_events(b).get("hits", 0) == 1


def test_the_cache_stopping_under_load_costs_no_request(two_servers):
    valkey, (_, port) = two_servers
    texts = [f"repeated {i}" for i in range(8)]
    phase = ["up"]
    results: list[tuple[str, int, float]] = []
    stop = threading.Event()

    def client(n: int) -> None:
        i = n
        while not stop.is_set():
            started = time.monotonic()
            status, _ = predict(port, texts[i % len(texts)], timeout=30)
            results.append((phase[0], status, time.monotonic() - started))
            i += 1

    until(
        lambda: (
            predict(port, texts[0])[0] == 200
            and shared_cache_events(port).get("hits", 0) >= 1
            or predict(port, texts[0])[0] != 200
        ),
        30,
        "the cache never answered",
    )
    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(3)
        phase[0] = "down"
        valkey.stop()
        time.sleep(4)
        phase[0] = "back"
        hits_before = shared_cache_events(port).get("hits", 0)
        valkey.start()
        returned = time.monotonic()
        until(
            lambda: shared_cache_events(port).get("hits", 0) > hits_before + 20,
            30,
            "no cache hits within 30 s of the cache's return",
        )
        recovered_s = time.monotonic() - returned
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert {status for _, status, _ in results} <= {200, 503}
    assert sum(status == 200 for _, status, _ in results) > 100

    def p95(name: str) -> float:
        latencies = sorted(s for phase_, status, s in results if phase_ == name and status == 200)
        assert latencies, f"no successful requests while the cache was {name}"
        return latencies[int(0.95 * (len(latencies) - 1))]

    # Up, most requests are hits; down, every one runs the model: bounded by the model's time, not the cache's.
    assert p95("down") < 1.0, (p95("up"), p95("down"))
    assert recovered_s < 30
