"""Sizing and cost advisor: which GPU, how many, and what a million requests cost (no torch needed).

Run ``python -m gpu_inference_constructs.sizing --help``. The pieces are importable too:
:func:`advise` per instance type, :func:`recommend` and :func:`validate` for the cdk.json blocks, and :func:`pack`
(``python -m gpu_inference_constructs.sizing pack MODELS.json``) for many small models on shared GPUs (NVIDIA MPS).
"""

from .advisor import TypeAdvice, advise, types_in_region
from .measured import read_measurement
from .model_shape import ModelShape, from_model_dir
from .pack import PackModel, PackResult, pack, parse_models, read_models
from .recommend import Recommendation, recommend, validate
from .safetensors_header import read_header
from .workload import Assumptions, Measurement, Purchase, Workload

__all__ = [
    "Assumptions",
    "Measurement",
    "ModelShape",
    "PackModel",
    "PackResult",
    "Purchase",
    "Recommendation",
    "TypeAdvice",
    "Workload",
    "advise",
    "from_model_dir",
    "pack",
    "parse_models",
    "read_header",
    "read_measurement",
    "read_models",
    "recommend",
    "types_in_region",
    "validate",
]
