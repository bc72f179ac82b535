"""The advisor's arithmetic against values computed by hand from the formulas in sizing/advisor.py."""

from __future__ import annotations

import math
from dataclasses import fields
from datetime import date

import pytest

from gpu_inference_constructs.capacity.gpu_capacity import GpuCapacityProps
from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.core.instance_catalog import (
    ACCELERATORS,
    CATALOG,
    NON_CUDA_CATALOG,
    ON_DEMAND_HOURLY_USD,
    AcceleratorSpec,
    GpuInstanceType,
    figure_sources,
    on_demand_price,
)
from gpu_inference_constructs.sizing import Assumptions, ModelShape, Purchase, Workload, advise, from_model_dir

GIB = 2**30
# Llama-2-7B by hand: embeddings and lm_head 2 x 32000 x 4096, final norm 4096, and per layer
# 4 x 4096^2 (attention) + 3 x 11008 x 4096 (MLP) + 2 x 4096 (norms), 32 layers.
LLAMA_7B_PARAMS = 2 * 32000 * 4096 + 4096 + 32 * (4 * 4096**2 + 3 * 11008 * 4096 + 2 * 4096)
LLAMA_13B_PARAMS = 2 * 32000 * 5120 + 5120 + 40 * (4 * 5120**2 + 3 * 13824 * 5120 + 2 * 5120)


def by_name(advice):
    return {a.name: a for a in advice}


def llm_workload(**kw):
    return Workload(**{"requests_per_second": 1, "p95_ms": 60_000, "prompt_tokens": 512, "output_tokens": 256, **kw})


def test_parameter_count_and_dtype_come_from_the_safetensors_headers(llama_7b):
    model = from_model_dir(llama_7b)
    assert (model.params, model.dtype, model.kind) == (LLAMA_7B_PARAMS, "fp16", "llm")
    assert LLAMA_7B_PARAMS == 6_738_415_616  # the published 6.74B
    assert (model.layers, model.hidden_size, model.heads, model.kv_heads) == (32, 4096, 32, 32)
    assert model.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2 == 524_288


def test_llama_2_7b_fp16_fits_one_24_gb_a10g(llama_7b):
    advice = by_name(advise(from_model_dir(llama_7b), llm_workload(), Purchase(), Assumptions()))["g5.xlarge"]
    weights = LLAMA_7B_PARAMS * 2 / GIB  # 12.55 GiB, "about 14 GB"
    kv = 524_288 * (512 + 256) * 1 / GIB  # one sequence of 768 tokens: 0.375 GiB
    prefill = 512 * (4 * 4096 + 11008) * 2 / GIB
    assert advice.fits and advice.gpus_per_task == 1
    assert advice.memory is not None
    assert advice.memory.weights_gib == pytest.approx(weights) and weights == pytest.approx(12.551, abs=1e-3)
    assert advice.memory.kv_cache_gib == pytest.approx(kv) == 0.375
    assert advice.memory.total_gib == pytest.approx(weights + kv + prefill)
    assert advice.memory.usable_gib == pytest.approx(24 * 0.9)
    assert advice.reason.startswith("fits: 12.6 GiB weights + 0.375 GiB KV cache")


def test_13b_fp16_does_not_fit_one_a10g_but_fits_one_l40s_or_two_a10gs(llama_13b):
    advice = by_name(advise(from_model_dir(llama_13b), llm_workload(), Purchase(), Assumptions()))
    weights = LLAMA_13B_PARAMS * 2 / GIB  # 24.24 GiB, "about 26 GB"
    assert weights == pytest.approx(24.244, abs=1e-3)
    g5 = advice["g5.xlarge"]
    assert g5.memory is not None  # sized even when it does not fit
    assert not g5.fits and g5.memory.weights_gib == pytest.approx(weights)
    assert "does not fit" in g5.reason and "quantised to int8 the weights take 12.1 GiB" in g5.reason
    assert g5.usd_per_million_requests == {"on_demand": None, "spot": None, "mix": None} and g5.throughput is None
    l40s = advice["g6e.xlarge"]
    assert l40s.memory is not None
    assert l40s.fits and l40s.gpus_per_task == 1 and l40s.memory.usable_gib == pytest.approx(48 * 0.9)
    four_a10g = advice["g5.12xlarge"]  # 40 heads split over 2 GPUs: 12.1 GiB each
    assert four_a10g.memory is not None
    assert four_a10g.fits and four_a10g.gpus_per_task == 2 and four_a10g.tasks_per_instance == 2
    assert four_a10g.memory.weights_gib == pytest.approx(weights / 2)
    assert "tensor parallel" in four_a10g.reason


