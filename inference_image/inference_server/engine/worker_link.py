"""The model side of one HTTP worker's link: its jobs go to the model's batcher, their outcomes back in one frame per
batcher cycle."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Protocol

from ..ipc import Channel
from ..link_messages import (
    Job,
    JobResult,
    LinkMessage,
    ModelUnavailable,
    QueueFull,
    Results,
    Submit,
    decode,
    encode,
)
from .batcher import Batcher

log = logging.getLogger("inference_server.model")


class LinkOwner(Protocol):
    """What a link needs of the model side that serves it (the ModelRunner)."""

    @property
    def batcher(self) -> Batcher: ...

    def remove_link(self, link: WorkerLink) -> None: ...


class WorkerLink:
    """The model side of one HTTP worker's link: a reader thread submits its jobs; results are sent back in one
    frame per batcher cycle."""

    def __init__(self, runner: LinkOwner, channel: Channel, name: str) -> None:
        self.runner, self.channel, self.name = runner, channel, name
        self._pending: list[tuple[int, JobResult | BaseException]] = []  # (job id, its outcome)
        self._lock = threading.Lock()
        self._futures: dict[int, Future] = {}
        self.closed = False
        self._thread = threading.Thread(target=self._read, name=f"link-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def send(self, message: LinkMessage) -> None:
        if self.closed:
            return
        try:
            self.channel.send(*encode(message))
        except OSError:
            self.closed = True

    def _read(self) -> None:
        while True:
            frames = self.channel.receive()
            if not frames:
                break
            for header, arrays in frames:
                message = decode(header, arrays)
                if isinstance(message, Submit):
                    self._submit(message.jobs)
            self.flush()
        self.closed = True
        for future in list(self._futures.values()):
            future.cancel()  # the batcher drops cancelled jobs before they run
        self._futures.clear()
        self.channel.close()  # unmaps the link's rings now, not when a later link or a GC comes along
        self.runner.remove_link(self)
        log.info("worker link closed", extra={"link": self.name})

    def _submit(self, jobs: Sequence[Job]) -> None:
        batcher = self.runner.batcher
        for job_id, deadline, bypass, items, traced in jobs:
            try:
                future = batcher.submit(items, deadline, bypass_queue_limit=bypass, traced=traced)
            except (QueueFull, ModelUnavailable) as exc:
                self._add(job_id, exc)
                continue
            self._futures[job_id] = future
            future.add_done_callback(lambda f, job_id=job_id: self._done(job_id, f))

    def _done(self, job_id: int, future: Future) -> None:
        self._futures.pop(job_id, None)
        if future.cancelled():
            return
        error = future.exception()
        self._add(job_id, future.result() if error is None else error)

    def _add(self, job_id: int, outcome: JobResult | BaseException) -> None:
        with self._lock:
            self._pending.append((job_id, outcome))

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending or self.closed:
            return
        try:
            self.channel.send(*encode(Results(pending)))
        except OSError:
            self.closed = True
