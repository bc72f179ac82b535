"""The batcher's jobs (one request's inputs, with the future its worker waits on) and their inputs as queued, and how a
job's future settles (once: a job cancelled by its caller meanwhile stays cancelled)."""

from __future__ import annotations

from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from ..inputs import Encoded


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
