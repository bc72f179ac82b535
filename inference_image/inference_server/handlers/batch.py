"""One forward's inputs as the engine hands them to a handler: the batch's preprocessed inputs stacked and padded to
the shape the model runs (a length bucket's batch size and sequence length), so no handler pads its own."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..inputs import Encoded


@dataclass(frozen=True, slots=True)
class Batch:
    """``arrays`` maps each input name to one array of ``size`` rows: rows from ``count`` on are padding (zeros, or the
    handler's ``pad_values``); an input named in the handler's ``sequence_inputs`` is padded along its first axis to
    ``seq_len``, any other to the largest row's shape. ``lengths`` holds each row's length (0 for padding rows)."""

    arrays: dict[str, np.ndarray]
    lengths: np.ndarray
    count: int
    seq_len: int

    @property
    def size(self) -> int:
        return len(self.lengths)


def pad_batch(
    items: Sequence[Encoded],
    size: int,
    seq_len: int,
    sequence_inputs: Collection[str] = (),
    pad_values: Mapping[str, float] | None = None,
) -> Batch:
    """``items`` (at most ``size``, each at most ``seq_len`` long) as one Batch of ``size`` rows."""
    lengths = np.zeros(size, dtype=np.int64)
    lengths[: len(items)] = [item.length for item in items]
    arrays = {}
    for name, first in items[0].data.items():
        rows = [item.data[name] for item in items]
        if name in sequence_inputs:
            rows = [row[:seq_len] for row in rows]
            shape = (seq_len, *first.shape[1:])
        else:
            shape = None
        arrays[name] = stack_rows(rows, size, shape, pad_values.get(name, 0) if pad_values else 0)
    return Batch(arrays, lengths, len(items), seq_len)


def stack_rows(
    rows: Sequence[np.ndarray], size: int | None = None, shape: tuple[int, ...] | None = None, fill: float = 0
) -> np.ndarray:
    """``rows`` as one array of ``size`` rows (default: as many as there are) of ``shape`` (default: the largest
    row's), each row at the start of its own and the rest ``fill``."""
    if shape is None:
        shape = tuple(max(sizes) for sizes in zip(*(row.shape for row in rows), strict=True))
    if size is None and fill == 0 and all(row.shape == shape for row in rows):
        return np.stack(rows)
    stacked = np.full((len(rows) if size is None else size, *shape), fill, dtype=rows[0].dtype)
    if all(row.shape == shape for row in rows):
        stacked[: len(rows)] = rows
    else:
        for index, row in enumerate(rows):
            stacked[(index, *(slice(0, n) for n in row.shape))] = row
    return stacked


def batch_for(handler: object, items: Sequence[Encoded], size: int, seq_len: int) -> Batch:
    """``items`` padded as ``handler`` (a Handler) asks: its ``sequence_inputs`` and ``pad_values``."""
    return pad_batch(
        items, size, seq_len, getattr(handler, "sequence_inputs", ()), getattr(handler, "pad_values", None)
    )