def test_7b_on_a10g_decodes_at_most_bandwidth_over_weight_bytes():
    model = ModelShape(params=7_000_000_000, dtype="fp16", kind="llm", layers=32, hidden_size=4096, heads=32)
    g5 = by_name(advise(model, llm_workload(), Purchase(), Assumptions()))["g5.xlarge"]
    assert g5.decode_tokens_per_second_ceiling == pytest.approx(600e9 / 14e9) == pytest.approx(42.857, abs=1e-3)
    l40s = by_name(advise(model, llm_workload(), Purchase(), Assumptions()))["g6e.xlarge"]
    assert l40s.decode_tokens_per_second_ceiling == pytest.approx(864e9 / 14e9)


def test_llm_throughput_follows_the_stated_roofline():
    model = ModelShape(params=7_000_000_000, dtype="fp16", kind="llm", layers=32, hidden_size=4096, heads=32)
    workload = llm_workload(concurrency=8, requests_per_second=2)
    l40s = by_name(advise(model, workload, Purchase(), Assumptions()))["g6e.xlarge"]
    bandwidth, flops = 864e9 * 0.5, 362.05e12 * 0.5
    kv_read = 8 * 524_288 * (512 + 256 / 2)
    step = max((14e9 + kv_read) / bandwidth, 2 * 7e9 * 8 / flops)
    prefill = 2 * 7e9 * 512 / flops
    rps = 1 / (prefill + 256 * step / 8)
    assert l40s.throughput is not None
    assert l40s.throughput.requests_per_second == pytest.approx(rps)
    assert l40s.throughput.tokens_per_second == pytest.approx(8 / step)
    tasks = math.ceil(2 / (rps * 0.7))
    assert l40s.tasks == tasks and l40s.instances == tasks
    hourly = tasks * 1.861
    assert l40s.usd_per_million_requests["on_demand"] == pytest.approx(hourly / (2 * 3600) * 1e6)
    assert l40s.usd_per_million_tokens["on_demand"] == pytest.approx(hourly / (2 * 3600 * 768) * 1e6)
    assert l40s.usd_per_million_requests["spot"] == pytest.approx(0.4 * hourly / (2 * 3600) * 1e6)


def test_minilm_fits_everything(minilm):
    advice = advise(from_model_dir(minilm, dtype="fp16"), Workload(500, 100, 256), Purchase(), Assumptions())
    assert {a.name for a in advice} == set(CATALOG) | set(NON_CUDA_CATALOG)
    assert all(a.fits and a.gpus_per_task == 1 for a in advice), [a.reason for a in advice if not a.fits]


def test_minilm_estimate_is_capped_by_the_measured_server_ceiling_and_costed(minilm):
    model = from_model_dir(minilm, dtype="fp16")
    assert model.params == 22_713_216 and model.kind == "encoder"
    t4 = by_name(advise(model, Workload(500, 100, 256), Purchase(), Assumptions()))["g4dn.xlarge"]
    per_request = 2 * (22_713_216 - (30522 + 512) * 384) * 256 + 4 * 6 * 256**2 * 384
    gpu_rps = 32 / max(32 * per_request / (65e12 * 0.5), 22_713_216 * 2 / (320e9 * 0.5))
    assert t4.throughput is not None
    assert gpu_rps > 5252 and t4.throughput.requests_per_second == 5252.0
    assert t4.throughput.bound == "HTTP server" and t4.throughput.source == "estimate"
    assert t4.tasks == 1 and t4.instances == 1  # 500 / (5252 x 0.7) = 0.14
    assert (
        t4.usd_per_million_requests["on_demand"]
        == pytest.approx(0.526 / (500 * 3600) * 1e6)
        == pytest.approx(0.29222, abs=1e-5)
    )


