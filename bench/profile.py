"""Where a server spends its time under load: `python -m bench.profile ours:null --concurrency 64 --seconds 10`.

Starts the system as the benchmark does, drives it with the closed-loop generator and samples it meanwhile with
py-spy (pip install py-spy==0.4.3). Writes the collapsed stacks (flamegraph.pl or speedscope read them) to
bench/results/profile-<system>-<model>.txt and prints the hottest functions: self time (the frame on top) and
total time (anywhere on the stack), as shares of all samples of busy threads.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

import orjson

from .config import RESULTS_DIR, SAME_TEXT, BenchConfig, _systems
from .loadgen import encode_requests, run_load
from .models import NULL, minilm_dir
from .processes import HOST, free_port, server_processes, start_server
from .run import _pin_model_process
from .systems import launch
from .texts import make_texts


def hottest(collapsed: str, top: int = 25) -> tuple[int, list[tuple[str, float, float]]]:
    """(samples, [(function, self share, total share)]) from py-spy's raw (collapsed) output."""
    own, anywhere, samples = Counter(), Counter(), 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n, frames = int(count), stack.split(";")
        samples += n
        own[frames[-1]] += n
        for frame in set(frames):
            anywhere[frame] += n
    rows = [(frame, own[frame] / samples, anywhere[frame] / samples) for frame, _ in own.most_common(top)]
    return samples, rows


def _component(frame: str) -> str:
    """The package a frame's code belongs to ('fastapi', 'inference_server/batcher.py', 'asyncio', ...)."""
    location = frame.rpartition("(")[2].rstrip(")")
    path = location.rpartition(":")[0] or location
    if path.startswith("inference_server/"):
        return path
    if path == "asyncio/runners.py":
        return "event loop (uvloop C code, syscalls)"
    head = path.split("/", 1)[0]
    return head.removesuffix(".py") if head else "other"


def by_component(collapsed: str) -> list[tuple[str, float]]:
    """Self time per component, as shares of all samples, largest first."""
    own, samples = Counter(), 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            samples += int(count)
            own[_component(stack.split(";")[-1])] += int(count)
    return [(name, n / samples) for name, n in own.most_common()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("system", type=_systems, help="one server:model pair, e.g. ours:null or ours:minilm")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--gil", action="store_true", help="sample only the thread holding the GIL")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    ((server, model),) = args.system
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).is_file():
        parser.exit(2, "bench.profile needs py-spy: pip install py-spy==0.4.3\n")
    cfg = BenchConfig()
    out = RESULTS_DIR / f"profile-{server}-{model}{'-gil' if args.gil else ''}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as scratch:
        how = launch(server, NULL if model == NULL else str(minilm_dir()), port, cfg, Path(scratch))
        process = start_server(f"profile-{server}-{model}", how.command, how.env, port, RESULTS_DIR / "logs", how.cpus)
        try:
            process.wait_ready(how.ready_path, cfg.ready_timeout_s)
            if how.model_cpus:
                _pin_model_process(server_processes(process.log_path), how.model_cpus)
            texts = [SAME_TEXT] if cfg.same_text else make_texts()
            requests = encode_requests(HOST, port, "/predict", [orjson.dumps({"text": t}) for t in texts])
            record = [
                py_spy,
                "record",
                "--pid",
                str(process.pid),
                "--duration",
                str(int(args.seconds)),
                "--rate",
                str(args.rate),
                "--format",
                "raw",
                "--output",
                str(out),
                "--nonblocking",
                "--subprocesses",  # our server's model process and HTTP workers
                *(["--gil"] if args.gil else []),
            ]
            spy = threading.Thread(target=subprocess.run, args=(record,), kwargs=dict(capture_output=True, check=True))
            result_box = []
            loader = threading.Thread(
                target=lambda: result_box.append(
                    run_load(HOST, port, requests, args.concurrency, 1.0, args.seconds + 1.0, process.pid)
                )
            )
            loader.start()
            spy.start()
            spy.join()
            loader.join()
        finally:
            process.stop()
    result = result_box[0]
    samples, rows = hottest(out.read_text(), args.top)
    print(
        f"{server}:{model} at {args.concurrency} clients: {result.throughput_rps:.0f} req/s, "
        f"p95 {result.p95_ms:.1f} ms, server CPU {result.server_cpu_s / result.duration_s:.2f} cores; "
        f"{samples} samples{' (GIL holder only)' if args.gil else ''} in {out}"
    )
    print(f"{'self':>6} {'total':>6}  function")
    for frame, own, total in rows:
        print(f"{own:6.1%} {total:6.1%}  {frame}")
    print("self time by component:")
    for name, share in by_component(out.read_text()):
        if share >= 0.005:
            print(f"{share:6.1%}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
