"""``sizing pack``'s output: the table for a terminal and the JSON for scripts."""

from __future__ import annotations

import json
from dataclasses import fields

from .advisor import TypeAdvice
from .pack_code import library_code
from .pack_figures import CUBLAS_WORKSPACE_MIB, CUDA_CONTEXT_MIB, figures
from .pack_placement import TypePack
from .pack_result import GROUP, PackResult


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def as_json(result: PackResult) -> dict:
    return {
        "models": [
            {
                "name": m.name,
                "version": m.version,
                "params": m.shape.params,
                "dtype": m.shape.dtype,
                "kind": m.shape.kind,
                "requests_per_second": m.workload.requests_per_second,
                "p95_ms": m.workload.p95_ms,
                "tokens_per_request": m.workload.tokens_per_request,
                "cpu": m.cpu,
                "memory_mib": m.memory_mib,
            }
            for m in result.models
        ],
        "purchase": {"region": result.purchase.region, "spot_fraction": result.purchase.spot_fraction},
        "assumptions": {f.name: getattr(result.assumptions, f.name) for f in fields(result.assumptions)},
        "figures": figures(),
        "instance_types": [_type_json(t) for t in result.types],
        "dedicated": {name: _dedicated_json(a) for name, a in result.dedicated.items()},
        "recommendation": None
        if result.best is None
        else {**result.snippet(), "library_code": library_code(result), "notes": result.notes},
    }


def _type_json(t: TypePack) -> dict:
    return {
        "instance_type": t.name,
        "fits": t.fits,
        "reason": t.reason,
        "refusals": {name: {"kind": r.kind, "reason": r.text} for name, r in t.refusals.items()},
        "gpus": t.instance_type.gpus,
        "gpu_memory_mib_for_shares": t.gpu_budget_mib,
        "task_cpu_units": t.cpu_budget,
        "task_memory_mib": t.memory_budget_mib,
        "on_demand_hourly_usd": t.price_usd,
        "price_source": t.price_source,
        "instances": len(t.instances) if t.fits else None,
        "placement": t.placement or None,
        "tasks_per_instance": [[[p.share.name for p in gpu] for gpu in i.gpus] for i in t.instances],
        "hourly_usd": {k: _round(v) for k, v in t.hourly_usd.items()},
        "dedicated_hourly_usd": {k: _round(v) for k, v in t.dedicated_hourly_usd.items()} if t.fits else None,
        "models": [
            {
                "name": s.name,
                "gpu_share": {"memory_mib": s.memory_mib, "max_compute_percent": s.compute_percent},
                "gpu_memory_mib": {
                    "weights_and_activations": _round(s.need_mib, 1),
                    "allocator_reserve": _round(s.allocator_mib, 1),
                    "cuda_context": CUDA_CONTEXT_MIB.value,
                    "cublas_workspaces": CUBLAS_WORKSPACE_MIB.value,
                    "formula": s.memory_formula(),
                },
                "utilisation": _round(s.utilisation, 5),
                "compute_percent": {
                    "throughput": _round(s.throughput_percent, 3),
                    "latency": _round(s.latency_percent, 3),
                    "formula": s.compute_formula(),
                },
                "tasks": s.tasks,
                "cpu": s.cpu,
                "cpu_basis": s.cpu_basis,
                "memory_mib": s.task_memory_mib,
                "memory_basis": s.memory_basis,
                "requests_per_second_per_task": _round(s.requests_per_second_per_task, 2),
                "hourly_usd": {k: _round(v, 6) for k, v in t.model_hourly_usd[s.name].items()},
                "usd_per_million_requests": {
                    "shared": {k: _round(v) for k, v in t.usd_per_million_requests[s.name].items()},
                    "dedicated": {k: _round(s.advice.usd_per_million_requests.get(k)) for k in ("on_demand", "spot")},
                },
            }
            for s in t.shares
        ],
    }


def _dedicated_json(advice: TypeAdvice | None) -> dict | None:
    if advice is None:
        return None
    return {
        "instance_type": advice.name,
        "tasks": advice.tasks,
        "instances": advice.instances,
        "usd_per_million_requests": {k: _round(advice.usd_per_million_requests.get(k)) for k in ("on_demand", "spot")},
    }


def _money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f}" if value >= 1 else f"{value:.4f}"


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    widths = (
        [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)] if rows else [len(c) for c in columns]
    )
    return [
        "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(),
        "  ".join("-" * w for w in widths),
        *("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows),
    ]


def _ranges(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]} ({len(names)} models)"


