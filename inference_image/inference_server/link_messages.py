"""The messages of the link between an HTTP worker and the model process (and the supervisor's to the model
process), each a type of its own, and how each is written as a frame's JSON header and arrays (encode) and read
back (decode). The transport (rings, channels, the status page) is ipc.py.

On the wire (the header's "t" names the kind):
- supervisor -> model process, on its control socket: NewWorker (a new link: its socket and two ring fds ride with
  the frame), Stop;
- worker -> model: Submit (jobs: ``[job id, deadline, bypass queue limit, [[length, [array names]], ...], traced]``,
  the arrays in the frame's payload, in order);
- model -> worker: Results (rows: ``[job id, ResultCode.OK, input tokens, queue wait s, inference s, output names or
  None, batch runs or None]`` with the outputs in the payload, or ``[job id, code, message]``), Artifact (where the
  model and its handler are), Ready. A traced job's row carries the batches its inputs ran in (BatchRun), for the
  worker's spans; any other job's, None.
The rows are lists, not objects: orjson writes them without a per-row conversion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any, NamedTuple

import numpy as np

from .inputs import Encoded, InputError


class Message(StrEnum):
    WORKER = "worker"
    STOP = "stop"
    SUBMIT = "submit"
    RESULTS = "results"
    ARTIFACT = "artifact"
    READY = "ready"


class ResultCode(IntEnum):
    """How a job ended, in a results row."""

    OK = 0
    DEADLINE = 1
    INVALID_INPUT = 2
    UNAVAILABLE = 3
    QUEUE_FULL = 4
    FAILED = 5


class QueueFull(Exception):
    pass


class DeadlineExceeded(Exception):
    pass


class ModelUnavailable(Exception):
    """The model is not loaded, failed, or the batcher stopped."""


class ModelError(Exception):
    """The model raised an error that is not the input's fault (a 500)."""


# Each error a job can end with, as its result code; any other error is FAILED, and arrives as a ModelError.
_ERROR_CODES: tuple[tuple[type[Exception], ResultCode], ...] = (
    (DeadlineExceeded, ResultCode.DEADLINE),
    (InputError, ResultCode.INVALID_INPUT),
    (ModelUnavailable, ResultCode.UNAVAILABLE),
    (QueueFull, ResultCode.QUEUE_FULL),
)
_ERRORS = {code: kind for kind, code in _ERROR_CODES}


class BatchRun(NamedTuple):
    """One batch a traced job's inputs ran in, on the model process's time.monotonic() clock (the worker's too: one
    host, one CLOCK_MONOTONIC): picked from its bucket, collated (padded into tensors), the forward's end."""

    picked: float
    collated: float
    forward_end: float
    size: int  # the inputs in the batch (every job's)
    padded_size: int  # the batch size the forward ran (the batch-size bucket when batches are padded)
    sequence_bucket: int  # the length bucket the batch was formed in
    sequence_length: int  # the length the batch was padded to


@dataclass(frozen=True)
class JobResult:
    outputs: Any  # the job's rows of the model's outputs: a numpy array, or a dict of them
    input_tokens: int
    queue_wait_s: float
    inference_s: float
    batches: Sequence[BatchRun] | None = None  # a traced job's batches, else None


class Job(NamedTuple):
    """One request's inputs on their way to the batcher (a tuple: made for every request on both sides)."""

    job_id: int
    deadline: float
    bypass_queue_limit: bool
    items: list[Encoded]
    traced: bool = False  # the worker records the request's spans: the model returns the job's BatchRuns


@dataclass(frozen=True, slots=True)
class NewWorker:
    """Supervisor -> model process: a worker's new link; its socket and two ring fds ride with the frame."""

    name: str


@dataclass(frozen=True, slots=True)
class Stop:
    """Supervisor -> model process: stop once the workers have drained."""


@dataclass(frozen=True, slots=True)
class Submit:
    """Worker -> model: jobs to batch."""

    jobs: Sequence[Job]


@dataclass(frozen=True, slots=True)
class Results:
    """Model -> worker: each job's id and what it ended with, its JobResult or the error it raised."""

    outcomes: Sequence[tuple[int, JobResult | BaseException]]


@dataclass(frozen=True, slots=True)
class Artifact:
    """Model -> worker, once the model process has fetched the model: what the worker loads its preprocessing from."""

    model_dir: str
    handler: str  # the handler class's source (handlers.handler_class_from)
    task: str | None
    manifest: bool
    shared: (
        dict[str, Any] | None
    )  # preprocessing the model process loaded for the workers (Handler.shared_preprocessing)


