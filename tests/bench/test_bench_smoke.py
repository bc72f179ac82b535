"""`python -m bench --short` end to end: the harness works and its numbers are sane (not timing targets)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.config import all_systems
from inference_server.front.access_log import ERROR_LINES_PER_S, SLOW_LINES_PER_S

# The most HTTP workers a bench system runs (ours-2w): each worker rate-limits its own error and slow lines.
MAX_WORKERS = 2

ROOT = Path(__file__).resolve().parents[2]
# --short's levels less its middle one: 1 client (the p50 target) and 64 (the saturation targets) are what the report
# reads; a third level only lengthened the run.
LEVELS = (1, 64)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("bench-results")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--short",
            "--concurrency",
            ",".join(map(str, LEVELS)),
            "--output-dir",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done, out


@pytest.mark.slow
@pytest.mark.timing
def test_writes_json_and_png(short_run):
    _, out = short_run
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((out / "bench.json").read_text())
    assert results["setup"]["mode"] == "short"
    assert results["setup"]["torch_threads_seen"] == results["setup"]["torch_threads"]


@pytest.mark.slow
@pytest.mark.timing
def test_every_system_measured_with_sane_numbers(short_run):
    _, out = short_run
    results = json.loads((out / "bench.json").read_text())
    raw = results["raw_model"]
    assert raw["best_items_per_s"] > 0 and all(rate > 0 for rate in raw["items_per_s"].values())
    measured = {(r["system"], r["model"]) for r in results["runs"]}
    assert measured == set(all_systems("minilm"))
    for run in results["runs"]:
        name = f"{run['system']}:{run['model']}@{run['concurrency']}"
        assert run["errors"] == 0 and run["connections"] == run["concurrency"], name
        assert run["statuses"] == {"200": run["requests"]}, name
        assert run["requests"] > 0 and run["throughput_rps"] > 0, name
        assert 0 < run["p50_ms"] <= run["p95_ms"] <= run["p99_ms"], name
        assert run["client_cpu_s"] > 0 and run["server_cpu_s"] is not None, name
    assert results["generator"]["ceiling_rps"] > 0
    unmeasured = [t["target"] for t in results["targets"] if t["value"] is None]
    # The short overload window (1 s) can end before any admitted request's deadline comes: the p99 of the 200s
    # within it is a full run's figure; --short skips the torch.compile start-ups (python -m bench.startup --compile,
    # 2.5 minutes). Every other target is measured.
    assert len(results["targets"]) == 14, results["targets"]
    assert all("p99 of the 200s" in t or "torch.compile" in t for t in unmeasured), unmeasured
    assert "compile_startup" not in results
    # An HTTP worker tokenizes without transformers or torch (handlers/fast_tokenizer.py): a fraction of the model
    # process's memory and CPU at ready.
    (start,) = results["startup"]["ours"]
    # Issue 40's report: one client from the moment /ready answers, and again once the warm-up is over. Its ratio is a
    # full run's figure (the short windows hold a few hundred requests, and load moves a p95).
    windows = start["first_client"]
    assert windows["window_s"] == 2.0 and windows["warm_up_over_s"] == 0.0  # nothing warms after ready
    for name in ("first", "settled"):
        assert windows[name]["requests"] > 0 and windows[name]["statuses"] == {"200": windows[name]["requests"]}, name
        assert 0 < windows[name]["p50_ms"] <= windows[name]["p95_ms"], name
    assert results["startup"]["first_client"]["p95_over_settled"] > 0
    at_ready = start["at_ready"]
    assert at_ready["worker-0"]["rss_mib"] < at_ready["model"]["rss_mib"] / 3, at_ready
    assert at_ready["worker-0"]["cpu_s"] < at_ready["model"]["cpu_s"] / 3, at_ready
    overload = {o["system"]: o for o in results["overload"]}
    assert set(overload) == {"ours", "litserve", "bare-asgi"}  # the bare app: the HTTP stack's floor
    # Under overload our server sheds (503) and answers every request: no other 5xx, none lost. Only that holds at any
    # load: on a machine busy with other work the 1 s window returned 12,903 503s and no 200 (issue 43), and an
    # admitted request whose batch overran its plan ends 504 at its deadline. How much was admitted and answered in
    # time (goodput) is the full run's target (make bench); test_admission_live bounds the deadlines.
    statuses = overload["ours"]["statuses"]
    assert set(statuses) <= {"200", "503", "504"} and statuses.get("503"), statuses
    not_ok = sum(count for status, count in statuses.items() if status != "200")
    assert overload["ours"]["errors"] == not_ok, overload["ours"]  # every error is an answer: no broken connection
    assert overload["bare-asgi"]["statuses"] == {"200": overload["bare-asgi"]["requests"]}
    ours_runs = [r for r in results["runs"] if r["system"] in ("ours", "ours-2w")]
    assert all({"model", "worker-0", "generator"} <= set(r["cores_by_process"]) for r in ours_runs)
    # Issue 14's promise, at our server's default logging settings: at most 30 bytes of log per successful
    # request, at every level of every endpoint (log_cost: the interval documents at their steady rate). Part of a
    # level's log is paid per second, whatever its throughput: the interval documents and the rate-limited error and
    # slow lines. On a machine busy with other work a level answers a fraction of its requests, so that part is
    # allowed beside the 30 bytes; the full run (make bench) reports the figure at its real throughput.
    ours = [r for r in results["runs"] if r["system"].startswith("ours")]
    assert len(ours) == 5 * len(LEVELS)  # ours, ours-openai, ours-oip on MiniLM; ours, ours-2w null
    over = {}
    for r in ours:
        per_second = (
            r["log_interval_bytes_per_s"] + (ERROR_LINES_PER_S + SLOW_LINES_PER_S) * MAX_WORKERS * r["log_longest_line"]
        )
        allowed = 30 + per_second * r["log_window_s"] / r["requests"]
        if not (r["log_bytes_per_request"] is not None and 0 <= r["log_bytes_per_request"] <= allowed):
            over[f"{r['system']}:{r['model']}@{r['concurrency']}"] = (r["log_bytes_per_request"], round(allowed, 1))
    assert over == {}


@pytest.mark.slow
@pytest.mark.timing
def test_prints_the_ratio_table(short_run):
    done, out = short_run
    assert "ours/baseline" in done.stdout and "targets:" in done.stdout
    assert str(out / "bench.json") in done.stdout
