"""uvicorn with draining on SIGTERM instead of its immediate shutdown, for any app that can say what it has in flight
(a :class:`Drainable`: an HTTP worker's WorkerService, a model pool's server)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, Protocol

import uvicorn

log = logging.getLogger(__name__)
FATAL_EXIT_GRACE_S = 15.0  # after a fatal error, how long a graceful shutdown may take before a hard exit
# After the accepted work finished: how long no connection may have opened before the server closes the port. A
# connection the kernel queued, or one accepted whose request is not parsed yet, is not in flight; closing under it
# resets it (the last worker's close resets the whole accept queue), so the server answers those first (503).
DRAIN_QUIET_S = 0.5


async def wait_until_answered(
    in_flight: Callable[[], int], timeout: float, logger: logging.Logger, fields: Mapping[str, Any] | None = None
) -> bool:
    """Until the accepted requests (``in_flight()``) have been answered (True), or ``timeout`` seconds (False); logs
    either end on ``logger`` with ``fields``."""
    deadline = time.monotonic() + timeout
    while in_flight():
        if time.monotonic() >= deadline:
            logger.warning(
                "drain timeout; exiting with work in flight", extra={"in_flight": in_flight(), **(fields or {})}
            )
            return False
        await asyncio.sleep(0.02)
    logger.info("drained", extra=dict(fields or {}))
    return True


class Drainable(Protocol):
    """What a draining server asks of the app it serves."""

    @property
    def drain_timeout_s(self) -> float:
        """After SIGTERM, how long accepted work may finish (DRAIN_TIMEOUT_S)."""
        ...

    @property
    def in_flight(self) -> int:
        """Requests accepted and not answered yet."""
        ...

    def begin_drain(self) -> None:
        """Readiness fails and new requests get 503 from now on."""
        ...

    async def wait_drained(self, timeout: float) -> bool:
        """Until nothing is in flight (True) or the timeout (False)."""
        ...


class DrainingServer(uvicorn.Server):
    """On the first SIGTERM/SIGINT: the app begins to drain (readiness fails, new requests get 503 at once), accepted
    work finishes (up to its drain_timeout_s), then uvicorn shuts down and the process exits 0. A second signal stops
    at once."""

    def __init__(self, config: uvicorn.Config, app: Drainable) -> None:
        super().__init__(config)
        self.drainable = app
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining = False

    async def serve(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Unlike uvicorn's handler this does not re-raise the signal after shutdown, so the exit code stays 0.
        if self._draining or self._loop is None:
            self.force_exit = self.should_exit and sig == signal.SIGINT
            self.should_exit = True
            return
        self._draining = True
        log.info(
            "signal received; draining",
            extra={"signal": signal.Signals(sig).name, "drain_timeout_s": self.drainable.drain_timeout_s},
        )
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self.drainable.begin_drain()
        self._drain_task = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        timeout = self.drainable.drain_timeout_s
        deadline = time.monotonic() + timeout
        if await self.drainable.wait_drained(timeout):
            await self._wait_quiet(deadline)
        self.should_exit = True

    async def _wait_quiet(self, deadline: float) -> None:
        """Until, for DRAIN_QUIET_S, no connection opened, no request started and nothing was in flight (or
        deadline)."""
        state = self.server_state
        seen, requests, quiet_since = set(map(id, state.connections)), state.total_requests, time.monotonic()
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            now_seen = set(map(id, state.connections))
            if now_seen - seen or state.total_requests != requests or self.drainable.in_flight:
                quiet_since = time.monotonic()
            seen, requests = now_seen, state.total_requests
            if time.monotonic() - quiet_since >= DRAIN_QUIET_S:
                return

    def exit_soon(self, code: int) -> None:
        """From any thread: shut down and exit with code; a hard exit if that takes too long."""
        self.should_exit = True
        watchdog = threading.Timer(FATAL_EXIT_GRACE_S, os._exit, (code,))
        watchdog.daemon = True
        watchdog.start()
