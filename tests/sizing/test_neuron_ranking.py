"""Issue 46: the advisor ranks Inferentia2 beside the GPUs for encoders with AWS's published Neuron throughput
(sourced, not measured), and leaves LLMs and unbenchmarked encoders on it uncosted or compared only."""

from __future__ import annotations

import json

import pytest

from gpu_inference_constructs.sizing import Assumptions, ModelShape, Purchase, Workload, advise
from gpu_inference_constructs.sizing.neuron_benchmarks import (
    NEURON_BENCHMARK_SOURCE,
    NEURON_ENCODER_BENCHMARKS,
    neuron_benchmark,
)
from gpu_inference_constructs.sizing.recommend import recommend
from gpu_inference_constructs.sizing.report import table

DISTILBERT = ModelShape(
    params=66_362_880,
    dtype="fp16",
    kind="encoder",
    name="distilbert",
    layers=6,
    hidden_size=768,
    heads=12,
    intermediate_size=3072,
)
BERT_BASE = ModelShape(
    params=109_482_240, dtype="fp16", kind="encoder", name="bert", layers=12, hidden_size=768, heads=12
)
LLAMA_7B = ModelShape(params=6_738_415_616, dtype="fp16", kind="llm", layers=32, hidden_size=4096, heads=32)


def by_name(advice):
    return {a.name: a for a in advice}


def test_an_encoder_of_a_benchmarked_geometry_ranks_inf2_first_by_cost_per_million():
    advice = advise(DISTILBERT, Workload(2000, 100, 128), Purchase(), Assumptions())
    first = advice[0]
    assert first.name == "inf2.xlarge" and first.ranked
    throughput = first.throughput
    assert throughput is not None and throughput.source == "sourced"
    assert throughput.requests_per_second == pytest.approx(min(5307.87660777, Assumptions().server_ceiling_rps))
    assert first.usd_per_million_requests["on_demand"] == pytest.approx(0.7582 / (2000 * 3600) * 1e6)
    assert NEURON_BENCHMARK_SOURCE in throughput.formula and "not measured" in throughput.formula
    assert "NeuronCapacity" in first.reason and "Neuron serving preset" in first.reason and "compile" in first.reason
    cheapest_gpu = next(a for a in advice if a.ranked and a.instance_type.cuda)
    assert (first.usd_per_million_requests["mix"] or 0) < (cheapest_gpu.usd_per_million_requests["mix"] or 0)


def test_the_slowest_benchmark_of_a_shared_geometry_stands_for_it():
    """BERT-base, RoBERTa-base, ELECTRA-base and ALBERT-base share 12 x 768 x 12 x 3072: BERT-base's 2,674/s is
    taken."""
    benchmark, _ = neuron_benchmark(BERT_BASE, 128)
    assert benchmark is not None and benchmark.model == "bert-base-uncased" and benchmark.batch_size == 8
    inf2 = by_name(advise(BERT_BASE, Workload(1000, 100, 64), Purchase(), Assumptions()))["inf2.xlarge"]
    assert inf2.throughput is not None and inf2.throughput.requests_per_second == pytest.approx(2674.18956433)


def test_an_llm_on_inf2_is_compared_only_never_ranked():
    workload = Workload(1, 60_000, 512, output_tokens=256)
    inf2 = by_name(advise(LLAMA_7B, workload, Purchase(), Assumptions()))["inf2.xlarge"]
    assert not inf2.deployable and not inf2.ranked
    assert "compared only" in inf2.reason
    assert inf2.throughput is None or inf2.throughput.source != "sourced"


@pytest.mark.parametrize(
    ("model", "tokens", "why"),
    [
        (
            ModelShape(
                params=22_713_216,
                dtype="fp16",
                kind="encoder",
                layers=6,
                hidden_size=384,
                heads=12,
                intermediate_size=1536,
            ),
            128,
            "no Neuron benchmark for this model class",
        ),
        (DISTILBERT, 256, "128-token sequences, not 256"),
        (
            ModelShape(params=66_362_880, dtype="int8", kind="encoder", layers=6, hidden_size=768, heads=12),
            128,
            "not int8",
        ),
    ],
)
def test_an_encoder_without_a_matching_benchmark_is_not_costed_and_says_why(model, tokens, why):
    inf2 = by_name(advise(model, Workload(500, 100, tokens), Purchase(), Assumptions()))["inf2.xlarge"]
    assert not inf2.ranked and inf2.usd_per_million_requests["mix"] is None
    assert "not costed, " in inf2.reason and why in inf2.reason


def test_the_report_names_the_source_and_the_recommendation_stays_a_gpu_block_with_a_neuron_note():
    workload, purchase, assumptions = Workload(2000, 100, 128), Purchase(), Assumptions()
    advice = advise(DISTILBERT, workload, purchase, assumptions)
    recommendation = recommend(advice, DISTILBERT, workload, purchase, assumptions)
    assert recommendation is not None
    assert all(not name.startswith("inf2") for name in recommendation.capacity["instance_types"])
    assert any(note.startswith("inf2.xlarge costs $") and "NeuronCapacity" in note for note in recommendation.notes)
    report = table(advice, recommendation, DISTILBERT, workload, purchase, assumptions)
    assert NEURON_BENCHMARK_SOURCE in report and "sourced" in report


def test_every_benchmark_row_is_the_published_table():
    """The seven encoder rows of throughput_data_encoder.csv (inf2.xlarge, sequence 128), as published."""
    rows = {b.model: (round(b.inferences_per_second), b.batch_size) for b in NEURON_ENCODER_BENCHMARKS}
    assert rows == {
        "albert-base-v2": (3147, 8),
        "bert-base-uncased": (2674, 8),
        "bert-large-uncased": (950, 4),
        "distilbert-base-uncased": (5308, 16),
        "google/electra-base-discriminator": (2890, 16),
        "roberta-base": (2920, 8),
        "roberta-large": (963, 4),
    }
    assert json.dumps([b.geometry for b in NEURON_ENCODER_BENCHMARKS])  # plain data: the advisor needs no aws_cdk
