"""Fake handlers: no model, controllable timing. Importable as tests.server.fakes for MODEL_HANDLER."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from pydantic import BaseModel

from inference_server.handlers import Encoded, Handler, InputError, LoadContext
from inference_server.handlers.batch import Batch


class EchoPrediction(BaseModel):
    echo: str
    tokens: int


class EchoHandler(Handler):
    """Length = words in the text; the text crosses to the model as an array of its UTF-8 bytes and comes back
    padded in a (batch, bytes) array. forward records each call's shape and can be held at a gate."""

    prediction_model = EchoPrediction
    max_length = 64

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, list[str]]] = []  # (batch_size, seq_len, texts)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()  # set whenever a forward starts
        self.error: BaseException | None = None
        self.preprocessed: list[list[str]] = []
        self.warmups: list[tuple[int, int]] = []

    def load(self, ctx: LoadContext) -> None:
        self.ctx = ctx

    def preprocess(self, texts: list[str]) -> list[Encoded]:
        self.preprocessed.append(list(texts))
        if any("\x00" in t for t in texts):
            raise InputError("NUL in text")
        return [Encoded(max(1, len(t.split())), {"text": np.frombuffer(t.encode(), dtype=np.uint8)}) for t in texts]

    def warmup_input(self, seq_len: int) -> Encoded:
        return Encoded(seq_len, {"text": np.frombuffer(b"<warmup>", dtype=np.uint8)})

    def forward(self, batch: Batch) -> Any:
        padded = batch.arrays["text"]  # the engine pads each text's bytes with zeros (a text holds no NUL)
        nbytes = (padded != 0).sum(axis=1)
        texts = [padded[row, : nbytes[row]].tobytes().decode() for row in range(batch.count)]
        if texts[0] == "<warmup>":
            self.warmups.append((batch.size, batch.seq_len))
        else:
            self.calls.append((batch.size, batch.seq_len, texts))
            self.entered.set()
            self.gate.wait(30)
            if self.error is not None:
                raise self.error
        return {"text": padded, "nbytes": nbytes, "tokens": batch.lengths}

    def postprocess(self, outputs: Any, count: int) -> list[Any]:
        return [
            {"echo": outputs["text"][i, : outputs["nbytes"][i]].tobytes().decode(), "tokens": int(outputs["tokens"][i])}
            for i in range(count)
        ]

    @property
    def served(self) -> list[tuple[int, int, list[str]]]:
        return [c for c in self.calls if c[2] != ["readiness probe"]]
