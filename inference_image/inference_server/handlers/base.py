"""The handler interface: how a model plugs into the server without forking it.

A handler turns texts into model inputs, runs a padded batch, and turns outputs into JSON-able predictions.
The server creates it with no arguments, then calls every method below on its single inference thread, so a
handler needs no locking. Install the class in the image and start the server with
``MODEL_HANDLER=mypkg.module:MyHandler`` (or ``--model-handler``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from pydantic import BaseModel

from ..manifest import Manifest


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


@dataclass(slots=True)
class Encoded:
    """One preprocessed input. `length` (tokens, or 1 for inputs without a sequence) picks its length bucket."""

    length: int
    data: Any


class InputError(ValueError):
    """Raised by preprocess for an input the model cannot take: the request gets a 422, not a 500."""


class Handler:
    # The JSON schema of one prediction, for the OpenAPI document; None documents it as any JSON value.
    prediction_model: ClassVar[type[BaseModel] | None] = None
    # Set by load() when inputs have a length limit (in tokens): the length buckets stop there.
    max_length: int | None = None

    def load(self, ctx: LoadContext) -> None:
        """Load weights from ctx.model_dir onto ctx.device. Load safetensors, never pickles."""
        raise NotImplementedError

    def preprocess(self, texts: list[str]) -> list[Encoded]:
        """One Encoded per text, in order."""
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
