"""The model service: loading state, admission (shed, drain), predictions through cache and batcher, readiness
probe and the periodic metrics line."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from pydantic import BaseModel

from . import emf
from . import metric_names as m
from .artifacts import ArtifactError, fetch_model
from .batcher import Batcher, DeadlineExceeded, ModelUnavailable, QueueFull
from .cache import ResultCache
from .device import is_cuda_error, select_device, select_dtype
from .errors import ApiError, draining, model_unavailable, not_ready, overloaded
from .gpu import GpuSampler
from .handlers import Handler, InputError, LoadContext, artifact_handler_class, builtin_handler_class, handler_class
from .metrics import Metrics
from .settings import Settings, SettingsError

log = logging.getLogger(__name__)
PROBE_TEXT = "readiness probe"


class ModelService:
    def __init__(self, settings: Settings) -> None:
        self.settings = s = settings
        self.device = select_device(s.device)
        self.dtype = select_dtype(s.precision, self.device)
        self.compile = s.compile and self.device.type == "cuda"
        if s.compile and not self.compile:
            log.warning("COMPILE is for CUDA; running eager on the CPU")
        self.handler_class: type[Handler] | None = handler_class(s.model_handler) if s.model_handler else None
        if self.handler_class is None and not s.allow_artifact_code:
            if s.model_task is None:
                raise SettingsError("MODEL_TASK", "is not set and the model's manifest names no task")
            self.handler_class = builtin_handler_class(s.model_task)
        self.metrics = Metrics(s.model_name, s.model_version)
        self.cache = ResultCache(s.result_cache_size, s.model_version)
        self.batcher = Batcher(self._load_handler, max_batch_size=s.max_batch_size,
                               max_wait_s=s.max_batch_wait_ms / 1000, max_queue_size=s.max_queue_size,
                               max_sequence_length=s.max_sequence_length, pad_batches=self.compile,
                               warmup_runs=3 if self.compile else 1,  # CUDA graphs record on a later call
                               on_batch=self.metrics.observe_batch, on_fatal=self._on_fatal, is_fatal=is_cuda_error)
        self.metrics.bind_gauges(lambda: self.batcher.queued, lambda: self.readiness() is None)
        self.gpu = GpuSampler(None)
        self.draining = False
        self.in_flight = 0
        self.exit_code = 0
        # Set by the server: ends the process after a load failure or a CUDA error.
        self.request_exit: Callable[[int], None] = lambda code: None
        self._last_probe_ok: float | None = None
        self._stop = threading.Event()
        self._started = False

    @property
    def prediction_model(self) -> type[BaseModel] | None:
        return self.handler_class.prediction_model if self.handler_class else None

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.batcher.start()
        for target, name in ((self._probe_loop, "ready-probe"), (self._metrics_loop, "metrics")):
            threading.Thread(target=target, name=name, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self.batcher.stop()

    def begin_drain(self) -> None:
        if not self.draining:
            self.draining = True
            log.info("draining", extra={"in_flight": self.in_flight, "queued": self.batcher.queued})

    async def wait_drained(self, timeout: float) -> bool:
        """Wait until accepted requests have finished; False if the timeout came first."""
        deadline = time.monotonic() + timeout
        while self.in_flight or not self.batcher.idle:
            if time.monotonic() >= deadline:
                log.warning("drain timeout; exiting with work in flight",
                            extra={"in_flight": self.in_flight, "queued": self.batcher.queued})
                return False
            await asyncio.sleep(0.02)
        log.info("drained")
        return True

    def _load_handler(self) -> Handler:
        """Runs on the inference thread, which then owns the model."""
        s = self.settings
        started = time.monotonic()
        artifact = fetch_model(s.model_uri, s.model_cache_dir, s.manifest_required)
        manifest = artifact.manifest
        if manifest and (manifest.model_name, manifest.version) != (s.model_name, s.model_version):
            log.warning("the manifest names another model or version",
                        extra={"manifest_model": manifest.model_name, "manifest_version": manifest.version})
        cls = self.handler_class or artifact_handler_class(artifact.directory)
        if cls is None:
            task = s.model_task or (manifest.task if manifest else None)
            if task is None:
                raise SettingsError("MODEL_TASK", "is not set, the manifest names no task and the model has no "
                                                  "handler.py")
            cls = builtin_handler_class(task)
        handler = cls()
        handler.load(LoadContext(artifact.directory, self.device, self.dtype, s.max_sequence_length, self.compile,
                                 s.allow_artifact_code, s.model_task, manifest, s.max_batch_size))
        if self.device.type == "cuda":
            self.gpu = GpuSampler(self.device.index if self.device.index is not None else torch.cuda.current_device())
        log.info("model loaded", extra={"handler": f"{cls.__module__}.{cls.__qualname__}", "device": str(self.device),
                                        "dtype": str(self.dtype).removeprefix("torch."), "compile": self.compile,
                                        "seconds": round(time.monotonic() - started, 3)})
        return handler

    def _on_fatal(self, exc: BaseException) -> None:
        if self.batcher.ready.is_set():
            log.critical("model failure; exiting so the task is replaced", exc_info=exc,
                         extra={"error": str(exc), "cuda_error": is_cuda_error(exc)})
        else:
            expected = isinstance(exc, (ArtifactError, SettingsError))  # no traceback needed for these
            log.critical("model load failed; refusing to start", exc_info=None if expected else exc,
                         extra={"error": str(exc), "error_type": type(exc).__name__})
        self.exit_code = 1
        self.request_exit(1)

    # -- readiness ---------------------------------------------------------------------------------------------

    def readiness(self) -> str | None:
        """None when ready for traffic, else why not."""
        if self.draining:
            return "draining"
        if self.batcher.failed:
            return "the model failed"
        if not self.batcher.ready.is_set():
            return "loading"
        window = 2 * self.settings.ready_probe_interval_s + self.settings.request_timeout_s
        if self._last_probe_ok is None or time.monotonic() - self._last_probe_ok > window:
            return "no recent successful test inference"
        return None

    def _probe_loop(self) -> None:
        while not self.batcher.ready.wait(0.2):
            if self._stop.is_set() or self.batcher.failed:
                return
        while not self._stop.is_set():
            if not self.draining:
                self.probe()
            self._stop.wait(self.settings.ready_probe_interval_s)

    def probe(self) -> bool:
        timeout = self.settings.request_timeout_s
        try:
            handler = self.batcher.handler
            probe = handler.probe_input() if handler is not None else PROBE_TEXT
            future = self.batcher.submit([probe], time.monotonic() + timeout, bypass_queue_limit=True)
            future.result(timeout)
        except Exception as exc:
            self._last_probe_ok = None
            log.warning("readiness test inference failed", extra={"error": repr(exc)})
            return False
        self._last_probe_ok = time.monotonic()
        return True

    # -- requests ----------------------------------------------------------------------------------------------

    def admit(self) -> None:
        """Shed a predict request before reading its body. Raises ApiError."""
        if self.draining:
            self.metrics.record_rejected()
            raise draining()
        if self.batcher.failed:
            raise model_unavailable()
        if not self.batcher.ready.is_set():
            raise not_ready("loading")
        if self.batcher.queued >= self.settings.max_queue_size:
            self.metrics.record_rejected()
            raise overloaded("queue full")

    @property
    def input_kind(self) -> str | None:
        """The handler's input kind; None while a handler from the artifact is not loaded yet."""
        handler = self.batcher.handler
        cls = type(handler) if handler is not None else self.handler_class
        return cls.input_kind if cls is not None else None

    def loaded_handler(self) -> Handler:
        """The loaded handler, for what it declares (signature, tensors); raises ApiError 503 until loaded."""
        handler = self.batcher.handler
        if handler is None:
            self.admit()
            raise not_ready("loading")
        return handler

    async def predict(self, texts: list[Any], log_fields: dict[str, Any], *, use_cache: bool = True) -> list[Any]:
        """Predictions for inputs of the handler's input_kind (the name `texts` is historical)."""
        cache = self.cache
        cacheable = use_cache and cache.enabled and all(isinstance(t, (str, bytes)) for t in texts)
        keys = [cache.key(t) for t in texts] if cacheable else []
        predictions: list[Any] = [cache.get(k) for k in keys] if keys else [None] * len(texts)
        missing = [i for i, p in enumerate(predictions) if p is None]
        if cacheable:
            log_fields["cache_hits"] = len(texts) - len(missing)
            self.metrics.record_cache(len(texts) - len(missing), len(missing))
        if not missing:
            return predictions
        result = await self._infer([texts[i] for i in missing])
        for i, prediction in zip(missing, result.predictions):
            predictions[i] = prediction
            if keys:
                cache.put(keys[i], prediction)
        log_fields.update(input_tokens=result.input_tokens, queue_wait_ms=round(result.queue_wait_s * 1000, 3),
                          inference_ms=round(result.inference_s * 1000, 3))
        self.metrics.observe_model_time(result.queue_wait_s, result.inference_s)
        return predictions

    async def _infer(self, texts: list[str]):
        timeout = self.settings.request_timeout_s
        try:
            future = self.batcher.submit(texts, time.monotonic() + timeout)
        except QueueFull as exc:
            self.metrics.record_rejected()
            raise overloaded(str(exc)) from None
        except ModelUnavailable:
            raise model_unavailable() from None
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except (TimeoutError, DeadlineExceeded):
            self.metrics.record_timed_out()
            raise ApiError(504, "timeout", f"no result within {timeout:g} s") from None
        except InputError as exc:
            raise ApiError(422, "invalid_input", str(exc)) from None
        except ModelUnavailable:
            raise model_unavailable() from None
        except Exception as exc:
            log.error("inference failed", exc_info=exc)
            raise ApiError(500, "internal_error", "inference failed") from None

    def emit_interval_metrics(self) -> None:
        values: dict[str, Any] = self.metrics.take_interval()
        values[m.QUEUE_DEPTH] = self.batcher.queued
        values.update(self.gpu.sample())
        s = self.settings
        log.info("metrics", extra={"fields": emf.document(s.deployment_env, s.model_name, values,
                                                          {"model_version": s.model_version})})

    def _metrics_loop(self) -> None:
        while not self._stop.wait(self.settings.metrics_interval_s):
            try:
                self.emit_interval_metrics()
            except Exception:
                log.exception("metrics emission failed")
