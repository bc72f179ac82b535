"""One benchmark run: the raw model in-process, then each server process driven over HTTP at every concurrency
level; writes the JSON result and the PNG plot and prints the table."""

from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import orjson

from .config import BARE, DEADLINE_BATCHES, ENDPOINT_OF, NULL, OURS, OURS_2W, PEER, SAME_TEXT, BenchConfig
from .loadgen import encode_requests, run_load
from .log_cost import LevelLog, interval_bytes_per_s, longest_request_line
from .models import minilm_dir
from .plot import plot
from .processes import HOST, free_port, pin, server_processes, start_server
from .report import compile_summary, evaluate, first_client_summary, generator_ceiling, table
from .startup import measure_compile_startup, measure_startup
from .systems import REPO_ROOT, cpu_layout, launch, request_bodies, thread_env, torch_threads
from .texts import make_texts
from .tracing_cost import measure_tracing_cost
from .tracing_cost import summary as tracing_summary

_VERSIONS = (
    "torch",
    "transformers",
    "tokenizers",
    "fastapi",
    "starlette",
    "pydantic",
    "uvicorn",
    "uvloop",
    "httptools",
    "orjson",
    "numpy",
)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def setup_info(cfg: BenchConfig, model_dir: str) -> dict:
    versions = {}
    for name in _VERSIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "mode": cfg.mode,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "device": cfg.device,
        "precision": cfg.precision,
        "compile": cfg.compile,
        "torch_threads": torch_threads(cfg),
        "model_label": cfg.model_label,
        "max_sequence_length": cfg.max_sequence_length,
        "model_process_env": thread_env(cfg),
        "model_dir": model_dir,
        "our_server": {
            "MAX_BATCH_SIZE": cfg.max_batch_size,
            "MAX_BATCH_WAIT_MS": cfg.max_batch_wait_ms,
            "WORKERS": cfg.workers,
            "RESULT_CACHE_SIZE": 0,
            "LOG_LEVEL": "info",
            "REQUEST_TIMEOUT_S": _server_default("request_timeout_s"),
        },
        "load": {
            "concurrency": list(cfg.concurrency),
            "warmup_s": cfg.warmup_s,
            "duration_s": cfg.duration_s,
            "texts": cfg.texts,
            "client": "closed loop, HTTP/1.1 keep-alive, httptools on uvloop, one process",
        },
        "systems": {
            "raw-model": "transformers forward in-process, padded to the batch's longest text",
            "ours": "python -m inference_server, 1 HTTP worker + the model process",
            "ours-2w": "python -m inference_server, 2 HTTP workers + the model process",
            "ours-openai": "the same process as ours, POST /v1/embeddings with the same text",
            "ours-oip": "the same process as ours, POST /v2/models/bench/infer, the text as BYTES",
            "litserve": "LitServe (open-source dynamic batching): API server + inference worker",
            "baseline": "FastAPI + pydantic, sync def endpoint (thread pool), one forward per request",
            "bare-asgi": "raw ASGI callable, constant response, same uvicorn/httptools/uvloop",
        },
        "texts": "the same text in every request" if cfg.same_text else f"{cfg.texts} varied texts",
        "cpus": _layout_info(cfg),
        "load_average_at_start": os.getloadavg(),
    }


def _layout_info(cfg: BenchConfig) -> dict:
    model, rest = cpu_layout(cfg)
    if model is None or rest is None:  # both, or neither
        return {"pinned": False}
    return {"pinned": True, "model_path": sorted(model), "http_and_load_generator": sorted(rest)}


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def measure_raw_model(cfg: BenchConfig, model_dir: str) -> dict:
    command = [
        sys.executable,
        "-m",
        "bench.raw_model",
        "--model",
        model_dir,
        "--duration",
        str(cfg.raw_duration_s),
        "--batch-sizes",
        ",".join(map(str, cfg.raw_batch_sizes)),
        "--texts",
        str(cfg.texts),
        "--device",
        cfg.device,
        "--dtype",
        "fp16" if cfg.precision == "fp16" else "fp32",
        "--max-length",
        str(cfg.max_sequence_length),
        *(["--compile"] if cfg.compile else []),
        *(["--same-text"] if cfg.same_text else []),
    ]
    env = {**os.environ, **thread_env(cfg)}
    model_cpus, _ = cpu_layout(cfg)
    done = subprocess.run(
        command,
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=(lambda: os.sched_setaffinity(0, model_cpus)) if model_cpus else None,
    )
    if done.returncode != 0:
        raise RuntimeError(f"raw model measurement failed:\n{done.stderr[-3000:]}")
    return orjson.loads(done.stdout.strip().splitlines()[-1])