def test_the_a10g_is_costed_from_its_labelled_tensor_estimate(minilm):
    """The catalog keeps sourced figures only (none for the A10G); the advisor costs a g5 from the labelled estimate,
    62.5 dense FP16 TFLOPS, and says so in the formula."""
    from gpu_inference_constructs.sizing.throughput import ESTIMATED_DENSE_FP16_TFLOPS, dense_fp16_tflops

    assert ACCELERATORS["NVIDIA A10G"].dense_fp16_tflops is None
    assert dense_fp16_tflops("NVIDIA A10G") == (62.5, ESTIMATED_DENSE_FP16_TFLOPS["NVIDIA A10G"].basis)
    assert ESTIMATED_DENSE_FP16_TFLOPS["NVIDIA A10G"].basis.startswith("estimated, the lowest published candidate")
    g5 = by_name(advise(from_model_dir(minilm, dtype="fp16"), Workload(500, 100, 256), Purchase(), Assumptions()))[
        "g5.xlarge"
    ]
    # By hand: MiniLM's 22,713,216 parameters less its embeddings (30522 + 512) x 384 = 10,796,160 multiply per token.
    per_request = 2 * 10_796_160 * 256 + 4 * 6 * 256**2 * 384  # 6.13 GFLOP
    batch_seconds = max(32 * per_request / (62.5e12 * 0.5), 22_713_216 * 2 / (600e9 * 0.5))  # compute: 6.28 ms
    assert batch_seconds == pytest.approx(0.006279, abs=1e-6)
    assert g5.throughput is not None and g5.throughput.source == "estimate"
    assert g5.throughput.requests_per_second == pytest.approx(32 / batch_seconds) == pytest.approx(5096.5, abs=0.1)
    assert g5.throughput.bound == "GPU compute"  # below the server's 5,252 req/s
    assert "(62.5 TFLOPS x 1 x 0.5)" in g5.throughput.formula
    assert "NVIDIA A10G's tensor throughput is estimated, the lowest published candidate" in g5.throughput.formula
    assert g5.tasks == 1 and g5.ranked  # 500 / (5096.5 x 0.7) = 0.14
    assert (
        g5.usd_per_million_requests["on_demand"]
        == pytest.approx(1.006 / (500 * 3600) * 1e6)
        == pytest.approx(0.5589, abs=1e-4)
    )
    assert g5.throughput.single_pass_ms == pytest.approx(per_request / (62.5e12 * 0.5) * 1000)  # batch 1: 0.196 ms


def test_without_an_estimate_a_gpu_with_no_sourced_tensor_figure_is_not_costed(minilm, monkeypatch):
    """The twin: take the A10G's estimate away and a g5 is 'not estimated', as before it was recorded."""
    from gpu_inference_constructs.sizing import throughput

    monkeypatch.setattr(throughput, "ESTIMATED_DENSE_FP16_TFLOPS", {})
    g5 = by_name(advise(from_model_dir(minilm, dtype="fp16"), Workload(500, 100, 256), Purchase(), Assumptions()))[
        "g5.xlarge"
    ]
    assert g5.throughput is not None
    assert g5.fits and g5.throughput.requests_per_second is None and g5.throughput.source == "none"
    assert "; not costed, not estimated: an encoder's estimate needs the GPU's tensor throughput" in g5.reason
    assert g5.usd_per_million_requests["mix"] is None and not g5.ranked


def test_the_a10g_estimate_counts_in_an_llms_prefill():
    model = ModelShape(params=7_000_000_000, dtype="fp16", kind="llm", layers=32, hidden_size=4096, heads=32)
    g5 = by_name(advise(model, llm_workload(), Purchase(), Assumptions()))["g5.xlarge"]
    assert g5.throughput is not None
    prefill = 2 * 7e9 * 512 / (62.5e12 * 0.5)  # 0.229 s
    step = max((14e9 + 524_288 * (512 + 256 / 2)) / (600e9 * 0.5), 2 * 7e9 / (62.5e12 * 0.5))
    assert g5.throughput.requests_per_second == pytest.approx(1 / (prefill + 256 * step))
    assert "prefill = 2 x params x 512 tokens / (62.5 TFLOPS x 1 x 0.5) = 229.4 ms" in g5.throughput.formula


def test_bf16_does_not_fit_a_t4():
    model = ModelShape(params=110_000_000, dtype="bf16", kind="encoder")
    advice = by_name(advise(model, Workload(100, 100, 128), Purchase(), Assumptions()))
    assert not advice["g4dn.xlarge"].fits and "has no BF16" in advice["g4dn.xlarge"].reason
    assert advice["g6.xlarge"].fits


