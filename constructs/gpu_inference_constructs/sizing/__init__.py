"""Sizing and cost advisor: which GPU, how many, and what a million requests cost (no torch needed).

Run ``python -m gpu_inference_constructs.sizing --help``. The pieces are importable too:
:func:`advise` per instance type, :func:`recommend` and :func:`validate` for the cdk.json blocks.
"""

from .advisor import TypeAdvice, advise, types_in_region
from .measured import read_measurement
from .model_shape import ModelShape, from_model_dir
from .recommend import Recommendation, recommend, validate
from .safetensors_header import read_header
from .workload import Assumptions, Measurement, Purchase, Workload

__all__ = [
    "Assumptions", "Measurement", "ModelShape", "Purchase", "Recommendation", "TypeAdvice", "Workload", "advise",
    "from_model_dir", "read_header", "read_measurement", "recommend", "types_in_region", "validate",
]
