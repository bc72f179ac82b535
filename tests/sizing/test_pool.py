"""``sizing pool``: the issue's 1,000 MiniLM-class encoders (2 req/s each) as one pool, its figures checked by hand;
Che's LRU approximation against cases with known answers; ``sizing pack`` naming a pool where one is cheaper."""

from __future__ import annotations

import json
import math

import pytest

from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.sizing.cli import main
from gpu_inference_constructs.sizing.pack import pack
from gpu_inference_constructs.sizing.pack_models import parse_models
from gpu_inference_constructs.sizing.pool import (
    LOAD_OVERHEAD_MS,
    PCIE_GB_PER_S,
    PoolAssumptions,
    lru_hit_rate,
    plan_pool,
    popularity,
)
from gpu_inference_constructs.sizing.workload import Assumptions, Purchase

MINILM = {
    "params": 22000000,
    "dtype": "fp16",
    "kind": "encoder",
    "layers": 6,
    "hidden_size": 384,
    "heads": 12,
    "intermediate_size": 1536,
    "requests_per_second": 2,
    "p95_ms": 100,
}
G4DN_XLARGE_ON_DEMAND = 0.526  # USD per hour, us-east-1 (the catalog's price)


@pytest.fixture(scope="module")
def thousand():
    return parse_models([{**MINILM, "name": f"m{index:04d}"} for index in range(1000)])


@pytest.fixture(scope="module")
def g4dn_affinity(thousand):
    (plan,) = plan_pool(thousand, Purchase(), Assumptions(), PoolAssumptions(affinity=True), only=["g4dn.xlarge"])
    return plan


def test_the_issues_thousand_encoders_cost_at_most_15_cents_per_million_on_two_g4dn_xlarge(g4dn_affinity):
    """By hand: a T4's usable 14.4 GiB (the advisor's, 10 % kept free) = 14,745.6 MiB, less one CUDA context (512),
    the cuBLAS workspaces (9.125) and one batch plan with the allocator's reserve (96 MiB x 1.25 = 120): 14,104.5 MiB;
    a MiniLM's weights, 22e6 x 2 bytes = 41.96 MiB, x 1.25 = 52.45 MiB: 268 resident per task, 536 over two tasks.
    Two g4dn.xlarge On-Demand: 2 x $0.526 = $1.052 an hour for 2,000 x 3,600 = 7.2M requests: $0.1461 per 1M
    (today: $7.31 shared, $73.06 dedicated)."""
    plan = g4dn_affinity
    weights_mib = 22e6 * 2 / 2**20
    budget = 14.4 * 1024 - 512 - 9.125 - 0.09375 * 1024 * 1.25
    assert plan.gpu_models_per_task == math.floor(budget / (weights_mib * 1.25)) == 268
    assert (plan.tasks, plan.instances) == (2, 2)
    assert plan.hourly_usd["on_demand"] == pytest.approx(2 * G4DN_XLARGE_ON_DEMAND)
    assert plan.usd_per_million_requests["on_demand"] == pytest.approx(2 * G4DN_XLARGE_ON_DEMAND / (2000 * 3600) * 1e6)
    assert plan.usd_per_million_requests["on_demand"] <= 0.15
    # Zipf(1.1) over 1,000 models, 536 resident: between the uniform's 53.6 % and the static top-536 share.
    shares = sorted(
        popularity(parse_models([{**MINILM, "name": f"m{i:04d}"} for i in range(1000)]), PoolAssumptions()),
        reverse=True,
    )
    assert 0.536 < plan.hit_rate < sum(shares[:536])
    assert plan.disk_rate == 0  # every other model is in the tasks' host memory
    assert plan.load_ms["host"] == pytest.approx(
        weights_mib * 1.048576 / (PCIE_GB_PER_S * 0.5 * 1000) * 1000 + LOAD_OVERHEAD_MS
    )
    assert plan.p95_ms_estimate is not None and plan.p95_ms_estimate <= 100


def test_without_affinity_or_with_the_rates_as_given_the_same_pool_needs_more(thousand, g4dn_affinity):
    (shared,) = plan_pool(thousand, Purchase(), Assumptions(), PoolAssumptions(), only=["g4dn.xlarge"])
    (given,) = plan_pool(
        thousand, Purchase(), Assumptions(), PoolAssumptions(popularity="given", affinity=True), only=["g4dn.xlarge"]
    )
    assert shared.tasks > g4dn_affinity.tasks and shared.hit_rate < g4dn_affinity.hit_rate
    # uniform rates: the pool needs every model resident somewhere: 1,000 / 268 -> 4 tasks, $0.29 per 1M
    assert (given.tasks, given.hit_rate) == (4, 1.0)
    assert given.usd_per_million_requests["on_demand"] == pytest.approx(4 * G4DN_XLARGE_ON_DEMAND / 7.2)


@pytest.mark.parametrize(("capacity", "expected"), [(500, 0.5), (250, 0.25), (1000, 1.0), (0, 0.0)])
def test_che_on_uniform_popularity_is_the_resident_share(capacity, expected):
    assert lru_hit_rate([1 / 1000] * 1000, capacity) == pytest.approx(expected, abs=1e-6)


def test_che_on_skewed_popularity_is_below_the_static_optimum():
    shares = [i**-1.1 for i in range(1, 1001)]
    total = sum(shares)
    shares = [s / total for s in shares]
    assert sum(shares[:200]) * 0.9 < lru_hit_rate(shares, 200) < sum(shares[:200])


def test_a_popularity_that_is_neither_given_nor_zipf_is_refused():
    with pytest.raises(ConfigError) as error:
        PoolAssumptions(popularity="zipf:-1")
    assert error.value.key == "--popularity"


def test_the_pool_command_prints_its_figures_and_assumptions(tmp_path, capsys):
    path = tmp_path / "models.json"
    path.write_text(json.dumps([{**MINILM, "name": f"m{index:04d}"} for index in range(1000)]))
    assert main(["pool", str(path), "--instance-types", "g4dn.xlarge", "--affinity"]) == 0
    out = capsys.readouterr().out
    assert "g4dn.xlarge" in out and "0.146" in out
    for assumption in (
        "popularity: zipf:1.1",
        "Che's approximation",
        "load from host memory",
        "each task holds its own share",
    ):
        assert assumption in out
    assert main(["pool", str(path), "--instance-types", "g4dn.xlarge", "--affinity", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["types"][0]["tasks"] == 2 and found["assumptions"]["affinity"] is True


def test_pack_names_a_pool_where_many_sparse_models_would_cost_less():
    models = parse_models([{**MINILM, "name": f"m{index:03d}"} for index in range(40)])
    result = pack(models, Purchase(), Assumptions(), only=["g4dn.xlarge"])
    (note,) = [n for n in result.notes if "ModelPool" in n]
    assert "sizing pool MODELS.json" in note and "hit rate" in note
    few = pack(models[:3], Purchase(), Assumptions(), only=["g4dn.xlarge"])
    assert not [n for n in few.notes if "ModelPool" in n]
