"""The handler interface: how a model plugs into the server without forking it.

The server runs in two kinds of process, and a handler is created (with no arguments) in both:

- every HTTP worker calls ``load_preprocessing(ctx)`` once, then ``preprocess`` for each request's inputs and
  ``postprocess`` for its outputs. Workers never touch the GPU.
- the model process (one per GPU) calls ``load_preprocessing(ctx)`` and ``load(ctx)`` once, then
  ``warmup_input`` and ``forward`` on its single inference thread, so a handler needs no locking.

The boundary between the two is plain arrays, never pickled objects:

- worker -> model: each input is an ``Encoded(length, data)`` where ``data`` maps names to numpy arrays
  (``{"input_ids": int32[n]}`` for text; any dtype and shape, e.g. ``{"pixels": uint8[3, 224, 224]}``).
  ``length`` (tokens, or 1 for inputs without a sequence) picks the input's length bucket. The arrays are
  copied into a shared-memory ring; the model process gets them back as numpy arrays of the same dtype/shape.
- model -> worker: ``forward`` returns a numpy array (or a CPU tensor) with one row per batch row, or a dict of
  such arrays. Each request's rows come back to its worker through shared memory, where ``postprocess`` turns
  them into JSON-able predictions.

Install the class in the image and start the server with ``MODEL_HANDLER=mypkg.module:MyHandler`` (or
``--model-handler``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel

from ..manifest import Manifest


@dataclass(frozen=True)
class LoadContext:
    model_dir: Path
    device: Any  # torch.device in the model process; "cpu" in HTTP workers
    dtype: Any  # torch.dtype in the model process; None in HTTP workers
    max_sequence_length: int
    compile: bool
    allow_artifact_code: bool
    task: str | None
    manifest: Manifest | None


@dataclass(slots=True)
class Encoded:
    """One preprocessed input: `length` picks its length bucket, `data` maps names to numpy arrays."""

    length: int
    data: dict[str, np.ndarray]


class InputError(ValueError):
    """Raised by preprocess for an input the model cannot take: the request gets a 422, not a 500."""


class Handler:
    # The JSON schema of one prediction, for the OpenAPI document; None documents it as any JSON value.
    prediction_model: ClassVar[type[BaseModel] | None] = None
    # Set by load_preprocessing() when inputs have a length limit (in tokens): the length buckets stop there.
    max_length: int | None = None

    def load_preprocessing(self, ctx: LoadContext) -> None:
        """What preprocess and postprocess need (a tokenizer, label names). Runs in every process. No GPU."""

    def load(self, ctx: LoadContext) -> None:
        """Model process only: load weights from ctx.model_dir onto ctx.device. Load safetensors, never pickles."""
        raise NotImplementedError

    def preprocess(self, texts: list[str]) -> list[Encoded]:
        """HTTP worker: one Encoded per text, in order. Raise InputError for an input the model cannot take."""
        raise NotImplementedError

    def forward(self, batch: list[Encoded], batch_size: int, seq_len: int) -> Any:
        """Model process: run the model on batch, padded to exactly (batch_size, seq_len); batch_size >=
        len(batch) and seq_len >= every item's length. Return CPU arrays (copied off any CUDA graph's memory)
        with batch_size or len(batch) rows: a numpy array, a CPU tensor, or a dict of them."""
        raise NotImplementedError

    def postprocess(self, outputs: Any, count: int) -> list[Any]:
        """HTTP worker: the predictions of `count` rows of outputs (numpy: an array or a dict of arrays, as
        forward returned them, holding this request's rows only); values orjson can serialise (numpy allowed)."""
        raise NotImplementedError

    def warmup_input(self, seq_len: int) -> Encoded:
        """An input of length seq_len, used to run every batch shape before the server is ready."""
        encoded = self.preprocess(["warm up"])[0]
        return Encoded(seq_len, encoded.data)
