"""The batcher's jobs (one request's inputs, with the future its worker waits on) and their inputs as queued, how a
job's future settles (once: a job cancelled by its caller meanwhile stays cancelled), and how a batch's outputs reach
its jobs."""

from __future__ import annotations

import logging
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from ..inputs import Encoded
from ..link_messages import BatchRun, JobResult
from .batch_outputs import gather_rows

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class Job:
    items: list[Encoded]
    deadline: float
    enqueued: float
    idle: bool = False  # arrived while the model was idle with nothing queued: runs at once
    future: Future = field(default_factory=Future)
    results: list[Any] = field(default_factory=list)
    remaining: int = 0
    input_tokens: int = 0
    inference_s: float = 0.0
    batches: list[BatchRun] | None = None  # a traced job's: the batches its inputs ran in


@dataclass(slots=True)
class QueuedInput:
    """One input of a job, as queued in its length bucket."""

    job: Job
    index: int
    encoded: Encoded


def settle(future: Future, *, result: Any = None, error: BaseException | None = None) -> None:
    if future.done():
        return
    try:
        future.set_exception(error) if error is not None else future.set_result(result)
    except InvalidStateError:  # cancelled by its caller in the meantime
        pass


def deliver(items: list[QueuedInput], outputs: Any, run: BatchRun, finished: float) -> None:
    """A batch's output rows to its jobs; a job whose last input this batch ran settles with its JobResult."""
    seen: set[int] = set()
    for row, item in enumerate(items):
        job = item.job
        if id(job) not in seen:
            seen.add(id(job))
            job.inference_s += finished - run.picked
            if job.batches is not None:
                job.batches.append(run)
        job.results[item.index] = (outputs, row)
        job.remaining -= 1
        if job.remaining == 0:
            try:
                outputs_of_job = gather_rows(job.results)
            except Exception as exc:  # outputs the handler shaped badly: this job fails, not the model
                log.exception("cannot assemble a job's outputs")
                settle(job.future, error=exc)
                continue
            settle(
                job.future,
                result=JobResult(
                    outputs_of_job,
                    job.input_tokens,
                    finished - job.enqueued - job.inference_s,
                    job.inference_s,
                    job.batches,
                ),
            )
