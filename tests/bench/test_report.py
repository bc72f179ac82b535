"""Ratios and targets from a hand-made result, the percentile helper, and the CLI presets."""

from __future__ import annotations

import pytest

from bench.config import BenchConfig, parse_args
from bench.loadgen import encode_requests, percentile
from bench.report import compile_summary, evaluate, generator_ceiling, table
from bench.run import truncation


def _run(system, model, concurrency, rps, p95, client_cpu=1.0):
    return {
        "system": system,
        "model": model,
        "concurrency": concurrency,
        "requests": int(rps * 10),
        "duration_s": 10.0,
        "errors": 0,
        "throughput_rps": rps,
        "p50_ms": p95 / 2,
        "p95_ms": p95,
        "p99_ms": p95 * 1.5,
        "client_cpu_s": client_cpu,
        "server_cpu_s": 10.0,
    }


@pytest.fixture
def results():
    runs = [
        _run("ours", "minilm", 1, 50, 25),
        {**_run("ours", "minilm", 64, 210, 400), "log_bytes_per_request": 4.0},
        _run("litserve", "minilm", 64, 140, 480),
        _run("baseline", "minilm", 1, 60, 20),
        _run("baseline", "minilm", 64, 55, 1500),
        _run("ours", "null", 64, 2000, 40),
        _run("ours-2w", "null", 64, 3000, 30),
        _run("bare-asgi", "null", 64, 5000, 15, client_cpu=2.5),
    ]
    overload = {
        "system": "ours",
        "model": "minilm",
        "concurrency": 600,
        "duration_s": 10.0,
        "throughput_rps": 195.0,
        "statuses": {"200": 1950, "503": 40000},
        "shed_p50_ms": 2.0,
        "p50_ms": 1500.0,
        "goodput_rps": 195.0,
        "deadline_ms": 1000.0,
        "within_deadline_p99_ms": 900.0,
    }
    bare = {
        "system": "bare-asgi",
        "model": "null",
        "concurrency": 600,
        "duration_s": 10.0,
        "throughput_rps": 30000.0,
        "statuses": {"200": 300000},
        "shed_p50_ms": None,
        "p50_ms": 19.0,
    }
    costs = [
        {
            "system": "ours",
            "clients": 64,
            "statuses": {"503": 100},
            "answers_per_s": 10.0,
            "server_cores": 0.5,
            "cpu_us_per_answer": 50.0,
            "cores_by_process": {"worker-0": 0.5},
        },
        {
            "system": "bare-asgi",
            "clients": 64,
            "statuses": {"200": 100},
            "answers_per_s": 10.0,
            "server_cores": 0.3,
            "cpu_us_per_answer": 30.0,
            "cores_by_process": None,
        },
    ]
    return {
        "setup": {"model_label": "minilm"},
        "runs": runs,
        "overload": [overload, bare],
        "rejection_cost": costs,
        "raw_model": {"items_per_s": {"1": 60.0, "32": 150.0}, "best_batch_size": 32, "best_items_per_s": 150.0},
    }


def test_targets(results):
    ratios, targets = evaluate(results)
    assert ratios["ours_over_raw_best_at_64"] == pytest.approx(1.4)  # issue 23's 1.3 met
    assert ratios["ours_over_peer_at_64"] == pytest.approx(1.5)  # issue 23's 1.5 met, just
    assert ratios["ours_over_baseline_at_64"] == pytest.approx(210 / 55)
    assert ratios["ours_p50_over_baseline_p50_at_1"] == pytest.approx(12.5 / 10)
    assert ratios["ours_null_over_bare_asgi"] == pytest.approx(0.4)
    assert ratios["ours_2_workers_null_over_1_worker"] == pytest.approx(1.5)
    assert ratios["overload_goodput_over_saturation"] == pytest.approx(195 / 210)
    assert ratios["overload_offered_over_saturation"] == pytest.approx(4195 / 210)
    assert ratios["rejection_cpu_over_bare_asgi_answer"] == pytest.approx(50 / 30)
    assert [t["met"] for t in targets] == [
        True,
        True,
        True,
        False,
        True,
        True,
        True,
        True,
        True,
        False,
        True,
        None,
        None,
        None,
    ]


