"""Tensor declarations shared by handlers and the Open Inference Protocol: datatypes, and a model's signature
(input and output tensors with their shapes, -1 marking the dynamic batch dimension)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Open Inference Protocol datatype -> numpy dtype (little-endian, the protocol's byte order). BYTES elements are
# Python bytes in an object array.
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(object),
}
BATCH = -1  # the dynamic batch dimension in a declared shape


def datatype_of(dtype: np.dtype) -> str:
    for name, candidate in DATATYPES.items():
        if candidate == dtype or (name == "BYTES" and dtype.kind in "OSU"):
            return name
    raise ValueError(f"no Open Inference Protocol datatype for {dtype}")


@dataclass(frozen=True)
class TensorSpec:
    """One tensor: shape[0] is the batch dimension (-1); the other dimensions are fixed."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    @property
    def row_shape(self) -> tuple[int, ...]:
        return self.shape[1:]

    @property
    def dtype(self) -> np.dtype:
        return DATATYPES[self.datatype]

    def metadata(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    platform: str = "pytorch"

    def input(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.inputs if spec.name == name), None)

    def output(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.outputs if spec.name == name), None)
