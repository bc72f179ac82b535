"""The process architecture: HTTP workers apart from the model process. A killed model process fails every
worker's readiness at once and the task exits non-zero; a killed worker is replaced; nothing is left behind."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from .test_process import free_port, json_lines, request, server_env, start, wait_until_ready

pytestmark = pytest.mark.slow


def started_pids(log: Path) -> dict[tuple[str, int], int]:
    """(role, index) -> pid of the latest process the supervisor started."""
    pids = {}
    for line in json_lines(log):
        if line["message"] == "process started":
            pids[(line["role"], line["index"])] = line["pid"]
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def shared_mappings(pid: int) -> set[str]:
    """The shared-memory files a process has mapped: memfds (anonymous) and anything under /dev/shm (named)."""
    found = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split(maxsplit=5)[5] if len(line.split(maxsplit=5)) == 6 else ""
        if path.startswith("/memfd:") or path.startswith("/dev/shm/"):
            found.add(path.removesuffix(" (deleted)"))
    return found


@pytest.fixture
def two_workers(tiny_classifier_dir, tmp_path):
    port, log = free_port(), tmp_path / "server.log"
    env = server_env(tiny_classifier_dir, port, tmp_path / "cache", MODEL_TASK="text-classification", WORKERS="2",
                     MAX_SEQUENCE_LENGTH="32", MAX_BATCH_SIZE="4", READY_PROBE_INTERVAL_S="1")
    process = start(env, log)
    try:
        wait_until_ready(process, port, log)
        deadline = time.monotonic() + 30
        while [request(port, "GET", "/ready")[0] for _ in range(6)] != [200] * 6:  # both workers
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        # The links live in anonymous memory (memfd): nothing named under /dev/shm that a crash could leave.
        for pid in started_pids(log).values():
            mapped = shared_mappings(pid)
            assert not [m for m in mapped if m.startswith("/dev/shm/")], mapped
            assert {"/memfd:inference-status", "/memfd:inference-requests", "/memfd:inference-responses"} <= mapped
        yield process, port, log
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    deadline = time.monotonic() + 30
    pids = started_pids(log).values()
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    # The kernel frees a memfd with its last mapping: with every process gone, so is the shared memory.
    assert not [pid for pid in pids if alive(pid)], "a child process outlived the server"


def test_a_killed_model_process_fails_every_workers_readiness_at_once_and_the_task_exits_1(two_workers):
    process, port, log = two_workers
    pids = started_pids(log)
    assert {role for role, _ in pids} == {"model", "worker"} and len(pids) == 3
    for _ in range(4):  # both workers answer (new connection each time)
        assert request(port, "POST", "/predict", {"text": "hello"})[0] == 200
    os.kill(pids[("model", 0)], signal.SIGKILL)
    killed = time.monotonic()
    answers = []
    while process.poll() is None and time.monotonic() - killed < 30:
        try:
            answers.append((time.monotonic() - killed, request(port, "GET", "/ready", timeout=5)[0]))
        except OSError:
            break
    assert process.wait(30) == 1, log.read_text()
    late = [status for at, status in answers if at > 0.5]
    assert all(status == 503 for status in late), answers  # no worker says ready once the model is gone
    messages = [line["message"] for line in json_lines(log)]
    assert "the model process exited; stopping the workers and failing the task" in messages


def test_a_killed_worker_is_replaced_then_sigterm_under_load_drains_every_worker_and_exits_0(two_workers):
    process, port, log = two_workers
    pids = started_pids(log)
    os.kill(pids[("worker", 0)], signal.SIGKILL)
    deadline = time.monotonic() + 120
    while started_pids(log)[("worker", 0)] == pids[("worker", 0)]:
        assert time.monotonic() < deadline and process.poll() is None, log.read_text()
        time.sleep(0.1)
    replacement = started_pids(log)[("worker", 0)]
    while not any(line["message"] == "Application startup complete." and line.get("pid") == replacement
                  for line in json_lines(log)) and time.monotonic() < deadline:
        time.sleep(0.1)
    statuses = [request(port, "POST", "/predict", {"text": f"still here {i}"})[0] for i in range(20)]
    assert statuses == [200] * 20  # the replacement accepts only once it is ready
    assert started_pids(log)[("model", 0)] == pids[("model", 0)]  # the model was not reloaded
    assert "an HTTP worker exited; replacing it" in [line["message"] for line in json_lines(log)]

    results: list[object] = []
    stop = threading.Event()

    def client(n: int) -> None:  # like a load balancer's client: told to go away (503, refused), it goes
        while not stop.is_set():
            try:
                status = request(port, "POST", "/predict", {"text": f"client {n}"})[0]
            except OSError as exc:
                status = type(exc).__name__
            results.append(status)
            if status != 200:
                return

    threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    process.send_signal(signal.SIGTERM)
    code = process.wait(60)
    stop.set()
    for t in threads:
        t.join(30)
    assert code == 0, log.read_text()
    assert set(results) <= {200, 503, "ConnectionRefusedError"}, set(results)
    assert results.count(200) > 6
    lines = json_lines(log)
    drained = {line.get("worker") for line in lines if line["message"] == "drained"}
    assert drained == {0, 1}
    assert lines[-1]["message"] == "exiting" and lines[-1]["exit_code"] == 0