def test_issue_23s_throughput_targets_miss_below_1_3_x_raw_and_1_5_x_the_peer(results):
    results["raw_model"]["best_items_per_s"] = 210 / 1.29
    results["runs"][2] = _run("litserve", "minilm", 64, 210 / 1.49, 480)
    _, targets = evaluate(results)
    assert [t["met"] for t in targets[:2]] == [False, False]
    assert "1.5 x the peer needs" in targets[1]["bound"]


def test_a_costly_no_and_late_200s_miss_their_targets(results):
    results["rejection_cost"][0]["cpu_us_per_answer"] = 61.0  # > 2 x the bare app's 30
    results["overload"][0]["within_deadline_p99_ms"] = 10_001.0  # past REQUEST_TIMEOUT_S (10 s by default)
    _, targets = evaluate(results)
    verdicts = {t["target"].split(":")[0]: t["met"] for t in targets}
    assert verdicts["a rejection's CPU <= 2 x a bare ASGI answer's (null model, every request shed)"] is False
    assert [t["met"] for t in targets if "p99 of the 200s" in t["target"]] == [False]


def test_missing_systems_are_not_measured(results):
    results["runs"] = [r for r in results["runs"] if r["system"] != "baseline"]
    results["overload"] = []
    _, targets = evaluate(results)
    assert [t["met"] for t in targets] == [
        True,
        True,
        None,
        None,
        None,
        None,
        True,
        None,
        True,
        False,
        True,
        None,
        None,
        None,
    ]


def test_generator_ceiling_from_the_bare_asgi_run(results):
    gen = generator_ceiling(results)
    assert gen is not None
    assert gen["ceiling_rps"] == pytest.approx(50000 / 2.5)
    assert gen["client_cpu_us_per_request"] == pytest.approx(50.0)
    assert gen["headroom_over_fastest_run"] == pytest.approx(4.0)


def test_table_names_ratios_and_verdicts(results):
    results["generator"] = generator_ceiling(results)
    results["ratios"], results["targets"] = evaluate(results)
    text = table(results)
    assert "ours/baseline" in text and "litserve" in text and "MISSED" in text and "met" in text
    assert "3.82" in text  # ours / baseline at 64 clients
    assert "overload, ours: 600 clients" in text and "log bytes per successful request" in text


def test_a_missed_target_says_what_the_run_measured_binds_it(results):
    results["runs"] = [r for r in results["runs"] if r["system"] != "ours-2w"]
    results["runs"].append(
        {
            **_run("ours-2w", "null", 64, 2400, 30),
            "cores_by_process": {"generator": 0.2, "model": 0.5, "worker-0": 0.6, "worker-1": 0.65},
        }
    )
    results["overload"][0]["shed_p50_ms"] = 18.0
    results["ratios"], results["targets"] = evaluate(results)
    assert results["ratios"]["overload_bare_asgi_p50_ms"] == 19.0
    text = table(results)
    assert (
        "bound by the HTTP stack: the bare ASGI app's constant answer takes 19.0 ms median under the same 600" in text
    )
    assert "bound by two cores for the server and the generator: generator 0.20, model 0.50, worker-0 0.60" in text
    assert text.count("bound by") == 2  # only missed targets say it


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.95), percentile(values, 0.99)) == (50.0, 95.0, 99.0)
    assert percentile([7.0], 0.99) == 7.0


def test_requests_are_complete_http_messages():
    (request,) = encode_requests("127.0.0.1", 80, "/predict", [b'{"text":"hi"}'], {"x-api-key": "k"})
    head, body = request.split(b"\r\n\r\n")
    assert body == b'{"text":"hi"}' and b"Content-Length: 13" in head and b"x-api-key: k" in head