def truncation(cfg: BenchConfig, raw: dict) -> str | None:
    """Why the run cannot go on when the raw model saw texts longer than every model path keeps, else None."""
    longest = raw["longest_text_tokens"]
    if longest <= cfg.max_sequence_length:
        return None
    return (
        f"the texts run to {longest} tokens, more than the {cfg.max_sequence_length} every model path keeps "
        f"(max_sequence_length): they would be truncated; pass --max-sequence-length {longest} or more"
    )


def _pin_model_process(processes: dict[int, str], cpus: set[int]) -> None:
    """Our server's model process (of server_processes) goes onto the model cores."""
    for pid, role in processes.items():
        if role == "model":
            pin(pid, cpus)


def _server_default(name: str) -> float:
    """One of our server's settings that the bench leaves at its default."""
    from inference_server.settings import Settings

    default = next(f.default for f in dataclasses.fields(Settings) if f.name == name)
    assert isinstance(default, float), name  # the settings the bench reads are floats with a default
    return default


def _default_metrics_interval_s() -> float:
    """Our server's METRICS_INTERVAL_S, which the bench leaves at its default."""
    return _server_default("metrics_interval_s")


def overload_deadline_ms(cfg: BenchConfig, raw: dict | None) -> float:
    """The overload requests' deadline: cfg's, or DEADLINE_BATCHES x the raw model's best batch's time."""
    if cfg.overload_deadline_ms is not None:
        return cfg.overload_deadline_ms
    if not raw:
        return 1000.0
    batch_ms = 1000 * raw["best_batch_size"] / raw["best_items_per_s"]
    return max(500.0, round(DEADLINE_BATCHES * batch_ms, -1))


def measure_rejection_cost(
    server: str, port: int, pid: int, cfg: BenchConfig, processes: dict[int, str] | None
) -> dict:
    """CPU per answer with cfg.reject_clients clients: our server shedding every request (a deadline of 0 ms can
    never be met), the bare app answering its constant; both alone on the model core."""
    requests = encode_requests(
        HOST, port, "/predict", [orjson.dumps({"text": SAME_TEXT})], {"X-Request-Timeout-Ms": "0"}
    )
    result = run_load(
        HOST,
        port,
        requests,
        cfg.reject_clients,
        cfg.warmup_s,
        cfg.duration_s,
        pid,
        min_per_client=0,
        processes=processes,
    )
    answers = result.answers
    server_cpu_s = result.server_cpu_s
    assert server_cpu_s is not None  # run_load had the server's pid
    return {
        "system": server,
        "clients": cfg.reject_clients,
        "statuses": result.statuses,
        "answers_per_s": answers / result.duration_s,
        "server_cores": server_cpu_s / result.duration_s,
        "cpu_us_per_answer": 1e6 * server_cpu_s / answers if answers else None,
        "cores_by_process": result.cores_by_process,
    }


