"""Is this the model that was published? Publish records eager FP32's answer to PROBE_TEXT in the manifest
(tools/conversion.record_probe); the model process answers the same text before it is ready (check_probe, after the
warm-up), and refuses to become ready when the answer differs by more than the runtime's accuracy gate allows
(probe_gate)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..handlers.batch import batch_for
from ..handlers.checkpoint_check import ModelCheckError
from ..handlers.runtimes import MAX_PROBABILITY_DIFF, MIN_COSINE

if TYPE_CHECKING:
    from ..manifest import Manifest

log = logging.getLogger(__name__)

PROBED_TASKS = ("text-classification", "text-embedding")
PROBE_TEXT = "The parcel arrived two days late, but the support team was friendly and sorted it out."
REFERENCE = {"runtime": "eager", "device": "cpu", "dtype": "float32"}  # how publish answers the probe
DECIMALS = 6


def probe_answer(handler: Any, text: str) -> dict[str, Any]:
    """A built-in text handler's answer to text as the manifest records it, rounded to DECIMALS: a classifier's top
    label and every label's probability, an embedder's whole vector."""
    import numpy as np

    encoded = handler.preprocess([text])
    row = np.asarray(handler.forward(batch_for(handler, encoded, 1, encoded[0].length)))[0]
    values = [round(float(v), DECIMALS) for v in row]
    if handler.task == "text-embedding":
        return {"embedding": values}
    return {"label": handler.labels[int(row.argmax())], "scores": dict(zip(handler.labels, values, strict=True))}


def library_versions() -> dict[str, str]:
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__}


def probe_gate(runtime: str, device_type: str) -> str:
    """The runtime whose accuracy gate bounds how far a start's answer may be from publish's eager FP32 one. On the
    CPU, eager and compile differ from it by rounding only, and a converted runtime passed its own gate; on a GPU the
    forward runs at FP16 or BF16 (TensorRT's FP16 for onnx), which no gate measured: the loosest gate's, int8's."""
    if device_type == "cuda":
        return "int8"
    return runtime if runtime in MIN_COSINE else "onnx"


def probe_difference(recorded: dict[str, Any], observed: dict[str, Any], gate: str) -> str | None:
    """What differs beyond the gate's tolerance; None when the answers agree."""
    import numpy as np

    if ("embedding" in recorded) != ("embedding" in observed):
        return "the answers are of different tasks"
    if "embedding" in recorded:
        a, b = np.asarray(recorded["embedding"]), np.asarray(observed["embedding"])
        if a.shape != b.shape:
            return f"the embedding has {b.size} values, not {a.size}"
        cosine = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))
        return None if cosine >= MIN_COSINE[gate] else f"cosine {cosine:.6f}, below the {MIN_COSINE[gate]} allowed"
    if list(recorded["scores"]) != list(observed["scores"]):
        return "the labels differ"
    diff = max(abs(p - observed["scores"][label]) for label, p in recorded["scores"].items())
    allowed = MAX_PROBABILITY_DIFF[gate]
    return None if diff <= allowed else f"a probability differs by {diff:.6f}, more than the {allowed} allowed"


def describe(answer: dict[str, Any]) -> str:
    if "embedding" in answer:
        values = answer["embedding"]
        return f"an embedding of {len(values)} values beginning [{', '.join(f'{v:.4f}' for v in values[:4])}, ...]"
    scores = ", ".join(f"{label} {p:.4f}" for label, p in answer["scores"].items())
    return f"label {answer['label']} ({scores})"


def check_probe(
    handler: Any, manifest: Manifest | None, *, model_name: str, version: str, runtime: str, device_type: str
) -> None:
    """At start, once warm: refuse (ModelCheckError) a model whose answer to the manifest's probe text differs from
    the one recorded at publish; warn where the manifest records none."""
    from ..handlers.hf import HuggingFaceHandler

    if manifest is None or not isinstance(handler, HuggingFaceHandler) or not handler.task:
        return
    recorded = manifest.probe
    if recorded is None:
        log.warning(
            "the manifest records no probe answer, so readiness cannot prove this is the published model",
            extra={
                "model_version": version,
                "fix": f"publish the version again with this image's python -m inference_server.publish "
                f"--task {handler.task}",
            },
        )
        return
    observed = probe_answer(handler, recorded["text"])
    gate = probe_gate(runtime, device_type)
    difference = probe_difference(recorded["answer"], observed, gate)
    serving = {
        "task": handler.task,
        "runtime": runtime,
        "device": device_type,
        "gate": gate,
        "versions": library_versions(),
    }
    if difference is not None:
        raise ModelCheckError(_mismatch(model_name, version, recorded, observed, serving, difference))
    log.info("the model answered the probe as published", extra={"model_version": version, "gate": gate})


def _mismatch(
    model_name: str,
    version: str,
    recorded: dict[str, Any],
    observed: dict[str, Any],
    serving: dict[str, Any],
    difference: str,
) -> str:
    return (
        f"model {model_name} version {version} does not answer as published: to the probe text "
        f"{recorded['text']!r} publish recorded {describe(recorded['answer'])} [{_setup(recorded)}] and this "
        f"server answers {describe(observed)} [{_setup(serving)}]: {difference}. Likely cause: "
        f"{_likely_cause(recorded, serving)}."
    )


def _setup(facts: dict[str, Any]) -> str:
    versions = ", ".join(f"{name} {v}" for name, v in sorted(facts.get("versions", {}).items()))
    return f"{facts.get('task')}, {facts.get('runtime')} on {facts.get('device')}, {versions}"


def _likely_cause(recorded: dict[str, Any], serving: dict[str, Any]) -> str:
    if recorded.get("task") != serving["task"]:
        return (
            f"a different task: the version was published for {recorded.get('task')} and this server runs "
            f"{serving['task']}; set MODEL_TASK={recorded.get('task')} (or leave it unset), or publish the model "
            f"again with --task {serving['task']}"
        )
    causes = [
        "different weights (a MODEL_HANDLER or handler.py that loads others, or a manifest edited after "
        "publish); if this is the model you mean to serve, publish it again so that its manifest records its "
        "answer"
    ]
    if _releases(recorded.get("versions", {})) != _releases(serving["versions"]):
        causes.insert(
            0,
            "a different runtime: this image's torch or transformers is not the one the version was "
            "published with; publish it again with this image",
        )
    elif serving["runtime"] != REFERENCE["runtime"] or serving["device"] != REFERENCE["device"]:
        causes.insert(
            0,
            f"a different runtime: MODEL_RUNTIME={serving['runtime']} on {serving['device']} answers "
            f"beyond the {serving['gate']} accuracy gate's tolerance; start it with MODEL_RUNTIME=eager "
            f"(and PRECISION=fp32 on a GPU) to tell the runtime from the model",
        )
    return "; or ".join(causes)


def _releases(versions: dict[str, str]) -> dict[str, str]:
    """Versions without their local build tag (torch 2.13.0+cpu and 2.13.0+cu128 are one release)."""
    return {name: version.split("+")[0] for name, version in versions.items()}
