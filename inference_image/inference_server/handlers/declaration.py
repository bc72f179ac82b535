"""model.json: what a torch.export artifact declares beside its program, checked strictly (unknown keys, wrong
types and impossible values are refused with the key's name):

    {"format": 1, "program": "model.pt2",
     "inputs":  [{"name": "pixel_values", "datatype": "FP32", "shape": [-1, 3, 224, 224]}],
     "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, 1000]}],
     "fp16_safe": true,
     "image": {"resize": 256, "crop": 224, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
               "labels": ["tench", "goldfish", ...], "top_k": 5, "max_pixels": 16777216, "softmax": true}}

shape[0] must be -1, the dynamic batch dimension; the other dimensions are fixed. "fp16_safe" lets the server run
the program under FP16 autocast on a GPU. "image" is for the image-classification task only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from ..tensor_spec import BATCH, Signature, TensorSpec

DECLARATION_FILE = "model.json"
FORMAT = 1
# Datatypes a torch.export program can take or return (torch has no strings, and unsigned types wider than 8 bits
# have little operator support).
TORCH_DATATYPES = ("BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64")
MAX_RANK = 8
DEFAULT_MAX_PIXELS = 4096 * 4096


class DeclarationError(ValueError):
    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{DECLARATION_FILE}: {key}: {message}")
        self.key = key


@dataclass(frozen=True)
class ImagePreprocessing:
    resize: int  # the shorter side is resized to this, keeping the aspect ratio
    crop: int  # then the centre crop x crop is taken
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    labels: tuple[str, ...]
    top_k: int
    max_pixels: int  # width x height above this is refused before decoding (decompression bombs)
    softmax: bool = True  # the program returns logits; false when it returns probabilities already


@dataclass(frozen=True)
class Declaration:
    program: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    fp16_safe: bool = False
    image: ImagePreprocessing | None = None

    @property
    def signature(self) -> Signature:
        return Signature(self.inputs, self.outputs, platform="pytorch_torch_export")


def _require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise DeclarationError(key, message)


def _keys(doc: Any, key: str, required: set[str], optional: set[str]) -> dict:
    _require(isinstance(doc, dict), key, "must be an object")
    missing = sorted(required - doc.keys())
    _require(not missing, key, f"missing {', '.join(missing)}")
    unknown = sorted(doc.keys() - required - optional)
    _require(
        not unknown, key, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(required | optional))}"
    )
    return doc


def _int(value: Any, key: str, minimum: int, maximum: int) -> int:
    _require(
        type(value) is int and minimum <= value <= maximum,
        key,
        f"must be an integer from {minimum} to {maximum}, got {value!r}",
    )
    return value


def _bool(value: Any, key: str) -> bool:
    _require(type(value) is bool, key, "must be true or false")
    return value


def _tensor(doc: Any, key: str) -> TensorSpec:
    _keys(doc, key, {"name", "datatype", "shape"}, set())
    name, datatype, shape = doc["name"], doc["datatype"], doc["shape"]
    _require(
        isinstance(name, str) and 0 < len(name) <= 64 and name.isprintable(),
        f"{key}.name",
        "must be a printable string of 1 to 64 characters",
    )
    _require(
        datatype in TORCH_DATATYPES, f"{key}.datatype", f"must be one of {', '.join(TORCH_DATATYPES)}, got {datatype!r}"
    )
    _require(
        isinstance(shape, list) and 1 <= len(shape) <= MAX_RANK,
        f"{key}.shape",
        f"must be a list of 1 to {MAX_RANK} dimensions",
    )
    _require(shape[0] == BATCH, f"{key}.shape", "the first dimension must be -1, the dynamic batch dimension")
    for i, dim in enumerate(shape[1:], 1):
        _int(dim, f"{key}.shape[{i}]", 1, 1 << 24)
    _require(math.prod(shape[1:]) <= 1 << 28, f"{key}.shape", "one row has over 2^28 elements")
    return TensorSpec(name, datatype, tuple(shape))


def _tensors(doc: Any, key: str) -> tuple[TensorSpec, ...]:
    _require(isinstance(doc, list) and 1 <= len(doc) <= 32, key, "must be a list of 1 to 32 tensors")
    specs = tuple(_tensor(item, f"{key}[{i}]") for i, item in enumerate(doc))
    names = [s.name for s in specs]
    _require(len(set(names)) == len(names), key, f"tensor names must be unique, got {names}")
    return specs


def _triple(value: Any, key: str, positive: bool) -> tuple[float, float, float]:
    _require(
        isinstance(value, list)
        and len(value) == 3
        and all(type(v) in (int, float) and math.isfinite(v) and (v > 0 or not positive) for v in value),
        key,
        f"must be three {'positive ' if positive else ''}numbers (R, G, B)",
    )
    return tuple(float(v) for v in value)  # type: ignore[return-value]


def _image(doc: Any, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> ImagePreprocessing:
    _keys(doc, "image", {"resize", "crop", "labels"}, {"mean", "std", "top_k", "max_pixels", "softmax"})
    crop = _int(doc["crop"], "image.crop", 1, 4096)
    resize = _int(doc["resize"], "image.resize", crop, 8192)
    labels = doc["labels"]
    _require(
        isinstance(labels, list) and bool(labels) and all(isinstance(x, str) and x for x in labels),
        "image.labels",
        "must be a non-empty list of non-empty strings",
    )
    _require(
        len(inputs) == 1 and inputs[0].datatype in ("FP32", "FP16") and inputs[0].shape[1:] == (3, crop, crop),
        "inputs",
        f"an image classifier takes one FP32 tensor of shape [-1, 3, {crop}, {crop}] (image.crop)",
    )
    _require(
        len(outputs) == 1
        and outputs[0].datatype in ("FP32", "FP16", "FP64")
        and outputs[0].shape[1:] == (len(labels),),
        "outputs",
        f"an image classifier returns one float tensor of shape [-1, {len(labels)}] (one score per label)",
    )
    top_k = _int(doc["top_k"], "image.top_k", 1, len(labels)) if "top_k" in doc else min(5, len(labels))
    return ImagePreprocessing(
        resize=resize,
        crop=crop,
        mean=_triple(doc.get("mean", [0.0, 0.0, 0.0]), "image.mean", positive=False),
        std=_triple(doc.get("std", [1.0, 1.0, 1.0]), "image.std", positive=True),
        labels=tuple(labels),
        top_k=top_k,
        max_pixels=_int(doc.get("max_pixels", DEFAULT_MAX_PIXELS), "image.max_pixels", 1, 1 << 30),
        softmax=_bool(doc.get("softmax", True), "image.softmax"),
    )


def parse_declaration(data: bytes, *, image: bool) -> Declaration:
    """The declaration in data; image says whether an "image" section is required (image-classification) or
    refused (torch-export)."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DeclarationError("(file)", f"not valid JSON: {exc}") from None
    _keys(
        doc, "(top level)", {"format", "inputs", "outputs"} | ({"image"} if image else set()), {"program", "fp16_safe"}
    )
    _require(doc["format"] == FORMAT and type(doc["format"]) is int, "format", f"must be {FORMAT}")
    program = doc.get("program", "model.pt2")
    _require(
        isinstance(program, str)
        and program.endswith(".pt2")
        and "/" not in program
        and "\\" not in program
        and PurePosixPath(program).name == program
        and program != ".pt2",
        "program",
        "must be the file name of a .pt2 archive beside model.json",
    )
    fp16_safe = _bool(doc.get("fp16_safe", False), "fp16_safe")
    inputs, outputs = _tensors(doc["inputs"], "inputs"), _tensors(doc["outputs"], "outputs")
    return Declaration(program, inputs, outputs, fp16_safe, _image(doc["image"], inputs, outputs) if image else None)


def read_declaration(model_dir: Path, *, image: bool) -> Declaration:
    path = model_dir / DECLARATION_FILE
    if not path.is_file():
        raise DeclarationError(
            "(file)", f"not found in {model_dir}; a torch.export model needs model.pt2 and model.json beside it"
        )
    declaration = parse_declaration(path.read_bytes(), image=image)
    if not (model_dir / declaration.program).is_file():
        raise DeclarationError("program", f"{declaration.program} not found in {model_dir}")
    return declaration
