"""``python -m gpu_inference_constructs.sizing``: which GPU, how many, and what a million requests cost."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

from ..core.capacity_props import GpuCapacityProps
from ..core.errors import ConfigError
from ..core.monitoring_props import MonitoringProps
from ..core.scaling_props import ModelScalingProps
from ..core.settings import from_dict
from ..servers.bundled import BundledServerProps
from .adapters import as_json as adapters_json
from .adapters import compare_adapters
from .adapters import table as adapters_table
from .advisor import advise
from .cache_cost import cache_cost, describe
from .measured import read_measurement, refuse_llm
from .model_shape import BYTES_PER_PARAM, ModelShape, from_model_dir
from .pack import pack
from .pack_models import read_models
from .pack_report import as_json as pack_json
from .pack_report import table as pack_table
from .plot import plot
from .pool import PoolAssumptions, plan_pool, pool_json, pool_table
from .recommend import recommend, validate
from .report import as_json, dumps, table
from .runtimes import RUNTIME_FACTORS
from .workload import Assumptions, Purchase, Workload

# A source line ending in one backslash goes on in the next (the help prints one line); "\\" is the shell's.
EXAMPLES = """examples:
  python -m gpu_inference_constructs.sizing --model-dir ./all-MiniLM-L6-v2 --dtype fp16 --requests-per-second 500 \
--p95-ms 100
  python -m gpu_inference_constructs.sizing --params 7e9 --dtype fp16 --kind llm --layers 32 --hidden-size 4096 \
--heads 32 \\
      --tokens-per-request 512,256 --concurrency 8 --requests-per-second 2 --p95-ms 20000 --environment prod --json
  python -m gpu_inference_constructs.sizing --model-dir DIR --dtype fp16 --requests-per-second 300 \\
      --measured bench/results/gpu/bench.json --plot sizing.png
  python -m gpu_inference_constructs.sizing pack MODELS.json --region us-east-1   (many small models on shared GPUs:
      python -m gpu_inference_constructs.sizing pack --help)
  python -m gpu_inference_constructs.sizing adapters --adapters 100 --params 7e9 --dtype fp16 --kind llm --layers 32 \
      --hidden-size 4096 --heads 32 --intermediate-size 11008 --tokens-per-request 512,256 --requests-per-second 0.5 \
      --lora-rank 16 --lora-resident 8   (100 LoRA fine-tunes on one base against 100 services, per 1M tokens)
