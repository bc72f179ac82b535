"""Running the app under uvicorn, with draining on SIGTERM instead of uvicorn's immediate shutdown."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import threading
import time
from types import FrameType
from typing import cast

import uvicorn

from ..settings import Settings
from .app import create_app
from .service import WorkerService

log = logging.getLogger(__name__)
FATAL_EXIT_GRACE_S = 15.0  # after a CUDA error, how long a graceful shutdown may take before a hard exit
# After the accepted work finished: how long no connection may have opened before the worker closes the port. A
# connection the kernel queued, or one accepted whose request is not parsed yet, is not in flight; closing under it
# resets it (the last worker's close resets the whole accept queue), so the worker answers those first (503).
DRAIN_QUIET_S = 0.5


class DrainingServer(uvicorn.Server):
    """On the first SIGTERM/SIGINT: readiness fails and new predict requests get 503 at once, accepted work
    finishes (up to DRAIN_TIMEOUT_S), then uvicorn shuts down and the process exits 0. A second signal stops at
    once."""

    def __init__(self, config: uvicorn.Config, service: WorkerService) -> None:
        super().__init__(config)
        self.service = service
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
            extra={"signal": signal.Signals(sig).name, "drain_timeout_s": self.service.settings.drain_timeout_s},
        )
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self.service.begin_drain()
        self._drain_task = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.service.settings.drain_timeout_s
        if await self.service.wait_drained(self.service.settings.drain_timeout_s):
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
            if now_seen - seen or state.total_requests != requests or self.service.in_flight:
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


def run_worker(settings: Settings, service: WorkerService, listen: socket.socket) -> int:
    """Serve HTTP on `listen` (shared by every worker) until drained or told to stop."""
    app = create_app(service)
    # uvicorn annotates timeout_keep_alive as int, but a float works (it is a call_later delay): keep the setting's.
    config = uvicorn.Config(
        app,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        log_config=None,
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_keep_alive=cast(int, settings.keep_alive_s),
        timeout_graceful_shutdown=5,
        server_header=False,
        backlog=2048,
        proxy_headers=False,
    )
    server = DrainingServer(config, service)
    # The app, its schemas and the imports never die: keep full collections, which a request's allocations
    # trigger now and then, from rescanning them (on the hot path of sheds, too).
    gc.collect()
    gc.freeze()
    service.request_exit = server.exit_soon
    try:
        server.run(sockets=[listen])
    finally:
        service.stop()
    return service.exit_code
