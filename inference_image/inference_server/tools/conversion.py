"""Publish's runtime conversion: each runtime other than eager is converted for the built-in Hugging Face tasks and
gated against eager FP32 on GATE_TEXTS; and the probe publish records for the server's start to check.

The converted file is written into the model directory before the manifest is built, so it is checksummed and
verified like the weights; the manifest records each runtime's gate result, and the server refuses a runtime the
version was not published with (handlers/runtimes.py).
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..engine.probe_check import PROBE_TEXT, REFERENCE, library_versions, probe_answer
from ..facts import TEXT_TASKS
from ..handlers import LoadContext, builtin_handler_class
from ..handlers.batch import batch_for
from ..handlers.compiled import compiling
from ..handlers.hf import HuggingFaceHandler
from ..handlers.runtimes import (
    MAX_PROBABILITY_DIFF,
    MIN_COSINE,
    MIN_SAME_LABEL,
    ONNX_FILES,
    RuntimeConversionError,
    check_runtime_name,
)

CONVERTIBLE_TASKS = TEXT_TASKS
OPSET = 17

GATE_TEXTS = (
    "The service answered every request within its deadline.",
    "I loved this film, the acting was wonderful.",
    "Terrible support, I waited an hour and nobody helped.",
    "The parcel arrived on time and in perfect condition.",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "The stock market fell sharply after the announcement.",
    "She plays the violin in the city orchestra.",
    "This is the worst meal I have ever eaten.",
    "An absolutely delightful experience from start to finish.",
    "The battery drains far too quickly on this phone.",
    "Quantum computers use qubits instead of bits.",
    "Please reset my password, I cannot log in.",
    "The weather tomorrow will be cloudy with light rain.",
    "He scored the winning goal in the final minute.",
    "I am not sure whether I like the new design.",
    "Cats sleep for most of the day.",
    "The recipe needs two eggs, flour and a pinch of salt.",
    "Our flight was delayed by three hours without explanation.",
    "The museum opens at nine and closes at five.",
    "A short one.",
    "ok",
    "Machine learning models need careful evaluation before deployment to production systems.",
    "The train to Berlin leaves from platform seven.",
    "Customer reviews were overwhelmingly positive.",
    "The software update broke the printer driver again.",
    "Mountains covered in snow glowed in the morning light.",
    "I would definitely recommend this hotel to my friends.",
    "The meeting has been moved to Thursday afternoon.",
    "Nothing works and the manual is useless.",
    "Bananas are rich in potassium.",
    "The committee approved the budget after a long debate.",
)


@dataclass(frozen=True)
class GateResult:
    runtime: str
    task: str
    metric: str
    value: float
    threshold: float
    passed: bool
    inputs: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _handler(model_dir: Path, task: str, runtime: str, max_batch_size: int = 32):
    import torch

    handler = builtin_handler_class(task)()
    ctx = LoadContext(
        model_dir,
        torch.device("cpu"),
        torch.float32,
        256,
        runtime == "compile",
        False,
        task,
        None,
        max_batch_size,
        runtime=runtime,
    )
    handler.load_preprocessing(ctx)
    handler.load(ctx)
    return handler


def reference_handler(model_dir: Path, task: str):
    """The model as publish measures it (the gates' reference and the recorded probe): eager FP32 on the CPU."""
    return _handler(model_dir, task, "eager")


def export_onnx(model_dir: Path, task: str, target: Path) -> None:
    """The handler's whole forward (model and head: pooled embeddings or probabilities) as ONNX, batch and
    sequence dynamic."""
    import torch

    handler = _handler(model_dir, task, "eager")
    assert isinstance(handler, HuggingFaceHandler)  # ONNX conversion is for the Hugging Face tasks only
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if handler.use_token_types else [])

    class Forward(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = handler.model

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return handler._forward_tensors(*tensors)

    sample = torch.ones(2, 8, dtype=torch.int64)
    args = tuple(sample if n != "token_type_ids" else torch.zeros_like(sample) for n in names)
    axes = {n: {0: "batch", 1: "sequence"} for n in names} | {"output": {0: "batch"}}
    with torch.inference_mode():
        torch.onnx.export(
            Forward().eval(),
            args,
            str(target),
            dynamo=False,
            input_names=names,
            output_names=["output"],
            dynamic_axes=axes,
            opset_version=OPSET,
        )


def quantize_int8(source: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Per-channel INT8 weights of the weight MatMuls only: quantising the embedding Gather and the activation x
    # activation MatMuls of attention (Q.K, P.V) cost MiniLM its gate (min cosine 0.85-0.96).
    quantize_dynamic(
        str(source),
        str(target),
        weight_type=QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=["MatMul"],
        extra_options={"MatMulConstBOnly": True},
    )


def convert(model_dir: Path, task: str, runtime: str) -> Path | None:
    """Write runtime's artifact into model_dir (None when it has none)."""
    check_runtime_name(runtime)
    if runtime == "eager":
        return None
    if task not in CONVERTIBLE_TASKS:
        raise RuntimeConversionError(
            f"runtime {runtime!r} is built for tasks {', '.join(CONVERTIBLE_TASKS)}; {task!r} serves eager only"
        )
    if runtime == "compile":
        return None
    target = model_dir / ONNX_FILES[runtime]
    try:
        if runtime == "onnx":
            export_onnx(model_dir, task, target)
        else:
            with tempfile.TemporaryDirectory() as scratch:
                fp32 = Path(scratch) / "model.onnx"
                export_onnx(model_dir, task, fp32)
                quantize_int8(fp32, target)
    except RuntimeConversionError:
        raise
    except Exception as exc:
        target.unlink(missing_ok=True)
        raise RuntimeConversionError(f"cannot convert to {runtime}: {exc}") from exc
    return target


def _outputs(handler, texts: tuple[str, ...]):
    """Outputs for texts in two batch shapes (16 rows at the longest length, then the rest at their own)."""
    import numpy as np

    encoded = handler.preprocess(list(texts))
    longest = max(e.length for e in encoded)
    rows = []
    with compiling(handler):  # the compiled forward itself, not the eager one it serves with until then
        for start in range(0, len(encoded), 16):
            chunk = encoded[start : start + 16]
            seq = longest if len(chunk) == 16 else max(e.length for e in chunk)
            rows.append(np.asarray(handler.forward(batch_for(handler, chunk, len(chunk), seq)))[: len(chunk)])
    return np.concatenate(rows)


def gate(model_dir: Path, task: str, runtime: str, texts: tuple[str, ...] = GATE_TEXTS) -> GateResult:
    """Compare runtime (as the server would run it) with eager FP32 on texts."""
    import numpy as np

    reference = _outputs(_handler(model_dir, task, "eager"), texts)
    candidate = _outputs(_handler(model_dir, task, runtime), texts)
    if candidate.shape != reference.shape or not np.isfinite(candidate).all():
        return GateResult(runtime, task, "shape and finite", 0.0, 1.0, False, len(texts))
    if task == "text-embedding":
        cos = (reference * candidate).sum(axis=1) / (
            np.linalg.norm(reference, axis=1) * np.linalg.norm(candidate, axis=1) + 1e-12
        )
        value, threshold = float(cos.min()), MIN_COSINE[runtime]
        return GateResult(runtime, task, "min cosine", value, threshold, value >= threshold, len(texts))
    same = float((reference.argmax(axis=1) == candidate.argmax(axis=1)).mean())
    diff = float(np.abs(reference - candidate).max())
    passed = same >= MIN_SAME_LABEL and diff <= MAX_PROBABILITY_DIFF[runtime]
    return GateResult(
        runtime,
        task,
        f"same label (>= {MIN_SAME_LABEL}); max probability diff {diff:.2e} (<= {MAX_PROBABILITY_DIFF[runtime]})",
        same,
        MIN_SAME_LABEL,
        passed,
        len(texts),
    )


def convert_and_gate(model_dir: Path, task: str, runtime: str) -> GateResult:
    """Publish's step: convert, gate, and remove the artifact again when the gate fails (RuntimeConversionError)."""
    target = convert(model_dir, task, runtime)
    if runtime == "eager":
        return GateResult("eager", task, "reference", 1.0, 1.0, True, 0)
    result = gate(model_dir, task, runtime)
    if not result.passed:
        if target is not None:
            target.unlink(missing_ok=True)
        raise RuntimeConversionError(
            f"runtime {runtime!r} failed its accuracy gate against eager: {result.metric} "
            f"{result.value:.5f} < {result.threshold} over {result.inputs} inputs"
        )
    return result


def record_probe(model_dir: Path, task: str) -> dict[str, Any]:
    """Publish's step: load the model as the gates do (checking its checkpoint) and record its answer to PROBE_TEXT."""
    handler = reference_handler(model_dir, task)
    return {
        "text": PROBE_TEXT,
        "task": task,
        **REFERENCE,
        "versions": library_versions(),
        "answer": probe_answer(handler, PROBE_TEXT),
    }