"""
PACK_EXAMPLE = """MODELS.json is a list of models with the single-model advisor's keys, '_' or '-' alike (params, \
dtype, kind,
layers, hidden_size, heads, kv_heads, intermediate_size, requests_per_second, p95_ms, tokens_per_request,
max_batch_size, runtime, or model_dir instead of params), a name, and optionally version, cpu and memory_mib:
  [{"name": "minilm", "params": 22000000, "dtype": "fp16", "kind": "encoder", "layers": 6, "hidden_size": 384,
    "heads": 12, "intermediate_size": 1536, "requests_per_second": 50, "p95_ms": 100}]
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gpu_inference_constructs.sizing",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_model_arguments(p)
    load = p.add_argument_group("the traffic")
    load.add_argument("--requests-per-second", type=float, required=True)
    load.add_argument(
        "--p95-ms",
        type=float,
        default=float(ModelScalingProps.latency_p95_ms),
        help="latency goal (default %(default)g, ModelScalingProps')",
    )
    load.add_argument(
        "--tokens-per-request",
        help=f"encoders: tokens per text (default {BundledServerProps.max_sequence_length}, "
        "BundledServerProps.max_sequence_length); LLMs: PROMPT,OUTPUT (required)",
    )
    load.add_argument(
        "--concurrency", type=int, default=1, help="LLMs: sequences one task decodes together (default 1)"
    )
    load.add_argument(
        "--runtime",
        choices=sorted(RUNTIME_FACTORS),
        default="eager",
        help="encoders: BundledServerProps.runtime; its throughput factor (measured or estimated) scales the estimate",
    )
    _add_lora_arguments(load)
    load.add_argument(
        "--max-batch-size",
        type=int,
        default=BundledServerProps.max_batch_size,
        help="encoders: the server's largest batch (default %(default)s)",
    )
    buy = p.add_argument_group("where and how it is bought")
    buy.add_argument("--region", help="default: the --environment's, else us-east-1")
    buy.add_argument(
        "--environment", help="read region, On-Demand base and share and Spot price fraction from cdk.json"
    )
    buy.add_argument("--cdk-json", default="cdk.json", help="with --environment (default %(default)s)")
    buy.add_argument("--on-demand-base", type=int)
    buy.add_argument("--on-demand-percent", type=int, help="On-Demand share above the base, 0-100")
    buy.add_argument(
        "--spot-fraction", type=float, help=f"Spot price / On-Demand (default {MonitoringProps.spot_price_fraction})"
    )
    buy.add_argument(
        "--price", action="append", default=[], metavar="TYPE=USD", help="your own hourly price (repeatable)"
    )
    buy.add_argument("--instance-types", help="compare only these, comma-separated")
    _add_assumption_arguments(p)
    _add_cache_arguments(p)
    out = p.add_argument_group("output")
    out.add_argument("--name", help="the model's name in the snippet (default: the directory's)")
    out.add_argument("--version", default="1", help="the model's version in the snippet (its S3 prefix)")
    out.add_argument("--json", action="store_true", help="machine-readable output")
    out.add_argument(
        "--plot", metavar="FILE.png", help="write a PNG of cost and throughput per type (needs matplotlib)"
    )
    return p


def _add_model_arguments(p: argparse.ArgumentParser) -> None:
    model = p.add_argument_group("the model (--model-dir, or --params with --dtype and --kind)")
    model.add_argument(
        "--model-dir", help="a Hugging Face model directory: config.json and *.safetensors (only headers are read)"
    )
    model.add_argument("--params", type=float, help="parameter count, e.g. 7e9")
    model.add_argument(
        "--dtype", choices=sorted(BYTES_PER_PARAM), help="precision it is served in (default: as stored)"
    )
    model.add_argument("--kind", choices=("encoder", "llm"), help="default: from config.json's architectures")
    model.add_argument("--layers", type=int, help="geometry for --params (sizes KV cache and activations)")
    model.add_argument("--hidden-size", type=int)
    model.add_argument("--heads", type=int)
    model.add_argument("--kv-heads", type=int, help="default: --heads (no grouped-query attention)")
    model.add_argument("--intermediate-size", type=int, help="default: 4 x hidden size")


def _add_assumption_arguments(p: argparse.ArgumentParser) -> None:
    measured = p.add_argument_group("measurements and assumptions")
    measured.add_argument(
        "--measured", metavar="FILE", help="a bench JSON (make bench, python -m bench.gpu_bench): measured throughput"
    )
    measured.add_argument(
        "--measured-on", metavar="TYPE", help="the instance type the measurement stands for (needed for a CPU run)"
    )
    defaults = Assumptions()
    measured.add_argument(
        "--efficiency", type=float, default=defaults.efficiency, help="fraction of peak reached (default %(default)s)"
    )
    measured.add_argument(
        "--vram-headroom", type=float, default=defaults.vram_headroom, help="GPU memory kept free (default %(default)s)"
    )
    measured.add_argument(
        "--target-utilization", type=float, default=defaults.target_utilization, help="default %(default)s"
    )
    measured.add_argument(
        "--peak-factor", type=float, default=defaults.peak_factor, help="max_tasks / tasks (default %(default)s)"
    )


def _add_cache_arguments(p: argparse.ArgumentParser) -> None:
    cache = p.add_argument_group("a shared result cache (the environment's `cache`)")
    cache.add_argument(
        "--cache-hit-rate",
        type=float,
        help="share of requests the cache answers (0-0.99): the GPUs "
        "are sized for the rest, and the cache's cost is shown",
    )
    cache.add_argument(
        "--cache-value-bytes", type=int, default=2048, help="bytes of one stored prediction (default %(default)s)"
    )
    cache.add_argument("--cache-ttl-seconds", type=int, default=3600, help="the models' TTL (default %(default)s)")


