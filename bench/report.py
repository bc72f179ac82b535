"""Ratios, targets and the printed table, computed from one run's results."""

from __future__ import annotations

from typing import Any

from .config import BARE, BASELINE, NULL, OURS, OURS_2W, OURS_OIP, OURS_OPENAI, PEER

RAW = "raw-model"


def series(results: dict, system: str, model: str) -> list[dict]:
    """The load runs of one system, by ascending concurrency."""
    return sorted(
        (r for r in results["runs"] if (r["system"], r["model"]) == (system, model)), key=lambda r: r["concurrency"]
    )


def peak(results: dict, system: str, model: str) -> dict | None:
    runs = series(results, system, model)
    return max(runs, key=lambda r: r["throughput_rps"]) if runs else None


def _at_highest(results: dict, system: str, model: str, concurrency: int) -> dict | None:
    runs = [r for r in series(results, system, model) if r["concurrency"] <= concurrency]
    return runs[-1] if runs else None


def _field(run: dict | None, key: str) -> Any:
    """run[key] (a JSON value), or None when there is no run."""
    return run and run[key]


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
    return {
        "ceiling_rps": ceiling,
        "client_cpu_us_per_request": 1e6 * bare["client_cpu_s"] / bare["requests"],
        "client_cpu_share_at_bare_peak": bare["client_cpu_s"] / bare["duration_s"],
        "bare_asgi_peak_rps": bare["throughput_rps"],
        "headroom_over_fastest_run": ceiling / fastest,
    }


def models(results: dict) -> list[str]:
    """The models measured, the real one first."""
    return sorted({r["model"] for r in results["runs"]}, key=lambda m: (m == NULL, m))


def _at(results: dict, system: str, model: str, concurrency: int) -> dict | None:
    return next((r for r in series(results, system, model) if r["concurrency"] == concurrency), None)


def _target(
    name: str, value: float | None, threshold: float, met: bool | None, at_most: bool = False, bound: str | None = None
) -> dict:
    """bound: what the run measured that limits the figure (printed when the target is missed)."""
    return {"target": name, "value": value, "threshold": threshold, "met": met, "at_most": at_most, "bound": bound}


def _cores(run: dict | None) -> str | None:
    cores = run and run.get("cores_by_process")
    return ", ".join(f"{name} {value:.2f}" for name, value in sorted(cores.items())) + " cores" if cores else None


