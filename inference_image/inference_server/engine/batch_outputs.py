"""A batch's outputs back to its jobs: a handler's forward outputs as numpy, and each job's rows gathered from the
batches they ran in (rows from different batches may be padded differently: zero-padded to the largest shape)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..handlers.batch import stack_rows


def as_numpy(outputs: Any) -> Any:
    """A handler's forward outputs as numpy: an array, or a dict of arrays."""
    if isinstance(outputs, dict):
        return {name: as_numpy(value) for name, value in outputs.items()}
    if isinstance(outputs, np.ndarray):
        return outputs
    if hasattr(outputs, "numpy"):  # a CPU torch tensor
        return outputs.numpy()
    return np.asarray(outputs)


def gather_rows(rows: list[tuple[Any, int]]) -> Any:
    """Stack (batch outputs, row) pairs into one array (or dict of arrays) of len(rows) rows."""
    first = rows[0][0]
    if isinstance(first, dict):
        return {name: stack_rows([out[name][row] for out, row in rows]) for name in first}
    if len(rows) == 1:
        out, row = rows[0]
        return out[row : row + 1]
    return stack_rows([out[row] for out, row in rows])