def _add_lora_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--lora-rank", type=int, default=0, help="LLMs with LoRA adapters: the largest rank (lora.max_rank)"
    )
    group.add_argument(
        "--lora-resident",
        type=int,
        default=0,
        help="LLMs with LoRA adapters: adapter slots on the GPU (lora.max_gpu_adapters), counted in its memory",
    )


def pack_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gpu_inference_constructs.sizing pack",
        epilog=PACK_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Many small models on shared GPUs (ECS GPU sharing, NVIDIA MPS): each model's gpu_share, the "
        "fewest instances, USD per 1M requests shared against dedicated, and the cdk.json blocks.",
    )
    p.add_argument("models", metavar="MODELS.json", help="a JSON list of models (see below)")
    p.add_argument("--region", default="us-east-1", help="default %(default)s")
    p.add_argument("--instance-types", help="compare only these, comma-separated (default: the region's CUDA types)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def run_pack(args: argparse.Namespace) -> int:
    only = [t.strip() for t in args.instance_types.split(",") if t.strip()] if args.instance_types else None
    result = pack(read_models(args.models), Purchase(region=args.region), Assumptions(), only)
    print(dumps(pack_json(result)) if args.json else pack_table(result))
    return 0


def pool_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gpu_inference_constructs.sizing pool",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Many sparse models in one pool (ModelPool): tasks that hold what their GPU budget takes and load "
        "the rest on demand; the hit rate, load times, tasks and USD per 1M requests, with every assumption "
        "printed. MODELS.json as for `sizing pack`.",
    )
    p.add_argument("models", metavar="MODELS.json", help="a JSON list of models (as for sizing pack)")
    p.add_argument("--region", default="us-east-1", help="default %(default)s")
    p.add_argument("--instance-types", help="compare only these, comma-separated (default: the region's CUDA types)")
    p.add_argument(
        "--popularity",
        default=PoolAssumptions.popularity,
        help="'given' (MODELS.json's rates) or 'zipf:S' (ranked Zipf(S), the same total; default %(default)s)",
    )
    p.add_argument(
        "--affinity",
        action="store_true",
        help="each task holds its own share of the models (split them over pools of one task each)",
    )
    p.add_argument("--min-tasks", type=int, default=PoolAssumptions.min_tasks, help="default %(default)s (one per AZ)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def run_pool(args: argparse.Namespace) -> int:
    only = [t.strip() for t in args.instance_types.split(",") if t.strip()] if args.instance_types else None
    models = read_models(args.models)
    pool = PoolAssumptions(popularity=args.popularity, affinity=args.affinity, min_tasks=args.min_tasks)
    plans = plan_pool(models, Purchase(region=args.region), Assumptions(), pool, only)
    print(dumps(pool_json(plans, pool, Assumptions())) if args.json else pool_table(plans, models, pool, Assumptions()))
    return 0


def adapters_parser() -> argparse.ArgumentParser:
    p = parser()
    p.prog = "python -m gpu_inference_constructs.sizing adapters"
    p.description = (
        "Many LoRA fine-tunes of one LLM: one service serving every adapter over one base (vllm.lora) against one "
        "service per fine-tune, in USD per 1M tokens. The model and traffic flags are the advisor's; "
        "--requests-per-second is every fine-tune's together, split evenly."
    )
    p.add_argument("--adapters", type=int, default=100, help="the fine-tunes of the one base (default %(default)s)")
    return p


def run_adapters(args: argparse.Namespace) -> int:
    model = _model(args)
    workload = _workload(args, model)
    purchase = _purchase(args)
    assumptions = Assumptions(args.efficiency, args.vram_headroom, args.target_utilization, args.peak_factor)
    only = [t.strip() for t in args.instance_types.split(",") if t.strip()] if args.instance_types else None
    result = compare_adapters(model, workload, purchase, assumptions, args.adapters, only)
    print(dumps(adapters_json(result)) if args.json else adapters_table(result, model, workload, purchase))
    return 0


COMMANDS = {
    "pack": (pack_parser, run_pack),
    "pool": (pool_parser, run_pool),
    "adapters": (adapters_parser, run_adapters),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = COMMANDS.get(argv[0]) if argv else None
    args = command[0]().parse_args(argv[1:]) if command else parser().parse_args(argv)
    try:
        return command[1](args) if command else run(args)
    except ConfigError as error:
        print(f"sizing: error: {error}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    model = _model(args)
    workload = _workload(args, model)
    purchase = _purchase(args)
    assumptions = Assumptions(args.efficiency, args.vram_headroom, args.target_utilization, args.peak_factor)
    measurement = None
    if args.measured:
        if model.kind == "llm":
            raise refuse_llm(args.measured)
        measurement = read_measurement(args.measured, workload.p95_ms, args.measured_on)
    only = [t.strip() for t in args.instance_types.split(",") if t.strip()] if args.instance_types else None
    cache_lines: list[str] = []
    cost = None
    if args.cache_hit_rate is not None:
        cost = cache_cost(
            workload.requests_per_second, args.cache_hit_rate, args.cache_value_bytes, args.cache_ttl_seconds
        )
        without = _cheapest_mix(advise(model, workload, purchase, assumptions, measurement, only))
        workload = replace(workload, requests_per_second=cost.gpu_requests_per_second)
    advice = advise(model, workload, purchase, assumptions, measurement, only)
    if cost is not None:
        cache_lines = describe(cost, without, _cheapest_mix(advice))
    recommendation = recommend(advice, model, workload, purchase, assumptions, args.name, args.version)
    if recommendation is not None:
        validate(recommendation, purchase.region)
    if args.plot:
        if not args.plot.lower().endswith(".png"):
            raise ConfigError("--plot", f"{args.plot!r}: give a .png file name")
        plot(
            advice,
            args.plot,
            f"{model.name} ({model.dtype}), {workload.requests_per_second:g} req/s, p95 <= "
            f"{workload.p95_ms:g} ms, {purchase.region}",
        )
    if args.json:
        report = as_json(advice, recommendation, model, workload, purchase, assumptions, measurement)
        if cost is not None:
            report["shared_cache"] = {**asdict(cost), "monthly_usd": cost.monthly_usd, "summary": cache_lines}
        print(dumps(report))
    else:
        print(table(advice, recommendation, model, workload, purchase, assumptions))
        for line in cache_lines:
            print(line)
        if args.plot:
            print(f"\nwrote {args.plot}")
    return 0


def _cheapest_mix(advice) -> float | None:
    """The hourly cost (the purchase's On-Demand/Spot mix) of the cheapest type that meets the goal."""
    costs = [a.hourly_usd["mix"] for a in advice if a.ranked and "mix" in a.hourly_usd]
    return min(costs) if costs else None


def _model(args: argparse.Namespace) -> ModelShape:
    if args.model_dir and args.params:
        raise ConfigError("--model-dir", "give --model-dir or --params, not both")
    if args.model_dir:
        model = from_model_dir(args.model_dir, args.dtype, args.kind)
        if args.name:
            model = replace(model, name=args.name)
    elif args.params:
        if not args.dtype or not args.kind:
            raise ConfigError(
                "--params", "with --params also give --dtype (fp16, bf16, fp32, int8, int4) and --kind (encoder, llm)"
            )
        model = ModelShape(
            params=int(args.params),
            dtype=args.dtype,
            kind=args.kind,
            name=args.name or "model",
            layers=args.layers,
            hidden_size=args.hidden_size,
            heads=args.heads,
            kv_heads=args.kv_heads,
            intermediate_size=args.intermediate_size,
        )
    else:
        raise ConfigError(
            "--model-dir", "describe the model: --model-dir DIR, or --params N --dtype D --kind encoder|llm"
        )
    geometry = [args.layers, args.hidden_size, args.heads]
    if args.params and any(geometry) and not all(geometry):
        raise ConfigError("--layers", "give --layers, --hidden-size and --heads together (or none)")
    if model.kind == "llm" and not model.has_geometry:
        raise ConfigError(
            "--layers",
            "an LLM's KV cache needs its geometry: pass --model-dir, or --layers, --hidden-size "
            "and --heads (and --kv-heads with grouped-query attention)",
        )
    return model


def _workload(args: argparse.Namespace, model: ModelShape) -> Workload:
    raw = args.tokens_per_request
    if raw is None:
        if model.kind == "llm":
            raise ConfigError("--tokens-per-request", "an LLM needs PROMPT,OUTPUT tokens per request, e.g. 512,256")
        raw = str(BundledServerProps.max_sequence_length)
    parts = raw.split(",")
    try:
        tokens = [int(p) for p in parts]
    except ValueError:
        raise ConfigError(
            "--tokens-per-request", f"{raw!r}: give N (encoders) or PROMPT,OUTPUT (LLMs), whole numbers"
        ) from None
    if model.kind == "llm" and len(tokens) != 2:
        raise ConfigError("--tokens-per-request", f"{raw!r}: an LLM needs PROMPT,OUTPUT, e.g. 512,256")
    if len(tokens) > 2:
        raise ConfigError("--tokens-per-request", f"{raw!r}: give N or PROMPT,OUTPUT")
    return Workload(
        args.requests_per_second,
        args.p95_ms,
        tokens[0],
        tokens[1] if len(tokens) > 1 else 0,
        args.concurrency,
        args.max_batch_size,
        runtime=args.runtime,
        lora_rank=args.lora_rank,
        lora_resident=args.lora_resident,
    )


def _purchase(args: argparse.Namespace) -> Purchase:
    region, base, percent, spot = "us-east-1", 0, 0, MonitoringProps.spot_price_fraction
    if args.environment:
        region, base, percent, spot = _from_environment(Path(args.cdk_json), args.environment)
    prices = {}
    for item in args.price:
        name, _, value = item.partition("=")
        try:
            prices[name.strip()] = float(value)
        except ValueError:
            raise ConfigError("--price", f"{item!r}: give TYPE=USD per hour, e.g. g5.xlarge=0.95") from None
        if prices[name.strip()] <= 0:
            raise ConfigError("--price", f"{item!r}: the price must be greater than 0")
    return Purchase(
        region=args.region or region,
        on_demand_base=base if args.on_demand_base is None else args.on_demand_base,
        on_demand_percent=percent if args.on_demand_percent is None else args.on_demand_percent,
        spot_fraction=spot if args.spot_fraction is None else args.spot_fraction,
        prices=prices,
    )


def _from_environment(path: Path, name: str) -> tuple[str, int, int, float]:
    """The environment's raw settings read with the library's own loader (stacks/ is not importable from here)."""
    try:
        environments = json.loads(path.read_text())["context"]["environments"]
    except FileNotFoundError:
        raise ConfigError("--cdk-json", f"{str(path)!r} does not exist") from None
    except (KeyError, TypeError, json.JSONDecodeError):
        raise ConfigError("--cdk-json", f"{str(path)!r} has no context.environments object") from None
    if name not in environments:
        raise ConfigError("--environment", f"unknown environment {name!r}; defined: {', '.join(environments)}")
    data = environments[name]
    capacity = from_dict(GpuCapacityProps, data.get("capacity", {}), f"environments.{name}.capacity")
    monitoring = from_dict(MonitoringProps, data.get("monitoring", {}), f"environments.{name}.monitoring")
    return (
        data.get("region", "us-east-1"),
        capacity.on_demand_base_capacity,
        capacity.on_demand_percentage_above_base,
        monitoring.spot_price_fraction,
    )
