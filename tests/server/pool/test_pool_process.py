"""The real pool server process (python -m inference_server with POOL_NAME set) receiving SIGTERM under load, with a
model load in progress that would take minutes: readiness fails and new requests get 503 at once, the requests in
flight finish, and the process exits 0 within DRAIN_TIMEOUT_S and the exit grace (the library's stop timing for the
pool's task, bundled_stop), not after the load."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest

from bench.pool import publish_local
from inference_server.facts import EXIT_GRACE_S
from inference_server.pool.registry import REGISTRY_FILE, Registry

from ..test_process import free_port, request, server_env, start

pytestmark = pytest.mark.slow
POOL = "pool-a"
DRAIN_S = 5
STUCK_LOAD_S = 300  # far past the drain and the exit grace


@pytest.fixture
def pool_store(tmp_path, tiny_classifier_dir):
    root = tmp_path / "store" / "pools" / POOL
    manifest = publish_local(tiny_classifier_dir, root, "clf", "text-classification")
    publish_local(tiny_classifier_dir, root, "stuck", "text-classification", manifest)
    (root / REGISTRY_FILE).write_bytes(Registry(POOL, {"clf": "1", "stuck": "1"}).to_json())
    return root


def wait_for(check, what: str, process, log, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert process.poll() is None, f"server exited with {process.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"{what} never happened:\n{log.read_text()}"
        time.sleep(0.1)


def answer(port: int, method: str, path: str, body: dict | None = None, timeout: float = 30.0) -> object:
    """The status (with the error code of a 503), "refused" when nothing listens, or the exception's repr."""
    try:
        status, raw = request(port, method, path, body, timeout=timeout)
    except ConnectionRefusedError:
        return "refused"
    except Exception as exc:  # a reset or a timeout: an accepted request lost
        return repr(exc)
    return f"503 {json.loads(raw)['error']['code']}" if status == 503 else status


def test_sigterm_drains_the_requests_in_flight_and_exits_0_without_waiting_for_a_load(pool_store, tmp_path):
    port, log = free_port(), tmp_path / "pool.log"
    env = server_env(
        pool_store,
        port,
        tmp_path / "cache",
        POOL_NAME=POOL,
        MODEL_STORE_URI=str(pool_store),
        MODEL_HANDLER="inference_server.testing:SlowClassificationHandler",
        SLOW_HANDLER_DELAY_S="0.2",
        SLOW_HANDLER_LOAD_MODEL="stuck",
        SLOW_HANDLER_LOAD_S=str(STUCK_LOAD_S),
        MAX_BATCH_SIZE="4",
        MAX_SEQUENCE_LENGTH="32",
        REQUEST_TIMEOUT_S="4",
        DRAIN_TIMEOUT_S=str(DRAIN_S),
    )
    process = start(env, log)
    try:
        wait_for(lambda: answer(port, "GET", f"/{POOL}/ready", timeout=2) == 200, "ready", process, log)
        predict = f"/{POOL}/models/clf/predict"
        # The first requests may time out or be shed while clf loads (torch's import too): its load goes on.
        wait_for(lambda: answer(port, "POST", predict, {"text": "warm"}) == 200, "clf serving", process, log)

        outcomes: list[tuple[float, object]] = []
        lock = threading.Lock()

        def client(n: int) -> None:
            for i in range(10_000):
                status = answer(port, "POST", predict, {"text": f"client {n} says hello {i}"})
                with lock:
                    outcomes.append((time.monotonic(), status))
                if status != 200:
                    return

        stuck = threading.Thread(target=answer, args=(port, "POST", f"/{POOL}/models/stuck/predict", {"text": "x"}))
        stuck.start()

        def loading() -> bool:
            _, raw = request(port, "GET", f"/{POOL}/ready", timeout=5)
            return json.loads(raw).get("loading", 0) >= 1

        wait_for(loading, "the stuck model's load", process, log)
        clients = [threading.Thread(target=client, args=(n,)) for n in range(6)]
        for t in clients:
            t.start()
        wait_for(lambda: sum(1 for _, s in outcomes if s == 200) >= 6, "requests served", process, log, 60)
        sigterm_at = time.monotonic()
        process.send_signal(signal.SIGTERM)
        readiness = answer(port, "GET", f"/{POOL}/ready", timeout=5)
        for t in [*clients, stuck]:
            t.join(60)
        code = process.wait(DRAIN_S + EXIT_GRACE_S + 30)
        exited_after = time.monotonic() - sigterm_at
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, log.read_text()
    assert exited_after < DRAIN_S + EXIT_GRACE_S + 10 < STUCK_LOAD_S  # the load did not hold the exit
    assert readiness in ("503 draining", "refused"), readiness
    statuses = [s for _, s in outcomes]
    assert set(statuses) <= {200, "503 draining", "refused"}, statuses
    assert any(at > sigterm_at and s == 200 for at, s in outcomes), "requests in flight at SIGTERM should finish"
    assert all(s != "503 draining" or at > sigterm_at for at, s in outcomes)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    messages = [line["message"] for line in lines]
    assert "signal received; draining" in messages
    (exiting,) = [line for line in lines if line["message"] == "exiting"]
    assert exiting["exit_code"] == 0 and exiting["loads_left"] >= 1
