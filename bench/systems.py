"""How each system under test is started: the command, its environment, its readiness path."""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .config import BARE, BASELINE, OURS, OURS_2W, OURS_OIP, OURS_OPENAI, PEER, BenchConfig
from .models import NULL

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Launch:
    command: list[str]
    env: dict[str, str]
    ready_path: str
    cpus: set[int] | None = None  # the process (and what it starts) runs there
    model_cpus: set[int] | None = None  # where its model process goes, when it has one (pinned once ready)


def cpu_layout(cfg: BenchConfig) -> tuple[set[int] | None, set[int] | None]:
    """(model path cores, the other cores), or (None, None) when not pinning."""
    available = set(cfg.cpus)
    model = set(cfg.model_cpus) & available
    rest = available - model
    if not cfg.pin_cpus or not model or not rest:
        return None, None
    return model, rest


def torch_threads(cfg: BenchConfig) -> int:
    """cfg.torch_threads, or one per model core when the model path is pinned."""
    model, _ = cpu_layout(cfg)
    return len(model) if model else cfg.torch_threads


def thread_env(cfg: BenchConfig) -> dict[str, str]:
    """The same thread settings for every model process: torch's intra-op pool (OpenMP and MKL) gets
    torch_threads(cfg), the tokenizer stays on the calling thread."""
    threads = str(torch_threads(cfg))
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "TOKENIZERS_PARALLELISM": "false"}
    if cfg.omp_wait_policy:
        env["OMP_WAIT_POLICY"] = cfg.omp_wait_policy
    return env


def _python_path() -> str:
    return os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)


def launch(server: str, model_spec: str, port: int, cfg: BenchConfig, scratch: Path) -> Launch:
    """model_spec: a Hugging Face model directory, or `null`.

    Cores, when pinning: a single-process server runs on the model cores. Ours keeps its HTTP workers on the
    other cores (beside the load generator) and its model process on the model cores; LitServe the same for its
    API server and inference worker. The null runs put a whole server on the model cores (the HTTP path on one
    core), except ours with 2 workers, which gets every core."""
    env = {**thread_env(cfg), "PYTHONPATH": _python_path(), "PYTHONUNBUFFERED": "1"}
    model_cpus, rest = cpu_layout(cfg)
    if server in (OURS, OURS_2W):
        launched = _ours(server, model_spec, port, cfg, scratch, env)
        if model_cpus is None or rest is None:  # both, or neither
            return launched
        if server == OURS_2W:  # every core, not the generator's cores that the bench process is pinned to
            return dataclasses.replace(launched, cpus=model_cpus | rest)
        if model_spec == NULL:
            return dataclasses.replace(launched, cpus=model_cpus)
        return dataclasses.replace(launched, cpus=rest, model_cpus=model_cpus)
    if server == PEER:
        if model_cpus is not None:
            env["BENCH_MODEL_CPUS"] = ",".join(map(str, sorted(model_cpus)))
        return Launch(
            [
                sys.executable,
                "-m",
                "bench.litserve_server",
                "--port",
                str(port),
                "--model",
                model_spec,
                "--device",
                cfg.device,
                "--dtype",
                "fp16" if cfg.precision == "fp16" else "fp32",
                "--max-length",
                str(cfg.max_sequence_length),
                "--max-batch-size",
                str(cfg.max_batch_size),
                "--batch-timeout-ms",
                str(cfg.max_batch_wait_ms),
            ],
            env,
            "/health",
            cpus=(model_cpus if model_spec == NULL else rest),
        )
    if server == BASELINE:
        return Launch(
            [
                sys.executable,
                "-m",
                "bench.baseline_server",
                "--port",
                str(port),
                "--model",
                model_spec,
                "--device",
                cfg.device,
                "--dtype",
                "fp16" if cfg.precision == "fp16" else "fp32",
                "--max-length",
                str(cfg.max_sequence_length),
            ],
            env,
            "/ready",
            cpus=model_cpus,
        )
    if server == BARE:
        return Launch([sys.executable, "-m", "bench.bare_asgi", "--port", str(port)], env, "/", cpus=model_cpus)
    raise ValueError(f"unknown server {server!r}")


def _ours(server: str, model_spec: str, port: int, cfg: BenchConfig, scratch: Path, env: dict[str, str]) -> Launch:
    env.update(
        PORT=str(port),
        HOST="127.0.0.1",
        MODEL_NAME="bench",
        MODEL_VERSION="1",
        LOG_LEVEL="info",
        MAX_BATCH_SIZE=str(cfg.max_batch_size),
        MAX_BATCH_WAIT_MS=str(cfg.max_batch_wait_ms),
        MAX_SEQUENCE_LENGTH=str(cfg.max_sequence_length),
        DEVICE=cfg.device,
        PRECISION=cfg.precision,
        MODEL_RUNTIME="compile" if cfg.compile else "eager",
        MODEL_CACHE_DIR=str(scratch / "model-cache"),
        # Steady state from the first measured request: every shape warm, and its time seeding the deadline
        # admission, before ready (the default leaves long shapes to traffic; bench.startup measures that
        # start and its first client).
        WARMUP="all",
    )
    if model_spec == NULL:
        empty = Path(tempfile.mkdtemp(prefix="null-model-", dir=scratch))
        env.update(MODEL_URI=str(empty), MODEL_HANDLER="bench.null_handler:NullHandler")
    else:
        env.update(MODEL_URI=model_spec, MODEL_TASK="text-embedding")
    env["WORKERS"] = "2" if server == OURS_2W else str(cfg.workers)
    return Launch([sys.executable, "-m", "inference_server"], env, "/ready")


def request_bodies(system: str, texts: list[str]) -> tuple[str, list[bytes]]:
    """(path, bodies), one text a request: /predict, or the same text over /v1/embeddings or the Open Inference
    Protocol on our server (model name "bench")."""
    import orjson

    if system == OURS_OPENAI:
        return "/v1/embeddings", [orjson.dumps({"model": "bench", "input": text}) for text in texts]
    if system == OURS_OIP:
        return "/v2/models/bench/infer", [
            orjson.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [text]}]})
            for text in texts
        ]
    return "/predict", [orjson.dumps({"text": text}) for text in texts]