def _type_lines(result: PackResult) -> list[str]:
    """Each instance type: how many, tasks on each, the shared and the dedicated hourly price; then those that cannot
    pack, and why."""
    rows = []
    for t in result.types:
        if not t.fits:
            rows.append([t.name, str(t.instance_type.gpus), "-", "-", "-", "-", "-", "-"])
            continue
        per_instance = " ".join(str(len(i.tasks)) for i in t.instances)
        rows.append(
            [
                t.name,
                str(t.instance_type.gpus),
                str(len(t.instances)),
                per_instance,
                _money(t.hourly_usd["on_demand"]),
                _money(t.hourly_usd["spot"]),
                _money(t.dedicated_hourly_usd["on_demand"]),
                _money(t.dedicated_hourly_usd["spot"]),
            ]
        )
    lines = _table(["type", "GPUs", "inst", "tasks/inst", "shared $/h OD", "Spot", "dedicated $/h OD", "Spot"], rows)
    unfit = [t for t in result.types if not t.fits]
    if unfit:
        lines += ["", "Cannot pack:"] + [f"  {t.name}: {t.reason}" for t in unfit]
    return lines


def _share_lines(result: PackResult, best: TypePack) -> list[str]:
    """Each model's share on the best type: where it runs, its reservations and its price against a dedicated GPU."""
    where = {}
    for n, instance in enumerate(best.instances):
        for g, gpu in enumerate(instance.gpus):
            for p in gpu:
                where.setdefault(p.share.name, []).append(f"{n}/{g}")
    rows = []
    for s in best.shares:
        shared, alone = best.usd_per_million_requests[s.name], result.dedicated[s.name]
        dedicated = alone.usd_per_million_requests if alone else {}
        rows.append(
            [
                s.name,
                ",".join(where[s.name]),
                f"{s.memory_mib:,}",
                str(s.compute_percent),
                f"{s.utilisation:.1%}",
                str(s.cpu),
                f"{s.task_memory_mib:,}",
                _money(shared["on_demand"]),
                _money(dedicated.get("on_demand")),
                _money(shared["spot"]),
                _money(dedicated.get("spot")),
                alone.name if alone else "-",
            ]
        )
    return _table(
        [
            "model",
            "inst/GPU",
            "GPU MiB",
            "compute %",
            "util",
            "cpu",
            "memory MiB",
            "$/1M OD shared",
            "dedicated",
            "Spot shared",
            "dedicated",
            "dedicated on",
        ],
        rows,
    )


def table(result: PackResult) -> str:
    purchase, assumptions = result.purchase, result.assumptions
    lines = [
        f"pack: {len(result.models)} models on shared GPUs (ECS GPU sharing, NVIDIA MPS); {purchase.region}, Spot at "
        f"{purchase.spot_fraction:.0%} of On-Demand",
        "",
    ]
    lines += _type_lines(result)
    best = result.best
    assert best is not None  # pack() refuses a list no type holds
    lines += [
        "",
        f"{best.name} x {len(best.instances)} ({best.placement}; GPU memory for shares {best.gpu_budget_mib:,} MiB "
        f"per GPU, tasks may reserve {best.cpu_budget:,} CPU units and {best.memory_budget_mib:,} MiB per instance):",
    ]
    lines += _share_lines(result, best)
    lines += ["", "Shares (estimates; each figure's basis under --json's figures):"]
    for text, names in _grouped(best, lambda s: f"GPU memory {s.memory_formula()}; compute {s.compute_formula()}"):
        lines.append(f"  {_ranges(names)}: {text}")
    for text, names in _grouped(
        best, lambda s: f"cpu {s.cpu} ({s.cpu_basis}); memory_mib {s.task_memory_mib} ({s.memory_basis})"
    ):
        lines.append(f"  {_ranges(names)}: {text}")
    lines += [
        "",
        f"Split rule: each instance's hourly price is shared by its tasks in proportion to max(GPU memory share / "
        f"({best.gpu_budget_mib:,} MiB x GPUs), compute % / (100 x GPUs)); the instance is paid in full by its tasks. "
        "Dedicated: the single-model advisor's figure, whole GPUs, on its cheapest type (per type: --json).",
        f"Assumptions (flags of the single-model advisor): efficiency {assumptions.efficiency:g} of peak, "
        f"{assumptions.vram_headroom:.0%} of GPU memory kept free, tasks at {assumptions.target_utilization:.0%} "
        f"utilisation, max_tasks = {assumptions.peak_factor:g} x tasks",
        "",
        "Library code (the same props, for an app of your own: GpuCapacity and ModelService):",
        library_code(result),
        "",
        "cdk.json fragment (validated with GpuCapacityProps, ModelProps and gpu_packing's deployment-at-peak check):",
        compact_json(result.snippet()),
    ]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def compact_json(snippet: dict) -> str:
    """The fragment with one model (and the capacity) a line: twenty models stay readable."""
    group = snippet["capacity_groups"][GROUP]
    models = ",\n    ".join(json.dumps(m) for m in snippet["models"])
    return (
        f'{{\n  "capacity_groups": {{"{GROUP}": {{\n    "capacity": {json.dumps(group["capacity"])},\n'
        f'    "models": {json.dumps(group["models"])}}}}},\n  "models": [\n    {models}\n  ]\n}}'
    )


def _grouped(result: TypePack, text) -> list[tuple[str, list[str]]]:
    groups: dict[str, list[str]] = {}
    for s in result.shares:
        groups.setdefault(text(s), []).append(s.name)
    return list(groups.items())
