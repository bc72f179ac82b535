"""One preprocessed input and the error for an input the model cannot take: what the handler contract and the link
between the HTTP workers and the model process share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class Encoded:
    """One preprocessed input: `length` picks its length bucket, `data` maps names to numpy arrays."""

    length: int
    data: dict[str, np.ndarray]


class InputError(ValueError):
    """Raised by preprocess for an input the model cannot take: the request gets a 422, not a 500."""
