"""The real server process: uvicorn under concurrent load receiving SIGTERM, refusing a corrupted model,
the container health check, and startup errors."""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from inference_server.publish import publish

pytestmark = pytest.mark.slow
STARTUP_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(model_uri: str | Path, port: int, cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MODEL_", "MAX_", "API_KEYS"))}
    env.update(
        MODEL_NAME="tiny",
        MODEL_VERSION="1",
        MODEL_URI=str(model_uri),
        PORT=str(port),
        HOST="127.0.0.1",
        MODEL_CACHE_DIR=str(cache),
        DEPLOYMENT_ENV="test",
        **extra,
    )
    return env


def start(env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "inference_server"], env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )


def request(port: int, method: str, path: str, body: dict | None = None, timeout: float = 30.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=payload, headers={"content-type": "application/json", "connection": "close"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def wait_until_ready(process: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        assert process.poll() is None, f"server exited with {process.returncode}:\n{log.read_text()}"
        try:
            if request(port, "GET", "/ready", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"not ready after {STARTUP_TIMEOUT} s:\n{log.read_text()}")


def json_lines(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]  # every line must be JSON


def healthcheck(port: int) -> int:
    env = {**os.environ, "PORT": str(port)}
    return subprocess.run([sys.executable, "-m", "inference_server.healthcheck"], env=env, timeout=30).returncode


def test_sigterm_under_load_drains_accepted_requests_and_exits_0(tiny_classifier_dir, tmp_path):
    port, log = free_port(), tmp_path / "server.log"
    env = server_env(
        tiny_classifier_dir,
        port,
        tmp_path / "cache",
        MODEL_TASK="text-classification",
        MODEL_HANDLER="inference_server.testing:SlowClassificationHandler",
        SLOW_HANDLER_DELAY_S="0.05",
        MAX_BATCH_SIZE="4",
        MAX_SEQUENCE_LENGTH="32",
        READY_PROBE_INTERVAL_S="1",
        MAX_BODY_BYTES="4096",
        DRAIN_TIMEOUT_S="30",
        SLOW_REQUEST_MS="60000",  # a loaded machine makes requests slow; slow ones get a line each
        ACCESS_LOG_SAMPLE="0",
    )  # by default 1 in 1000 successes gets a line: a flake over ~1000 requests
    launched = time.monotonic()
    process = start(env, log)
    try:
        wait_until_ready(process, port, log)
        seen_ready_after = time.monotonic() - launched
        assert healthcheck(port) == 0
        assert request(port, "POST", "/predict", {"text": "x" * 5000})[0] == 413

        outcomes: list[tuple[float, object]] = []  # (finished at, status or "refused")
        lock = threading.Lock()
        sigterm_at: list[float] = []

        def client(n: int) -> None:
            for i in range(10_000):
                try:
                    status, body = request(port, "POST", "/predict", {"text": f"client {n} says hello {i}"})
                    if status == 503:
                        # Draining after SIGTERM; before it, a machine busy with other work may make admission shed
                        # (its batch times run long): both are the server's answers, neither a lost request.
                        status = f"503 {json.loads(body)['error']['code']}"
                except ConnectionRefusedError:
                    status = "refused"
                except Exception as exc:  # a reset or a timeout: an accepted request lost
                    status = repr(exc)
                with lock:
                    outcomes.append((time.monotonic(), status))
                if status != 200:
                    return
                # A pause before the next connection, as real clients have: it lands after the worker's in-flight
                # count reached 0, which reset it when the worker closed the port at once.
                time.sleep(random.uniform(0, 0.15))

        clients = [threading.Thread(target=client, args=(n,)) for n in range(12)]
        for t in clients:
            t.start()
        deadline = time.monotonic() + 60
        while sum(1 for _, s in outcomes if s == 200) < 20:
            assert time.monotonic() < deadline and process.poll() is None, outcomes[-5:]
            time.sleep(0.01)
        sigterm_at.append(time.monotonic())
        process.send_signal(signal.SIGTERM)
        for t in clients:
            t.join(60)
        assert process.wait(60) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
    statuses = [s for _, s in outcomes]
    assert set(statuses) <= {200, "503 draining", "503 overloaded", "refused"}, statuses
    assert all(s != "503 draining" or at > sigterm_at[0] for at, s in outcomes)
    finished_after_sigterm = [s for at, s in outcomes if at > sigterm_at[0] and s == 200]
    assert finished_after_sigterm, "requests in flight at SIGTERM should have completed"
    lines = json_lines(log)
    messages = [line["message"] for line in lines]
    assert "signal received; draining" in messages and "drained" in messages
    assert lines[-1]["message"] == "exiting" and lines[-1]["exit_code"] == 0
    # No line per request: each worker's interval documents (the last one written as it exits) hold them.
    assert not [line for line in lines if line.get("path") == "/predict" and line.get("status") == 200]
    # One start document: the seconds from the server's process start to ready (no more than the test saw from its
    # launch), and the fetch, load and warm-up within them.
    (started,) = [line for line in lines if line["message"] == "metrics" and "StartupSeconds" in line]
    phases = ("StartupFetchSeconds", "StartupLoadSeconds", "StartupWarmupSeconds")
    assert {d["Name"]: d["Unit"] for d in started["_aws"]["CloudWatchMetrics"][0]["Metrics"]} == {
        name: "Seconds" for name in ("StartupSeconds", *phases)
    }
    assert all(started[name] >= 0 for name in phases) and started["StartupLoadSeconds"] > 0
    assert sum(started[name] for name in phases) <= started["StartupSeconds"] <= seen_ready_after + 0.5, started
    # The imports before the fetch count too (the model process alone imports torch: well over half a second).
    assert started["StartupSeconds"] - sum(started[name] for name in phases) > 0.5, started
    worker_metrics = [line for line in lines if line["message"] == "metrics" and line.get("process") == "worker"]
    assert worker_metrics and all(line["Environment"] == "test" for line in worker_metrics)
    served = sum(line["RequestLatency"]["Count"] for line in worker_metrics if "RequestLatency" in line)
    assert served >= sum(1 for s in statuses if s == 200)
    assert healthcheck(port) == 1  # nothing listens any more


def test_a_corrupted_model_in_s3_refuses_to_start(s3, bucket, tiny_classifier_dir, tmp_path):
    uri = f"s3://{bucket}/models/tiny/1/"
    publish(tiny_classifier_dir, uri, task="text-classification")
    s3.put_object(Bucket=bucket, Key="models/tiny/1/config.json", Body=b'{"model_type": "bert"}')
    log = tmp_path / "server.log"
    process = start(server_env(uri, free_port(), tmp_path / "cache"), log)
    assert process.wait(STARTUP_TIMEOUT) == 1, log.read_text()
    [refusal] = [line for line in json_lines(log) if line["level"] == "CRITICAL"]
    assert refusal["message"] == "model load failed; refusing to start"
    assert "config.json: size" in refusal["error"]
    # Two versions run side by side during a canary: every line (not only request lines) says which one wrote it.
    assert {(line["model"], line["model_version"]) for line in json_lines(log)} == {("tiny", "1")}


def test_a_checkpoint_without_its_head_refuses_to_start_as_a_classifier(s3, bucket, tiny_embedder_dir, tmp_path):
    """Issue 43: MODEL_TASK=text-classification on an embedding model answered with a random head."""
    uri = f"s3://{bucket}/models/tiny/1/"
    publish(tiny_embedder_dir, uri, task="text-embedding")
    log = tmp_path / "server.log"
    env = server_env(uri, free_port(), tmp_path / "cache", MODEL_TASK="text-classification")
    assert start(env, log).wait(STARTUP_TIMEOUT) == 1, log.read_text()
    [refusal] = [line for line in json_lines(log) if line["level"] == "CRITICAL"]
    assert refusal["message"] == "wrong model; refusing to start" and refusal["error_type"] == "ModelCheckError"
    assert "lack classifier.bias" in refusal["error"] and "MODEL_TASK=text-embedding" in refusal["error"]


def test_a_model_without_manifest_in_s3_refuses_to_start(s3, bucket, tiny_classifier_dir, tmp_path):
    for path in tiny_classifier_dir.iterdir():
        s3.upload_file(str(path), bucket, f"models/tiny/1/{path.name}")
    log = tmp_path / "server.log"
    process = start(server_env(f"s3://{bucket}/models/tiny/1/", free_port(), tmp_path / "cache"), log)
    assert process.wait(STARTUP_TIMEOUT) == 1, log.read_text()
    [refusal] = [line for line in json_lines(log) if line["level"] == "CRITICAL"]
    assert "REQUIRE_MANIFEST" in refusal["error"]


def test_missing_settings_exit_2_naming_the_variable(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_")}
    result = subprocess.run([sys.executable, "-m", "inference_server"], env=env, capture_output=True, timeout=60)
    assert result.returncode == 2
    line = json.loads(result.stdout.decode().strip().splitlines()[-1])
    assert line["setting"] == "MODEL_NAME" and "required" in line["error"]
