"""The model side: loads the handler, owns the device, batches the inputs of every HTTP worker's link and sends
each job's outputs back to the worker that asked. Runs in the model process (or, in tests, in threads of the
test process)."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import emf
from .. import facts as m
from ..batch_times import BatchTimes
from ..handlers import (
    Handler,
    HandlerError,
    LoadContext,
    resolve_handler_class,
)
from ..handlers.checkpoint_check import ModelCheckError
from ..handlers.runtimes import RuntimeConversionError, check_published
from ..interval_stats import IntervalStats
from ..ipc import Channel, ModelState, Slot, StatusPage
from ..link_messages import (
    Artifact,
    LinkMessage,
    Ready,
)
from ..manifest import Manifest
from ..queue_signal import QueuePeak, signal_document
from ..settings import Settings, SettingsError
from . import gpu_share
from .artifacts import ArtifactError, fetch_model
from .batcher import Batcher
from .probe_check import check_probe
from .worker_link import WorkerLink

log = logging.getLogger("inference_server.model")


class ModelRunner:
    """Loads the model on the inference thread, serves every worker link, reports readiness in the status page
    and emits the model's interval metrics (batch sizes, queue depth, GPU)."""

    def __init__(
        self,
        settings: Settings,
        status: StatusPage,
        on_exit: Callable[[int], None] = lambda code: None,
        server_started_at: float | None = None,
    ) -> None:
        self.started_at = server_started_at if server_started_at is not None else time.time()
        self.start_phases: dict[str, float] = {}  # wall-clock times of the start's steps
        import torch

        from .device import is_cuda_error, select_device, select_dtype
        from .gpu import GpuSampler

        self.settings = s = settings
        self.status = status
        self.device = select_device(s.device)
        self.dtype = select_dtype(s.precision, self.device)
        self.compile = s.model_runtime == "compile"  # inductor: CUDA graphs on a GPU, the CPU's kernels on the CPU
        self._torch = torch
        self._gpu_sampler = GpuSampler
        self.gpu = GpuSampler(None)
        self.on_exit = on_exit
        self.links: list[WorkerLink] = []
        self._links_lock = threading.Lock()
        self.announcements: list[LinkMessage] = []  # what the model directory is; that the model is ready
        self.batch_sizes = IntervalStats()
        self.exit_code = 0
        self._stop = threading.Event()
        self._queue_peak = QueuePeak()  # the deepest queue since the last signal document
        self.share: gpu_share.GpuShare | None = None  # read as the model loads
        self.batcher = Batcher(
            self._load_handler,
            max_batch_size=s.max_batch_size,
            max_wait_s=s.max_batch_wait_ms / 1000,
            max_queue_size=s.max_queue_size,
            max_sequence_length=s.max_sequence_length,
            pad_batches=self.compile,
            compile=self.compile,
            warmup=s.warmup,
            on_batch=self.batch_sizes.observe,
            on_cycle=self._flush_links,
            on_queue_change=self._on_queue_change,
            on_fatal=self._on_fatal,
            is_fatal=self._is_fatal,
            on_all_warm=self._on_all_warm,
            before_ready=self._check_probe,
            fit_batch=self._fit_share,
            batch_times=BatchTimes(status.table),
        )
        self._is_cuda_error = is_cuda_error
        self._save_compile_cache: Callable[[], object] | None = None  # set when a compile finds no cache to restore
        self.manifest: Manifest | None = None  # the fetched version's, once fetched

    def _is_fatal(self, exc: BaseException) -> bool:
        fatal = self._is_cuda_error(exc)
        if fatal:  # before any worker hears of the failure, so their readiness already fails when it does
            self.status.set(Slot.STATE, ModelState.FAILED)
        return fatal

    @property
    def handler(self) -> Handler | None:
        return self.batcher.handler

    def start(self) -> None:
        self.batcher.start()
        threading.Thread(target=self._announce_when_ready, name="announce", daemon=True).start()
        emf.start_emitting("model-metrics", self.settings.metrics_interval_s, self._stop, self.emit_interval_metrics)
        emf.start_emitting("model-signals", self.settings.signal_interval_s, self._stop, self.emit_signals)

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self.batcher.stop()
        self.emit_interval_metrics()  # the last interval's, not lost
        if self.status.state != ModelState.FAILED:
            self.status.set(Slot.STATE, ModelState.STOPPED)

    def add_link(self, channel: Channel, name: str) -> WorkerLink:
        link = WorkerLink(self, channel, name)
        with self._links_lock:
            self.links = [*self.links, link]
            for message in self.announcements:
                link.send(message)
        link.start()
        return link

    def remove_link(self, link: WorkerLink) -> None:
        with self._links_lock:
            self.links = [existing for existing in self.links if existing is not link]

    def _flush_links(self) -> None:
        for link in self.links:
            link.flush()

    def _load_handler(self) -> Handler:
        """Runs on the inference thread, which then owns the model."""
        s = self.settings
        started = time.monotonic()
        self._read_share()
        self.start_phases["fetch started"] = time.time()
        artifact = fetch_model(s.model_uri, s.model_cache_dir, s.manifest_required)
        self.start_phases["fetched"] = time.time()
        self.manifest = manifest = artifact.manifest
        if manifest and (manifest.model_name, manifest.version) != (s.model_name, s.model_version):
            log.warning(
                "the manifest names another model or version",
                extra={"manifest_model": manifest.model_name, "manifest_version": manifest.version},
            )
        cls, source = resolve_handler_class(s, artifact.directory, manifest)
        handler = cls()
        task = s.model_task or (manifest.task if manifest else None)
        ctx = LoadContext(
            artifact.directory,
            self.device,
            self.dtype,
            s.max_sequence_length,
            self.compile,
            s.allow_artifact_code,
            task,
            manifest,
            s.max_batch_size,
            runtime=s.model_runtime,
        )
        artifact_message = Artifact(
            model_dir=str(artifact.directory), handler=source, task=task, manifest=manifest is not None, shared=None
        )
        # The workers load their preprocessing (a tokenizer) while this process loads weights and warms up: at once,
        # or, where this handler shares what it loaded (handlers/base.py), once it has.
        shares = handler.shares_preprocessing(ctx)
        if not shares:
            self._announce(artifact_message)
        try:
            check_published(s.model_runtime, artifact.directory, manifest)
        except RuntimeConversionError as exc:
            raise ArtifactError(str(exc)) from None
        handler.load_preprocessing(ctx)
        if shares:
            self._announce(dataclasses.replace(artifact_message, shared=self._shared_preprocessing(handler)))
        if self.compile and s.compile_cache_uri:
            self._restore_compile_cache(s.compile_cache_uri)
        handler.load(ctx)
        if self.device.type == "cuda":
            self.gpu = self._gpu_sampler(self._device_identity()[0])
        self.start_phases["loaded"] = time.time()
        log.info(
            "model loaded",
            extra={
                "handler": f"{cls.__module__}.{cls.__qualname__}",
                "device": str(self.device),
                "dtype": str(self.dtype).removeprefix("torch."),
                "compile": self.compile,
                "runtime": s.model_runtime,
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        return handler

    def _check_probe(self, handler: Handler) -> None:
        """Once warm, before ready: the model answers the manifest's probe as it did at publish (model_check.py)."""
        s = self.settings
        check_probe(
            handler,
            self.manifest,
            model_name=s.model_name,
            version=s.model_version,
            runtime=s.model_runtime,
            device_type=self.device.type,
        )

    def _device_identity(self) -> tuple[int, str | None]:
        """The model's device as a GPU share names it: its ordinal and its UUID (0 and None on the CPU)."""
        if self.device.type != "cuda":
            return 0, None
        index = self.device.index if self.device.index is not None else self._torch.cuda.current_device()
        uuid = getattr(self._torch.cuda.get_device_properties(index), "uuid", None)
        return index, None if uuid is None else str(uuid)

    def _read_share(self) -> None:
        self.share = share = gpu_share.read_share(os.environ)
        if share is not None:
            log.info(
                "GPU share",
                extra={
                    "memory_limit": os.environ.get(gpu_share.MEMORY_VARIABLE),
                    "memory_mib": share.memory_mib(*self._device_identity()),
                    "compute_percent": share.compute_percent,
                },
            )

    def _fit_share(self, handler: Handler, length: int) -> int:
        """On the inference thread, once loaded: the largest batch of inputs of up to `length` that fits the GPU
        share's memory with the weights (MAX_BATCH_SIZE without a share). Raises ShareTooSmall when one does not."""
        s = self.settings
        limit = self.share.memory_mib(*self._device_identity()) if self.share is not None else None
        if limit is None:
            return s.max_batch_size
        weights = handler.weights_bytes()
        estimate: Callable[[int], int | None] = functools.partial(handler.activation_bytes, seq_len=length)
        plan = gpu_share.plan_batches(limit, weights, estimate, s.max_batch_size, length)  # before a forward runs out
        if self.device.type == "cuda":
            weights, estimate = self._measured(handler, length, weights)
            plan = gpu_share.plan_batches(limit, weights, estimate, s.max_batch_size, length)
        self._log_plan(plan, length, gpu_share.share_needed_mib(weights, estimate(s.max_batch_size) or 0))
        return plan.largest_batch

    def _measured(self, handler: Handler, length: int, weights: int) -> tuple[int, Callable[[int], int | None]]:
        """On a GPU, what it allocates too (the estimate may miss a kernel's workspace): the weights as allocated, and
        a batch's estimate against a measured forward of one input."""
        allocated = self._torch.cuda.memory_allocated(self.device)
        one = gpu_share.measure_input_bytes(handler, length, self.device)
        return max(weights, allocated), functools.partial(_larger_estimate, handler, length, one)

    def _log_plan(self, plan: gpu_share.BatchPlan, length: int, needed_for_max_mib: int) -> None:
        s = self.settings
        log.info(
            "batch sizes planned within the GPU share",
            extra={
                **plan.fields(),
                "max_batch_size": s.max_batch_size,
                "length": length,
                "compute_percent": self.share.compute_percent if self.share is not None else None,
            },
        )
        if plan.largest_batch < s.max_batch_size:
            log.warning(
                "MAX_BATCH_SIZE does not fit the GPU share; serving smaller batches",
                extra={
                    "max_batch_size": s.max_batch_size,
                    "largest_batch": plan.largest_batch,
                    "fix": f"set MAX_BATCH_SIZE to at most {plan.largest_batch}, or gpu_share.memory_mib to at least "
                    f"{needed_for_max_mib} MiB for batches of {s.max_batch_size}",
                },
            )

    @staticmethod
    def _shared_preprocessing(handler: Handler) -> dict[str, Any] | None:
        """What the handler shares with the workers; None (each loads its own) where it fails: never the load."""
        try:
            return handler.shared_preprocessing()
        except Exception as exc:
            log.warning(
                "the workers load their own preprocessing: sharing it failed", exc_info=exc, extra={"error": repr(exc)}
            )
            return None

    def _restore_compile_cache(self, uri: str) -> None:
        """Before anything compiles: the cache a task on this kind of device saved, or, when there is none, save
        this task's once every shape has compiled."""
        from . import compile_cache

        s = self.settings
        key = compile_cache.cache_key(
            self._torch.__version__,
            compile_cache.device_kind(self.device),
            {
                "dtype": str(self.dtype),
                "runtime": s.model_runtime,
                "max_batch_size": s.max_batch_size,
                "max_sequence_length": s.max_sequence_length,
            },
        )
        directories = compile_cache.cache_directories()
        if not compile_cache.restore(uri, key, directories):
            self._save_compile_cache = functools.partial(compile_cache.save, uri, key, directories)

    def _on_all_warm(self) -> None:
        if self.compile:
            self._emit({m.STARTUP_COMPILE_SECONDS: time.time() - self.start_phases["loaded"]})
            if self.device.type == "cuda":
                # Until now every shape also ran eagerly: hand the eager forward's cached blocks back, outside the
                # CUDA graphs' private pool, for the traffic that runs compiled from here on.
                self._torch.cuda.empty_cache()
        save, self._save_compile_cache = self._save_compile_cache, None
        if save is None:
            return
        if self.batcher.warm_failures:  # the next tasks would restore a cache without those shapes, for good
            log.warning("compile cache not saved: a shape failed to warm", extra={"shapes": self.batcher.warm_failures})
            return
        threading.Thread(target=save, name="compile-cache", daemon=True).start()  # off the inference thread

    def _announce(self, message: LinkMessage) -> None:
        """Send to every link, and to each link that connects later."""
        with self._links_lock:
            self.announcements.append(message)
            links = list(self.links)
        for link in links:
            link.send(message)

    def _announce_when_ready(self) -> None:
        while not self.batcher.ready.wait(0.1):
            if self._stop.is_set() or self.batcher.failed:
                return
        self.status.set(Slot.STATE, ModelState.READY)
        self._announce(Ready())
        self.emit_startup_metrics(time.time())

    def emit_startup_metrics(self, ready_at: float) -> None:
        """Once per start: seconds from the server's process start to ready, and the model's fetch, load and warm-up
        within them (the dashboard's "Task start" graph)."""
        p = self.start_phases  # all three set: ready follows a load
        self._emit(
            {
                m.STARTUP_SECONDS: ready_at - self.started_at,
                m.STARTUP_FETCH_SECONDS: p["fetched"] - p["fetch started"],
                m.STARTUP_LOAD_SECONDS: p["loaded"] - p["fetched"],
                m.STARTUP_WARMUP_SECONDS: ready_at - p["loaded"],
            }
        )

    def _emit(self, values: dict[str, float]) -> None:
        """One EMF document of the model process's start."""
        s = self.settings
        log.info(
            "metrics",
            extra={
                "fields": emf.document(
                    s.deployment_env,
                    s.model_name,
                    {name: round(value, 3) for name, value in values.items()},
                    {"model_version": s.model_version, "process": "model"},
                )
            },
        )

    def _on_fatal(self, exc: BaseException) -> None:
        self.status.set(Slot.STATE, ModelState.FAILED)
        if self.batcher.ready.is_set():
            log.critical(
                "model failure; exiting so the task is replaced",
                exc_info=exc,
                extra={"error": str(exc), "cuda_error": self._is_cuda_error(exc)},
            )
            code = 1
        else:
            _log_refusal(exc)
            code = 2 if isinstance(exc, (SettingsError, HandlerError)) else 1
        self.exit_code = code
        sys.stdout.flush()
        self.on_exit(code)

    def _on_queue_change(self, queued: int) -> None:
        self.status.set(Slot.QUEUED, queued)
        self._queue_peak.observe(queued)

    def emit_signals(self) -> None:
        """The scale-out signal, every SIGNAL_INTERVAL_S at high resolution: the deepest queue since the last one."""
        peak = self._queue_peak.take(self.batcher.queued)
        s = self.settings
        document = signal_document(
            s.deployment_env, s.model_name, peak, {"model_version": s.model_version, "process": "model"}
        )
        log.info("metrics", extra={"fields": document})

    def emit_interval_metrics(self) -> None:
        values: dict[str, Any] = {}
        sizes = self.batch_sizes.take()
        if sizes is not None:
            values[m.BATCH_SIZE] = sizes
        values.update(self.gpu.sample())
        memory, busy = self._gpu_memory_used(), self.batcher.busy.take_percent()
        self.status.publish_model_figures(memory, busy)
        values[m.GPU_MEMORY_USED_MIB] = round(memory / gpu_share.MIB, 1)
        values[m.MODEL_BUSY_PERCENT] = busy
        s = self.settings
        log.info(
            "metrics",
            extra={
                "fields": emf.document(
                    s.deployment_env, s.model_name, values, {"model_version": s.model_version, "process": "model"}
                )
            },
        )

    def _gpu_memory_used(self) -> int:
        """Bytes this process holds on its GPU (the caching allocator's reserve: what counts against a share)."""
        return int(self._torch.cuda.memory_reserved(self.device)) if self.device.type == "cuda" else 0


def _log_refusal(exc: BaseException) -> None:
    """Before ready: why the model will not serve (the expected refusals need no traceback)."""
    expected = isinstance(exc, (ArtifactError, SettingsError, ModelCheckError))
    wrong_model = isinstance(exc, ModelCheckError)
    log.critical(
        "wrong model; refusing to start" if wrong_model else "model load failed; refusing to start",
        exc_info=None if expected else exc,
        extra={"error": str(exc), "error_type": type(exc).__name__},
    )


def _larger_estimate(handler: Handler, length: int, measured_one: int, size: int) -> int:
    """A batch's need on a GPU: the handler's estimate or the measured forward of one input times the batch,
    whichever is larger (the measured one counts the forward's fixed costs once per input: an upper estimate)."""
    return max(size * measured_one, handler.activation_bytes(size, length) or 0)
