"""One HTTP worker's model service: loading state, admission (shed, drain), predictions through the cache,
the worker's preprocessing and the link to the model process, the readiness probe and the interval metrics."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel

from .. import emf
from ..batch_times import SLOTS, BatchTimes
from ..handlers import Encoded, Handler, InputError, LoadContext, builtin_handler_class, handler_class
from ..link_messages import DeadlineExceeded, ModelUnavailable, QueueFull
from ..settings import Settings, SettingsError
from .admission import Admission
from .cache import ResultCache
from .cache_values import input_key, key_prefix, normalised_input
from .client import ModelClient
from .draining import wait_until_answered
from .errors import ApiError, draining, model_unavailable, not_ready, overloaded
from .metrics import Metrics
from .shared_cache import SharedCache, SharedCacheMetrics, config_from_settings
from .tracing import tracing_from

if TYPE_CHECKING:
    from .spans import RequestTrace

log = logging.getLogger(__name__)
PROBE_TEXT = "readiness probe"
# A shape's compile (runtime compile, after ready) this long or longer no longer counts as the reason the readiness
# test inference fails: the model is taken for stuck. Compiling one shape took 9 s on a 2-core CPU (MiniLM).
MAX_COMPILE_S = 600.0
PREPROCESS_THREADS = 2  # per worker, for a handler's slow_preprocess (Pillow decodes without the GIL)
# What admission by deadline adds to the model's measured batch times (beside the batching window): the link both
# ways, postprocessing and the response.
ADMISSION_MARGIN_S = 0.005
ADMISSION_HEADROOM = 1.0  # on top of the planned deviations: 1.2 refused every request under overload on a busy machine
QUEUE_FULL, WOULD_MISS_DEADLINE = "queue full", "the queue ahead would miss the deadline"  # why a request is shed


class WorkerService:
    """An HTTP worker's side of the model: admission, the result caches, preprocessing, and jobs sent over the
    link (ipc) to the model process; what every route of the worker calls."""

    local_model: Any  # set only by inference_server.testing.LocalModel: the in-process model side that serves it

    def __init__(self, settings: Settings, client: ModelClient, worker: int = 0) -> None:
        self.settings = s = settings
        self.client = client
        self.status = client.status
        self.worker = worker
        self.handler_class: type[Handler] | None = handler_class(s.model_handler) if s.model_handler else None
        if self.handler_class is None and not s.allow_artifact_code:
            if s.model_task is None:
                raise SettingsError("MODEL_TASK", "is not set and the model's manifest names no task")
            self.handler_class = builtin_handler_class(s.model_task)
        self._schema_class = self.handler_class
        self.handler: Handler | None = None  # this worker's preprocessing, once the model process is ready
        self.metrics = Metrics(s.model_name, s.model_version)
        self.tracing = tracing_from(s, worker)  # None: no OTLP endpoint, nothing traced
        self.cache = ResultCache(s.result_cache_size, s.model_version)
        shared = config_from_settings(s)
        self.shared_cache = (
            None if shared is None else SharedCache(shared, metrics=SharedCacheMetrics(self.metrics.registry))
        )
        self.metrics.bind_gauges(lambda: self.status.queued, lambda: self.readiness() is None)
        self.metrics.bind_model_gauges(lambda: self.status.gpu_memory_used_mib, lambda: self.status.model_busy_percent)
        times = BatchTimes(self.status.table if self.status is not None else [0] * SLOTS)
        self.admission = Admission(
            times,
            lambda: self.status.queued,
            margin_s=s.max_batch_wait_ms / 1000 + ADMISSION_MARGIN_S,
            headroom=ADMISSION_HEADROOM,
        )
        self.draining = False
        self.in_flight = 0
        self.exit_code = 0
        self.load_error: BaseException | None = None
        # Set by the server: ends the process (a failed preprocessing load).
        self.request_exit: Callable[[int], None] = lambda code: None
        self._last_probe_ok: float | None = None
        self._probed_ok = False  # a test inference has succeeded
        self._probe_error = False  # the last test inference failed with an error, not a wait behind a compile
        self._stop = threading.Event()
        self._started = False
        self._preprocess_pool: ThreadPoolExecutor | None = None
        self._preprocessing = 0  # inputs waiting for or in the pool

    @property
    def prediction_model(self) -> type[BaseModel] | None:
        return self._schema_class.prediction_model if self._schema_class else None

    @property
    def model_ready(self) -> bool:
        return self.handler is not None and self.client.ready.is_set() and not self.client.model_failed

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self, on_loop: bool = False) -> None:
        """on_loop: called on the server's event loop, which then reads the link to the model itself."""
        if self._started:
            return
        self._started = True
        self.client.start(on_loop)
        threading.Thread(target=self._load_loop, name="preprocessing-load", daemon=True).start()
        emf.start_emitting("metrics", self.settings.metrics_interval_s, self._stop, self.emit_interval_metrics)

    def stop(self) -> None:
        """Stop the background threads; the last interval's metrics are written now, not lost."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._preprocess_pool is not None:
            self._preprocess_pool.shutdown(wait=False, cancel_futures=True)
        if self._started:
            self.emit_interval_metrics()
        if self.tracing is not None:
            self.tracing.shutdown()

    @property
    def drain_timeout_s(self) -> float:
        return self.settings.drain_timeout_s

    def begin_drain(self) -> None:
        if not self.draining:
            self.draining = True
            log.info("draining", extra={"in_flight": self.in_flight, "worker": self.worker})

    async def wait_drained(self, timeout: float) -> bool:
        """Wait until accepted requests have finished; False if the timeout came first."""
        return await wait_until_answered(lambda: self.in_flight, timeout, log, {"worker": self.worker})

    def _load_loop(self) -> None:
        """Load this worker's preprocessing from the model directory the model process fetched (while it loads
        the weights), then probe once the model is ready."""
        while not self.client.artifact.wait(0.1):
            if self._stop.is_set() or self.client.model_failed:
                return
        info = self.client.artifact_info
        assert info is not None  # set before the artifact event
        s = self.settings
        started = time.monotonic()
        try:
            from pathlib import Path

            from ..handlers import handler_class_from
            from ..manifest import read_manifest

            model_dir = Path(info.model_dir)
            cls = handler_class_from(info.handler, model_dir)
            handler = cls()
            manifest = read_manifest(model_dir) if info.manifest else None
            handler.load_preprocessing(
                LoadContext(
                    model_dir,
                    "cpu",
                    None,
                    s.max_sequence_length,
                    False,
                    s.allow_artifact_code,
                    info.task,
                    manifest,
                    s.max_batch_size,
                    shared=info.shared,
                )
            )
        except Exception as exc:
            self.load_error = exc
            log.critical("preprocessing load failed", exc_info=exc, extra={"error": str(exc)})
            self.exit_code = 1
            self.request_exit(1)
            return
        self.handler = handler
        log.info("preprocessing loaded", extra={"worker": self.worker, "seconds": round(time.monotonic() - started, 3)})
        while not self.client.ready.wait(0.1):
            if self._stop.is_set() or self.client.model_failed:
                return
        self._probe_loop()

    # -- readiness ---------------------------------------------------------------------------------------------

    def readiness(self) -> str | None:
        """None when ready for traffic, else why not."""
        if self.draining or self.status.draining:
            return "draining"
        if self.client.model_failed or self.load_error is not None:
            return "the model failed"
        if not self.model_ready:
            return "loading"
        window = 2 * self.settings.ready_probe_interval_s + self.settings.request_timeout_s
        if self._last_probe_ok is not None and time.monotonic() - self._last_probe_ok <= window:
            return None
        if self._waiting_out_a_compile():
            return None  # the model compiles a shape after ready (runtime compile): the test inference waits behind it
        return "no recent successful test inference"

    def _waiting_out_a_compile(self) -> bool:
        """The model compiles a shape (for less than MAX_COMPILE_S), has served before (a test inference of this
        worker's, or any real batch: a worker that replaced another mid-compile), and this worker's last test
        inference did not fail with an error of its own."""
        times = self.admission.times
        compiling = times.compiling_s()
        return (
            compiling is not None
            and compiling < MAX_COMPILE_S
            and not self._probe_error
            and (self._probed_ok or times.served)
        )

    def _probe_loop(self) -> None:
        while not self._stop.is_set():
            if not self.draining:
                self.probe()
            self._stop.wait(self.settings.ready_probe_interval_s)

    def probe(self) -> bool:
        """A test inference through the whole path: this worker's preprocessing, the link, the model."""
        timeout = self.settings.request_timeout_s
        try:
            handler = self.handler
            assert handler is not None  # probed only once the preprocessing has loaded
            items = handler.preprocess([handler.probe_input()])
            result = self.client.submit_sync(items, time.monotonic() + timeout, bypass_queue_limit=True)
            handler.postprocess(result.result(timeout).outputs, 1)
        except (TimeoutError, DeadlineExceeded) as exc:
            if self._waiting_out_a_compile():
                log.info("readiness test inference waited out behind a compile", extra={"error": repr(exc)})
                return False
            return self._probe_failed(exc)
        except Exception as exc:
            return self._probe_failed(exc)
        if self._last_probe_ok is None:
            log.info("ready for traffic", extra={"worker": self.worker})
        self._last_probe_ok = time.monotonic()
        self._probed_ok, self._probe_error = True, False
        return True

    def _probe_failed(self, exc: Exception) -> bool:
        self._last_probe_ok = None
        self._probe_error = True  # an error, not a wait: no compile excuses it until a test inference succeeds again
        log.warning("readiness test inference failed", extra={"error": repr(exc)})
        return False

    # -- requests ----------------------------------------------------------------------------------------------

    def admit(self, budget_s: float | None = None) -> None:
        """Shed a predict request before reading its body: also when one more input could not finish within
        budget_s (default REQUEST_TIMEOUT_S) behind the queue. Raises ApiError."""
        self.check_serving()
        reason = self.shed_reason(budget_s)
        if reason is not None:
            raise overloaded(reason)

    def check_serving(self) -> None:
        """Raises ApiError 503 while draining, failed or loading."""
        if self.draining or self.status.draining:
            self.metrics.record_rejected()
            raise draining()
        if self.client.model_failed:
            raise model_unavailable()
        if not self.model_ready:
            raise not_ready("loading")

    def shed_reason(self, budget_s: float | None = None) -> str | None:
        """Why a ready server sheds a request now (a full queue, or a deadline the queue ahead would miss), or
        None; counted as rejected. The hot path of overload: no exception, no allocation on the way to yes."""
        queued = self.status.queued
        if queued >= self.settings.max_queue_size:
            self.metrics.record_rejected()
            return QUEUE_FULL
        if not self.admission.can_finish(self.settings.request_timeout_s if budget_s is None else budget_s):
            self.metrics.record_rejected()
            return WOULD_MISS_DEADLINE
        return None

    @property
    def input_kind(self) -> str | None:
        """The handler's input kind; None while a handler from the artifact is not loaded yet."""
        cls = type(self.handler) if self.handler is not None else self.handler_class
        return cls.input_kind if cls is not None else None

    def loaded_handler(self) -> Handler:
        """This worker's handler, for what it declares (signature, tensors); raises ApiError 503 until loaded."""
        if self.handler is None:
            self.admit()
            raise not_ready("loading")
        return self.handler

    async def predict(
        self,
        texts: list[Any],
        log_fields: dict[str, Any],
        *,
        use_cache: bool = True,
        options: dict[str, Any] | None = None,
        deadline: float | None = None,
        trace: RequestTrace | None = None,
    ) -> list[Any]:
        """Predictions for inputs of the handler's input_kind (the name `texts` is historical): the in-process
        LRU first, then the shared cache (one round trip), then the model; what the model computed is stored in
        both. ``options``: the request's options that change a prediction (part of every cache key);
        ``deadline``: time.monotonic() by which to answer (at most REQUEST_TIMEOUT_S from now); ``trace``: a
        sampled request's, which gets the phases' spans."""
        cache, shared = self.cache, self.shared_cache
        cacheable = (
            use_cache and (cache.enabled or shared is not None) and all(isinstance(t, (str, bytes)) for t in texts)
        )
        if not cacheable:
            return await self._infer(texts, log_fields, deadline, trace)
        lookup = time.monotonic() if trace is not None else 0.0
        scope = orjson.dumps(options, option=orjson.OPT_SORT_KEYS) if options else b""
        keys = (
            [cache.key(scope + normalised_input(t)) if scope else cache.key(t) for t in texts] if cache.enabled else []
        )
        predictions: list[Any] = [cache.get(k) for k in keys] if keys else [None] * len(texts)
        missing = [i for i, p in enumerate(predictions) if p is None]
        if cache.enabled:
            log_fields["cache_hits"] = len(texts) - len(missing)
            self.metrics.record_cache(len(texts) - len(missing), len(missing))
        shared_keys: list[str] = []
        if missing and shared is not None:
            prefix = key_prefix(self.settings.model_name, self.settings.model_version, self._task_name(), options)
            shared_keys = [input_key(prefix, texts[i]) for i in missing]
            found = await shared.get_many(shared_keys)
            still = []
            for i, key, prediction in zip(missing, shared_keys, found, strict=False):
                if prediction is None:
                    still.append((i, key))
                    continue
                predictions[i] = prediction
                if keys:
                    cache.put(keys[i], prediction)
            log_fields["shared_cache_hits"] = len(missing) - len(still)
            missing, shared_keys = [i for i, _ in still], [k for _, k in still]
        if trace is not None:
            trace.child(
                "cache lookup", lookup, time.monotonic(), {"cache.inputs": len(texts), "cache.misses": len(missing)}
            )
        if not missing:
            return predictions
        fresh = await self._infer([texts[i] for i in missing], log_fields, deadline, trace)
        for i, prediction in zip(missing, fresh, strict=False):
            predictions[i] = prediction
            if keys:
                cache.put(keys[i], prediction)
        if shared_keys and shared is not None:  # shared_keys only come from the shared cache
            shared.store_many(list(zip(shared_keys, fresh, strict=False)))
        return predictions

    def _task_name(self) -> str:
        cls = type(self.handler) if self.handler is not None else self.handler_class
        return self.settings.model_task or (cls.__name__ if cls is not None else "unknown")

    async def _infer(
        self, texts: list[Any], log_fields: dict[str, Any], deadline: float | None, trace: RequestTrace | None = None
    ) -> list[Any]:
        handler = self.handler
        if handler is None:
            raise not_ready("loading")
        timeout = self.settings.request_timeout_s
        started = time.monotonic()
        latest = started + timeout  # the wait for a slow preprocess counts against it too
        deadline = latest if deadline is None else min(deadline, latest)
        try:
            items = await self._preprocess(handler, texts, deadline)
            submitted = time.monotonic() if trace is not None else 0.0
            if trace is not None:
                trace.child("preprocess", started, submitted, {"inputs": len(texts)})
            # Now the inputs' lengths are known: their own length bucket's batch times.
            admission = self.admission
            if items and not admission.can_finish(
                deadline - time.monotonic(), len(items), max(item.length for item in items)
            ):
                self.metrics.record_rejected()
                raise overloaded(WOULD_MISS_DEADLINE)
            admission.at_model += len(items)
            try:
                result = await asyncio.wait_for(
                    self.client.submit(items, deadline, traced=trace is not None), deadline - time.monotonic()
                )
            finally:
                admission.at_model -= len(items)
        except QueueFull as exc:
            self.metrics.record_rejected()
            raise overloaded(str(exc)) from None
        except (TimeoutError, DeadlineExceeded):
            self.metrics.record_timed_out()
            raise ApiError(504, "timeout", f"no result within {timeout:g} s") from None
        except InputError as exc:
            raise ApiError(422, "invalid_input", str(exc)) from None
        except ModelUnavailable:
            raise model_unavailable() from None
        except ApiError:
            raise
        except Exception as exc:
            log.error("inference failed", extra={"error": str(exc)})
            raise ApiError(500, "internal_error", "inference failed") from None
        log_fields.update(
            input_tokens=result.input_tokens,
            queue_wait_ms=round(result.queue_wait_s * 1000, 3),
            inference_ms=round(result.inference_s * 1000, 3),
        )
        self.metrics.observe_model_time(result.queue_wait_s, result.inference_s)
        if trace is None:
            return handler.postprocess(result.outputs, len(texts))
        trace.model(submitted, result)
        postprocessing = time.monotonic()
        predictions = handler.postprocess(result.outputs, len(texts))
        trace.child("postprocess", postprocessing, time.monotonic())
        return predictions

    async def _preprocess(self, handler: Handler, inputs: list[Any], deadline: float) -> list[Encoded]:
        """On the event loop, or for a slow_preprocess handler on the worker's threads until ``deadline``: at most
        max_queue_size inputs wait for them (or are being preprocessed); beyond that a request is shed (503). An
        input counts until its thread is done with it (or it is taken off the threads' queue unstarted), not only
        until its request stops waiting."""
        if not handler.slow_preprocess:
            return handler.preprocess(inputs)
        if self._preprocessing + len(inputs) > self.settings.max_queue_size:
            self.metrics.record_rejected()
            raise overloaded("too many inputs waiting to be preprocessed")
        if self._preprocess_pool is None:
            self._preprocess_pool = ThreadPoolExecutor(PREPROCESS_THREADS, thread_name_prefix="preprocess")
        loop, count = asyncio.get_running_loop(), len(inputs)
        self._preprocessing += count
        work = self._preprocess_pool.submit(handler.preprocess, inputs)
        work.add_done_callback(lambda _: self._release_preprocessing(loop, count))
        return await asyncio.wait_for(asyncio.wrap_future(work), deadline - time.monotonic())

    def _release_preprocessing(self, loop: asyncio.AbstractEventLoop, count: int) -> None:
        """From the preprocessing thread: the loop's count drops by ``count`` (unless the loop is gone: shutdown)."""

        def release() -> None:
            self._preprocessing -= count

        try:
            loop.call_soon_threadsafe(release)
        except RuntimeError:
            pass

    # -- metrics -----------------------------------------------------------------------------------------------

    def emit_interval_metrics(self) -> None:
        values, statuses = self.metrics.take_interval()
        if self.shared_cache is not None:
            values.update(self.shared_cache.metrics.take_interval())
        s = self.settings
        fields = {
            "model_version": s.model_version,
            "process": "worker",
            "worker": self.worker,
            "requests_by_status": statuses,
            "requests_by_key": self.metrics.take_key_counts(),
            "access_log_suppressed": self.take_suppressed(),
        }
        log.info("metrics", extra={"fields": emf.document(s.deployment_env, s.model_name, values, fields)})

    # Set by the app's access log: how many error lines it left out since the last call (rate limit).
    take_suppressed: Callable[[], int] = staticmethod(lambda: 0)