@dataclass(frozen=True, slots=True)
class Ready:
    """Model -> worker: the model is warm and serves."""


LinkMessage = NewWorker | Stop | Submit | Results | Artifact | Ready


def encode(message: LinkMessage) -> tuple[dict[str, Any], list[np.ndarray]]:
    """The frame header and arrays of a message, in the order decode reads them."""
    if isinstance(message, Submit):
        return _encode_submit(message.jobs)
    if isinstance(message, Results):
        rows, arrays = [], []
        for job_id, outcome in message.outcomes:
            row, row_arrays = _result_row(job_id, outcome)
            rows.append(row)
            arrays.extend(row_arrays)
        return {"t": Message.RESULTS, "results": rows}, arrays
    if isinstance(message, Artifact):
        return {
            "t": Message.ARTIFACT,
            "model_dir": message.model_dir,
            "handler": message.handler,
            "task": message.task,
            "manifest": message.manifest,
            "shared": message.shared,
        }, []
    if isinstance(message, NewWorker):
        return {"t": Message.WORKER, "name": message.name}, []
    return {"t": Message.STOP if isinstance(message, Stop) else Message.READY}, []


def decode(header: dict[str, Any], arrays: list[np.ndarray]) -> LinkMessage | None:
    """The message a frame carries; None for a kind this side does not know."""
    kind = header.get("t")
    if kind == Message.SUBMIT:
        return Submit(_read_jobs(header["jobs"], arrays))
    if kind == Message.RESULTS:
        return Results(_read_results(header["results"], arrays))
    if kind == Message.ARTIFACT:
        return Artifact(
            header["model_dir"],
            header["handler"],
            header.get("task"),
            bool(header.get("manifest")),
            header.get("shared"),
        )
    if kind == Message.READY:
        return Ready()
    if kind == Message.WORKER:
        return NewWorker(str(header.get("name", "")))
    if kind == Message.STOP:
        return Stop()
    return None


def _encode_submit(jobs: Sequence[Job]) -> tuple[dict[str, Any], list[np.ndarray]]:
    rows, arrays = [], []
    for job_id, deadline, bypass, items, traced in jobs:
        item_rows = []
        for item in items:
            names = list(item.data)
            item_rows.append([item.length, names])
            arrays.extend(np.asarray(item.data[name]) for name in names)
        rows.append([job_id, deadline, bypass, item_rows, traced])
    return {"t": Message.SUBMIT, "jobs": rows}, arrays


def _read_jobs(rows: list[Any], arrays: list[np.ndarray]) -> list[Job]:
    jobs, index = [], 0
    for job_id, deadline, bypass, items, traced in rows:
        encoded = []
        for length, names in items:
            encoded.append(Encoded(length, dict(zip(names, arrays[index : index + len(names)], strict=False))))
            index += len(names)
        jobs.append(Job(job_id, deadline, bypass, encoded, traced))
    return jobs


def _result_row(job_id: int, outcome: JobResult | BaseException) -> tuple[list[Any], list[np.ndarray]]:
    if isinstance(outcome, JobResult):
        outputs = outcome.outputs
        names, arrays = (list(outputs), list(outputs.values())) if isinstance(outputs, dict) else (None, [outputs])
        batches = None if outcome.batches is None else [tuple(run) for run in outcome.batches]  # orjson: no NamedTuple
        return [
            job_id,
            ResultCode.OK,
            outcome.input_tokens,
            outcome.queue_wait_s,
            outcome.inference_s,
            names,
            batches,
        ], arrays
    for kind, code in _ERROR_CODES:
        if isinstance(outcome, kind):
            return [job_id, code, str(outcome)], []
    return [job_id, ResultCode.FAILED, f"{type(outcome).__name__}: {outcome}"], []


def _read_results(rows: list[Any], arrays: list[np.ndarray]) -> list[tuple[int, JobResult | BaseException]]:
    outcomes: list[tuple[int, JobResult | BaseException]] = []
    index = 0
    for row in rows:
        if row[1] != ResultCode.OK:
            outcomes.append((row[0], _ERRORS.get(row[1], ModelError)(row[2])))
            continue
        job_id, _, tokens, queue_wait_s, inference_s, names, batches = row
        if names is None:
            outputs: Any = arrays[index]
            index += 1
        else:
            outputs = dict(zip(names, arrays[index : index + len(names)], strict=False))
            index += len(names)
        runs = None if batches is None else [BatchRun(*run) for run in batches]
        outcomes.append((job_id, JobResult(outputs, tokens, queue_wait_s, inference_s, runs)))
    return outcomes
