"""Running a worker's app under uvicorn, draining on SIGTERM (draining.py)."""

from __future__ import annotations

import gc
import socket
from typing import cast

import uvicorn

from ..settings import Settings
from .app import create_app
from .draining import DrainingServer
from .service import WorkerService


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
