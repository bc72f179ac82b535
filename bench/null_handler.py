"""A handler for our server that does no work: with it, a benchmark measures the server's HTTP, IPC and batching
path alone. Start the server with MODEL_HANDLER=bench.null_handler:NullHandler and the repo root on PYTHONPATH."""

from __future__ import annotations

from typing import Any

import numpy as np

from inference_server.handlers import Encoded, Handler, LoadContext
from inference_server.handlers.batch import Batch

from .models import NULL_PREDICTION

_ONE = {"x": np.zeros(1, dtype=np.int32)}


class NullHandler(Handler):
    max_length = 16

    def load(self, ctx: LoadContext) -> None:
        pass

    def preprocess(self, texts: list[str]) -> list[Encoded]:
        return [Encoded(1, _ONE) for _ in texts]

    def forward(self, batch: Batch) -> Any:
        return np.zeros((batch.count, 1), dtype=np.int8)

    def postprocess(self, outputs: Any, count: int) -> list[Any]:
        return [NULL_PREDICTION] * count

    def warmup_input(self, seq_len: int) -> Encoded:
        return Encoded(seq_len, _ONE)


class TimedHandler(NullHandler):
    """A stand-in for a GPU-bound model: each batch takes BENCH_BATCH_MS (default 20) of wall time and no host CPU
    (a sleep, as a CUDA kernel's wait is), whatever its size up to the batch limit. For measuring what skips the
    model (the shared cache) on a machine whose CPUs are shared."""

    def load(self, ctx: LoadContext) -> None:
        import os

        self._batch_s = float(os.environ.get("BENCH_BATCH_MS", "20")) / 1000

    def forward(self, batch: Batch) -> Any:
        import time

        time.sleep(self._batch_s)
        return super().forward(batch)
