"""The process architecture: HTTP workers apart from the model process. A killed model process fails every
worker's readiness at once and the task exits non-zero; a killed worker is replaced; nothing is left behind."""

from __future__ import annotations

import http.client
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from inference_server.supervisor.processes import MAX_WORKER_RESTARTS

from ..test_process import free_port, json_lines, request, server_env, start, wait_until_ready

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


def shared_mappings(pid: int) -> Counter[str]:
    """The shared-memory files a process has mapped, memfds (anonymous) and anything under /dev/shm (named): how
    many distinct files of each name."""
    files = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        path = fields[5] if len(fields) == 6 else ""
        if path.startswith("/memfd:") or path.startswith("/dev/shm/"):
            files.add((path.removesuffix(" (deleted)"), fields[3], fields[4]))  # name, device, inode
    return Counter(name for name, _, _ in files)


def loads_torch(pid: int) -> bool:
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


@pytest.fixture
def two_workers(tiny_classifier_dir, tmp_path):
    port, log = free_port(), tmp_path / "server.log"
    env = server_env(
        tiny_classifier_dir,
        port,
        tmp_path / "cache",
        MODEL_TASK="text-classification",
        WORKERS="2",
        MAX_SEQUENCE_LENGTH="32",
        MAX_BATCH_SIZE="4",
        READY_PROBE_INTERVAL_S="1",
    )
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
            assert {"/memfd:inference-status", "/memfd:inference-requests", "/memfd:inference-responses"} <= set(mapped)
        # The workers tokenize with tokenizer.json, which the model process found to encode as transformers does:
        # neither transformers nor torch is loaded in them (handlers/fast_tokenizer.py).
        assert {(role, loads_torch(pid)) for (role, _), pid in started_pids(log).items()} == {
            ("model", True),
            ("worker", False),
        }
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


def ready_from(port: int) -> tuple[int, str, str]:
    """GET /ready on a new connection: the status, which worker process answered (the per-process prefix of the
    request ids it hands out) and the body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/ready", headers={"connection": "close"})
        response = conn.getresponse()
        body = response.read().decode()
        request_id = response.getheader("x-request-id")
        assert request_id is not None  # every response carries one
        return response.status, request_id[:16], body
    finally:
        conn.close()


def test_a_killed_model_process_fails_every_workers_readiness_at_once_and_the_task_exits_1(two_workers):
    process, port, log = two_workers
    pids = started_pids(log)
    assert {role for role, _ in pids} == {"model", "worker"} and len(pids) == 3
    workers, deadline = set(), time.monotonic() + 30
    while len(workers) < 2:  # each worker's id prefix (a new connection may go to either)
        assert time.monotonic() < deadline
        status, worker, _ = ready_from(port)
        assert status == 200
        workers.add(worker)
    # The supervisor is frozen while the model dies: it can neither stop the workers nor close the port, so each
    # worker's readiness is observed on its own (the broken link fails it) before anything exits.
    os.kill(process.pid, signal.SIGSTOP)
    try:
        os.kill(pids[("model", 0)], signal.SIGKILL)
        killed = time.monotonic()
        answers, failed = [], {}
        while failed.keys() != workers and time.monotonic() < killed + 30:
            answers.append((*ready_from(port), round(time.monotonic() - killed, 3)))
            if answers[-1][0] == 503:
                failed.setdefault(answers[-1][1], answers[-1][3])
    finally:
        os.kill(process.pid, signal.SIGCONT)
    assert failed.keys() == workers, answers  # every worker's readiness failed before the task exits,
    # at once: through the broken link, not at the next readiness test inference (READY_PROBE_INTERVAL_S=1)
    assert max(failed.values()) < 0.5, failed
    # Once failed, a worker stays failed. (Across workers the order is the kernel's: a killed process's sockets
    # are released a few milliseconds apart, so one worker may still say ready just after another failed.)
    for worker in workers:
        statuses = [answer[0] for answer in answers if answer[1] == worker]
        assert 200 not in statuses[statuses.index(503) :], answers
    assert process.wait(30) == 1, log.read_text()
    messages = [line["message"] for line in json_lines(log)]
    assert "the model process exited; stopping the workers and failing the task" in messages


def test_workers_that_keep_dying_fail_the_task_with_exit_1(tiny_classifier_dir, tmp_path):
    port, log = free_port(), tmp_path / "server.log"
    env = server_env(
        tiny_classifier_dir,
        port,
        tmp_path / "cache",
        MODEL_TASK="text-classification",
        WORKERS="1",
        MAX_SEQUENCE_LENGTH="32",
    )
    process = start(env, log)
    try:
        wait_until_ready(process, port, log)
        killed: set[int] = set()
        deadline = time.monotonic() + 120
        while process.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            worker = started_pids(log)[("worker", 0)]
            if worker not in killed:  # each replacement dies as soon as it started
                os.kill(worker, signal.SIGKILL)
                killed.add(worker)
            time.sleep(0.02)
        assert process.returncode == 1, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    lines = json_lines(log)
    messages = [line["message"] for line in lines]
    assert messages.count("an HTTP worker exited; replacing it") == MAX_WORKER_RESTARTS
    assert len(killed) == MAX_WORKER_RESTARTS + 1
    assert "HTTP workers keep dying; failing the task" in messages
    assert lines[-1]["message"] == "exiting" and lines[-1]["exit_code"] == 1
    assert not alive(started_pids(log)[("model", 0)])  # the model process was stopped too


def test_a_killed_worker_is_replaced_then_sigterm_under_load_drains_every_worker_and_exits_0(two_workers):
    process, port, log = two_workers
    pids = started_pids(log)
    os.kill(pids[("worker", 0)], signal.SIGKILL)
    deadline = time.monotonic() + 120
    while started_pids(log)[("worker", 0)] == pids[("worker", 0)]:
        assert time.monotonic() < deadline and process.poll() is None, log.read_text()
        time.sleep(0.1)
    replacement = started_pids(log)[("worker", 0)]
    while (
        not any(
            line["message"] == "Application startup complete." and line.get("pid") == replacement
            for line in json_lines(log)
        )
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    statuses = [request(port, "POST", "/predict", {"text": f"still here {i}"})[0] for i in range(20)]
    assert statuses == [200] * 20  # the replacement accepts only once it is ready
    assert started_pids(log)[("model", 0)] == pids[("model", 0)]  # the model was not reloaded
    assert "an HTTP worker exited; replacing it" in [line["message"] for line in json_lines(log)]
    # The dead worker's rings are unmapped by the model process as soon as its link closed: only the two live
    # workers' rings (and the status page) stay mapped there.
    assert shared_mappings(pids[("model", 0)]) == {
        "/memfd:inference-status": 1,
        "/memfd:inference-requests": 2,
        "/memfd:inference-responses": 2,
    }

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
