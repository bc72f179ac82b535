"""Loading a torch.export archive (.pt2) without unpickling anything, and checking it against model.json.

torch.export.load can fall back to pickle for tensor subclasses, custom objects and legacy archives. Those
entries are refused before loading, and every torch.load inside runs with weights_only forced, so a .pt2 from an
artifact can carry weights and a graph, never code.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import torch

from .declaration import Declaration

_TORCH_DTYPES = {
    "BOOL": torch.bool,
    "UINT8": torch.uint8,
    "INT8": torch.int8,
    "INT16": torch.int16,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "FP16": torch.float16,
    "FP32": torch.float32,
    "FP64": torch.float64,
}
_TENSOR_CONSTANT_PREFIX = "tensor_"
_LOAD_LOCK = threading.Lock()  # torch.export's deserializer is process-global state


class ProgramError(ValueError):
    """The archive is unsafe, unreadable, or does not match its declaration."""


def torch_dtype(datatype: str) -> torch.dtype:
    return _TORCH_DTYPES[datatype]


def check_archive(path: Path) -> None:
    """Refuse an archive with pickled entries (the only way a .pt2 could run code on load)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            for name in names:
                parts = name.split("/")
                if (
                    len(parts) >= 3
                    and parts[-3] == "data"
                    and parts[-2] in ("weights", "constants")
                    and name.endswith(".pt")
                ):
                    raise ProgramError(
                        f"{path.name}: {name} is a pickle (legacy format); re-save the program "
                        "with torch.export.save from torch >= 2.7"
                    )
                if name.endswith(("_weights_config.json", "_constants_config.json")):
                    config = json.loads(archive.read(name)).get("config", {})
                    for fqn, entry in config.items():
                        if entry.get("use_pickle"):
                            raise ProgramError(
                                f"{path.name}: {fqn} is stored as a pickle (a tensor subclass?); export plain tensors"
                            )
                        if name.endswith("_constants_config.json") and not str(entry.get("path_name", "")).startswith(
                            _TENSOR_CONSTANT_PREFIX
                        ):
                            raise ProgramError(
                                f"{path.name}: constant {fqn} is a custom object, which loads with "
                                "pickle; export plain tensors"
                            )
    except (zipfile.BadZipFile, OSError, ValueError, AttributeError) as exc:
        if isinstance(exc, ProgramError):
            raise
        raise ProgramError(f"{path.name} is not a torch.export archive: {exc}") from None


@contextlib.contextmanager
def _weights_only_loads() -> Iterator[None]:
    name = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"
    previous = os.environ.get(name)
    os.environ[name] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def load_program(path: Path) -> torch.export.ExportedProgram:
    check_archive(path)
    with _LOAD_LOCK, _weights_only_loads():
        try:
            return torch.export.load(path)
        except Exception as exc:
            raise ProgramError(f"cannot load {path.name}: {exc}") from None


def check_program(program: torch.export.ExportedProgram, declaration: Declaration, max_batch_size: int) -> None:
    """The program takes and returns what model.json declares, with a batch dimension that spans
    1..max_batch_size."""
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    user_inputs = program.graph_signature.user_inputs
    if len(user_inputs) != len(declaration.inputs):
        raise ProgramError(
            f"the program takes {len(user_inputs)} input(s) {list(user_inputs)}; model.json declares "
            f"{len(declaration.inputs)} ({[s.name for s in declaration.inputs]}), in call order"
        )
    for name, spec in zip(user_inputs, declaration.inputs, strict=False):
        value = placeholders[name].meta.get("val")
        if not isinstance(value, torch.Tensor):
            raise ProgramError(f"program input {name} is not a tensor")
        where = f"input {spec.name} (program argument {name})"
        if value.dtype != torch_dtype(spec.datatype):
            raise ProgramError(f"{where}: the program takes {value.dtype}, model.json declares {spec.datatype}")
        if value.dim() != len(spec.shape):
            raise ProgramError(
                f"{where}: the program takes {value.dim()} dimensions, model.json declares {list(spec.shape)}"
            )
        batch = value.shape[0]
        if not isinstance(batch, torch.SymInt):
            raise ProgramError(
                f"{where}: the batch dimension is static ({batch}); export with dynamic_shapes="
                "{..: {0: torch.export.Dim('batch')}}"
            )
        for i, (dim, declared) in enumerate(zip(value.shape[1:], spec.shape[1:], strict=False), 1):
            if isinstance(dim, torch.SymInt) or dim != declared:
                raise ProgramError(f"{where}: dimension {i} is {dim} in the program, {declared} in model.json")
        bounds = program.range_constraints.get(batch.node.expr)
        if bounds is not None:
            lower, upper = bounds.lower, bounds.upper
            if lower > 1 or upper < max_batch_size:
                raise ProgramError(
                    f"{where}: the program's batch dimension spans {lower}..{upper}; it must "
                    f"cover 1..{max_batch_size} (MAX_BATCH_SIZE)"
                )
    outputs = program.graph_signature.user_outputs
    if len(outputs) != len(declaration.outputs):
        raise ProgramError(
            f"the program returns {len(outputs)} tensor(s); model.json declares "
            f"{len(declaration.outputs)} ({[s.name for s in declaration.outputs]}), in return order"
        )
    nodes = {node.name: node for node in program.graph.nodes}
    for name, spec in zip(outputs, declaration.outputs, strict=False):
        value = nodes[name].meta.get("val") if name in nodes else None
        if not isinstance(value, torch.Tensor):
            continue  # a constant or an input passed through: checked when warm-up runs it
        where = f"output {spec.name}"
        if value.dtype != torch_dtype(spec.datatype):
            raise ProgramError(f"{where}: the program returns {value.dtype}, model.json declares {spec.datatype}")
        if value.dim() != len(spec.shape) or any(
            isinstance(dim, torch.SymInt) or dim != declared
            for dim, declared in zip(value.shape[1:], spec.shape[1:], strict=False)
        ):
            raise ProgramError(
                f"{where}: the program returns shape {list(value.shape)}, model.json declares {list(spec.shape)}"
            )
