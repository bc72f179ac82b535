"""Dynamic batching on one inference thread that owns the model.

The thread loads the model, warms up every (batch bucket x length bucket) shape, then loops: take new jobs,
tokenise them together, file their inputs into sequence-length buckets, and run a batch as soon as the model is
free. A bucket runs when it has a full batch, or when its oldest input has waited max_wait; until then the thread
waits for more. Inputs past their deadline are dropped before they run.
"""

from __future__ import annotations

import bisect
import gc
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from .handlers import Encoded, Handler, InputError

log = logging.getLogger(__name__)


class QueueFull(Exception):
    pass


class DeadlineExceeded(Exception):
    pass


class ModelUnavailable(Exception):
    """The model is not loaded, failed, or the batcher stopped."""


@dataclass(frozen=True)
class JobResult:
    predictions: list[Any]
    input_tokens: int
    queue_wait_s: float
    inference_s: float


@dataclass(eq=False, slots=True)
class Job:
    texts: list[str]
    deadline: float
    enqueued: float
    future: Future = field(default_factory=Future)
    results: list[Any] = field(default_factory=list)
    remaining: int = 0
    input_tokens: int = 0
    inference_s: float = 0.0


@dataclass(slots=True)
class _Item:
    job: Job
    index: int
    encoded: Encoded


def size_buckets(limit: int, smallest: int = 1) -> list[int]:
    """Powers of two from `smallest` below limit, then limit itself."""
    sizes, size = [], smallest
    while size < limit:
        sizes.append(size)
        size *= 2
    return [*sizes, limit]


def _settle(future: Future, *, result: Any = None, error: BaseException | None = None) -> None:
    if future.done():
        return
    try:
        future.set_exception(error) if error is not None else future.set_result(result)
    except InvalidStateError:  # cancelled by its caller in the meantime
        pass