def test_mix_uses_the_environments_on_demand_base_and_share():
    model = ModelShape(params=7_000_000_000, dtype="fp16", kind="llm", layers=32, hidden_size=4096, heads=32)
    purchase = Purchase(on_demand_base=1, on_demand_percent=50)
    l40s = by_name(advise(model, llm_workload(concurrency=8, requests_per_second=5), purchase, Assumptions()))[
        "g6e.xlarge"
    ]
    n = l40s.instances
    assert n is not None  # a type that fits is sized
    on_demand = 1 + -(-(n - 1) * 50 // 100)
    assert n > 2
    assert l40s.hourly_usd["mix"] == pytest.approx(on_demand * 1.861 + (n - on_demand) * 1.861 * 0.4)
    assert Purchase(on_demand_base=2).on_demand_instances(1) == 1


def test_inferentia2_is_priced_but_not_costed_for_an_unbenchmarked_encoder_and_gpu_capacity_refuses_it(minilm):
    """MiniLM (6 x 384) has no Neuron benchmark: inf2 is listed with its price, not costed, not ranked (issue 46
    ranks it only for the benchmarked geometries: tests/sizing/test_neuron_ranking.py)."""
    inf2 = by_name(advise(from_model_dir(minilm, dtype="fp16"), Workload(500, 100, 256), Purchase(), Assumptions()))[
        "inf2.xlarge"
    ]
    assert inf2.fits and inf2.deployable and not inf2.ranked
    assert inf2.price_usd == 0.7582 and inf2.usd_per_million_requests["on_demand"] is None
    assert "not costed, the Neuron benchmarks run 128-token sequences, not 256" in inf2.reason
    with pytest.raises(ConfigError, match=r"^instance_types\[0\]: .*pick a g4dn"):
        GpuCapacityProps(instance_types=("inf2.xlarge",)).resolve_instance_types()


def test_every_catalog_figure_has_a_source_and_a_date():
    """Every field of every entry (a new field fails here until it has a source), its regions, its accelerator's
    figures, and every regional price."""
    figures = {f.name for f in fields(GpuInstanceType)} - {"name"}
    figures |= {"regions"} | {f.name for f in fields(AcceleratorSpec)} - {"source", "as_of"}
    entries = [*CATALOG.values(), *NON_CUDA_CATALOG.values()]
    assert {t.gpu_model for t in entries} == set(ACCELERATORS)
    for entry in entries:
        sources = figure_sources(entry)
        assert set(sources) == figures, entry.name
        for figure, sourced in sources.items():
            assert len(sourced.source) > 20, (entry.name, figure)
            assert date(2025, 1, 1) <= date.fromisoformat(sourced.as_of) <= date.today(), (
                entry.name,
                figure,
                sourced.as_of,
            )
    for spec in ACCELERATORS.values():
        assert spec.memory_bandwidth_gb_per_s > 0 and date.fromisoformat(spec.as_of)
    for region, prices in ON_DEMAND_HOURLY_USD.items():
        for name in prices:
            price, source = on_demand_price(name, region)
            assert price > 0 and "read 2026-12-03" in source, (region, name)
    price, source = on_demand_price("g5.xlarge", "us-east-1")
    assert price == 1.006 and "karpenter" in source
    price, source = on_demand_price("g5.xlarge", "eu-west-1")
    assert price == 1.006 and "no sourced eu-west-1 price" in source


def test_a_region_without_a_type_and_an_unknown_type_are_errors():
    model = ModelShape(params=100_000_000, dtype="fp16", kind="encoder")
    with pytest.raises(ConfigError, match=r"^--region: .*catalog knows"):
        advise(model, Workload(1, 100, 128), Purchase(region="xx-nowhere-1"), Assumptions())
    with pytest.raises(ConfigError, match=r"^--instance-types: .*known here"):
        advise(model, Workload(1, 100, 128), Purchase(), Assumptions(), only=["p5.48xlarge"])


def test_the_runtime_scales_the_encoder_estimate_by_its_stated_factor(minilm):
    from gpu_inference_constructs.sizing.runtimes import RUNTIME_FACTORS

    model = from_model_dir(minilm, dtype="fp16")
    uncapped = Assumptions(server_ceiling_rps=1e9)
    eager = by_name(advise(model, Workload(500, 100, 256), Purchase(), uncapped))["g4dn.xlarge"].throughput
    onnx = by_name(advise(model, Workload(500, 100, 256, runtime="onnx"), Purchase(), uncapped))[
        "g4dn.xlarge"
    ].throughput
    assert eager is not None and onnx is not None and eager.requests_per_second is not None
    assert onnx.requests_per_second == pytest.approx(eager.requests_per_second * RUNTIME_FACTORS["onnx"].factor)
    assert "x 1.2 for runtime onnx (estimated:" in onnx.formula and "runtime" not in eager.formula
    assert all(f.source in ("measured", "estimated") and f.basis for f in RUNTIME_FACTORS.values())
    with pytest.raises(ConfigError, match=r"^--runtime: .*use one of"):
        Workload(500, 100, 256, runtime="tensorrt")
