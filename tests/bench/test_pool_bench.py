"""`python -m bench.pool` end to end at small sizes (the harness works, its figures are sane; no timing targets), the
routing simulation's arithmetic checked by hand and its use of the servers' own router, and the hop bench between
two real pool servers at a small size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.pool_hop import measure
from bench.pool_routing import best_possible, simulate, slots_for
from inference_server.pool.affinity import candidates
from inference_server.pool.peer_router import PeerRouter

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_pool_bench_runs_at_small_sizes(tmp_path):
    from inference_server.testing import build_tiny_bert

    miss_model = build_tiny_bert(tmp_path / "miss", "text-embedding")
    out = tmp_path / "pool.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.pool",
            "--models",
            "6",
            "--slots",
            "2",
            "--requests",
            "30",
            "--rate",
            "30",
            "--hit-requests",
            "10",
            "--reps",
            "2",
            "--s3-reps",
            "1",
            "--cycles",
            "6",
            "--miss-model",
            str(miss_model),
            "--out",
            str(out),
            "--core",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["hit"]["pool_hit"]["n"] > 0 and report["hit"]["p50_ratio"] > 0
    assert 0 <= report["zipf"]["hit_rate"] <= 1 and report["zipf"]["counted"] == 24
    assert report["miss"]["host_memory"]["tiers"] == ["host"]
    assert report["miss"]["local_disk"]["tiers"] == ["disk"]
    assert report["miss"]["s3"]["tiers"] == ["s3"]
    cycles = report["cycles"]
    assert cycles["cycles"] == 6 and cycles["descriptor_growth"] <= 2 and cycles["thread_growth"] <= 0


def test_the_best_possible_hit_rate_is_the_top_slots_share_of_zipf():
    # By hand: Zipf(1.1) over 3 models weighs 1, 2^-1.1 = 0.4665, 3^-1.1 = 0.2987; two slots hold 1.4665 of 1.7652.
    assert best_possible(3, 2) == pytest.approx(1.4665 / 1.7652, abs=1e-4)
    assert slots_for(0.8, 3) == 2 and slots_for(0.5, 3) == 1


def test_affinity_keeps_each_model_on_its_own_tasks_and_beats_least_outstanding_at_four_tasks():
    tasks = ["t0", "t1", "t2", "t3"]
    assert candidates("m1", tasks, 2) == candidates("m1", list(reversed(tasks)), 2)  # the order of tasks is no input
    moved = sum(candidates(f"m{i}", tasks)[0] != candidates(f"m{i}", tasks[:3])[0] for i in range(1000))
    assert 150 < moved < 350  # a task leaving moves about a quarter of the models: its own
    plain = simulate(models=200, slots=40, tasks=4, requests=20000, routing="least-outstanding")
    routed = simulate(models=200, slots=40, tasks=4, requests=20000, routing="peer-router")
    assert routed["hit_rate"] > plain["hit_rate"] + 0.05
    assert (
        plain["forwarded"] == 0 and 0.6 < routed["forwarded"] < 0.9
    )  # three quarters enter a task that is not the owner


def test_the_routing_simulation_drives_the_servers_own_router(monkeypatch):
    routed = simulate(models=200, slots=40, tasks=4, requests=5000, routing="peer-router")
    monkeypatch.setattr(PeerRouter, "owner", lambda self, model: None)  # a router that keeps every request
    kept = simulate(models=200, slots=40, tasks=4, requests=5000, routing="peer-router")
    plain = simulate(models=200, slots=40, tasks=4, requests=5000, routing="least-outstanding")
    assert kept == plain != routed


def test_the_hop_bench_measures_both_paths_between_two_real_servers():
    report = measure(30)
    assert report["direct"]["n"] == report["hop"]["n"] == 30
    assert report["hop"]["p50_ms"] > 0 and report["direct"]["p50_ms"] > 0
