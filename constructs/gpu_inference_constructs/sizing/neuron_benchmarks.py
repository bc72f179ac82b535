"""Inferentia2 throughput for encoders, sourced (not measured here): AWS's published Neuron benchmarks.

Source: AWS Neuron SDK documentation, "Inf2 Inference Performance", Encoder Models, throughput optimized (the table's
data: aws-neuron/aws-neuron-sdk, about-neuron/benchmarks/inf2/throughput_data_encoder.csv, last update Feb 26th,
2026). Every row: one inf2.xlarge (one Inferentia2 chip, two NeuronCores, data parallel), sequence length 128, FP32
weights compiled with matrix multiplies autocast to BF16, Ubuntu 22.

How a model is matched: by its transformer geometry (layers, hidden size, attention heads, MLP width), which fixes
the work per token; the vocabulary only adds an embedding lookup. Where several benchmarked models share a geometry
(BERT-base, RoBERTa-base, ELECTRA-base, ALBERT-base), the lowest throughput is taken. A Neuron model is compiled
for a fixed shape, so texts of up to 128 tokens run padded to 128 at the benchmark's rate; longer ones, other
geometries and int8/int4 are not costed. The figure is per chip: a type with more chips runs a task per chip.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model_shape import ModelShape

NEURON_BENCHMARK_SOURCE = (
    "AWS Neuron SDK docs, Inf2 Inference Performance, Encoder Models, throughput optimized "
    "(aws-neuron/aws-neuron-sdk about-neuron/benchmarks/inf2/throughput_data_encoder.csv, last update 2026-02-26): "
    "one inf2.xlarge, 2 NeuronCores data parallel, sequence 128, FP32 compiled with BF16 matmult autocast"
)
NEURON_BENCHMARK_AS_OF = "2026-12-06"
BENCHMARK_SEQUENCE_LENGTH = 128
BENCHMARKED_DTYPES = ("fp32", "fp16", "bf16")
ACCELERATOR = "AWS Inferentia2"


@dataclass(frozen=True)
class NeuronBenchmark:
    """One row of the table: a Hugging Face model, its geometry, and what one Inferentia2 chip sustained."""

    model: str
    layers: int
    hidden_size: int
    heads: int
    intermediate_size: int
    inferences_per_second: float
    p50_ms: float
    p99_ms: float
    batch_size: int
    neuron_version: str

    @property
    def geometry(self) -> tuple[int, int, int, int]:
        return self.layers, self.hidden_size, self.heads, self.intermediate_size


NEURON_ENCODER_BENCHMARKS: tuple[NeuronBenchmark, ...] = (
    NeuronBenchmark("albert-base-v2", 12, 768, 12, 3072, 3147.09984049, 5.0675869, 5.27883291, 8, "2.25.0"),
    NeuronBenchmark("bert-base-uncased", 12, 768, 12, 3072, 2674.18956433, 5.97381591, 6.17100715, 8, "2.27.0"),
    NeuronBenchmark("bert-large-uncased", 24, 1024, 16, 4096, 950.0496231, 8.41140747, 8.84652853, 4, "2.21.0"),
    NeuronBenchmark("distilbert-base-uncased", 6, 768, 12, 3072, 5307.87660777, 6.01053237, 6.23083114, 16, "2.27.0"),
    NeuronBenchmark(
        "google/electra-base-discriminator", 12, 768, 12, 3072, 2889.75325068, 11.02411747, 11.97555304, 16, "2.25.0"
    ),
    NeuronBenchmark("roberta-base", 12, 768, 12, 3072, 2920.37954741, 5.42390347, 5.82957506, 8, "2.25.0"),
    NeuronBenchmark("roberta-large", 24, 1024, 16, 4096, 962.70185508, 8.31007957, 8.60977411, 4, "2.25.0"),
)
# Left out: the table's xlm-roberta-base row (an inf2.48xlarge, AutoModelForMaskedLM: 51 inferences/s, a masked-LM
# head over a 250k vocabulary, not an embedding or classification model).


def neuron_benchmark(model: ModelShape, prompt_tokens: int) -> tuple[NeuronBenchmark | None, str]:
    """The benchmark that stands for ``model`` on one Inferentia2 chip (the slowest of its geometry), or None and why
    it is not costed."""
    if model.kind != "encoder":
        return None, "no Neuron benchmark for this model class (LLMs on Inferentia2 are compared only)"
    if model.dtype not in BENCHMARKED_DTYPES:
        return None, f"the Neuron benchmarks compile FP32 weights with BF16 matmuls, not {model.dtype}"
    if prompt_tokens > BENCHMARK_SEQUENCE_LENGTH:
        return None, (
            f"the Neuron benchmarks run {BENCHMARK_SEQUENCE_LENGTH}-token sequences, not "
            f"{prompt_tokens}: compile at your length and measure one task (--measured)"
        )
    hidden = model.hidden_size
    geometry = (model.layers, hidden, model.heads, model.intermediate_size or (4 * hidden if hidden else None))
    matches = [b for b in NEURON_ENCODER_BENCHMARKS if b.geometry == geometry]
    if not matches:
        return None, (
            "no Neuron benchmark for this model class (benchmarked geometries, layers x hidden x "
            "heads x MLP: "
            + ", ".join(sorted({"x".join(map(str, b.geometry)) for b in NEURON_ENCODER_BENCHMARKS}))
            + "; give --layers, --hidden-size, --heads, --intermediate-size or --model-dir, or measure one task)"
        )
    slowest = min(matches, key=lambda b: b.inferences_per_second)
    return slowest, ""
