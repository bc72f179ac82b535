"""One inference thread for every model of a pool: a queue per loaded model, and batches taken from the models with
work in turn (round robin), one batch each, so a hot model with a full queue delays a cold model's request by at
most one batch of each other busy model, never by its whole queue. A batch holds one model's inputs only, as many
as are queued up to MAX_BATCH_SIZE: the thread is busy while they gather, so no batching window is needed."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import Future

from ..engine.batch_jobs import Job, QueuedInput, deliver, settle
from ..engine.batch_outputs import as_numpy
from ..handlers.batch import batch_for
from ..inputs import Encoded
from ..link_messages import BatchRun, DeadlineExceeded, ModelUnavailable, QueueFull
from ..queue_signal import QueuePeak
from .loaded import LoadedModel

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, *, max_batch_size: int, max_queue_size: int, clock=time.monotonic) -> None:
        self.max_batch_size, self.max_queue_size = max_batch_size, max_queue_size
        self._clock = clock
        self._cond = threading.Condition()
        self._queues: OrderedDict[LoadedModel, deque[QueuedInput]] = OrderedDict()  # models with work, in turn
        self._stopping = False
        self._total = 0  # inputs queued for every model
        self.queue_peak = QueuePeak()  # the deepest total since the last scale-out signal
        self.running: LoadedModel | None = None
        self.batch_seconds = 0.005  # a recent batch's time (deadline admission's estimate of a turn)
        self._thread = threading.Thread(target=self._run, name="pool-inference", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)
        with self._cond:
            queues, self._queues, self._total = list(self._queues.values()), OrderedDict(), 0
        for queue in queues:
            for item in queue:
                settle(item.job.future, error=ModelUnavailable("the server is shutting down"))

    def queued(self, model: LoadedModel) -> int:
        queue = self._queues.get(model)
        return len(queue) if queue else 0

    @property
    def total_queued(self) -> int:
        """Inputs queued for every model (the pool's QueueDepth)."""
        return self._total

    @property
    def busy_models(self) -> int:
        return len(self._queues)

    def expected_wait_s(self, model: LoadedModel | None, inputs: int) -> float:
        """How long inputs for ``model`` would wait and run: the model's own queue ahead (in batches) and, per batch,
        one turn of every other model with work."""
        ahead = self.queued(model) if model is not None else 0
        batches = (ahead + inputs + self.max_batch_size - 1) // self.max_batch_size
        return batches * max(1, self.busy_models) * self.batch_seconds

    def submit(self, model: LoadedModel, items: list[Encoded], deadline: float, traced: bool = False) -> Future:
        """Queue a job's inputs for ``model``; traced: the job keeps the batches it ran in (its spans)."""
        job = Job(items, deadline, self._clock())
        if traced:
            job.batches = []
        job.results = [None] * len(items)
        job.remaining = len(items)
        job.input_tokens = sum(item.length for item in items)
        with self._cond:
            if self._stopping:
                raise ModelUnavailable("the server is shutting down")
            queue = self._queues.get(model)
            if queue is None:
                queue = self._queues[model] = deque()
            if len(queue) + len(items) > self.max_queue_size:
                if not queue:
                    del self._queues[model]
                raise QueueFull(f"model {model.name}'s queue holds {len(queue)} of {self.max_queue_size} inputs")
            queue.extend(QueuedInput(job, index, item) for index, item in enumerate(items))
            self._total += len(items)
            self.queue_peak.observe(self._total)
            self._cond.notify()
        return job.future

    def _take(self) -> tuple[LoadedModel, list[QueuedInput]] | None:
        """The next model in turn and up to a batch of its inputs; it goes to the back of the turn if more remain."""
        with self._cond:
            while not self._queues and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            model, queue = self._queues.popitem(last=False)
            items = [queue.popleft() for _ in range(min(self.max_batch_size, len(queue)))]
            self._total -= len(items)
            if queue:
                self._queues[model] = queue
            self.running = model
            return model, items

    def _run(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            model, items = taken
            try:
                self._run_batch(model, items)
            finally:
                self.running = None

    def _run_batch(self, model: LoadedModel, items: list[QueuedInput]) -> None:
        now = self._clock()
        live = []
        for item in items:
            future = item.job.future
            if future.done() or now >= item.job.deadline:
                settle(future, error=DeadlineExceeded("deadline passed while queued"))
            elif future.running() or future.set_running_or_notify_cancel():
                live.append(item)  # running: its caller can no longer cancel it, so it holds the model until settled
        if not live:
            return
        handler = model.handler
        seq_len = max(item.encoded.length for item in live)
        started = time.perf_counter()
        try:
            batch = batch_for(handler, [item.encoded for item in live], len(live), seq_len)
            collated = self._clock()
            outputs = as_numpy(handler.forward(batch))
        except Exception as exc:
            log.exception(
                "batch failed", extra={"model": model.name, "model_version": model.version, "batch_size": len(live)}
            )
            for item in live:
                settle(item.job.future, error=exc)
            return
        finished = self._clock()
        self.batch_seconds = 0.8 * self.batch_seconds + 0.2 * (time.perf_counter() - started)
        deliver(live, outputs, BatchRun(now, collated, finished, len(live), len(live), seq_len, seq_len), finished)
