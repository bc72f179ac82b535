"""How much one task's encoder throughput changes with the model's runtime (BundledServerProps.runtime), against eager
FP16.

Each factor says where it comes from: "measured" (python -m bench on the same inputs, ratio to eager) or
"estimated" (no GPU run yet: python -m bench.gpu_bench on the instance type, then --measured, replaces it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeFactor:
    factor: float
    source: str  # "measured" or "estimated"
    basis: str


RUNTIME_FACTORS: dict[str, RuntimeFactor] = {
    "eager": RuntimeFactor(1.0, "measured", "the reference"),
    "compile": RuntimeFactor(
        1.2,
        "estimated",
        "torch.compile with CUDA graphs removes per-kernel launch overhead, which "
        "dominates small batches (published: DistilBERT on L40S 2.88 ms eager, 0.46 ms compiled, batch 1); "
        "taken at 1.2 for full batches until bench.gpu_bench measures it",
    ),
    "onnx": RuntimeFactor(
        1.2,
        "estimated",
        "ONNX Runtime's CUDA/TensorRT FP16 fused attention and layer norm; taken at 1.2 "
        "until bench.gpu_bench measures it",
    ),
    "int8": RuntimeFactor(
        1.0,
        "estimated",
        "INT8 dynamic quantisation is a CPU runtime (ONNX Runtime's CPU provider): on a GPU "
        "it gains nothing, so no gain is counted",
    ),
}


def runtime_factor(runtime: str) -> RuntimeFactor:
    return RUNTIME_FACTORS[runtime]
