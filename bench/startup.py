"""Start-up: seconds from process start to ready for our server against the bare script (bench.bare_start: import,
load, one inference, exit) on the same model, same machine, alternating, each `repeats` times; where our server's
start goes, from its own log lines; and what its first client gets: one client from the moment /ready answers, against
the same client once the warm-up is over. With --compile: our server with MODEL_RUNTIME=compile, its first start and
a start that finds the compile cache the first one saved, against an eager start.
`python -m bench.startup [--repeats 3] [--first-client 10] [--compile]` prints the JSON."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import orjson

from .config import SAME_TEXT, BenchConfig
from .loadgen import LoadResult, encode_requests, own_cpu_s, rss_mib, run_load
from .models import minilm_dir
from .processes import HOST, free_port, log_entries, server_processes, start_server
from .systems import REPO_ROOT, _python_path, thread_env
from .texts import make_texts

BACKGROUND_DONE = "background warm-up done"
# Our server's log lines that mark a phase of its start, in the order they normally come (role, message).
PHASES = (
    ("worker", "Application startup complete."),
    ("model", "model fetched"),
    ("worker", "preprocessing loaded"),
    ("model", "compile cache restored"),
    ("model", "model loaded"),
    ("model", "warm-up done"),
    ("worker", "ready for traffic"),
    ("model", BACKGROUND_DONE),
)
FETCHED = (
    "model has no manifest; files not verified",
    "model verified",
    "model downloaded and verified",
    "model downloaded",
)


def bare_start(model_dir: str, cfg: BenchConfig) -> dict:
    env = {**os.environ, **thread_env(cfg), "PYTHONPATH": _python_path()}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bench.bare_start", "--model", model_dir, "--max-length", str(cfg.max_sequence_length)],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    total = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"the bare start-up script failed:\n{done.stderr[-3000:]}")
    return {"seconds": total, **orjson.loads(done.stdout.strip().splitlines()[-1])}


def our_start(
    model_dir: str,
    cfg: BenchConfig,
    scratch: Path,
    warmup: str = "first",
    extra_env: dict[str, str] | None = None,
    wait_for: tuple[str, ...] = (),
    first_client_s: float = 0.0,
) -> dict:
    """Popen to the first 200 from /ready, then (``first_client_s``) the first client's windows, then one /predict (a
    ready server answers), then (``wait_for``) until the log has one of those messages (``waited_s`` None unless it
    was the first), then the phases."""
    port = free_port()
    cache = tempfile.mkdtemp(prefix="startup-cache-", dir=scratch)
    # Eager unless extra_env says otherwise, and each start's compiler caches its own (never the shell's).
    env = {
        **thread_env(cfg),
        "PYTHONPATH": _python_path(),
        "PYTHONUNBUFFERED": "1",
        "PORT": str(port),
        "HOST": HOST,
        "MODEL_NAME": "bench",
        "MODEL_VERSION": "1",
        "LOG_LEVEL": "info",
        "MODEL_URI": model_dir,
        "MODEL_TASK": "text-embedding",
        "MAX_BATCH_SIZE": str(cfg.max_batch_size),
        "MAX_SEQUENCE_LENGTH": str(cfg.max_sequence_length),
        "DEVICE": cfg.device,
        "PRECISION": cfg.precision,
        "WORKERS": str(cfg.workers),
        "MODEL_RUNTIME": "eager",
        "MODEL_CACHE_DIR": cache,
        "TORCHINDUCTOR_CACHE_DIR": f"{cache}/torchinductor",
        "TRITON_CACHE_DIR": f"{cache}/triton",
        "WARMUP": warmup,
        **(extra_env or {}),
    }
    wall_started, started = time.time(), time.monotonic()
    process = start_server(
        f"startup-ours-{warmup}", [sys.executable, "-m", "inference_server"], env, port, cfg.output_dir / "logs"
    )
    try:
        process.wait_ready("/ready", cfg.ready_timeout_s, interval_s=0.02)
        ready = time.monotonic() - started
        costs = process_costs(process.log_path)
        client = first_client(port, process.log_path, cfg, first_client_s) if first_client_s else None
        status = _predict(port)
        time.sleep(0.2)
        waited = None
        if wait_for:
            seconds, message = _wait_for_message(process.log_path, wait_for, started, cfg.ready_timeout_s)
            waited = seconds if message == wait_for[0] else None  # else the cache was not saved, or not restored
    finally:
        process.stop()
    marks = phases(process.log_path, wall_started)
    if client is not None:
        client["warm_up_over_s"] = round(max(0.0, marks.get(BACKGROUND_DONE, ready) - ready), 3)
    return {
        "seconds": ready,
        "predict_status": status,
        "warmup": warmup,
        "waited_for": wait_for,
        "waited_s": waited,
        "phases": marks,
        "restore_s": logged(process.log_path, "compile cache restored", "seconds"),
        "at_ready": costs,
        "first_client": client,
    }


def first_client(port: int, log_path: Path, cfg: BenchConfig, window_s: float) -> dict:
    """One closed-loop client for window_s from the moment /ready answered; then, once the server's warm-up is over
    (at ready, or when its background warm-up logs its end), the same client again: the settled figure."""
    texts = [SAME_TEXT] if cfg.same_text else make_texts(cfg.texts)
    requests = encode_requests(HOST, port, "/predict", [orjson.dumps({"text": text}) for text in texts])
    first = run_load(HOST, port, requests, 1, 0.0, window_s)
    if logged(log_path, "warm-up done", "shapes_left"):
        _wait_for_message(log_path, (BACKGROUND_DONE,), time.monotonic(), cfg.ready_timeout_s)
    settled = run_load(HOST, port, requests, 1, 0.0, window_s)
    return {
        "window_s": window_s,
        "first": _window(first),
        "settled": _window(settled),
        "p95_over_settled": round(first.p95_ms / settled.p95_ms, 3),
    }


def _window(result: LoadResult) -> dict:
    return {
        "requests": result.requests,
        "statuses": result.statuses,
        "p50_ms": round(result.p50_ms, 2),
        "p95_ms": round(result.p95_ms, 2),
        "p99_ms": round(result.p99_ms, 2),
    }


def process_costs(log_path: Path) -> dict[str, dict[str, float | None]]:
    """Each process of our server (model, worker-0, ...): CPU seconds spent and resident MiB, now."""
    return {
        role: {"cpu_s": own_cpu_s(pid), "rss_mib": rss_mib(pid)}
        for pid, role in sorted(server_processes(log_path).items(), key=lambda item: item[1])
    }


def _wait_for_message(log_path: Path, messages: tuple[str, ...], started: float, timeout_s: float) -> tuple[float, str]:
    """(seconds from the start, the message) when a log line first carries one of ``messages``."""
    while True:
        text = log_path.read_text(errors="replace")
        found = [message for message in messages if f'"message":"{message}"' in text]
        if found:
            return time.monotonic() - started, found[0]
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"none of {messages} in {log_path} after {timeout_s:g} s")
        time.sleep(0.5)


def _predict(port: int) -> int:
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        conn.request("POST", "/predict", body=b'{"text": "hello world"}', headers={"content-type": "application/json"})
        return conn.getresponse().status
    finally:
        conn.close()


def logged(log_path: Path, message: str, field: str) -> float | None:
    """``field`` of the first log line with ``message`` (None when there is none)."""
    for line in log_path.read_text(errors="replace").splitlines():
        if f'"message":"{message}"' in line:
            with contextlib.suppress(orjson.JSONDecodeError):
                return orjson.loads(line).get(field)
    return None


def phases(log_path: Path, wall_started: float) -> dict[str, float]:
    """Seconds from the Popen to each phase's log line (its first), from our server's JSON log."""
    roles: dict[int, str] = {}
    seen: dict[str, float] = {}
    for entry in log_entries(log_path):
        if entry.get("message") == "process started":
            roles[entry["pid"]] = entry.get("role")
        message = "model fetched" if entry.get("message") in FETCHED else entry.get("message")
        role = roles.get(entry.get("pid"))
        if (role, message) in PHASES and message not in seen:
            at = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()
            seen[message] = round(at - wall_started, 3)
    return seen


def measure_startup(cfg: BenchConfig, model_dir: str, repeats: int) -> dict:
    """Alternating bare, ours, bare, ours...: drift on a shared machine hits both alike. Median ratio; and, over our
    starts, the first client's medians."""
    bare, ours = [], []
    with tempfile.TemporaryDirectory(prefix="startup-") as scratch:
        for _ in range(repeats):
            bare.append(bare_start(model_dir, cfg))
            ours.append(our_start(model_dir, cfg, Path(scratch), first_client_s=cfg.first_client_s))
    bare_s = statistics.median(run["seconds"] for run in bare)
    ours_s = statistics.median(run["seconds"] for run in ours)
    clients = [run["first_client"] for run in ours if run["first_client"]]
    return {
        "repeats": repeats,
        "bare": bare,
        "ours": ours,
        "bare_median_s": round(bare_s, 3),
        "ours_median_s": round(ours_s, 3),
        "ratio": round(ours_s / bare_s, 3),
        "first_client": first_client_medians(clients) if clients else None,
        "load_average_at_start": os.getloadavg(),
    }


