"""How the built-in Hugging Face handlers run each runtime (MODEL_RUNTIME): ONNX Runtime's session for onnx and
int8, and the check that a version was published with the runtime it is served with. Publish converts and gates
(tools/conversion.py); the accuracy bounds here are the gates' and the start's probe's (engine/probe_check.py).

- ``eager``: PyTorch as loaded (FP16/BF16 on a GPU through PRECISION, FP32 on the CPU).
- ``compile``: torch.compile (inductor; CUDA graphs on a GPU), each shape in the background once the model is ready
  on its eager forward (handlers/compiled.py), its cache kept beside the model version (engine/compile_cache.py).
- ``onnx``: ONNX Runtime on model.onnx: the CPU execution provider here, CUDA's on a GPU and TensorRT's (FP16) where
  the image's onnxruntime has it.
- ``int8``: ONNX Runtime on model.int8.onnx (dynamic INT8 weights; a CPU runtime).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..facts import RUNTIMES

ONNX_FILES = {"onnx": "model.onnx", "int8": "model.int8.onnx"}

# Gates against eager FP32. Embeddings: the lowest cosine over the set. Classifiers: the share of inputs with
# eager's label, and the largest difference of any class probability.
MIN_COSINE = {"compile": 0.999, "onnx": 0.999, "int8": 0.99}
MIN_SAME_LABEL = 0.99
MAX_PROBABILITY_DIFF = {"compile": 1e-3, "onnx": 1e-3, "int8": 0.05}


class RuntimeConversionError(Exception):
    """A runtime cannot be produced for this model, or its conversion failed its accuracy gate."""


def check_runtime_name(runtime: str) -> None:
    if runtime not in RUNTIMES:
        raise RuntimeConversionError(f"runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}")


def onnx_providers(device_type: str, cache_dir: Path | None = None) -> list[Any]:
    """TensorRT (FP16, engine cache) then CUDA on a GPU, where the installed onnxruntime has them; CPU last."""
    import onnxruntime as ort

    available = set(ort.get_available_providers())
    chosen: list[Any] = []
    if device_type == "cuda":
        if "TensorrtExecutionProvider" in available:
            options: dict[str, bool | str] = {"trt_fp16_enable": True, "trt_engine_cache_enable": cache_dir is not None}
            if cache_dir is not None:
                options["trt_engine_cache_path"] = str(cache_dir)
            chosen.append(("TensorrtExecutionProvider", options))
        if "CUDAExecutionProvider" in available:
            chosen.append("CUDAExecutionProvider")
    chosen.append("CPUExecutionProvider")
    return chosen


class OnnxForward:
    """Callable like the handler's _forward_tensors: torch tensors in, a CPU float32 tensor out."""

    def __init__(self, path: Path, device_type: str, threads: int, cache_dir: Path | None = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if device_type == "cuda" and cache_dir is None:
            cache_dir = Path(tempfile.gettempdir()) / "ort-tensorrt-cache"  # the model directory may be read-only
        self.session = ort.InferenceSession(str(path), options, providers=onnx_providers(device_type, cache_dir))
        self.names = [i.name for i in self.session.get_inputs()]

    @property
    def providers(self) -> Sequence[str]:
        return self.session.get_providers()

    def __call__(self, *tensors):
        import torch

        feeds = {name: t.cpu().numpy() for name, t in zip(self.names, tensors, strict=False)}
        return torch.from_numpy(self.session.run(None, feeds)[0])


def required_file(runtime: str) -> str | None:
    return ONNX_FILES.get(runtime)


def check_published(runtime: str, model_dir: Path, manifest: Any) -> None:
    """Refuse (RuntimeConversionError) a runtime the model version was not published with."""
    check_runtime_name(runtime)
    if runtime == "eager":
        return
    if manifest is not None:
        gates = getattr(manifest, "runtimes", None) or {}
        if runtime not in gates:
            raise RuntimeConversionError(
                f"MODEL_RUNTIME={runtime} but this version was not published with it (manifest runtimes: "
                f"{', '.join(sorted(gates)) or 'none'}); publish it with --runtime {runtime}"
            )
    file = required_file(runtime)
    if file is not None and not (model_dir / file).is_file():
        raise RuntimeConversionError(
            f"MODEL_RUNTIME={runtime} needs {file} in the model directory; publish the version with --runtime {runtime}"
        )
