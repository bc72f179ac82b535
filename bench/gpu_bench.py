"""The same comparison on a GPU: `python -m bench.gpu_bench [--short]` on a machine with CUDA.

The model is DistilBERT-size (6 layers, hidden 768, 12 heads, 30522-token vocabulary) built from a
DistilBertConfig with random weights and a local WordPiece vocabulary, saved as safetensors: nothing is
downloaded. The raw model, our server and the baseline run in FP16; the raw model and our server also use
torch.compile (our server with CUDA graphs). Reports each system's requests/s at p95 < 50 ms. Without CUDA it
says so and exits 0 having measured nothing. Results go to bench/results/gpu/.

`--server`: our server only (its default worker count for the machine's CPUs, or `--workers N`; FP16,
torch.compile with CUDA graphs), driven over HTTP at rising concurrency, with the raw model's ceiling; reports
req/s at p95 < 50 ms.

`--runtimes eager,compile,onnx,int8` (the default is all four): our server on each runtime, converted and gated as
`python -m inference_server.publish --runtime` does it (the same accuracy gate), beside the raw FP16 model's best
batch, in one run: eager is FP16, compile is torch.compile with CUDA graphs, onnx runs on TensorRT's execution
provider (FP16) then CUDA's where the installed onnxruntime has them (onnxruntime-gpu; the CPU build has neither,
and the run says so rather than measuring the CPU), int8 is ONNX Runtime's dynamic INT8 (a CPU runtime: on a GPU
it is reported, not measured). `--short` fits the whole run in about 10 minutes. Results:
bench/results/gpu/runtimes.json and a table.

`--compile-startup`: our server with MODEL_RUNTIME=compile on the GPU (FP16, CUDA graphs), as
`python -m bench.startup --compile` runs it on the CPU: an eager start, the version's first compile start (ready on
the eager forward, every shape compiled after, the compile cache saved), then a start that restores that cache; when
each was ready and when every shape had compiled. Results: bench/results/gpu/compile_startup.json and a line.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import string
import sys
import tempfile
from pathlib import Path

from .config import OURS, RESULTS_DIR, SAME_TEXT, BenchConfig, all_systems
from .report import series
from .texts import make_texts

LABEL = "distilbert"
SLO_P95_MS = 50.0
SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def build_distilbert(
    dest: str | Path,
    *,
    dim: int = 768,
    layers: int = 6,
    heads: int = 12,
    hidden_dim: int = 3072,
    vocab_size: int = 30522,
    seed: int = 0,
) -> Path:
    """Save a randomly initialised DistilBERT and its WordPiece tokenizer to dest (config.json,
    model.safetensors, tokenizer files). The vocabulary holds the benchmark texts' words, so they tokenise to
    about one token per word, and is padded with unused tokens to vocab_size."""
    import torch
    from transformers import DistilBertConfig, DistilBertModel, DistilBertTokenizerFast

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    words = sorted({w for text in make_texts() for w in re.findall(r"[a-z0-9]+", text.lower())})
    pieces = [
        *string.ascii_lowercase,
        *string.digits,
        *string.punctuation,
        *(f"##{c}" for c in string.ascii_lowercase + string.digits),
    ]
    vocab = list(dict.fromkeys([*SPECIAL, *words, *pieces]))
    vocab += [f"[unused{i}]" for i in range(vocab_size - len(vocab))]
    (dest / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = DistilBertTokenizerFast(vocab=str(dest / "vocab.txt"), do_lower_case=True, model_max_length=512)
    tokenizer.save_pretrained(dest)
    config = DistilBertConfig(
        vocab_size=len(vocab),
        dim=dim,
        n_layers=layers,
        n_heads=heads,
        hidden_dim=hidden_dim,
        max_position_embeddings=512,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    DistilBertModel(config).save_pretrained(dest, safe_serialization=True)
    return dest


def best_within_slo(results: dict, slo_ms: float = SLO_P95_MS) -> dict[str, dict | None]:
    """Per server, the highest-throughput load level whose p95 stayed under slo_ms."""
    best = {}
    measured = {(r["system"], r["model"]) for r in results["runs"]}
    for server, model in [s for s in all_systems(LABEL) if s in measured]:
        runs = [r for r in series(results, server, model) if r["p95_ms"] < slo_ms and not r["errors"]]
        best[f"{server}:{model}"] = max(runs, key=lambda r: r["throughput_rps"]) if runs else None
    return best


def gpu_config(
    short: bool, output_dir: Path, model_dir: Path, server_only: bool = False, workers: int = 0
) -> BenchConfig:
    """workers: our server's WORKERS (0: its default for this machine's CPUs; the CPU bench pins 1)."""
    full = dict(
        concurrency=(1, 8, 32, 64, 128, 256),
        warmup_s=3.0,
        duration_s=10.0,
        raw_batch_sizes=(1, 8, 32, 64, 128, 256),
        raw_duration_s=3.0,
    )
    quick = dict(
        concurrency=(1, 32, 128), warmup_s=1.0, duration_s=3.0, raw_batch_sizes=(1, 32, 128), raw_duration_s=1.0
    )
    systems = ((OURS, LABEL),) if server_only else all_systems(LABEL)
    mode = ("gpu-server" if server_only else "gpu") + ("-short" if short else "")
    # On a GPU the model path is the GPU: no core pinning; the overload scenario is the CPU bench's.
    return dataclasses.replace(
        BenchConfig(),
        **(quick if short else full),
        systems=systems,
        model_label=LABEL,
        model_dir=str(model_dir),
        device="cuda",
        precision="fp16",
        compile=True,
        max_batch_size=64,
        workers=workers,
        pin_cpus=False,
        overload_clients=0,
        same_text=True,
        ready_timeout_s=1800.0,
        output_dir=output_dir,
        mode=mode,
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.gpu_bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--short", action="store_true", help="fewer levels, shorter windows")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR / "gpu")
    parser.add_argument("--server", action="store_true", help="our server alone (FP16, torch.compile) over HTTP")
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="our server's HTTP workers (default 0: the server's default, one per CPU less one)",
    )
    parser.add_argument(
        "--runtimes",
        nargs="?",
        const=",".join(GPU_RUNTIMES),
        default=None,
        help=f"our server on each runtime, gated (default when given alone: {','.join(GPU_RUNTIMES)})",
    )
    parser.add_argument(
        "--compile-startup",
        action="store_true",
        help="our server's compile starts (first, with its cache) against an eager start, on the GPU",
    )
    args = parser.parse_args(argv)
    if args.runtimes is not None:
        unknown = sorted(set(args.runtimes.split(",")) - set(GPU_RUNTIMES))
        if unknown:
            parser.error(f"unknown runtimes {unknown}; choose from {', '.join(GPU_RUNTIMES)}")
    return args


GPU_RUNTIMES = ("eager", "compile", "onnx", "int8")
GPU_EXECUTION_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")


def runtime_plan(runtimes: list[str], available_providers: list[str]) -> dict[str, str | None]:
    """Runtime -> None (serve it on the GPU) or why it is not measured here."""
    plan: dict[str, str | None] = {}
    gpu_providers = [p for p in GPU_EXECUTION_PROVIDERS if p in available_providers]
    for runtime in runtimes:
        if runtime == "int8":
            plan[runtime] = (
                "dynamic INT8 is ONNX Runtime's CPU quantisation: on a GPU it would run on the CPU "
                "provider, so it is gated here but not served"
            )
        elif runtime == "onnx" and not gpu_providers:
            plan[runtime] = (
                "this onnxruntime has no TensorRT or CUDA execution provider (the CPU build): install "
                "onnxruntime-gpu==1.32.0 (the image's GPU pin) to measure ONNX Runtime on the GPU"
            )
        else:
            plan[runtime] = None
    return plan


def runtime_config(cfg: BenchConfig, runtime: str) -> BenchConfig:
    """Our server's settings for one runtime: FP16 throughout; MODEL_RUNTIME=compile only for compile (the others run as
    built)."""
    return dataclasses.replace(cfg, compile=runtime == "compile", precision="fp16")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(
            "gpu_bench: no CUDA device is available (torch.cuda.is_available() is False), so nothing was "
            "measured. Run it on a machine with an NVIDIA GPU and a CUDA build of torch; `python -m bench` "
            "runs the CPU comparison."
        )
        return 0
    from .run import main as run_main

    if args.runtimes is not None:
        return run_runtimes(args, torch.cuda.get_device_name(0))
    if args.compile_startup:
        return run_compile_startup(args, torch.cuda.get_device_name(0))
    with tempfile.TemporaryDirectory(prefix="gpu-bench-model-") as model_dir:
        build_distilbert(model_dir)
        cfg = gpu_config(args.short, args.output_dir, Path(model_dir), server_only=args.server, workers=args.workers)
        results = run_main(
            cfg, extra=lambda r: {"gpu": torch.cuda.get_device_name(0), "best_within_p95_50ms": best_within_slo(r)}
        )
    print(f"\nrequests/s at p95 < {SLO_P95_MS:g} ms ({torch.cuda.get_device_name(0)}):")
    for name, run in results["best_within_p95_50ms"].items():
        print(
            f"  {name:<22} "
            + (
                "none of the levels"
                if run is None
                else f"{run['throughput_rps']:9.1f} req/s at {run['concurrency']} clients (p95 {run['p95_ms']:.1f} ms)"
            )
        )
    return 0


def run_compile_startup(args: argparse.Namespace, gpu: str) -> int:
    import orjson

    from .report import compile_summary
    from .startup import measure_compile_startup

    with tempfile.TemporaryDirectory(prefix="gpu-bench-model-") as model_dir:
        build_distilbert(model_dir)
        # One HTTP worker, as the CPU start-up bench runs; a wait that fits the device's 600 s a command.
        cfg = dataclasses.replace(
            gpu_config(True, args.output_dir, Path(model_dir), server_only=True, workers=args.workers or 1),
            ready_timeout_s=240.0,
        )
        result = {"gpu": gpu, **measure_compile_startup(cfg, model_dir)}
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "compile_startup.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(
        f"start-to-ready with torch.compile on {gpu} (MAX_BATCH_SIZE {result['max_batch_size']}): "
        + compile_summary(result)
    )
    statuses = {name: result[name]["predict_status"] for name in ("eager", "first", "cached") if result[name]}
    if any(status != 200 for status in statuses.values()):
        print(f"a start did not answer its first /predict with 200: {statuses}")
        return 1
    return 0


def run_runtimes(args: argparse.Namespace, gpu: str) -> int:
    import onnxruntime
    import orjson

    from .run import measure_raw_model
    from .runtimes import gate_runtime, serve, table

    runtimes = args.runtimes.split(",")
    plan = runtime_plan(runtimes, onnxruntime.get_available_providers())
    with tempfile.TemporaryDirectory(prefix="gpu-bench-runtimes-") as scratch:
        scratch_dir = Path(scratch)
        model_dir = build_distilbert(scratch_dir / "model")
        cfg = gpu_config(args.short, args.output_dir, model_dir, server_only=True, workers=args.workers)
        cfg = dataclasses.replace(cfg, concurrency=(1, max(cfg.concurrency)))
        cfg.output_dir.mkdir(parents=True, exist_ok=True)
        raw = measure_raw_model(runtime_config(cfg, "eager"), str(model_dir))
        texts = [SAME_TEXT] if cfg.same_text else make_texts(cfg.texts)
        gates, runs, skipped = {}, [], {}
        for runtime in runtimes:
            gates[runtime] = gate_runtime(model_dir, runtime)
            if not gates[runtime]["passed"]:
                continue
            if plan[runtime] is not None:
                skipped[runtime] = plan[runtime]
                continue
            runs += serve(runtime, model_dir, runtime_config(cfg, runtime), texts, scratch_dir)
    results = {
        "gpu": gpu,
        "config": {"concurrency": list(cfg.concurrency), "duration_s": cfg.duration_s, "texts": cfg.texts},
        "raw_model": raw,
        "gates": gates,
        "runs": runs,
        "not_measured": skipped,
    }
    path = cfg.output_dir / "runtimes.json"
    path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(f"{gpu}\n{table(results)}")
    for runtime, why in skipped.items():
        print(f"  {runtime}: not measured: {why}")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
