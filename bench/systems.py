"""How each system under test is started: the command, its environment, its readiness path."""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import orjson

from .config import BARE, BASELINE, OURS, OURS_OIP, OURS_OPENAI, BenchConfig
from .models import NULL

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Launch:
    command: list[str]
    env: dict[str, str]
    ready_path: str


def thread_env(cfg: BenchConfig) -> dict[str, str]:
    """The same thread settings for every model process: torch's intra-op pool (OpenMP and MKL) gets
    cfg.torch_threads, the tokenizer stays on the calling thread."""
    env = {"OMP_NUM_THREADS": str(cfg.torch_threads), "MKL_NUM_THREADS": str(cfg.torch_threads),
           "TOKENIZERS_PARALLELISM": "false"}
    if cfg.omp_wait_policy:
        env["OMP_WAIT_POLICY"] = cfg.omp_wait_policy
    return env


def _python_path() -> str:
    return os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)


def launch(server: str, model_spec: str, port: int, cfg: BenchConfig, scratch: Path) -> Launch:
    """model_spec: a Hugging Face model directory, or `null`."""
    env = {**thread_env(cfg), "PYTHONPATH": _python_path(), "PYTHONUNBUFFERED": "1"}
    if server == OURS:
        env.update(PORT=str(port), HOST="127.0.0.1", MODEL_NAME="bench", MODEL_VERSION="1", LOG_LEVEL="info",
                   MAX_BATCH_SIZE=str(cfg.max_batch_size), MAX_BATCH_WAIT_MS=str(cfg.max_batch_wait_ms),
                   MAX_SEQUENCE_LENGTH=str(cfg.max_sequence_length), DEVICE=cfg.device, PRECISION=cfg.precision,
                   COMPILE=str(cfg.compile).lower(), MODEL_CACHE_DIR=str(scratch / "model-cache"))
        if model_spec == NULL:
            empty = Path(tempfile.mkdtemp(prefix="null-model-", dir=scratch))
            env.update(MODEL_URI=str(empty), MODEL_HANDLER="bench.null_handler:NullHandler")
        else:
            env.update(MODEL_URI=model_spec, MODEL_TASK="text-embedding")
        return Launch([sys.executable, "-m", "inference_server"], env, "/ready")
    if server == BASELINE:
        return Launch([sys.executable, "-m", "bench.baseline_server", "--port", str(port), "--model", model_spec,
                       "--device", cfg.device, "--dtype", "fp16" if cfg.precision == "fp16" else "fp32",
                       "--max-length", str(cfg.max_sequence_length)],
                      env, "/ready")
    if server == BARE:
        return Launch([sys.executable, "-m", "bench.bare_asgi", "--port", str(port)], env, "/")
    raise ValueError(f"unknown server {server!r}")


def request_bodies(system: str, texts: list[str]) -> tuple[str, list[bytes]]:
    """(path, bodies) of one text per request for a system: /predict, or the same text over /v1/embeddings or the
    Open Inference Protocol on our server (model name "bench")."""
    if system == OURS_OPENAI:
        return "/v1/embeddings", [orjson.dumps({"model": "bench", "input": text}) for text in texts]
    if system == OURS_OIP:
        return "/v2/models/bench/infer", [orjson.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                                                  "data": [text]}]}) for text in texts]
    return "/predict", [orjson.dumps({"text": text}) for text in texts]
