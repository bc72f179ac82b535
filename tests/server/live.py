"""A real uvicorn server on a free port, in a thread of the test process, for clients that need TCP (openai,
tritonclient)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from inference_server.front.app import create_app
from inference_server.front.service import WorkerService


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def live_asgi(app: Any, port: int | None = None) -> Iterator[str]:
    """Yields "127.0.0.1:<port>" while ``app`` is served by uvicorn (lifespan on) on ``port`` (default: a free one)."""
    port = port or free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        http="httptools",
        loop="asyncio",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def live_server(service: WorkerService) -> Iterator[str]:
    """Yields "127.0.0.1:<port>" while the app on service is served."""
    with live_asgi(create_app(service)) as address:
        yield address
