"""A fake pool loader: no model files, loads that can be held at a gate or made to fail, forwards that record which
model ran and can be held too."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import numpy as np

from inference_server.handlers import Encoded, Handler
from inference_server.handlers.batch import Batch
from inference_server.pool.loaded import LoadedModel, LoadError
from inference_server.pool.store import DISK

MIB = 1 << 20


class VersionHandler(Handler):
    """Answers every text with its model's version (a number), so a test sees which weights served it."""

    def __init__(self, name: str, version: str, runs: list[str], gate: threading.Event) -> None:
        self.name, self.version, self.runs, self.gate = name, version, runs, gate

    def preprocess(self, inputs: list[Any]) -> list[Encoded]:
        return [Encoded(1, {"x": np.zeros(1, dtype=np.float32)}) for _ in inputs]

    def forward(self, batch: Batch) -> np.ndarray:
        self.runs.append(self.name)
        self.gate.wait(10)
        return np.full((batch.size, 1), float(self.version), dtype=np.float32)

    def postprocess(self, outputs: Any, count: int) -> list[Any]:
        return [float(row[0]) for row in outputs[:count]]


class FakeLoader:
    def __init__(self, cost_bytes: int = MIB) -> None:
        self.cost_bytes = cost_bytes
        self.loads: Counter[tuple[str, str]] = Counter()
        self.unloaded: list[tuple[str, str]] = []
        self.fail: dict[tuple[str, str], str] = {}  # (model, version) -> the error its load raises
        self.load_gate = threading.Event()
        self.load_gate.set()
        self.loading = threading.Event()  # set when a load starts
        self.forward_gate = threading.Event()
        self.forward_gate.set()
        self.runs: list[str] = []  # the model of each batch, in order

    def load(self, name: str, version: str) -> tuple[LoadedModel, str]:
        self.loads[(name, version)] += 1
        self.loading.set()
        self.load_gate.wait(10)
        if (name, version) in self.fail:
            raise LoadError(f"model {name} version {version} refused: {self.fail[(name, version)]}")
        handler = VersionHandler(name, version, self.runs, self.forward_gate)
        return LoadedModel(name, version, handler, self.cost_bytes, self.cost_bytes), DISK

    def to_device(self, model: LoadedModel) -> bool:
        return True

    def to_host(self, model: LoadedModel) -> bool:
        return True

    def unload(self, model: LoadedModel) -> None:
        self.unloaded.append(model.key)
