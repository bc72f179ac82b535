"""A model a pool has loaded, and how a pool loads one: fetched through the store (verified against its manifest),
its handler loaded on the device, and its answer to the published probe checked before it serves."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

from ..engine.probe_check import check_probe
from ..handlers import Handler, LoadContext, builtin_handler_class, handler_class
from .store import ModelStore

log = logging.getLogger(__name__)

# Where a request found its model: on the device (a hit), or loaded from host memory, the local disk cache or S3.
DEVICE, HOST = "device", "host"


class LoadError(Exception):
    """A model version cannot be loaded (fetch, verification, handler, or the published-probe check)."""


@dataclass(eq=False)
class LoadedModel:
    """One version of one model, loaded. ``in_flight`` counts requests holding it: it is never evicted, unloaded or
    moved while that is above zero (requests finish on the weights they started on)."""

    name: str
    version: str
    handler: Handler
    cost_bytes: int  # device memory: weights plus the batch plan (MAX_BATCH_SIZE inputs of the longest length)
    host_bytes: int  # host memory once moved off the device (the weights)
    load_s: float = 0.0
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)
    on_device: bool = True
    retired: bool = False  # removed from the registry or replaced by another version: unloaded once idle

    @property
    def key(self) -> tuple[str, str]:
        return self.name, self.version


class Loader(Protocol):
    def load(self, name: str, version: str) -> tuple[LoadedModel, str]:
        """The loaded model and the tier its files came from (store.DISK or store.S3). Raises LoadError."""
        ...

    def to_device(self, model: LoadedModel) -> bool: ...

    def to_host(self, model: LoadedModel) -> bool: ...

    def unload(self, model: LoadedModel) -> None: ...


class StoreLoader:
    """Loads pool models from a ModelStore onto one device, with the built-in handler of each manifest's task (or
    MODEL_HANDLER for every model). A model's own code (trust_remote_code, handler.py) is never run in a pool."""

    def __init__(
        self,
        store: ModelStore,
        *,
        device_setting: str = "auto",
        precision: str = "auto",
        max_batch_size: int = 32,
        max_sequence_length: int = 256,
        model_handler: str | None = None,
    ) -> None:
        import torch

        from ..engine.device import select_device, select_dtype

        self._torch = torch
        self.store = store
        self.device = select_device(device_setting)
        self.dtype = select_dtype(precision, self.device)
        self.max_batch_size, self.max_sequence_length = max_batch_size, max_sequence_length
        self._handler_class = handler_class(model_handler) if model_handler else None
        self._probed: set[tuple[str, str]] = set()  # versions that answered their published probe in this process

    def load(self, name: str, version: str) -> tuple[LoadedModel, str]:
        started = time.monotonic()
        try:
            fetched = self.store.fetch(name, version)
        except Exception as exc:
            raise LoadError(f"model {name} version {version} cannot be fetched: {exc}") from exc
        artifact = fetched.artifact
        manifest = artifact.manifest
        task = manifest.task if manifest else None
        try:
            cls = self._handler_class or builtin_handler_class(task or "")
        except Exception as exc:
            raise LoadError(
                f"model {name} version {version}: its manifest names no task the pool serves "
                f"({task!r}); publish it with --task"
            ) from exc
        handler = cls()
        ctx = LoadContext(
            artifact.directory,
            self.device,
            self.dtype,
            self.max_sequence_length,
            False,
            False,
            task,
            manifest,
            self.max_batch_size,
        )
        try:
            handler.load_preprocessing(ctx)
            handler.load(ctx)
            if fetched.verified_now or (name, version) not in self._probed:  # files unchanged since they passed
                check_probe(
                    handler, manifest, model_name=name, version=version, runtime="eager", device_type=self.device.type
                )
                self._probed.add((name, version))
            weights = handler.weights_bytes()
            plan = handler.activation_bytes(self.max_batch_size, handler.max_length or self.max_sequence_length) or 0
        except Exception as exc:
            self._free(handler)
            raise LoadError(f"model {name} version {version} refused: {exc}") from exc
        return LoadedModel(name, version, handler, weights + plan, weights, time.monotonic() - started), fetched.tier

    def to_device(self, model: LoadedModel) -> bool:
        return model.on_device or model.handler.move_to(self.device)

    def to_host(self, model: LoadedModel) -> bool:
        """On the CPU the device is host memory: nothing moves."""
        if self.device.type == "cpu":
            return True
        moved = model.handler.move_to(self._torch.device("cpu"))
        if moved:
            self._torch.cuda.empty_cache()
        return moved

    def unload(self, model: LoadedModel) -> None:
        self._free(model.handler)

    def _free(self, handler: Handler) -> None:
        try:
            handler.unload()
        except Exception:
            log.exception("a handler's unload failed; its memory is freed when nothing references it")
        if self.device.type == "cuda":
            self._torch.cuda.empty_cache()