def test_short_preset_and_overrides():
    cfg = parse_args(["--short", "--concurrency", "1,4", "--systems", "ours:null,bare-asgi:null"])
    assert cfg.mode == "short" and cfg.concurrency == (1, 4) and cfg.duration_s < BenchConfig().duration_s
    assert cfg.systems == (("ours", "null"), ("bare-asgi", "null"))
    with pytest.raises(SystemExit):
        parse_args(["--systems", "bare-asgi:minilm"])


def test_a_run_whose_texts_the_model_paths_would_truncate_stops_and_names_the_flag():
    short = parse_args(["--short"])
    assert short.max_sequence_length == 32 and BenchConfig().max_sequence_length == 128
    assert truncation(short, {"longest_text_tokens": 24}) is None  # SAME_TEXT
    varied = parse_args(["--short", "--varied-texts"])
    problem = truncation(varied, {"longest_text_tokens": 76})
    assert problem and "76 tokens, more than the 32" in problem and "--max-sequence-length 76" in problem
    assert (
        truncation(
            parse_args(["--short", "--varied-texts", "--max-sequence-length", "128"]), {"longest_text_tokens": 76}
        )
        is None
    )


def _start(seconds, phases):
    return {"seconds": seconds, "phases": phases}


def test_startup_ratio_target_and_what_binds_a_missed_one(results):
    slow = {
        "model fetched": 4.0,
        "model loaded": 15.0,
        "warm-up done": 15.5,
        "ready for traffic": 16.0,
        "background warm-up done": 40.0,
    }
    at_ready = {"model": {"cpu_s": 5.15, "rss_mib": 464.1}, "worker-0": {"cpu_s": 0.73, "rss_mib": 80.7}}
    results["startup"] = {
        "repeats": 3,
        "ratio": 1.6,
        "ours_median_s": 16.0,
        "bare_median_s": 10.0,
        "ours": [_start(17.0, {}), {**_start(16.0, slow), "at_ready": at_ready}, _start(12.0, {})],
        "bare": [],
    }
    results["ratios"], results["targets"] = evaluate(results)
    startup = target(results["targets"], "start-to-ready")
    assert startup["met"] is False and startup["value"] == 1.6
    assert startup["bound"] == "the phase ending at 'model loaded': 11.0 s of the median start"  # not the background
    text = table(results)
    assert "start-to-ready (median of 3): ours 16.0 s, the bare script 10.0 s: 1.60 x" in text
    assert "ours at ready, CPU spent and memory by process: model 5.2 s 464 MiB, worker-0 0.7 s 81 MiB" in text
    results["startup"]["ratio"] = 1.2
    _, targets = evaluate(results)
    assert target(targets, "start-to-ready")["met"] is True


def _first_client(first_p95_ms: float, warm_up_over_s: float) -> dict:
    return {
        "starts": 3,
        "window_s": 10.0,
        "first_p50_ms": 14.3,
        "first_p95_ms": first_p95_ms,
        "first_p99_ms": 380.0,
        "settled_p50_ms": 9.9,
        "settled_p95_ms": 20.0,
        "settled_p99_ms": 24.0,
        "p95_over_settled": round(first_p95_ms / 20.0, 3),
        "warm_up_over_s": warm_up_over_s,
    }