def evaluate(results: dict, target_concurrency: int = 64) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(ratios, targets), the issue's targets. A target whose systems were not measured has met = None."""
    raw = results.get("raw_model") or {}
    model = results["setup"]["model_label"]
    c = max(
        (r["concurrency"] for r in series(results, OURS, model) if r["concurrency"] <= target_concurrency),
        default=target_concurrency,
    )
    ours_c, peer_c, base_c = (_at_highest(results, s, model, c) for s in (OURS, PEER, BASELINE))
    ours_1, base_1 = _at(results, OURS, model, 1), _at(results, BASELINE, model, 1)
    ours_null, ours_2w, bare = peak(results, OURS, NULL), peak(results, OURS_2W, NULL), peak(results, BARE, NULL)
    saturation = peak(results, OURS, model)
    overload = next((o for o in results.get("overload", []) if o["system"] == OURS), None)
    bare_overload = next((o for o in results.get("overload", []) if o["system"] == BARE), None)

    def rps(run: dict | None) -> Any:
        return _field(run, "throughput_rps")

    ratios = {
        f"ours_over_raw_best_at_{c}": _ratio(rps(ours_c), raw.get("best_items_per_s")),
        f"ours_over_peer_at_{c}": _ratio(rps(ours_c), rps(peer_c)),
        f"ours_over_baseline_at_{c}": _ratio(rps(ours_c), rps(base_c)),
        f"ours_p95_over_peer_p95_at_{c}": _ratio(_field(ours_c, "p95_ms"), _field(peer_c, "p95_ms")),
        f"ours_p95_over_baseline_p95_at_{c}": _ratio(_field(ours_c, "p95_ms"), _field(base_c, "p95_ms")),
        "ours_p50_over_baseline_p50_at_1": _ratio(_field(ours_1, "p50_ms"), _field(base_1, "p50_ms")),
        "ours_null_over_bare_asgi": _ratio(rps(ours_null), rps(bare)),
        "ours_2_workers_null_over_1_worker": _ratio(rps(ours_2w), rps(ours_null)),
    }
    if overload and saturation:
        answers = sum(overload["statuses"].values()) / overload["duration_s"]
        fives = sum(n for code, n in overload["statuses"].items() if code.startswith("5") and code != "503")
        ratios.update(
            overload_goodput_over_saturation=overload.get("goodput_rps", rps(overload)) / rps(saturation),
            overload_offered_over_saturation=answers / rps(saturation),
            overload_shed_p50_ms=overload["shed_p50_ms"],
            overload_5xx_other_than_503=fives,
            overload_good_p99_ms=overload.get("within_deadline_p99_ms"),
            overload_deadline_ms=overload.get("deadline_ms"),
        )
    if bare_overload:
        ratios["overload_bare_asgi_p50_ms"] = bare_overload["p50_ms"]
    costs = {c["system"]: c for c in results.get("rejection_cost", [])}
    shed_cost, bare_cost = costs.get(OURS), costs.get(BARE)
    ratios["rejection_cpu_over_bare_asgi_answer"] = _ratio(
        shed_cost and shed_cost["cpu_us_per_answer"], bare_cost and bare_cost["cpu_us_per_answer"]
    )
    timeout_ms = 1000 * results["setup"].get("our_server", {}).get("REQUEST_TIMEOUT_S", 10.0)
    ratios["peer_over_raw_best"] = _ratio(rps(peer_c), raw.get("best_items_per_s"))
    for system, key in ((OURS_OPENAI, "openai_embeddings"), (OURS_OIP, "oip_infer")):
        ratios[f"{key}_peak_over_predict_peak"] = _ratio(rps(peak(results, system, model)), rps(saturation))
    log_bytes = ours_c.get("log_bytes_per_request") if ours_c else None
    ratios[f"ours_log_bytes_per_request_at_{c}"] = log_bytes
    startup = results.get("startup")
    ratios["startup_ours_over_bare"] = startup and startup["ratio"]
    clients = startup and startup.get("first_client")
    ratios["first_client_p95_over_settled"] = clients and clients["p95_over_settled"]
    compiled = results.get("compile_startup")
    ratios["compile_cached_start_over_eager_start"] = compiled and compiled["cached_over_eager"]

    def check(value, threshold, at_most=False):
        return None if value is None else (value <= threshold if at_most else value >= threshold)

    p95_peer, p95_base = ratios[f"ours_p95_over_peer_p95_at_{c}"], ratios[f"ours_p95_over_baseline_p95_at_{c}"]
    lower_p95 = None if p95_peer is None or p95_base is None else p95_peer < 1 and p95_base < 1
    goodput = ratios.get("overload_goodput_over_saturation")
    offered = ratios.get("overload_offered_over_saturation")
    shed = ratios.get("overload_shed_p50_ms")
    floor = ratios.get("overload_bare_asgi_p50_ms")
    ours_over_raw, peer_over_raw = ratios[f"ours_over_raw_best_at_{c}"], ratios["peer_over_raw_best"]
    ceiling = (
        f"the model: ours runs at {ours_over_raw:.2f} x the raw model's best batch, the peer at "
        f"{peer_over_raw:.2f} x, so 1.5 x the peer needs {1.5 * peer_over_raw:.2f} x the raw model"
        if ours_over_raw and peer_over_raw
        else None
    )
    targets = [
        _target(
            f"ours at {c} clients >= 1.3 x the raw model's best batch (issue 23)",
            ratios[f"ours_over_raw_best_at_{c}"],
            1.3,
            check(ratios[f"ours_over_raw_best_at_{c}"], 1.3),
        ),
        _target(
            f"ours at {c} clients >= 1.5 x the peer (LitServe; issue 23)",
            ratios[f"ours_over_peer_at_{c}"],
            1.5,
            check(ratios[f"ours_over_peer_at_{c}"], 1.5),
            bound=ceiling,
        ),
        _target(
            f"ours p95 at {c} clients below the peer's and the baseline's (ours/peer shown)",
            p95_peer,
            1.0,
            lower_p95,
            at_most=True,
        ),
        _target(
            "ours p50 at 1 client <= 1.1 x the baseline's",
            ratios["ours_p50_over_baseline_p50_at_1"],
            1.1,
            check(ratios["ours_p50_over_baseline_p50_at_1"], 1.1, at_most=True),
            at_most=True,
        ),
        _target(
            "overload (>= 10 x saturation offered): goodput (200s within their deadline) >= 0.9 x saturation",
            goodput,
            0.9,
            None if goodput is None or offered is None else goodput >= 0.9 and offered >= 10,
        ),
        _target(
            f"overload: p99 of the 200s within their deadline below the request timeout ({timeout_ms:g} ms)",
            ratios.get("overload_good_p99_ms"),
            timeout_ms,
            check(ratios.get("overload_good_p99_ms"), timeout_ms, at_most=True),
            at_most=True,
        ),
        _target(
            "a rejection's CPU <= 2 x a bare ASGI answer's (null model, every request shed)",
            ratios["rejection_cpu_over_bare_asgi_answer"],
            2.0,
            check(ratios["rejection_cpu_over_bare_asgi_answer"], 2.0, at_most=True),
            at_most=True,
            bound=shed_cost and f"the worker: {_cores(shed_cost)}",
        ),
        _target(
            "overload: shed answers in < 5 ms median, no 5xx but 503",
            shed,
            5.0,
            None if shed is None else shed < 5.0 and ratios["overload_5xx_other_than_503"] == 0,
            at_most=True,
            bound=None
            if floor is None or bare_overload is None
            else f"the HTTP stack: the bare ASGI app's constant answer takes {floor:.1f} "
            f"ms median under the same {bare_overload['concurrency']} clients",
        ),
        _target(
            "null model, 1 worker: ours >= 0.25 x bare ASGI",
            ratios["ours_null_over_bare_asgi"],
            0.25,
            check(ratios["ours_null_over_bare_asgi"], 0.25),
            bound=_cores(ours_null) and f"one core for the whole server: {_cores(ours_null)}",
        ),
        _target(
            "null model: 2 workers >= 1.7 x 1 worker",
            ratios["ours_2_workers_null_over_1_worker"],
            1.7,
            check(ratios["ours_2_workers_null_over_1_worker"], 1.7),
            bound=_cores(ours_2w) and f"two cores for the server and the generator: {_cores(ours_2w)}",
        ),
        _target(
            f"log bytes per successful request at {c} clients <= 30",
            log_bytes,
            30.0,
            check(log_bytes, 30.0, at_most=True),
            at_most=True,
        ),
        _target(
            "start-to-ready <= 1.5 x the bare import-load-infer script (issue 22)",
            ratios["startup_ours_over_bare"],
            1.5,
            check(ratios["startup_ours_over_bare"], 1.5, at_most=True),
            at_most=True,
            bound=startup and startup_bound(startup),
        ),
        _target(
            "one client's p95 in the first seconds after ready <= 1.5 x its settled p95 (issue 40)",
            ratios["first_client_p95_over_settled"],
            1.5,
            check(ratios["first_client_p95_over_settled"], 1.5, at_most=True),
            at_most=True,
            bound=clients and first_client_bound(clients),
        ),
        _target(
            "with torch.compile, a start that finds its compile cache <= 1.3 x an eager start (issue 22)",
            ratios["compile_cached_start_over_eager_start"],
            1.3,
            check(ratios["compile_cached_start_over_eager_start"], 1.3, at_most=True),
            at_most=True,
            bound=compile_bound(compiled) if compiled and compiled["cached_over_eager"] is not None else None,
        ),
    ]
    return ratios, targets