def measure_server(
    server: str, model: str, model_dir: str, cfg: BenchConfig, texts: list[str], scratch: Path
) -> tuple[list[dict], dict | None, dict | None]:
    """The concurrency sweep of every endpoint this process serves in cfg.systems (level by level, each endpoint
    in turn, so drift on a shared machine hits them alike), then (ours and the peer with the real model) the
    overload scenario, and (ours with the null model, the bare app) the cost of an answer that says no."""
    port = free_port()
    spec = NULL if model == NULL else model_dir
    how = launch(server, spec, port, cfg, scratch)
    name = f"{server}-{model}"
    process = start_server(name, how.command, how.env, port, cfg.output_dir / "logs", how.cpus)
    runs, overload, cost, levels = [], None, None, []
    try:
        started = time.monotonic()
        process.wait_ready(how.ready_path, cfg.ready_timeout_s)
        processes = server_processes(process.log_path) if server in (OURS, OURS_2W) else None
        if how.model_cpus and processes is not None:  # only ours has a model process: processes is its roles
            _pin_model_process(processes, how.model_cpus)
        _log(f"{name}: ready in {time.monotonic() - started:.1f} s")
        systems = [s for s, m in cfg.systems if m == model and ENDPOINT_OF.get(s, s) == server]
        endpoints = {system: encode_requests(HOST, port, *request_bodies(system, texts)) for system in systems}
        # Every overload request carries its deadline (only our server reads it); goodput counts 200s within it.
        requests = encode_requests(
            HOST, port, *request_bodies(server, texts), {"X-Request-Timeout-Ms": f"{cfg.overload_deadline_ms:g}"}
        )
        for concurrency in cfg.concurrency:
            for system, system_requests in endpoints.items():
                log_before, level_started = process.log_path.stat().st_size, time.monotonic()
                result = run_load(
                    HOST,
                    port,
                    system_requests,
                    concurrency,
                    cfg.warmup_s,
                    cfg.duration_s,
                    process.pid,
                    processes=processes,
                )
                # The log over warm-up and window, per successful request of the window (an upper bound: the
                # warm-up's requests are not counted); see log_cost for the interval documents.
                levels.append(
                    LevelLog(
                        log_before, process.log_path.stat().st_size, time.monotonic() - level_started, result.requests
                    )
                )
                runs.append({"system": system, "model": model, **result.as_dict()})
                _log(
                    f"{system}-{model}: {concurrency:>3} clients {result.throughput_rps:9.1f} req/s  "
                    f"p50 {result.p50_ms:7.2f}  p95 {result.p95_ms:7.2f}  p99 {result.p99_ms:7.2f} ms  "
                    f"errors {result.errors}"
                )
        # The bare app under the same offered load: the HTTP stack's floor for any answer, a 503 included.
        overloaded = (server in (OURS, PEER) and model != NULL) or server == BARE
        if server in systems and overloaded and cfg.overload_clients:
            result = run_load(
                HOST,
                port,
                requests,
                cfg.overload_clients,
                cfg.warmup_s,
                cfg.overload_duration_s,
                process.pid,
                min_per_client=0,
                processes=processes,
                deadline_ms=cfg.overload_deadline_ms,
            )
            overload = {"system": server, "model": model, **result.as_dict(), "goodput_rps": result.goodput_rps}
            _log(
                f"{name}: overload, {cfg.overload_clients} clients: goodput {result.goodput_rps:.1f} req/s within "
                f"{cfg.overload_deadline_ms:g} ms (p99 {result.within_deadline_p99_ms} ms), answers "
                f"{result.statuses}, 503 median {result.shed_p50_ms} ms"
            )
        if cfg.reject_clients and model == NULL and server in (OURS, BARE) and server in systems:
            cost = measure_rejection_cost(server, port, process.pid, cfg, processes)
            each = cost["cpu_us_per_answer"]  # None when no answer came within the window (a busy machine)
            _log(
                f"{name}: {cost['answers_per_s']:.0f} answers/s {cost['statuses']}, "
                + (f"{each:.1f} us CPU each" if each is not None else "no answer in the window: no CPU per answer")
            )
    finally:
        process.stop()
    # After the stop: every process has written its last document.
    interval_rate = interval_bytes_per_s(process.log_path, _default_metrics_interval_s())
    for run, level in zip(runs, levels, strict=False):
        run["log_bytes_per_request"] = level.bytes_per_request(process.log_path, interval_rate)
        # What a level pays whatever its throughput (the interval documents, the rate-limited error and slow lines),
        # so a reader can tell the per-request part from the per-second part on a slow machine.
        run["log_window_s"] = level.seconds
        run["log_interval_bytes_per_s"] = interval_rate
        run["log_longest_line"] = longest_request_line(process.log_path, level.start, level.end)
    return runs, overload, cost


