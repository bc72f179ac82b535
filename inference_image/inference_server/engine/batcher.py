"""Dynamic batching on one inference thread that owns the model (in the model process).

The thread loads the model and warms up before it reports ready (warmup="first"): batch 1 at every length bucket,
then each larger (batch bucket x length bucket) shape whose forward is expected to be short (SHORT_FORWARD_S). A
longer shape is left to traffic: an eager forward's first call at a shape costs about what every later one does, so
nothing runs after ready but requests, and none waits behind a warm-up forward. warmup="all" warms every shape
first. A handler that compiles (handlers/compiled.py) is made ready on its eager forward, and every shape then
compiles one at a time, smallest first, whenever the model is idle; until its shape has compiled a request runs
eagerly, and it waits behind at most one shape's compile.

Then it loops: take new jobs (inputs already preprocessed by the HTTP workers), file their inputs into
sequence-length buckets, and run a batch as soon as the model is free. A job that arrives while the model is idle
and nothing is queued runs at once (no batching window: at low load waiting only adds latency). Otherwise a bucket
runs when it has a full batch, or when its oldest input has waited max_wait; until then the thread waits for more.
Inputs past their deadline are dropped before they run. A batch is padded to its longest input, or to its bucket's
shapes when the model needs fixed shapes (pad_batches: compiled CUDA graphs).
"""

from __future__ import annotations

import atexit
import bisect
import contextlib
import gc
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future

from ..batch_times import BatchTimes
from ..handlers import Encoded, Handler, InputError
from ..handlers.batch import batch_for
from ..handlers.compiled import compiling
from ..link_messages import BatchRun, DeadlineExceeded, JobResult, ModelUnavailable, QueueFull
from .batch_jobs import Job, QueuedInput, deliver, settle
from .batch_outputs import as_numpy
from .buckets import bucket_of, size_buckets
from .busy_time import BusyTime

__all__ = ["Batcher", "DeadlineExceeded", "JobResult", "ModelUnavailable", "QueueFull", "size_buckets"]

log = logging.getLogger(__name__)


WARMUP_MODES = ("first", "all")
# After ready, the background warm-up of a model that compiles waits this long: each worker's readiness test inference
# comes within milliseconds of the model's ready, and must not queue behind a compile (8.6 s between the model's ready
# and a worker's on a 2-core CPU, 1.8 s with the compile cache).
WARM_AFTER_READY_S = 1.0
# warmup="first" warms a larger batch before ready only where its forward is expected to take at most this long. A
# first call's fixed costs (allocations, kernel choice) matter against a short forward; a long one's first call costs
# about what every later one does (MiniLM on one CPU core: 32 x 256 tokens within 3 ms of its 1.6 s), and warming it
# would hold readiness for its whole length, or, after ready, a request behind it.
SHORT_FORWARD_S = 0.02
# Runs of each shape's compile warm-up: the first compiles, CUDA graphs record on a later one.
COMPILE_RUNS = 3


def _stop_at_exit(ref: weakref.ref) -> None:
    batcher = ref()
    if batcher is not None:
        batcher.stop()


