"""The handler interface: how a model plugs into the server without forking it.

A handler turns inputs into model inputs, runs a padded batch, and turns outputs into JSON-able predictions.
The server creates it with no arguments, then calls every method below on its single inference thread, so a
handler needs no locking. Install the class in the image and start the server with
``MODEL_HANDLER=mypkg.module:MyHandler`` (or ``--model-handler``).

Inputs are typed by ``input_kind``:

- ``"text"``: each input is a str (from /predict, /v1/embeddings, or a BYTES tensor over the Open Inference
  Protocol, decoded as UTF-8);
- ``"bytes"``: each input is the bytes of one element of the handler's single BYTES input tensor (an image file);
- ``"tensors"``: each input is one row, a dict of input name -> numpy array without the batch dimension, already
  checked against ``signature()`` (datatype and shape).

``signature()`` describes the model to the Open Inference Protocol (/v2): its input and output tensors, -1 marking
the batch dimension; ``to_tensors`` turns a request's predictions back into those output tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import BaseModel

from ..manifest import Manifest
from ..tensor_spec import Signature


@dataclass(frozen=True)
class LoadContext:
    model_dir: Path
    device: torch.device
    dtype: torch.dtype
    max_sequence_length: int
    compile: bool
    allow_artifact_code: bool
    task: str | None
    manifest: Manifest | None
    max_batch_size: int = 32


@dataclass(slots=True)
class Encoded:
    """One preprocessed input. `length` (tokens, or 1 for inputs without a sequence) picks its length bucket."""

    length: int
    data: Any


class InputError(ValueError):
    """Raised by preprocess for an input the model cannot take: the request gets a 422, not a 500."""


INPUT_KINDS = ("text", "bytes", "tensors")


class Handler:
    input_kind: ClassVar[str] = "text"  # one of INPUT_KINDS (see the module docstring)
    # True when each prediction is {"embedding": [...]}: the model is served at /v1/embeddings too.
    provides_embeddings: ClassVar[bool] = False
    # The JSON schema of one prediction, for the OpenAPI document; None documents it as any JSON value.
    prediction_model: ClassVar[type[BaseModel] | None] = None
    # Set by load() when inputs have a length limit (in tokens): the length buckets stop there.
    max_length: int | None = None

    def load_preprocessing(self, ctx: LoadContext) -> None:
        """What preprocess, postprocess and signature need (a tokenizer, labels, a declaration). No GPU."""

    def load(self, ctx: LoadContext) -> None:
        """Load weights from ctx.model_dir onto ctx.device. Load safetensors, never pickles."""
        raise NotImplementedError

    def preprocess(self, inputs: list[Any]) -> list[Encoded]:
        """One Encoded per input (of input_kind), in order. Raise InputError for an input the model cannot take."""
        raise NotImplementedError

    def forward(self, batch: list[Encoded], batch_size: int, seq_len: int) -> Any:
        """Run the model on batch, padded to exactly (batch_size, seq_len); batch_size >= len(batch) and
        seq_len >= every item's length. Return outputs copied off any CUDA graph's memory (e.g. on the CPU)."""
        raise NotImplementedError

    def postprocess(self, outputs: Any, count: int) -> list[Any]:
        """The predictions of the first `count` rows of outputs; values orjson can serialise (numpy allowed)."""
        raise NotImplementedError

    def warmup_input(self, seq_len: int) -> Encoded:
        """An input of length seq_len, used to run every batch shape before the server is ready."""
        return Encoded(seq_len, self.preprocess(["warm up"])[0].data)

    def probe_input(self) -> Any:
        """One input (of input_kind) for the periodic readiness test inference."""
        return "readiness probe"

    def signature(self) -> Signature | None:
        """The model's tensors for the Open Inference Protocol, once loaded; None: not served over /v2."""
        return None

    def to_tensors(self, predictions: list[Any]) -> dict[str, np.ndarray]:
        """The output tensors (name -> array with the batch dimension first) of a request's predictions."""
        raise NotImplementedError
