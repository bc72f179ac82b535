"""The advice as JSON (the field names scripts read) and as a table for people."""

from __future__ import annotations

import json
from dataclasses import asdict

from ..core.instance_catalog import ACCELERATORS
from .advisor import TypeAdvice
from .model_shape import ModelShape
from .recommend import Recommendation
from .throughput import ESTIMATED_DENSE_FP16_TFLOPS
from .workload import Assumptions, Measurement, Purchase, Workload


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def type_entry(a: TypeAdvice) -> dict:
    t = a.throughput
    spec = ACCELERATORS[a.instance_type.gpu_model]
    return {
        "instance_type": a.name,
        "gpu": a.instance_type.gpu_model,
        "gpus": a.instance_type.gpus,
        "fits": a.fits,
        "reason": a.reason,
        "deployable": a.deployable,
        "gpus_per_task": a.gpus_per_task,
        "tasks_per_instance": a.tasks_per_instance,
        "memory_gib_per_gpu": None
        if a.memory is None
        else {
            "usable": _round(a.memory.usable_gib, 2),
            "weights": _round(a.memory.weights_gib, 2),
            "kv_cache": _round(a.memory.kv_cache_gib, 2),
            "activations": _round(a.memory.activations_gib, 3),
            **({"lora_adapters": _round(a.memory.adapters_gib, 3)} if a.memory.adapters_gib is not None else {}),
            "total": _round(a.memory.total_gib, 2),
        },
        "decode_tokens_per_second_ceiling": _round(a.decode_tokens_per_second_ceiling, 2),
        "throughput": None
        if t is None
        else {
            "requests_per_second_per_task": _round(t.requests_per_second, 2),
            "source": t.source,
            "formula": t.formula,
            "bound": t.bound,
            "tokens_per_second_per_task": _round(t.tokens_per_second, 1),
            "p95_ms": _round(t.p95_ms_estimate, 1),
            "max_batch_size": t.max_batch_size,
        },
        "meets_p95": None if t is None else (not a.too_slow if t.p95_ms_estimate is not None else None),
        "tasks": a.tasks,
        "instances": a.instances,
        "on_demand_hourly_usd": a.price_usd,
        "price_source": a.price_source,
        "hourly_usd": {k: _round(v) for k, v in a.hourly_usd.items()},
        "usd_per_million_requests": {k: _round(v) for k, v in a.usd_per_million_requests.items()},
        "usd_per_million_tokens": {k: _round(v, 6) for k, v in a.usd_per_million_tokens.items()},
        "accelerator_source": f"{spec.source} (read {spec.as_of})"
        + (
            f"; dense FP16 tensor throughput {ESTIMATED_DENSE_FP16_TFLOPS[a.instance_type.gpu_model].value:g} TFLOPS, "
            f"{ESTIMATED_DENSE_FP16_TFLOPS[a.instance_type.gpu_model].basis}"
            if a.instance_type.gpu_model in ESTIMATED_DENSE_FP16_TFLOPS
            else ""
        ),
    }


def as_json(
    advice: list[TypeAdvice],
    recommendation: Recommendation | None,
    model: ModelShape,
    workload: Workload,
    purchase: Purchase,
    assumptions: Assumptions,
    measurement: Measurement | None,
) -> dict:
    return {
        "model": {
            **asdict(model),
            "weight_bytes": model.weight_bytes,
            "kv_cache_bytes_per_token": model.kv_bytes_per_token,
        },
        "workload": asdict(workload),
        "purchase": asdict(purchase),
        "assumptions": asdict(assumptions),
        "measured": None if measurement is None else asdict(measurement),
        "instance_types": [type_entry(a) for a in advice],
        "recommendation": None
        if recommendation is None
        else {
            "capacity": recommendation.capacity,
            "model": recommendation.model,
            "capacity_groups": recommendation.capacity_groups,
            "notes": recommendation.notes,
        },
    }