class Batcher:
    def __init__(
        self,
        load: Callable[[], Handler],
        *,
        max_batch_size: int,
        max_wait_s: float,
        max_queue_size: int,
        max_sequence_length: int,
        pad_batches: bool = False,
        compile: bool = False,
        warmup: str = "first",
        on_batch: Callable[[int], None] = lambda size: None,
        on_cycle: Callable[[], None] = lambda: None,
        on_queue_change: Callable[[int], None] = lambda queued: None,
        on_fatal: Callable[[BaseException], None] = lambda exc: None,
        is_fatal: Callable[[BaseException], bool] = lambda exc: False,
        on_all_warm: Callable[[], None] = lambda: None,
        before_ready: Callable[[Handler], None] = lambda handler: None,
        fit_batch: Callable[[Handler, int], int] | None = None,
        batch_times: BatchTimes | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.max_queue_size = max_queue_size
        self._max_sequence_length = max_sequence_length
        self.pad_batches = pad_batches
        self.compile = compile  # the model process compiles (MODEL_RUNTIME=compile, or COMPILE on a GPU)
        if warmup not in WARMUP_MODES:
            raise ValueError(f"warmup must be one of {WARMUP_MODES}, got {warmup!r}")
        self.warmup = warmup
        self._cold: deque[tuple[int, int]] = deque()  # (batch size, length) shapes left to warm while idle
        self._cold_started = 0.0
        self._warm_after = 0.0  # the background warm-up starts no earlier (time.monotonic)
        self.warm_failures = 0  # warm-up shapes that raised; the model serves on without them
        self.unwarmed: list[tuple[int, int]] = []  # shapes left to traffic: their first real batch runs cold
        self._last_compile_s = 0.0  # how long the last shape's compile took (the admission's estimate for the next)
        self._on_batch, self._on_fatal, self._is_fatal = on_batch, on_fatal, is_fatal
        self._on_cycle, self._on_queue_change = on_cycle, on_queue_change
        self._on_all_warm = on_all_warm  # once, on the inference thread, when every shape is warm: keep it short
        self._before_ready = before_ready  # on the inference thread, once warm; raising refuses the start
        # After load: the largest batch that fits the device (a GPU share), given the handler and the longest length.
        self._fit_batch = fit_batch
        self.busy = BusyTime()
        self._clock = clock
        self.batch_times = batch_times  # published for the workers' admission by deadline
        self.batch_sizes = size_buckets(max_batch_size)
        self.lengths: list[int] = []
        self._cond = threading.Condition()
        self._intake: list[Job] = []
        self._buckets: dict[int, deque[QueuedInput]] = {}
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
        # The inference thread may be in a forward (a background warm-up shape) when the interpreter exits; a daemon
        # thread inside torch then aborts the process ("terminate called without an active exception"). Stop first.
        atexit.register(_stop_at_exit, weakref.ref(self))

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

    def submit(
        self, items: list[Encoded], deadline: float, *, bypass_queue_limit: bool = False, traced: bool = False
    ) -> Future:
        """Queue preprocessed inputs; the future gets a JobResult (a traced job's with the batches it ran in), or
        DeadlineExceeded, InputError, ModelUnavailable, or the model's error. Raises QueueFull when the queue has no
        room for all the inputs."""
        job = Job(items, deadline, self._clock(), batches=[] if traced else None)
        with self._cond:
            if self.error is not None or self._stopping:
                raise ModelUnavailable("the model is not available")
            if not bypass_queue_limit and self._queued + len(items) > self.max_queue_size:
                raise QueueFull(f"the queue holds {self._queued} of {self.max_queue_size} inputs")
            job.idle = self._queued == 0 and not self._running_batch and self.ready.is_set()
            self._queued += len(items)
            self._intake.append(job)
            self._cond.notify()
        self._on_queue_change(self._queued)
        return job.future

    # -- the inference thread ----------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            handler = self._load()
            limit = min(self._max_sequence_length, handler.max_length or self._max_sequence_length)
            self.lengths = size_buckets(limit, smallest=min(16, limit))
            self._buckets = {length: deque() for length in self.lengths}
            self._fit_batch_sizes(handler)
            if self.batch_times is not None:
                self.batch_times.configure(self.batch_sizes, self.lengths)
            self._cold = deque(self._warm_up(handler))
            self._before_ready(handler)
            self._cold_started = self._clock()
            # Startup objects (model, tokenizer, modules) never die: keep later full collections from
            # rescanning them, which otherwise stalls every request for ~0.2 s (the p99 tail).
            gc.collect()
            gc.freeze()
            self.handler = handler
            self._warm_after = time.monotonic() + WARM_AFTER_READY_S
            self.ready.set()
            if not self._cold:
                self._on_all_warm()
            self._serve()
        except BaseException as exc:
            self.error = exc
            self._fail_all(ModelUnavailable("the model failed"))
            self._on_cycle()
            self._on_fatal(exc)
        else:
            self._fail_all(ModelUnavailable("the server is shutting down"))
            self._on_cycle()

    def _fit_batch_sizes(self, handler: Handler) -> None:
        """Before anything warms: batch sizes no larger than what fits (fit_batch), for warm-up and traffic alike."""
        if self._fit_batch is None:
            return
        largest = self._fit_batch(handler, self.lengths[-1])
        if largest < self.max_batch_size:
            self.max_batch_size = largest
            self.batch_sizes = size_buckets(largest)

    def warmup_shapes(self) -> list[tuple[int, int]]:
        """Every (batch size, length) shape, in the order they warm: by batch size, then length."""
        return [(size, length) for size in self.batch_sizes for length in self.lengths]

    def _warm_up(self, handler: Handler) -> list[tuple[int, int]]:
        """Warm what must be warm before ready; returns the shapes left to warm (or compile) in the background."""
        started = self._clock()
        shapes = self.warmup_shapes()
        compiles = handler.compiled_forward is not None
        later: list[tuple[int, int]] = []
        if self.warmup == "all":
            for size, length in shapes:
                if compiles:
                    self._compile_shape(handler, size, length)
                else:
                    self._warm_shape(handler, size, length)
            warmed = shapes
        elif compiles or self.compile:  # a first call compiles: batch 1 now (on the eager forward), the rest while idle
            warmed = [shape for shape in shapes if shape[0] == 1]
            for size, length in warmed:
                self._warm_shape(handler, size, length)
            later = shapes if compiles else [shape for shape in shapes if shape[0] > 1]
        else:
            warmed = self._warm_short_shapes(handler, shapes)
        log.info(
            "warm-up done",
            extra={
                "batch_sizes": sorted({size for size, _ in warmed}),
                "lengths": self.lengths,
                "shapes": len(warmed),
                "shapes_left": len(later),
                "left_to_traffic": len(self.unwarmed),
                "compiled": compiles and self.warmup == "all",
                "seconds": round(self._clock() - started, 3),
            },
        )
        return later

    def _warm_short_shapes(self, handler: Handler, shapes: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """An eager forward's warm-up: batch 1 at every length, then each larger batch expected to be short, as long as
        the batch before it at that length took, scaled by size; a longer one is left to traffic. Returns the shapes
        warmed."""
        took: dict[int, tuple[int, float]] = {}  # length -> (the last batch size there, its time or expected time)
        warmed = []
        for size, length in shapes:  # by batch size, then length
            if size == 1:  # the process's first forward also pays one-time costs: run twice, keep the second's time
                seconds = self._warm_shape(handler, size, length, runs=1 if took else 2)
                warmed.append((size, length))
            else:
                before, before_s = took[length]
                seconds = before_s * size / before
                if seconds <= SHORT_FORWARD_S:
                    with self._surviving("warm-up of a shape failed", size, length):
                        seconds = self._warm_shape(handler, size, length)
                    warmed.append((size, length))
                else:
                    self._leave_to_traffic(size, length, seconds)
            took[length] = (size, seconds)
        return warmed

    def _leave_to_traffic(self, size: int, length: int, expected_s: float) -> None:
        """A shape not warmed up: the deadline admission plans on its expected time until a real batch replaces it."""
        self.unwarmed.append((size, length))
        if self.batch_times is not None:
            self.batch_times.seed(size, length, expected_s)

    def _warm_shape(self, handler: Handler, size: int, length: int, runs: int | None = None) -> float:
        """Run one shape: once, or COMPILE_RUNS times for a handler that compiles without a CompiledForward (its
        compile, then its CUDA graph's recording, hold readiness as they always did). The shape's time seeds the
        deadline admission once every run has succeeded: the last run's, not a compile's. Returns that time."""
        if runs is None:
            runs = COMPILE_RUNS if self.compile and handler.compiled_forward is None else 1
        item = handler.warmup_input(length)
        seconds = 0.0
        for _ in range(runs):
            shape_started = self._clock()
            with self.busy.forward():
                as_numpy(handler.forward(batch_for(handler, [item] * size, size, length)))
            seconds = self._clock() - shape_started
        if self.batch_times is not None:
            self.batch_times.seed(size, length, seconds)
        return seconds

    def _compile_shape(self, handler: Handler, size: int, length: int) -> None:
        """Compile one shape of a CompiledForward handler; one that fails keeps running eagerly. The workers'
        admission counts the model busy meanwhile, for as long as the last shape's compile took."""
        started = time.perf_counter()
        if self.batch_times is not None:
            self.batch_times.occupied(self._last_compile_s)
        try:
            with self._surviving("a shape failed to compile; it runs eagerly", size, length), compiling(handler):
                self._warm_shape(handler, size, length, runs=COMPILE_RUNS)
        finally:
            if self.batch_times is not None:
                self.batch_times.finished()
        self._last_compile_s = time.perf_counter() - started

    @contextlib.contextmanager
    def _surviving(self, message: str, size: int, length: int) -> Iterator[None]:
        """A warm-up shape that raises is counted and logged, and the model serves on; a fatal error (CUDA) still
        ends it."""
        try:
            yield
        except Exception as exc:
            if self._is_fatal(exc):
                self.error = exc
                raise
            self.warm_failures += 1
            log.exception(message, extra={"batch_size": size, "length": length})

    def _warm_next_cold_shape(self) -> None:
        """One shape of the background warm-up (the model is idle)."""
        size, length = self._cold.popleft()
        handler = self.handler
        assert handler is not None  # the background warm-up runs once the model is loaded
        compiles = handler.compiled_forward is not None
        if compiles:
            self._compile_shape(handler, size, length)
        else:  # requests of this shape would fail alike, and get their error; the server stays up for the rest
            with self._surviving("background warm-up of a shape failed", size, length):
                self._warm_shape(handler, size, length)
        if not self._cold:
            log.info(
                "background warm-up done",
                extra={
                    "batch_sizes": self.batch_sizes,
                    "lengths": self.lengths,
                    "compiled": compiles,
                    "seconds": round(self._clock() - self._cold_started, 3),
                },
            )
            self._on_all_warm()

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._intake and not self._queued and not self._stopping and not self._cold:
                    self._cond.wait()
                if self._stopping:
                    return
                jobs, self._intake = self._intake, []
            if not jobs and not self._queued:  # idle, so something is cold (the wait above ended)
                hold = self._warm_after - time.monotonic()
                if hold > 0:  # the workers' test inferences arrive just after ready: they go first
                    with self._cond:
                        if not self._intake and not self._stopping:
                            self._cond.wait(hold)
                    continue
                self._warm_next_cold_shape()
                continue
            if jobs:
                self._admit(jobs)
            bucket, wait = self._pick()
            if bucket is not None:
                self._run_batch(bucket)
            self._on_cycle()
            if bucket is None and wait > 0:
                with self._cond:
                    if not self._intake and not self._stopping:
                        self._cond.wait(wait)

    def _admit(self, jobs: list[Job]) -> None:
        now = self._clock()
        limit = self.lengths[-1]
        for job in jobs:
            if self._dropped(job, now, count=len(job.items)):
                continue
            too_long = [item.length for item in job.items if item.length > limit]
            if too_long:
                self._discard(len(job.items))
                settle(job.future, error=InputError(f"an input has {max(too_long)} tokens; the limit is {limit}"))
                continue
            job.results = [None] * len(job.items)
            job.remaining = len(job.items)
            job.input_tokens = sum(item.length for item in job.items)
            for index, item in enumerate(job.items):
                self._buckets[self._length_bucket(item.length)].append(QueuedInput(job, index, item))

    def _length_bucket(self, length: int) -> int:
        return bucket_of(self.lengths, length)

    def _dropped(self, job: Job, now: float, count: int = 1) -> bool:
        """True (and the inputs leave the queue) when the job was cancelled, failed, or is past its deadline."""
        if not job.future.done() and now < job.deadline:
            return False
        settle(job.future, error=DeadlineExceeded("deadline passed while queued"))
        self._discard(count)
        return True

    def _discard(self, count: int) -> None:
        with self._cond:
            self._queued -= count
        self._on_queue_change(self._queued)

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
            head = items[0].job
            enqueued = head.enqueued
            if head.idle or len(items) >= self.max_batch_size or now - enqueued >= self.max_wait_s:
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
        self._on_queue_change(self._queued)
        size = self.batch_sizes[bisect.bisect_left(self.batch_sizes, len(items))] if self.pad_batches else len(items)
        # Fixed shapes (compiled CUDA graphs) pad to the bucket; otherwise to the batch's longest input, so a bucket
        # of 16-32 tokens does not run 22-token texts at 32.
        longest = max(item.encoded.length for item in items)
        seq_len = max(length, longest) if self.pad_batches else longest
        times = self.batch_times
        handler = self.handler
        assert handler is not None  # batches run only once the model is loaded
        if times is not None:
            times.started(len(items), length)
        try:
            forward_started = time.perf_counter()
            batch = batch_for(handler, [item.encoded for item in items], size, seq_len)
            collated = self._clock()
            with self.busy.forward():
                outputs = as_numpy(handler.forward(batch))
            forward_end = self._clock()
            if times is not None:
                times.observe(len(items), length, time.perf_counter() - forward_started)
        except Exception as exc:
            fatal = self._is_fatal(exc)
            if fatal:
                self.error = exc  # before the callers hear of it, so readiness already fails when they do
            else:
                log.exception("batch failed", extra={"batch_size": len(items)})
            for item in items:
                settle(item.job.future, error=ModelUnavailable("the model failed") if fatal else exc)
            if fatal:
                raise
            return
        finally:
            self._running_batch = False
            if times is not None:
                times.finished()
        finished = self._clock()
        self._on_batch(len(items))
        deliver(items, outputs, BatchRun(now, collated, forward_end, len(items), size, length, seq_len), finished)

    def _fail_all(self, error: BaseException) -> None:
        with self._cond:
            jobs = list(self._intake)
            self._intake = []
            for items in self._buckets.values():
                jobs.extend(item.job for item in items)
                items.clear()
            self._queued = 0
        self._on_queue_change(0)
        for job in jobs:
            settle(job.future, error=error)