def first_client_medians(clients: list[dict]) -> dict:
    """The first client's figures over our starts: medians of each window's percentiles, and the ratio of the p95s'."""

    def median(window: str, field: str) -> float:
        return round(statistics.median(client[window][field] for client in clients), 2)

    figures = {
        f"{window}_{field}": median(window, field)
        for window in ("first", "settled")
        for field in ("p50_ms", "p95_ms", "p99_ms")
    }
    return {
        "starts": len(clients),
        "window_s": clients[0]["window_s"],
        **figures,
        "p95_over_settled": round(figures["first_p95_ms"] / figures["settled_p95_ms"], 3),
        "warm_up_over_s": round(statistics.median(client["warm_up_over_s"] for client in clients), 3),
    }


# The compile starts' MAX_BATCH_SIZE: each start compiles every shape, 12 at 4 (batch 1, 2, 4 at four lengths) rather
# than 24 at the default 32; readiness needs batch 1 at every length either way.
COMPILE_MAX_BATCH = 4
# The server's log messages that end each wait (inference_server/engine/compile_cache.py, model_runner.py, batcher.py):
# the first is the one measured, the others end the wait without a figure.
SAVED = (
    "compile cache saved",
    "compile cache not saved",
    "compile cache too large to keep",
    "compile cache not saved: a shape failed to warm",
    "compile cache already saved by another task",
)
ALL_COMPILED = (BACKGROUND_DONE,)


