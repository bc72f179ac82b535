"""Ratios, targets and the printed table, computed from one run's results."""

from __future__ import annotations

from typing import Any

from .config import BARE, BASELINE, NULL, OURS, OURS_OIP, OURS_OPENAI

RAW = "raw-model"


def series(results: dict, system: str, model: str) -> list[dict]:
    """The load runs of one system, by ascending concurrency."""
    return sorted((r for r in results["runs"] if (r["system"], r["model"]) == (system, model)),
                  key=lambda r: r["concurrency"])


def peak(results: dict, system: str, model: str) -> dict | None:
    runs = series(results, system, model)
    return max(runs, key=lambda r: r["throughput_rps"]) if runs else None


def _at_highest(results: dict, system: str, model: str, concurrency: int) -> dict | None:
    runs = [r for r in series(results, system, model) if r["concurrency"] <= concurrency]
    return runs[-1] if runs else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def generator_ceiling(results: dict) -> dict | None:
    """The load generator's own limit, from its CPU time while it drove the bare ASGI app at its peak: requests per
    CPU-second of the generator is what it could send with a whole core to itself."""
    bare = peak(results, BARE, NULL)
    if bare is None or not bare["client_cpu_s"]:
        return None
    ceiling = bare["requests"] / bare["client_cpu_s"]
    fastest = max(r["throughput_rps"] for r in results["runs"])
    return {"ceiling_rps": ceiling, "client_cpu_us_per_request": 1e6 * bare["client_cpu_s"] / bare["requests"],
            "client_cpu_share_at_bare_peak": bare["client_cpu_s"] / bare["duration_s"],
            "bare_asgi_peak_rps": bare["throughput_rps"], "headroom_over_fastest_run": ceiling / fastest}


def models(results: dict) -> list[str]:
    """The models measured, the real one first."""
    return sorted({r["model"] for r in results["runs"]}, key=lambda m: (m == NULL, m))


def evaluate(results: dict, target_concurrency: int = 64) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(ratios, targets). A target whose systems were not measured is reported with met = None."""
    raw = results.get("raw_model") or {}
    model = results["setup"]["model_label"]
    ours = peak(results, OURS, model)
    c = max((r["concurrency"] for r in series(results, OURS, model) if r["concurrency"] <= target_concurrency),
            default=target_concurrency)
    ours_c, base_c = _at_highest(results, OURS, model, c), _at_highest(results, BASELINE, model, c)
    ours_null, bare = peak(results, OURS, NULL), peak(results, BARE, NULL)
    ratios = {
        "ours_peak_over_raw_best": _ratio(ours and ours["throughput_rps"], raw.get("best_items_per_s")),
        f"ours_over_baseline_at_{c}": _ratio(ours_c and ours_c["throughput_rps"], base_c and base_c["throughput_rps"]),
        f"ours_p95_over_baseline_p95_at_{c}": _ratio(ours_c and ours_c["p95_ms"], base_c and base_c["p95_ms"]),
        "ours_null_peak_over_bare_asgi_peak": _ratio(ours_null and ours_null["throughput_rps"],
                                                    bare and bare["throughput_rps"]),
    }
    for system, key in ((OURS_OPENAI, "openai_embeddings"), (OURS_OIP, "oip_infer")):
        other = peak(results, system, model)
        ratios[f"{key}_peak_over_predict_peak"] = _ratio(other and other["throughput_rps"],
                                                         ours and ours["throughput_rps"])
    null_ratio = ratios["ours_null_peak_over_bare_asgi_peak"]
    raw_ratio = ratios["ours_peak_over_raw_best"]
    speedup, p95_ratio = ratios[f"ours_over_baseline_at_{c}"], ratios[f"ours_p95_over_baseline_p95_at_{c}"]
    targets = [
        {"target": "ours at saturation >= 0.9 x raw model at its best batch size", "value": raw_ratio,
         "threshold": 0.9, "met": None if raw_ratio is None else raw_ratio >= 0.9},
        {"target": f"ours >= 3 x baseline at {c} clients, with a lower p95", "value": speedup, "threshold": 3.0,
         "met": None if speedup is None or p95_ratio is None else speedup >= 3.0 and p95_ratio < 1.0},
        {"target": "null model: ours >= 0.5 x bare ASGI", "value": null_ratio, "threshold": 0.5,
         "met": None if null_ratio is None else null_ratio >= 0.5},
    ]
    return ratios, targets


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(results: dict) -> str:
    lines = []
    for model in models(results):
        levels = sorted({r["concurrency"] for r in results["runs"] if r["model"] == model})
        if not levels:
            continue
        lines.append(f"\n{model + ' model':<18}{'ours':>24} | {'baseline':>22} | {'ours/baseline':>13}")
        lines.append(f"{'clients':>7} {'req/s':>10} {'p50':>7} {'p95':>7} {'p99':>7} | {'req/s':>10} {'p95':>11} |"
                     f" {'x req/s':>7} {'x p95':>5}")
        for level in levels:
            o = next((r for r in series(results, OURS, model) if r["concurrency"] == level), None)
            b = next((r for r in series(results, BASELINE, model) if r["concurrency"] == level), None)
            speedup = _ratio(o and o["throughput_rps"], b and b["throughput_rps"])
            lines.append(
                f"{level:>7} {_num(o and o['throughput_rps']):>10} {_num(o and o['p50_ms']):>7} "
                f"{_num(o and o['p95_ms']):>7} {_num(o and o['p99_ms']):>7} | {_num(b and b['throughput_rps']):>10} "
                f"{_num(b and b['p95_ms']):>11} | {_num(speedup, 2):>7} "
                f"{_num(_ratio(o and o['p95_ms'], b and b['p95_ms']), 2):>5}")
    lines.append("  (latencies in ms)")
    for system, endpoint in ((OURS_OPENAI, "/v1/embeddings"), (OURS_OIP, "/v2/models/<name>/infer")):
        other, ours = peak(results, system, results["setup"]["model_label"]), peak(
            results, OURS, results["setup"]["model_label"])
        if other and ours:
            lines.append(f"{endpoint}: peak {other['throughput_rps']:.1f} req/s at {other['concurrency']} clients, "
                         f"{_ratio(other['throughput_rps'], ours['throughput_rps']):.2f} x /predict's "
                         f"(p95 {other['p95_ms']:.1f} ms)")
    raw = results.get("raw_model")
    if raw:
        rates = ", ".join(f"{k}: {v:.1f}" for k, v in raw["items_per_s"].items())
        lines.append(f"raw model (texts/s by batch size): {rates}; best {raw['best_items_per_s']:.1f} "
                     f"at batch {raw['best_batch_size']}")
    bare = peak(results, BARE, NULL)
    if bare:
        lines.append(f"bare ASGI ceiling: {bare['throughput_rps']:.0f} req/s at {bare['concurrency']} clients")
    gen = results.get("generator")
    if gen:
        lines.append(f"load generator ceiling: {gen['ceiling_rps']:.0f} req/s per core "
                     f"({gen['client_cpu_us_per_request']:.0f} us CPU/request), "
                     f"{gen['headroom_over_fastest_run']:.1f} x the fastest run")
    lines.append("targets:")
    for t in results["targets"]:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        lines.append(f"  [{verdict:>12}] {t['target']}: {_num(t['value'], 2)} (need {t['threshold']:g})")
    return "\n".join(lines)