def startup_bound(startup: dict) -> str | None:
    """The slowest phase of our median start, from its log lines."""
    runs = sorted(startup["ours"], key=lambda run: run["seconds"])
    median = runs[len(runs) // 2]
    marks = sorted(
        ((name, at) for name, at in median["phases"].items() if at <= median["seconds"]), key=lambda item: item[1]
    )
    if not marks:
        return None
    steps = [(name, at - (marks[i - 1][1] if i else 0.0)) for i, (name, at) in enumerate(marks)]
    name, seconds = max(steps, key=lambda step: step[1])
    return f"the phase ending at '{name}': {seconds:.1f} s of the median start"


def first_client_bound(clients: dict) -> str:
    """What the first client's window ran beside: the server's background warm-up, or nothing of the server's."""
    figures = f"{clients['first_p95_ms']:.0f} ms against {clients['settled_p95_ms']:.0f} ms settled"
    if clients["warm_up_over_s"]:
        return f"the background warm-up, over {clients['warm_up_over_s']:.1f} s after ready: {figures}"
    return f"the machine: nothing of the server's warm-up ran after ready ({figures})"


def first_client_summary(clients: dict) -> str:
    def percentiles(window: str) -> str:
        return " ".join(f"p{q} {clients[f'{window}_p{q}_ms']:.1f}" for q in (50, 95, 99))

    return (
        f"first client after ready (median of {clients['starts']}): the first {clients['window_s']:g} s "
        f"{percentiles('first')} ms, settled {percentiles('settled')} ms: p95 {clients['p95_over_settled']:.2f} x; "
        f"the warm-up over {clients['warm_up_over_s']:.1f} s after ready"
    )


def compile_summary(compiled: dict) -> str:
    """The three starts of bench.startup's measure_compile_startup, or why the cached one has no figure."""
    first, cached, eager = compiled["first"], compiled["cached"], compiled["eager"]
    if cached is None:
        return (
            f"first start {first['seconds']:.1f} s, eager {eager['seconds']:.1f} s; the first start did not save "
            "its compile cache, so no cached start was measured (see its log)"
        )
    if compiled["cached_over_eager"] is None:
        return (
            f"first start {first['seconds']:.1f} s, eager {eager['seconds']:.1f} s; the second start did not "
            f"restore the cache ({cached['seconds']:.1f} s, see its log)"
        )
    return (
        f"first start {first['seconds']:.1f} s (every shape compiled at {_num(compiled['first_compiled_s'])} s, "
        f"its cache saved at {first['waited_s']:.1f} s, {compiled['archive_bytes'] / 1e6:.1f} MB), with the cache "
        f"{cached['seconds']:.1f} s (every shape compiled at {_num(compiled['cached_compiled_s'])} s), eager "
        f"{eager['seconds']:.1f} s: {compiled['cached_over_eager']:.2f} x"
    )


def compile_bound(compiled: dict) -> str:
    """What the cached compile start spends before ready beyond the eager one: restoring the cache, and the readiness
    warm-up (on the eager forward; a longer one means the compile is holding readiness)."""
    cached, eager = compiled["cached"]["phases"], compiled["eager"]["phases"]
    restore = compiled["cached"].get("restore_s") or 0.0

    def warm(phases: dict) -> float:
        return phases.get("warm-up done", 0.0) - phases.get("model loaded", 0.0)

    return (
        f"restoring the cache took {restore:.1f} s and the readiness warm-up {warm(cached):.1f} s with the cache "
        f"(eager: {warm(eager):.1f} s); the first start {compiled['first']['seconds']:.1f} s"
    )


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(results: dict) -> str:
    lines = []
    for model in models(results):
        levels = sorted({r["concurrency"] for r in results["runs"] if r["model"] == model})
        if not levels:
            continue
        lines.append(
            f"\n{model + ' model':<18}{'ours':>24} | {'litserve':>18} | {'baseline':>18} | {'ours/baseline':>13}"
        )
        lines.append(
            f"{'clients':>7} {'req/s':>10} {'p50':>7} {'p95':>7} {'p99':>7} | {'req/s':>10} {'p95':>7} |"
            f" {'req/s':>10} {'p95':>7} | {'x req/s':>7} {'x p95':>5}"
        )
        for level in levels:
            o, p, b = (_at(results, system, model, level) for system in (OURS, PEER, BASELINE))
            speedup = _ratio(_field(o, "throughput_rps"), _field(b, "throughput_rps"))
            lines.append(
                f"{level:>7} {_num(_field(o, 'throughput_rps')):>10} {_num(_field(o, 'p50_ms')):>7} "
                f"{_num(_field(o, 'p95_ms')):>7} {_num(_field(o, 'p99_ms')):>7} | "
                f"{_num(_field(p, 'throughput_rps')):>10} {_num(_field(p, 'p95_ms')):>7} | "
                f"{_num(_field(b, 'throughput_rps')):>10} {_num(_field(b, 'p95_ms')):>7} | {_num(speedup, 2):>7} "
                f"{_num(_ratio(_field(o, 'p95_ms'), _field(b, 'p95_ms')), 2):>5}"
            )
        two = [r for r in series(results, OURS_2W, model)]
        if two:
            lines.append(
                "  ours with 2 workers: "
                + ", ".join(f"{r['concurrency']}: {r['throughput_rps']:.0f} req/s" for r in two)
            )
    lines.append("  (latencies in ms)")
    label = results["setup"]["model_label"]
    for system, endpoint in ((OURS_OPENAI, "/v1/embeddings"), (OURS_OIP, "/v2/models/<name>/infer")):
        other, ours = peak(results, system, label), peak(results, OURS, label)
        if other and ours:
            lines.append(
                f"{endpoint}: peak {other['throughput_rps']:.1f} req/s at {other['concurrency']} clients, "
                f"{_ratio(other['throughput_rps'], ours['throughput_rps']):.2f} x /predict's "
                f"(p95 {other['p95_ms']:.1f} ms)"
            )
    raw = results.get("raw_model")
    if raw:
        rates = ", ".join(f"{k}: {v:.1f}" for k, v in raw["items_per_s"].items())
        lines.append(
            f"raw model (texts/s by batch size): {rates}; best {raw['best_items_per_s']:.1f} "
            f"at batch {raw['best_batch_size']}"
        )
    bare = peak(results, BARE, NULL)
    if bare:
        lines.append(f"bare ASGI ceiling: {bare['throughput_rps']:.0f} req/s at {bare['concurrency']} clients")
    for o in results.get("overload", []):
        lines.append(
            f"overload, {o['system']}: {o['concurrency']} clients retrying at once: goodput "
            f"{o.get('goodput_rps', o['throughput_rps']):.1f} req/s within {_num(o.get('deadline_ms'), 0)} ms "
            f"(all 200s {o['throughput_rps']:.1f}), answers {o['statuses']}, 503 median "
            f"{_num(o['shed_p50_ms'], 2)} ms, 200 median {_num(o['p50_ms'], 1)} ms, p99 within the "
            f"deadline {_num(o.get('within_deadline_p99_ms'), 1)} ms"
        )
    for c in results.get("rejection_cost", []):
        lines.append(
            f"cost of an answer, {c['system']} (null model, {c['clients']} clients): "
            f"{c['answers_per_s']:.0f} answers/s {c['statuses']}, {_num(c['cpu_us_per_answer'])} us CPU "
            f"each, {1e6 / c['cpu_us_per_answer'] if c['cpu_us_per_answer'] else 0:.0f} per core-second"
        )
    logs = [(r["system"], r["model"], r["concurrency"], r.get("log_bytes_per_request")) for r in results["runs"]]
    ours_logs = [f"{m}@{c}: {_num(b, 1)}" for s, m, c, b in logs if s == OURS and b is not None]
    if ours_logs:
        lines.append("ours, log bytes per successful request: " + ", ".join(ours_logs))
    gen = results.get("generator")
    if gen:
        lines.append(
            f"load generator ceiling: {gen['ceiling_rps']:.0f} req/s per core "
            f"({gen['client_cpu_us_per_request']:.0f} us CPU/request), "
            f"{gen['headroom_over_fastest_run']:.1f} x the fastest run"
        )
    startup = results.get("startup")
    if startup:
        runs = sorted(startup["ours"], key=lambda run: run["seconds"])
        marks = ", ".join(
            f"{name} {at:.1f}" for name, at in sorted(runs[len(runs) // 2]["phases"].items(), key=lambda item: item[1])
        )
        lines.append(
            f"start-to-ready (median of {startup['repeats']}): ours {startup['ours_median_s']:.1f} s, the bare "
            f"script {startup['bare_median_s']:.1f} s: {startup['ratio']:.2f} x; ours, s from start: {marks}"
        )
        if startup.get("first_client"):
            lines.append(first_client_summary(startup["first_client"]))
        costs = runs[len(runs) // 2].get("at_ready")
        if costs:
            lines.append(
                "ours at ready, CPU spent and memory by process: "
                + ", ".join(
                    f"{role} {cost['cpu_s']:.1f} s {cost['rss_mib']:.0f} MiB"
                    for role, cost in costs.items()
                    if cost["cpu_s"] is not None and cost["rss_mib"] is not None
                )
            )
    compiled = results.get("compile_startup")
    if compiled:
        lines.append(
            f"start-to-ready with torch.compile (MAX_BATCH_SIZE {compiled['max_batch_size']}): "
            + compile_summary(compiled)
        )
    lines.append("targets:")
    for t in results["targets"]:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        need = f"{'<=' if t.get('at_most') else '>='} {t['threshold']:g}"
        lines.append(f"  [{verdict:>12}] {t['target']}: {_num(t['value'], 2)} (need {need})")
        if t["met"] is False and t.get("bound"):
            lines.append(f"                 bound by {t['bound']}")
    return "\n".join(lines)