def measure_compile_startup(cfg: BenchConfig, model_dir: str) -> dict:
    """Our server with MODEL_RUNTIME=compile: its first start (nothing cached: it compiles every shape, and saves the
    compile cache once all are), then a start on a fresh scratch directory that finds that cache, against an eager
    start with the same settings. Each is ready on its eager forward; ``first_compiled_s`` and ``cached_compiled_s``
    are when every shape had compiled and traffic ran compiled."""
    cfg = dataclasses.replace(cfg, max_batch_size=COMPILE_MAX_BATCH)
    with tempfile.TemporaryDirectory(prefix="compile-startup-") as scratch:
        compiled = {"MODEL_RUNTIME": "compile", "COMPILE_CACHE_URI": str(Path(scratch) / "store")}
        eager = our_start(model_dir, cfg, Path(scratch))
        first = our_start(model_dir, cfg, Path(scratch), extra_env=compiled, wait_for=SAVED)
        result = {
            "max_batch_size": COMPILE_MAX_BATCH,
            "eager": eager,
            "first": first,
            "cached": None,
            "archive_bytes": None,
            "first_over_eager": round(first["seconds"] / eager["seconds"], 3),
            "cached_over_eager": None,
            "first_compiled_s": first["phases"].get(ALL_COMPILED[0]),
            "cached_compiled_s": None,
            "load_average_at_start": os.getloadavg(),
        }
        if first["waited_s"] is None:  # not saved: there is no cached start to measure
            return result
        result["archive_bytes"] = sum(f.stat().st_size for f in (Path(scratch) / "store").iterdir())
        result["cached"] = cached = our_start(model_dir, cfg, Path(scratch), extra_env=compiled, wait_for=ALL_COMPILED)
    if "compile cache restored" in cached["phases"]:
        result["cached_over_eager"] = round(cached["seconds"] / eager["seconds"], 3)
        result["cached_compiled_s"] = cached["phases"].get(ALL_COMPILED[0])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model-dir", default=None)
    parser.add_argument("--compile", action="store_true", help="the compile starts (first, cached) against eager")
    parser.add_argument("--workers", type=int, default=BenchConfig.workers, help="our server's HTTP workers")
    parser.add_argument(
        "--first-client",
        type=float,
        default=BenchConfig.first_client_s,
        dest="first_client_s",
        help="seconds of one client after each of our starts is ready, and again once settled (0: skip)",
    )
    parser.add_argument(
        "--max-sequence-length",
        type=int,
        default=BenchConfig.max_sequence_length,
        help="our server's MAX_SEQUENCE_LENGTH",
    )
    args = parser.parse_args(argv)
    cfg = BenchConfig(
        workers=args.workers, first_client_s=args.first_client_s, max_sequence_length=args.max_sequence_length
    )
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    model_dir = args.model_dir or str(minilm_dir())
    result = measure_compile_startup(cfg, model_dir) if args.compile else measure_startup(cfg, model_dir, args.repeats)
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