def run_benchmark(cfg: BenchConfig) -> dict:
    model_dir = cfg.model_dir or str(minilm_dir())
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    results: dict = {"setup": setup_info(cfg, model_dir), "raw_model": None, "runs": []}
    if any(model != NULL for _, model in cfg.systems):
        _log(f"raw model: batch sizes {', '.join(map(str, cfg.raw_batch_sizes))}")
        results["raw_model"] = measure_raw_model(cfg, model_dir)
        results["setup"]["torch_threads_seen"] = results["raw_model"]["torch_threads"]
        if problem := truncation(cfg, results["raw_model"]):
            raise SystemExit(problem)
    if cfg.startup_repeats and any(model != NULL for _, model in cfg.systems):
        _log(f"start-up: ours and the bare script, {cfg.startup_repeats} each, alternating")
        results["startup"] = measure_startup(cfg, model_dir, cfg.startup_repeats)
        _log(
            f"start-up: ours {results['startup']['ours_median_s']:.1f} s, bare "
            f"{results['startup']['bare_median_s']:.1f} s: {results['startup']['ratio']:.2f} x"
        )
        if results["startup"]["first_client"]:
            _log(first_client_summary(results["startup"]["first_client"]))
    if cfg.compile_startup and any(model != NULL for _, model in cfg.systems):
        _log("start-up with torch.compile: eager, the first compile start, a start that finds its compile cache")
        compiled = results["compile_startup"] = measure_compile_startup(cfg, model_dir)
        _log(f"start-up with torch.compile: {compile_summary(compiled)}")
    texts = [SAME_TEXT] if cfg.same_text else make_texts(cfg.texts)
    cfg = dataclasses.replace(cfg, overload_deadline_ms=overload_deadline_ms(cfg, results["raw_model"]))
    results["setup"]["overload_deadline_ms"] = cfg.overload_deadline_ms
    results["overload"], results["rejection_cost"] = [], []
    _, generator_cpus = cpu_layout(cfg)
    if generator_cpus:
        os.sched_setaffinity(0, generator_cpus)  # the load generator stays off the model path's cores
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        for server, model in dict.fromkeys((ENDPOINT_OF.get(s, s), m) for s, m in cfg.systems):
            runs, overload, cost = measure_server(server, model, model_dir, cfg, texts, Path(scratch))
            results["runs"] += runs
            if overload:
                results["overload"].append(overload)
            if cost:
                results["rejection_cost"].append(cost)
        if cfg.tracing_rounds and any(server == OURS for server, _ in cfg.systems):
            _log(f"tracing: ours off against traced at the default sampling, {cfg.tracing_rounds} turns each")
            results["tracing_cost"] = measure_tracing_cost(cfg, model_dir, texts, Path(scratch))
    results["generator"] = generator_ceiling(results)
    results["ratios"], results["targets"] = evaluate(results)
    return results


def write_outputs(results: dict, output_dir: Path) -> tuple[Path, Path]:
    json_path, png_path = output_dir / "bench.json", output_dir / "bench.png"
    json_path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    plot(results, png_path)
    return json_path, png_path


def main(cfg: BenchConfig, extra: Callable[[dict], dict] | None = None) -> dict:
    """Run, add extra(results) to the results, write them, print the table."""
    started = time.monotonic()
    results = run_benchmark(cfg)
    results["setup"]["elapsed_s"] = round(time.monotonic() - started, 1)
    results["setup"]["load_average_at_end"] = os.getloadavg()
    if extra:
        results.update(extra(results))
    json_path, png_path = write_outputs(results, cfg.output_dir)
    print(table(results))
    if "tracing_cost" in results:
        print(tracing_summary(results["tracing_cost"]))
    print(f"wrote {json_path} and {png_path} in {results['setup']['elapsed_s']:.0f} s")
    return results
