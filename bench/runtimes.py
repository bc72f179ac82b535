"""python -m bench.runtimes [--short] [--runtimes eager,onnx,int8,compile]: our server on each runtime, side by side.

Each runtime is converted and gated exactly as `python -m inference_server.publish --runtime` does it (the same
accuracy gate against eager), then served by our server (MODEL_RUNTIME) with the same settings, cores and request
list as `python -m bench`, and measured at its concurrency levels; the raw eager model's best batch is measured in the
same run. A runtime that fails its gate is reported and not served. Results: bench/results/runtimes.json.
Issue 23's targets read the highest level: ours >= 1.3 x the raw eager model's best batch with a runtime that passes
its gate (and >= 1.5 x LitServe, whose figure comes from `python -m bench`).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson

from .config import OURS, SAME_TEXT, BenchConfig, parse_args
from .loadgen import encode_requests, run_load
from .models import minilm_dir
from .processes import HOST, free_port, server_processes, start_server
from .run import _pin_model_process, measure_raw_model
from .systems import launch, request_bodies
from .texts import make_texts

RUNTIMES = ("eager", "onnx", "int8", "compile")
TARGET_OVER_RAW = 1.3


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def gate_runtime(model_dir: Path, runtime: str) -> dict:
    from inference_server.handlers.runtimes import RuntimeConversionError
    from inference_server.tools.conversion import convert_and_gate

    started = time.monotonic()
    try:
        gate = convert_and_gate(model_dir, "text-embedding", runtime)
    except RuntimeConversionError as refused:
        return {"passed": False, "refused": str(refused), "seconds": round(time.monotonic() - started, 1)}
    return {**dataclasses.asdict(gate), "seconds": round(time.monotonic() - started, 1)}


def serve(runtime: str, model_dir: Path, cfg, texts: list[str], scratch: Path) -> list[dict]:
    port = free_port()
    how = launch(OURS, str(model_dir), port, cfg, scratch)
    how.env["MODEL_RUNTIME"] = runtime
    process = start_server(f"ours-{runtime}", how.command, how.env, port, cfg.output_dir / "logs", how.cpus)
    runs = []
    try:
        process.wait_ready(how.ready_path, cfg.ready_timeout_s)
        if how.model_cpus:
            _pin_model_process(server_processes(process.log_path), how.model_cpus)
        requests = encode_requests(HOST, port, *request_bodies(OURS, texts))
        for concurrency in cfg.concurrency:
            result = run_load(HOST, port, requests, concurrency, cfg.warmup_s, cfg.duration_s, process.pid)
            runs.append({"runtime": runtime, **result.as_dict()})
            _log(
                f"ours-{runtime}: {concurrency:>3} clients {result.throughput_rps:9.1f} req/s  "
                f"p95 {result.p95_ms:7.2f} ms  errors {result.errors}"
            )
    finally:
        process.stop()
    return runs


def table(results: dict) -> str:
    raw = results["raw_model"]["best_items_per_s"]
    top = max(results["config"]["concurrency"])
    eager = next(
        (r["throughput_rps"] for r in results["runs"] if r["runtime"] == "eager" and r["concurrency"] == top), None
    )
    lines = [
        f"raw eager model's best batch: {raw:.1f} texts/s",
        "",
        f"{'runtime':<8} {'gate':<34} {f'req/s @{top}':>11} {'p95 ms':>8} {'x raw':>6} {'x eager':>8}",
    ]
    for runtime, gate in results["gates"].items():
        if not gate["passed"]:
            lines.append(f"{runtime:<8} {'refused: ' + gate.get('refused', '')[:60]}")
            continue
        gate_text = (
            f"{gate['metric'][:16]} {gate['value']:.5f} >= {gate['threshold']}" if runtime != "eager" else "reference"
        )
        run = next((r for r in results["runs"] if r["runtime"] == runtime and r["concurrency"] == top), None)
        if run is None:
            lines.append(f"{runtime:<8} {gate_text:<34} (not served)")
            continue
        rps = run["throughput_rps"]
        lines.append(
            f"{runtime:<8} {gate_text:<34} {rps:>11.1f} {run['p95_ms']:>8.1f} {rps / raw:>6.2f} "
            f"{rps / eager if eager else float('nan'):>8.2f}"
        )
    served = [
        r["throughput_rps"] / raw
        for r in results["runs"]
        if r["concurrency"] == top and results["gates"][r["runtime"]]["passed"]
    ]
    best = max(served, default=None)
    verdict = "met" if best is not None and best >= TARGET_OVER_RAW else "MISSED"
    best_text = "none served" if best is None else f"{best:.2f}"
    lines += [
        "",
        f"  [{verdict:>6}] ours at {top} clients >= {TARGET_OVER_RAW} x the raw eager model's best batch, "
        f"with a runtime that passes its gate: {best_text}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    assert __doc__ is not None  # the module has a docstring (not run under -OO)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtimes", default=",".join(RUNTIMES), help="comma-separated, of " + ", ".join(RUNTIMES))
    parser.add_argument("--short", action="store_true", help="a smoke run: one level, short windows")
    args = parser.parse_args(argv)
    runtimes = [r for r in args.runtimes.split(",") if r]
    unknown = set(runtimes) - set(RUNTIMES)
    if unknown:
        parser.error(f"unknown runtimes {sorted(unknown)}; choose from {', '.join(RUNTIMES)}")
    cfg = parse_args(["--short"] if args.short else [])
    # The full run's sequence length in both: a runtime's gain depends on the shapes it runs.
    cfg = dataclasses.replace(
        cfg,
        concurrency=cfg.concurrency[-1:] if args.short else (1, 64),
        max_sequence_length=BenchConfig().max_sequence_length,
    )
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    texts = [SAME_TEXT] if cfg.same_text else make_texts(cfg.texts)
    with tempfile.TemporaryDirectory(prefix="bench-runtimes-") as scratch:
        scratch_dir = Path(scratch)
        model_dir = scratch_dir / "model"
        shutil.copytree(minilm_dir(), model_dir)
        raw = measure_raw_model(cfg, str(model_dir))
        _log(f"raw eager model: best {raw['best_items_per_s']:.1f} texts/s at batch {raw['best_batch_size']}")
        gates, runs = {}, []
        for runtime in runtimes:
            gates[runtime] = gate_runtime(model_dir, runtime)
            _log(f"{runtime}: gate {gates[runtime]}")
            if gates[runtime]["passed"]:
                runs += serve(runtime, model_dir, cfg, texts, scratch_dir)
    results = {
        "config": {"concurrency": list(cfg.concurrency), "duration_s": cfg.duration_s, "texts": cfg.texts},
        "raw_model": raw,
        "gates": gates,
        "runs": runs,
    }
    path = cfg.output_dir / "runtimes.json"
    path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(table(results))
    print(f"results: {path}")
    return results


if __name__ == "__main__":
    main()