class Batcher:
    def __init__(self, load: Callable[[], Handler], *, max_batch_size: int, max_wait_s: float, max_queue_size: int,
                 max_sequence_length: int, pad_batches: bool = False, warmup_runs: int = 1,
                 on_batch: Callable[[int], None] = lambda size: None,
                 on_fatal: Callable[[BaseException], None] = lambda exc: None,
                 is_fatal: Callable[[BaseException], bool] = lambda exc: False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._load = load
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.max_queue_size = max_queue_size
        self._max_sequence_length = max_sequence_length
        self.pad_batches = pad_batches
        self.warmup_runs = warmup_runs
        self._on_batch, self._on_fatal, self._is_fatal = on_batch, on_fatal, is_fatal
        self._clock = clock
        self.batch_sizes = size_buckets(max_batch_size)
        self.lengths: list[int] = []
        self._cond = threading.Condition()
        self._intake: list[Job] = []
        self._buckets: dict[int, deque[_Item]] = {}
        self._queued = 0  # inputs submitted and neither started nor dropped
        self._stopping = False
        self._running_batch = False
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.handler: Handler | None = None  # set once loaded; used by the inference thread only
        self._thread = threading.Thread(target=self._run, name="inference", daemon=True)

    # -- any thread --------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def idle(self) -> bool:
        return self._queued == 0 and not self._running_batch

    @property
    def failed(self) -> bool:
        return self.error is not None

    def submit(self, texts: list[str], deadline: float, *, bypass_queue_limit: bool = False) -> Future:
        """Queue texts; the future gets a JobResult, or DeadlineExceeded, InputError, ModelUnavailable, or the
        model's error. Raises QueueFull when the queue has no room for all the texts."""
        job = Job(texts, deadline, self._clock())
        with self._cond:
            if self.error is not None or self._stopping:
                raise ModelUnavailable("the model is not available")
            if not bypass_queue_limit and self._queued + len(texts) > self.max_queue_size:
                raise QueueFull(f"the queue holds {self._queued} of {self.max_queue_size} inputs")
            self._queued += len(texts)
            self._intake.append(job)
            self._cond.notify()
        return job.future

    # -- the inference thread ----------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            handler = self._load()
            limit = min(self._max_sequence_length, handler.max_length or self._max_sequence_length)
            self.lengths = size_buckets(limit, smallest=min(16, limit))
            self._buckets = {length: deque() for length in self.lengths}
            self._warm_up(handler)
            # Startup objects (model, tokenizer, modules) never die: keep later full collections from
            # rescanning them, which otherwise stalls every request for ~0.2 s (the p99 tail).
            gc.collect()
            gc.freeze()
            self.handler = handler
            self.ready.set()
            self._serve()
        except BaseException as exc:
            self.error = exc
            self._fail_all(ModelUnavailable("the model failed"))
            self._on_fatal(exc)
        else:
            self._fail_all(ModelUnavailable("the server is shutting down"))

    def _warm_up(self, handler: Handler) -> None:
        started = self._clock()
        for length in self.lengths:
            item = handler.warmup_input(length)
            for size in self.batch_sizes:
                for _ in range(self.warmup_runs):
                    handler.postprocess(handler.forward([item] * size, size, length), size)
        log.info("warm-up done", extra={"batch_sizes": self.batch_sizes, "lengths": self.lengths,
                                        "seconds": round(self._clock() - started, 3)})

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._intake and not self._queued and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                jobs, self._intake = self._intake, []
            if jobs:
                self._admit(jobs)
            bucket, wait = self._pick()
            if bucket is not None:
                self._run_batch(bucket)
            elif wait > 0:
                with self._cond:
                    if not self._intake and not self._stopping:
                        self._cond.wait(wait)

    def _admit(self, jobs: list[Job]) -> None:
        now = self._clock()
        live = [job for job in jobs if not self._dropped(job, now, count=len(job.texts))]
        if not live:
            return
        try:
            encoded = self.handler.preprocess([text for job in live for text in job.texts])
        except InputError:
            encoded = None  # find the culprit: preprocess job by job
        except Exception as exc:
            if self._is_fatal(exc):
                raise
            log.exception("preprocess failed", extra={"jobs": len(live)})
            for job in live:
                self._discard(len(job.texts))
                _settle(job.future, error=exc)
            return
        offset = 0
        for job in live:
            if encoded is not None:
                job_encoded, offset = encoded[offset: offset + len(job.texts)], offset + len(job.texts)
            else:
                try:
                    job_encoded = self.handler.preprocess(job.texts)
                except InputError as exc:
                    self._discard(len(job.texts))
                    _settle(job.future, error=exc)
                    continue
            job.results = [None] * len(job.texts)
            job.remaining = len(job.texts)
            job.input_tokens = sum(e.length for e in job_encoded)
            for index, e in enumerate(job_encoded):
                self._buckets[self._length_bucket(e.length)].append(_Item(job, index, e))

    def _length_bucket(self, length: int) -> int:
        return self.lengths[min(bisect.bisect_left(self.lengths, length), len(self.lengths) - 1)]

    def _dropped(self, job: Job, now: float, count: int = 1) -> bool:
        """True (and the inputs leave the queue) when the job was cancelled, failed, or is past its deadline."""
        if not job.future.done() and now < job.deadline:
            return False
        _settle(job.future, error=DeadlineExceeded("deadline passed while queued"))
        self._discard(count)
        return True

    def _discard(self, count: int) -> None:
        with self._cond:
            self._queued -= count

    def _pick(self) -> tuple[int | None, float]:
        """The bucket to run now, or None and how long to wait for one. Of the buckets that are ready (a full
        batch, or a head that has waited max_wait), the one whose head is oldest runs, so no bucket starves."""
        now = self._clock()
        ready: tuple[float, int] | None = None
        wait = self.max_wait_s
        for length, items in self._buckets.items():
            while items and self._dropped(items[0].job, now):
                items.popleft()
            if not items:
                continue
            enqueued = items[0].job.enqueued
            if len(items) >= self.max_batch_size or now - enqueued >= self.max_wait_s:
                if ready is None or enqueued < ready[0]:
                    ready = (enqueued, length)
            else:
                wait = min(wait, self.max_wait_s - (now - enqueued))
        if ready is not None:
            return ready[1], 0.0
        return None, wait if any(self._buckets.values()) else 0.0

    def _run_batch(self, length: int) -> None:
        now = self._clock()
        items, bucket = [], self._buckets[length]
        while bucket and len(items) < self.max_batch_size:
            item = bucket.popleft()
            if not self._dropped(item.job, now):
                items.append(item)
        if not items:
            return
        with self._cond:
            self._queued -= len(items)
            self._running_batch = True
        size = self.batch_sizes[bisect.bisect_left(self.batch_sizes, len(items))] if self.pad_batches else len(items)
        seq_len = max(length, max(item.encoded.length for item in items))
        try:
            outputs = self.handler.forward([item.encoded for item in items], size, seq_len)
            predictions = self.handler.postprocess(outputs, len(items))
        except Exception as exc:
            fatal = self._is_fatal(exc)
            if fatal:
                self.error = exc  # before the callers hear of it, so readiness already fails when they do
            else:
                log.exception("batch failed", extra={"batch_size": len(items)})
            for item in items:
                _settle(item.job.future, error=ModelUnavailable("the model failed") if fatal else exc)
            if fatal:
                raise
            return
        finally:
            self._running_batch = False
        finished = self._clock()
        self._on_batch(len(items))
        seen: set[int] = set()
        for item, prediction in zip(items, predictions):
            job = item.job
            if id(job) not in seen:
                seen.add(id(job))
                job.inference_s += finished - now
            job.results[item.index] = prediction
            job.remaining -= 1
            if job.remaining == 0:
                _settle(job.future, result=JobResult(job.results, job.input_tokens,
                                                     finished - job.enqueued - job.inference_s, job.inference_s))

    def _fail_all(self, error: BaseException) -> None:
        with self._cond:
            jobs = list(self._intake)
            self._intake = []
            for items in self._buckets.values():
                jobs.extend(item.job for item in items)
                items.clear()
            self._queued = 0
        for job in jobs:
            _settle(job.future, error=error)
