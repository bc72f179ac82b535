"""Issue 55: the advisor counts LoRA adapters in the GPU fit, and ``sizing adapters`` prices a hundred fine-tunes on one
base against a hundred services, each figure checked by hand from the catalog's prices and the stated formulas."""

from __future__ import annotations

import json

import pytest

from gpu_inference_constructs.core.instance_catalog import on_demand_price
from gpu_inference_constructs.sizing import Assumptions, ModelShape, Purchase, Workload, advise
from gpu_inference_constructs.sizing.cli import main

GIB = 2**30
LLAMA_7B_PARAMS = 6_738_415_616
LLAMA_7B = ModelShape(
    params=LLAMA_7B_PARAMS, dtype="fp16", kind="llm", layers=32, hidden_size=4096, heads=32, intermediate_size=11008
)
# One rank-1 Llama-2-7B adapter's elements per layer, every projection: q and o (h + h), k and v (h + kv, kv = h
# without grouped-query attention), gate and up (h + i), down (i + h).
PER_RANK_PER_LAYER = 2 * (4096 + 4096) + 2 * (4096 + 4096) + 2 * (4096 + 11008) + (11008 + 4096)
FLAGS = [
    "--params",
    str(LLAMA_7B_PARAMS),
    "--dtype",
    "fp16",
    "--kind",
    "llm",
    "--layers",
    "32",
    "--hidden-size",
    "4096",
    "--heads",
    "32",
    "--intermediate-size",
    "11008",
    "--tokens-per-request",
    "512,256",
    "--p95-ms",
    "60000",
]


def workload(**kw) -> Workload:
    return Workload(**{"requests_per_second": 1, "p95_ms": 60_000, "prompt_tokens": 512, "output_tokens": 256, **kw})


def test_the_advisor_counts_the_adapter_slots_in_the_gpus_memory():
    plain = {a.name: a for a in advise(LLAMA_7B, workload(), Purchase(), Assumptions())}["g5.xlarge"]
    lora = {a.name: a for a in advise(LLAMA_7B, workload(lora_rank=16, lora_resident=8), Purchase(), Assumptions())}
    g5 = lora["g5.xlarge"]
    assert PER_RANK_PER_LAYER == 78_080
    adapters = 8 * 16 * PER_RANK_PER_LAYER * 32 * 2 / GIB  # 0.596 GiB
    assert g5.memory is not None and plain.memory is not None
    assert g5.memory.adapters_gib == pytest.approx(adapters) and adapters == pytest.approx(0.5957, abs=1e-4)
    assert g5.memory.total_gib == pytest.approx(plain.memory.total_gib + adapters)
    assert g5.fits and "0.596 GiB LoRA adapters (8 on the GPU at rank 16)" in g5.reason
    # Rank 512: 8 slots take 19.0 GiB beside 12.6 GiB of weights, past the A10G's 21.6 usable; an L40S holds them.
    big = {a.name: a for a in advise(LLAMA_7B, workload(lora_rank=512, lora_resident=8), Purchase(), Assumptions())}
    assert not big["g5.xlarge"].fits and "LoRA adapters" in big["g5.xlarge"].reason
    assert big["g6e.xlarge"].fits


def test_a_hundred_fine_tunes_on_one_base_cost_a_hundredth_of_a_hundred_services(capsys):
    """0.05 requests per second in all, 768 tokens each: one g5.xlarge task serves them, and each of 100 separate
    services needs a task of its own on an instance of its own. All Spot (the purchase's default), at 0.4 of the
    catalog's On-Demand price."""
    assert main(["adapters", *FLAGS, "--requests-per-second", "0.05", "--lora-rank", "16", "--lora-resident", "8",
                 "--adapters", "100", "--instance-types", "g5.xlarge", "--json"]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    price, _ = on_demand_price("g5.xlarge", "us-east-1")
    tokens_per_hour = 0.05 * 3600 * (512 + 256)
    assert tokens_per_hour == 138_240
    one_base, separate = report["one_base"], report["separate"]
    assert (one_base["tasks_per_service"], one_base["instances_per_service"]) == (1, 1)
    assert (separate["services"], separate["tasks_per_service"], separate["instances_per_service"]) == (100, 1, 1)
    assert one_base["hourly_usd"] == pytest.approx(price * 0.4, abs=1e-4)
    assert separate["hourly_usd"] == pytest.approx(100 * price * 0.4, abs=1e-4)
    assert one_base["usd_per_million_tokens"] == pytest.approx(price * 0.4 / tokens_per_hour * 1e6, rel=1e-5)
    assert separate["usd_per_million_tokens"] == pytest.approx(100 * price * 0.4 / tokens_per_hour * 1e6, rel=1e-5)


def test_the_table_says_both_figures_and_what_is_assumed(capsys):
    assert main(["adapters", *FLAGS, "--requests-per-second", "0.05", "--lora-rank", "16", "--lora-resident", "8",
                 "--instance-types", "g5.xlarge"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "100 LoRA fine-tunes" in out and "100 separate services" in out and "per 1M tokens" in out
    assert "one base costs 1.0% of separate services" in out
    assert "at the base's speed" in out


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--lora-rank", "16"], "--lora-rank: give --lora-rank and --lora-resident together"),
        (["--adapters", "1", "--lora-rank", "16", "--lora-resident", "8"], "--adapters: 1"),
        ([], "--lora-rank: give --lora-rank and --lora-resident"),
    ],
)
def test_bad_adapter_arguments_get_a_clear_error(capsys, extra, message):
    assert main(["adapters", *FLAGS, "--requests-per-second", "0.05", *extra]) == 2
    assert message in capsys.readouterr().err