def dumps(data: dict) -> str:
    return json.dumps(data, indent=2)


def _money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f}" if value >= 1 else f"{value:.4f}"


def table(
    advice: list[TypeAdvice],
    recommendation: Recommendation | None,
    model: ModelShape,
    workload: Workload,
    purchase: Purchase,
    assumptions: Assumptions,
) -> str:
    llm = model.kind == "llm"
    head = (
        f"{model.name}: {model.params / 1e9:.3g}B parameters, {model.dtype}, {model.kind} "
        f"({model.weight_bytes / 1e9:.2f} GB of weights); {workload.requests_per_second:g} req/s, p95 <= "
        f"{workload.p95_ms:g} ms, "
        + (
            f"{workload.prompt_tokens} prompt + {workload.output_tokens} output tokens, "
            f"{workload.concurrency} sequences per task"
            if llm
            else f"{workload.prompt_tokens} tokens per text, batch <= {workload.max_batch_size}"
        )
        + f"; {purchase.region}, Spot at {purchase.spot_fraction:.0%} of On-Demand, On-Demand base "
        f"{purchase.on_demand_base} + {purchase.on_demand_percent}% above it"
    )
    columns = (
        ["type", "fits", "GPUs/task", "mem GiB/GPU"]
        + (["decode tok/s ceiling"] if llm else [])
        + ["req/s per task", "source", "tasks", "inst", "$/1M req OD", "Spot", "mix"]
        + (["mix $/1M tok"] if llm else [])
    )
    rows = []
    for a in advice:
        t = a.throughput
        mem = "-" if a.memory is None else f"{a.memory.total_gib:.1f}/{a.memory.usable_gib:.1f}"
        row = [a.name + ("" if a.deployable else " *"), "yes" if a.fits else "no", str(a.gpus_per_task), mem]
        if llm:
            row.append(
                "-" if a.decode_tokens_per_second_ceiling is None else f"{a.decode_tokens_per_second_ceiling:.1f}"
            )
        rps = t.requests_per_second if t else None
        row += [
            "-" if rps is None else f"{rps:,.1f}",
            "-" if t is None else t.source,
            "-" if a.tasks is None else str(a.tasks),
            "-" if a.instances is None else str(a.instances),
            *(_money(a.usd_per_million_requests.get(k)) for k in ("on_demand", "spot", "mix")),
        ]
        if llm:
            row.append(_money(a.usd_per_million_tokens.get("mix")))
        rows.append(row)
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    lines = [
        head,
        "",
        "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=False)),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)) for r in rows]
    lines += ["", "* compared only: the library serves CUDA types, and Inferentia2 for encoders only", "", "Why:"]
    lines += [f"  {a.name}: {a.reason}" for a in advice]
    lines += ["", "Throughput, per GPU model (one task on one instance type of each):"]
    seen = set()
    for a in advice:
        key = (a.instance_type.gpu_model, a.gpus_per_task)
        if a.throughput and key not in seen:
            seen.add(key)
            lines.append(f"  {a.instance_type.gpu_model} x {a.gpus_per_task} ({a.name}): {a.throughput.formula}")
    lines += [
        "",
        f"Assumptions (replace with flags or --measured): efficiency {assumptions.efficiency:g} of peak, "
        f"{assumptions.vram_headroom:.0%} of GPU memory kept free, tasks at {assumptions.target_utilization:.0%} "
        f"utilisation, max_tasks = {assumptions.peak_factor:g} x tasks",
    ]
    if recommendation is None:
        lines += [
            "",
            "No recommendation: no deployable type both fits and has a throughput (see Why; --measured supplies one).",
        ]
    else:
        lines += [
            "",
            "Recommended cdk.json blocks (validated with GpuCapacityProps and ModelProps):",
            json.dumps(recommendation.snippet(), indent=2),
        ]
        lines += [f"note: {n}" for n in recommendation.notes]
    return "\n".join(lines)
