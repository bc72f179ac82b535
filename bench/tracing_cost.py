"""What request spans cost on the request path (issue 45): our server with tracing off against the same server
exporting spans at the default sampling (TRACE_SAMPLE_RATIO's default, parent-based; the requests carry no trace
header) to an OTLP/HTTP sink (otlp_sink.py), same inputs, same run. Both servers are up at once, on the same cores,
and each level alternates between them, off-on then on-off, `tracing_rounds` times: drift on a shared machine hits
both alike. Each side's throughput and p95 is the median of its turns; the goal is both within 3 %.

    python -m bench.tracing_cost [--systems ours:minilm,ours:null] [--tracing-rounds 3] [--tracing-concurrency 1,64]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

from .config import NULL, OURS, BenchConfig
from .loadgen import LoadResult, encode_requests, run_load
from .processes import HOST, ServerProcess, free_port, pin, server_processes, start_server
from .systems import cpu_layout, launch, request_bodies

OFF, ON = "off", "traced"
GOAL = 0.03  # at most this far apart, throughput and p95


@contextmanager
def otlp_sink() -> Iterator[tuple[str, subprocess.Popen]]:
    """The sink's base URL (OTEL_EXPORTER_OTLP_ENDPOINT) while it runs."""
    process = subprocess.Popen([sys.executable, "-m", "bench.otlp_sink"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://{HOST}:{port}", process
    finally:
        process.kill()
        process.wait()


def _sink_counts(url: str) -> dict[str, int]:
    import http.client

    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=5)
    try:
        conn.request("GET", "/count")
        return orjson.loads(conn.getresponse().read())
    finally:
        conn.close()


def _side(turns: list[LoadResult]) -> dict:
    return {"throughput_rps": statistics.median(t.throughput_rps for t in turns),
            "p95_ms": statistics.median(t.p95_ms for t in turns),
            "p50_ms": statistics.median(t.p50_ms for t in turns),
            "errors": sum(t.errors for t in turns), "requests": sum(t.requests for t in turns),
            "turns": [{"throughput_rps": t.throughput_rps, "p95_ms": t.p95_ms} for t in turns]}


def _start(model: str, model_dir: str, side: str, cfg: BenchConfig, scratch: Path, sink_url: str) -> tuple:
    port = free_port()
    how = launch(OURS, NULL if model == NULL else model_dir, port, cfg, scratch)
    env = {**how.env, "OTEL_EXPORTER_OTLP_ENDPOINT": sink_url} if side == ON else how.env
    process = start_server(f"ours-{model}-tracing-{side}", how.command, env, port, cfg.output_dir / "logs", how.cpus)
    return process, how


def _ready(process: ServerProcess, how, cfg: BenchConfig) -> dict[int, str]:
    process.wait_ready(how.ready_path, cfg.ready_timeout_s)
    processes = server_processes(process.log_path)
    if how.model_cpus:
        for pid, role in processes.items():
            if role == "model":
                pin(pid, how.model_cpus)
    return processes


def compare(model: str, model_dir: str, cfg: BenchConfig, texts: list[str], scratch: Path, sink_url: str) -> dict:
    """Off against traced for one model, every level of cfg.tracing_concurrency."""
    started = {side: _start(model, model_dir, side, cfg, scratch, sink_url) for side in (OFF, ON)}
    levels = []
    try:
        processes = {side: _ready(process, how, cfg) for side, (process, how) in started.items()}
        requests = {side: encode_requests(HOST, process.port, *request_bodies(OURS, texts))
                    for side, (process, _) in started.items()}
        for concurrency in cfg.tracing_concurrency:
            turns: dict[str, list[LoadResult]] = {OFF: [], ON: []}
            for round_ in range(cfg.tracing_rounds):
                for side in (OFF, ON) if round_ % 2 == 0 else (ON, OFF):
                    process = started[side][0]
                    turns[side].append(run_load(HOST, process.port, requests[side], concurrency, cfg.warmup_s,
                                                cfg.duration_s, process.pid, processes=processes[side]))
            off, on = _side(turns[OFF]), _side(turns[ON])
            level = {"model": model, "concurrency": concurrency, OFF: off, ON: on,
                     "throughput_ratio": on["throughput_rps"] / off["throughput_rps"],
                     "p95_ratio": on["p95_ms"] / off["p95_ms"]}
            levels.append(level)
            print(level_line(level), file=sys.stderr, flush=True)
    finally:
        for process, _ in started.values():
            process.stop()  # SIGTERM: the traced worker sends its last spans as it exits
    return {"model": model, "levels": levels}


def measure_tracing_cost(cfg: BenchConfig, model_dir: str, texts: list[str], scratch: Path) -> dict:
    """Each of our models in cfg.systems, off against traced; the spans the sink received."""
    models = [model for system, model in cfg.systems if system == OURS]
    with otlp_sink() as (url, _):
        compared = [compare(model, model_dir, cfg, texts, scratch, url) for model in models]
        counts = _sink_counts(url)
    within = all(abs(level["throughput_ratio"] - 1) <= GOAL and abs(level["p95_ratio"] - 1) <= GOAL
                 for result in compared for level in result["levels"])
    return {"rounds": cfg.tracing_rounds, "goal": GOAL, "sampling": "TRACE_SAMPLE_RATIO default, parent-based",
            "models": compared, "spans_received": counts["spans"], "traces_received": counts["traces"],
            "within_goal": within}


def level_line(level: dict) -> str:
    off, on = level[OFF], level[ON]
    return (f"tracing {level['model']} @{level['concurrency']:>3} clients: off {off['throughput_rps']:8.1f} req/s "
            f"p95 {off['p95_ms']:7.2f} ms | traced {on['throughput_rps']:8.1f} req/s p95 {on['p95_ms']:7.2f} ms | "
            f"throughput {level['throughput_ratio'] - 1:+.1%}, p95 {level['p95_ratio'] - 1:+.1%}")


def summary(result: dict) -> str:
    lines = [level_line(level) for model in result["models"] for level in model["levels"]]
    lines.append(f"tracing: {result['traces_received']} traced requests ({result['spans_received']} spans) reached the "
                 f"sink; goal within {result['goal']:.0%}: {'met' if result['within_goal'] else 'missed'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    import tempfile

    from .config import SAME_TEXT, parse_args
    from .models import minilm_dir
    from .texts import make_texts

    cfg = parse_args(argv)
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    _, generator_cpus = cpu_layout(cfg)
    if generator_cpus:
        os.sched_setaffinity(0, generator_cpus)  # the load generator (and the sink) off the model path's cores
    model_dir = cfg.model_dir or str(minilm_dir())
    texts = [SAME_TEXT] if cfg.same_text else make_texts(cfg.texts)
    with tempfile.TemporaryDirectory(prefix="bench-tracing-") as scratch:
        result = measure_tracing_cost(cfg, model_dir, texts, Path(scratch))
    (cfg.output_dir / "tracing_cost.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(summary(result))
    return result


if __name__ == "__main__":
    main()