@pytest.mark.parametrize(
    ("first_p95_ms", "warm_up_over_s", "bound"),
    [
        (41.6, 5.5, "the background warm-up, over 5.5 s after ready: 42 ms against 20 ms settled"),
        (36.0, 0.0, "the machine: nothing of the server's warm-up ran after ready (36 ms against 20 ms settled)"),
    ],
)
def test_the_first_clients_target_and_what_binds_a_missed_one(results, first_p95_ms, warm_up_over_s, bound):
    results["startup"] = {
        "repeats": 3,
        "ratio": 1.1,
        "ours_median_s": 4.2,
        "bare_median_s": 3.9,
        "ours": [_start(4.2, {})],
        "bare": [],
        "first_client": _first_client(first_p95_ms, warm_up_over_s),
    }
    results["ratios"], results["targets"] = evaluate(results)
    first = target(results["targets"], "one client's p95 in the first seconds after ready")
    assert first["met"] is False and first["value"] == pytest.approx(first_p95_ms / 20.0) and first["threshold"] == 1.5
    assert first["bound"] == bound
    assert (
        f"first client after ready (median of 3): the first 10 s p50 14.3 p95 {first_p95_ms:.1f} p99 380.0 ms, "
        f"settled p50 9.9 p95 20.0 p99 24.0 ms: p95 {first_p95_ms / 20:.2f} x; the warm-up over {warm_up_over_s:.1f} "
        "s after ready"
    ) in table(results)
    results["startup"]["first_client"] = _first_client(25.0, 0.0)
    assert target(evaluate(results)[1], "one client's p95 in the first seconds")["met"] is True


def target(targets: list[dict], start: str) -> dict:
    (found,) = [t for t in targets if t["target"].startswith(start)]
    return found


def test_the_compile_cache_target_and_what_binds_it(results):
    _, targets = evaluate(results)
    assert target(targets, "with torch.compile")["met"] is None  # not measured: no compile start-ups in the run
    cached = {
        "model fetched": 1.0,
        "compile cache restored": 1.4,
        "model loaded": 6.0,
        "warm-up done": 13.7,
        "ready for traffic": 13.9,
    }
    eager = {"model loaded": 4.2, "warm-up done": 5.0}
    results["compile_startup"] = {
        "max_batch_size": 4,
        "eager": _start(5.5, eager),
        "first": {**_start(46.6, {}), "waited_s": 115.4},
        "first_compiled_s": 114.9,
        "cached": {**_start(13.9, cached), "restore_s": 0.4},
        "cached_compiled_s": 30.2,
        "archive_bytes": 2_951_943,
        "cached_over_eager": 2.527,
    }
    results["ratios"], results["targets"] = evaluate(results)
    compiled = target(results["targets"], "with torch.compile")
    assert compiled["met"] is False and compiled["value"] == 2.527 and compiled["threshold"] == 1.3
    assert (
        "restoring the cache took 0.4 s and the readiness warm-up 7.7 s with the cache (eager: 0.8 s); the first "
        "start 46.6 s"
    ) in compiled["bound"]
    assert (
        "start-to-ready with torch.compile (MAX_BATCH_SIZE 4): first start 46.6 s (every shape compiled at "
        "114.9 s, its cache saved at 115.4 s, 3.0 MB), with the cache 13.9 s (every shape compiled at 30.2 s), "
        "eager 5.5 s: 2.53 x"
    ) in table(results)
    results["compile_startup"]["cached_over_eager"] = 1.25
    assert target(evaluate(results)[1], "with torch.compile")["met"] is True


@pytest.mark.parametrize("failed", ["not saved", "not restored"])
def test_a_compile_start_up_without_a_cached_figure_is_not_measured_and_says_why(results, failed):
    results["compile_startup"] = {
        "max_batch_size": 4,
        "eager": _start(5.5, {}),
        "first": {**_start(46.6, {}), "waited_s": None},
        "cached": None if failed == "not saved" else {**_start(40.0, {}), "waited_s": None},
        "archive_bytes": None,
        "cached_over_eager": None,
        "first_compiled_s": None,
        "cached_compiled_s": None,
    }
    results["ratios"], results["targets"] = evaluate(results)
    compiled = target(results["targets"], "with torch.compile")
    assert compiled["met"] is None and compiled["bound"] is None
    said = {"not saved": "did not save its compile cache", "not restored": "did not restore the cache (40.0 s"}[failed]
    assert said in table(results) and said in compile_summary(results["compile_startup"])
