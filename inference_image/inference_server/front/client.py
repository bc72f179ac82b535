"""The HTTP worker's side of its link to the model process.

Jobs submitted from the event loop are sent together, one frame per loop iteration. Result frames are read by the
server's event loop itself when the client starts on it (no thread hand-off: the hot path), or else by a reader
thread (started outside a loop, as in-process tests do); each result goes to its waiter (an asyncio future, or a
concurrent future for threads such as the readiness probe). When the link breaks (the model process died), every
waiter fails at once and `failed` turns true."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from ..handlers import Encoded
from ..ipc import Channel, ModelState, StatusPage
from ..link_messages import (
    Artifact,
    Job,
    JobResult,
    ModelError,
    ModelUnavailable,
    Ready,
    Results,
    Submit,
    decode,
    encode,
)

__all__ = ["ModelClient", "ModelError"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Waiter:
    loop: asyncio.AbstractEventLoop | None
    future: Any  # asyncio.Future when loop is set, else concurrent.futures.Future


def _deliver(results: list[tuple[Any, Any, bool]]) -> None:
    for future, value, ok in results:
        if future.done():
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


class ModelClient:
    def __init__(self, channel: Channel, status: StatusPage) -> None:
        self.channel, self.status = channel, status
        self.artifact = threading.Event()  # the model process fetched the model: its directory is known
        self.artifact_info: Artifact | None = None
        self.ready = threading.Event()  # the model process loaded and warmed up the model
        self.failed = False
        self._closing = False
        self._ids = itertools.count(1)
        self._waiters: dict[int, _Waiter] = {}
        self._lock = threading.Lock()
        self._outbox: list[Job] = []
        self._flush_scheduled = False
        self._started = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._read, name="model-link", daemon=True)

    def start(self, on_loop: bool = False) -> None:
        """on_loop: the running event loop reads the link (the server's); else a reader thread does."""
        if self._started or self.failed:
            return
        self._started = True
        if not on_loop:
            self._thread.start()
            return
        loop = self._loop = asyncio.get_running_loop()
        loop.add_reader(self.channel.sock.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        frames = self.channel.receive_available()
        if frames is None:
            assert self._loop is not None  # only the loop's reader calls this
            self._loop.remove_reader(self.channel.sock.fileno())
            self._fail_all()
            return
        if frames:
            self._handle(frames)

    @property
    def model_failed(self) -> bool:
        return self.failed or self.status.state == ModelState.FAILED

    def submit(
        self, items: list[Encoded], deadline: float, *, bypass_queue_limit: bool = False, traced: bool = False
    ) -> asyncio.Future:
        """From the event loop: an asyncio future of the JobResult (or the error); a traced job's JobResult carries
        the batches it ran in."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if self.failed:
            future.set_exception(ModelUnavailable("the model process is gone"))
            return future
        job_id = next(self._ids)
        with self._lock:
            self._waiters[job_id] = _Waiter(loop, future)
            self._outbox.append(Job(job_id, deadline, bypass_queue_limit, items, traced))
            schedule = not self._flush_scheduled
            self._flush_scheduled = True
        if schedule:
            loop.call_soon(self.flush)
        return future

    def submit_sync(self, items: list[Encoded], deadline: float, *, bypass_queue_limit: bool = False) -> Future:
        """From any thread: a concurrent future, sent at once."""
        future: Future = Future()
        if self.failed:
            future.set_exception(ModelUnavailable("the model process is gone"))
            return future
        job_id = next(self._ids)
        with self._lock:
            self._waiters[job_id] = _Waiter(None, future)
            self._outbox.append(Job(job_id, deadline, bypass_queue_limit, items))
        self.flush()
        return future

    def flush(self) -> None:
        with self._lock:
            jobs, self._outbox = self._outbox, []
            self._flush_scheduled = False
        if not jobs:
            return
        header, arrays = encode(Submit(jobs))
        try:
            self.channel.send(header, arrays)
        except OSError:
            self._fail_all()

    def _read(self) -> None:
        while True:
            frames = self.channel.receive()
            if not frames:
                break
            self._handle(frames)
        self._fail_all()

    def _handle(self, frames) -> None:
        deliveries: dict[asyncio.AbstractEventLoop | None, list[tuple[Any, Any, bool]]] = defaultdict(list)
        for header, arrays in frames:
            message = decode(header, arrays)
            if isinstance(message, Results):
                self._collect(message.outcomes, deliveries)
            elif isinstance(message, Artifact):
                self.artifact_info = message
                self.artifact.set()
            elif isinstance(message, Ready):
                self.ready.set()
        self._dispatch(deliveries)

    def _collect(self, outcomes: Sequence[tuple[int, JobResult | BaseException]], deliveries) -> None:
        with self._lock:
            waiters = [self._waiters.pop(job_id, None) for job_id, _ in outcomes]
        for (_, outcome), waiter in zip(outcomes, waiters, strict=True):
            if waiter is not None:
                deliveries[waiter.loop].append((waiter.future, outcome, isinstance(outcome, JobResult)))

    def _dispatch(self, deliveries) -> None:
        for loop, results in deliveries.items():
            if loop is None or loop is self._loop:  # a concurrent future, or already on the waiter's loop
                _deliver(results)
            elif not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(_deliver, results)
                except RuntimeError:  # the loop closed in the meantime
                    pass

    def _fail_all(self) -> None:
        if not self.failed:
            self.failed = True
            if not self._closing:
                log.error("the link to the model process is broken; failing every request")
        with self._lock:
            waiters, self._waiters = self._waiters, {}
            self._outbox = []
        deliveries: dict[Any, list[tuple[Any, Any, bool]]] = defaultdict(list)
        for waiter in waiters.values():
            deliveries[waiter.loop].append((waiter.future, ModelUnavailable("the model process is gone"), False))
        self._dispatch(deliveries)

    def close(self) -> None:
        self._closing = True
        if self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.remove_reader(self.channel.sock.fileno())
            except (RuntimeError, ValueError, OSError):
                pass
        self.channel.close()
