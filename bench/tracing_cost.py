"""What request spans cost on the request path (issue 45): our server with tracing off against the same server
exporting spans at the default sampling (TRACE_SAMPLE_RATIO's default, parent-based; the requests carry no trace
header) to an OTLP/HTTP sink (otlp_sink.py), same inputs, same run. Each round starts a fresh pair of servers, up at
once on the same cores, and runs each level on both, off-on in even rounds and on-off in odd ones: drift on a shared
machine hits both sides of a round alike, and no one process's own speed rides through every turn. A level's ratio
is the median of its round pairs' ratios (_ratio; each side's throughput and p95 shown are the medians of its turns);
the goal is both within 3 %.

    python -m bench.tracing_cost [--systems ours:minilm,ours:null] [--tracing-rounds 3] [--tracing-concurrency 1,64]
"""

from __future__ import annotations

import math
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


def _cpu_us(turn: LoadResult) -> float:
    """The server's CPU (all its processes) per request, µs."""
    return (turn.server_cpu_s or 0.0) / max(turn.requests, 1) * 1e6


def _side(turns: list[LoadResult]) -> dict:
    return {
        "throughput_rps": statistics.median(t.throughput_rps for t in turns),
        "p95_ms": statistics.median(t.p95_ms for t in turns),
        "p50_ms": statistics.median(t.p50_ms for t in turns),
        "server_cpu_us_per_request": statistics.median(_cpu_us(t) for t in turns),
        "errors": sum(t.errors for t in turns),
        "requests": sum(t.requests for t in turns),
        "turns": [
            {"throughput_rps": t.throughput_rps, "p95_ms": t.p95_ms, "server_cpu_us_per_request": _cpu_us(t)}
            for t in turns
        ],
    }


def _start(model: str, model_dir: str, side: str, cfg: BenchConfig, scratch: Path, sink_url: str, seed: int) -> tuple:
    port = free_port()
    how = launch(OURS, NULL if model == NULL else model_dir, port, cfg, scratch)
    env = {**how.env, "PYTHONHASHSEED": str(seed)}
    if side == ON:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = sink_url
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


def _round(
    model: str, model_dir: str, cfg: BenchConfig, texts: list[str], scratch: Path, sink_url: str, round_: int
) -> dict[int, dict[str, LoadResult]]:
    """One round: a fresh pair of servers (started off-on, or on-off in odd rounds, with the same hash seed), each
    level run on both in that order; {concurrency: {side: its turn}}."""
    order = (OFF, ON) if round_ % 2 == 0 else (ON, OFF)
    started = {side: _start(model, model_dir, side, cfg, scratch, sink_url, round_) for side in order}
    turns: dict[int, dict[str, LoadResult]] = {}
    try:
        processes = {side: _ready(process, how, cfg) for side, (process, how) in started.items()}
        requests = {
            side: encode_requests(HOST, process.port, *request_bodies(OURS, texts))
            for side, (process, _) in started.items()
        }
        for concurrency in cfg.tracing_concurrency:
            turns[concurrency] = {}
            for side in order:
                process = started[side][0]
                turns[concurrency][side] = run_load(
                    HOST,
                    process.port,
                    requests[side],
                    concurrency,
                    cfg.warmup_s,
                    cfg.duration_s,
                    process.pid,
                    processes=processes[side],
                )
    finally:
        for process, _ in started.values():
            process.stop()  # SIGTERM: the traced worker sends its last spans as it exits
    return turns


def _ratio(rounds: list[float]) -> float:
    """The rounds' ratios (on / off, in round order) as one: each even round (off first) with the odd one after it
    (on first) as their geometric mean, which cancels what running first does for a process (an A/A comparison's
    first-run side won all six of its rounds, by 3-5 %), then the median of those."""
    paired = [math.sqrt(first * second) for first, second in zip(rounds[::2], rounds[1::2], strict=False)]
    return statistics.median(paired + rounds[len(paired) * 2 :])


def compare(model: str, model_dir: str, cfg: BenchConfig, texts: list[str], scratch: Path, sink_url: str) -> dict:
    """Off against traced for one model, every level of cfg.tracing_concurrency, over cfg.tracing_rounds rounds.
    Each round starts its own pair of servers: two processes of the same server run a few per cent apart by
    themselves (their memory layout; an A/A pair, tracing disabled on both, measured -4.3 % to +0.6 % on the null
    model at 64 clients), a bias one pair would carry into every turn."""
    rounds = [_round(model, model_dir, cfg, texts, scratch, sink_url, round_) for round_ in range(cfg.tracing_rounds)]
    levels = []
    for concurrency in cfg.tracing_concurrency:
        pairs = [(turns[concurrency][OFF], turns[concurrency][ON]) for turns in rounds]
        level = {
            "model": model,
            "concurrency": concurrency,
            OFF: _side([off for off, _ in pairs]),
            ON: _side([on for _, on in pairs]),
            "throughput_ratio": _ratio([on.throughput_rps / off.throughput_rps for off, on in pairs]),
            "p95_ratio": _ratio([on.p95_ms / off.p95_ms for off, on in pairs]),
            "server_cpu_ratio": _ratio([_cpu_us(on) / _cpu_us(off) for off, on in pairs]),
        }
        levels.append(level)
        print(level_line(level), file=sys.stderr, flush=True)
    return {"model": model, "levels": levels}


def measure_tracing_cost(cfg: BenchConfig, model_dir: str, texts: list[str], scratch: Path) -> dict:
    """Each of our models in cfg.systems, off against traced; the spans the sink received."""
    models = [model for system, model in cfg.systems if system == OURS]
    with otlp_sink() as (url, _):
        compared = [compare(model, model_dir, cfg, texts, scratch, url) for model in models]
        counts = _sink_counts(url)
    within = all(
        abs(level["throughput_ratio"] - 1) <= GOAL and abs(level["p95_ratio"] - 1) <= GOAL
        for result in compared
        for level in result["levels"]
    )
    return {
        "rounds": cfg.tracing_rounds,
        "goal": GOAL,
        "sampling": "TRACE_SAMPLE_RATIO default, parent-based",
        "models": compared,
        "spans_received": counts["spans"],
        "traces_received": counts["traces"],
        "within_goal": within,
    }


def level_line(level: dict) -> str:
    off, on = level[OFF], level[ON]
    return (
        f"tracing {level['model']} @{level['concurrency']:>3} clients: off {off['throughput_rps']:8.1f} req/s "
        f"p95 {off['p95_ms']:7.2f} ms | traced {on['throughput_rps']:8.1f} req/s p95 {on['p95_ms']:7.2f} ms | "
        f"throughput {level['throughput_ratio'] - 1:+.1%}, p95 {level['p95_ratio'] - 1:+.1%}, server CPU a request "
        f"{level['server_cpu_ratio'] - 1:+.1%}"
    )


def summary(result: dict) -> str:
    lines = [level_line(level) for model in result["models"] for level in model["levels"]]
    lines.append(
        f"tracing: {result['traces_received']} traced requests ({result['spans_received']} spans) reached the "
        f"sink; goal within {result['goal']:.0%}: {'met' if result['within_goal'] else 'missed'}"
    )
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
