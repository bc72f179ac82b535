"""Entry point of the server's child processes (`python -m inference_server.supervisor.children`, started by the
supervisor with their role, fds and settings in INFERENCE_SERVER_CHILD)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time

import orjson

from ..logs import configure_logging
from ..settings import load_settings
from .library_caches import confine_library_caches
from .processes import CHILD_ENV

log = logging.getLogger("inference_server")


def _watch_parent(alive_fd: int, on_gone) -> None:
    """Call on_gone when the supervisor's end of the pipe closes (it died, or exited)."""

    def watch() -> None:
        try:
            while os.read(alive_fd, 1):
                pass
        except OSError:
            pass
        on_gone()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def run_model(settings, fds: dict[str, int], server_started_at: float | None = None) -> int:
    from ..engine.model_runner import ModelRunner
    from ..ipc import Channel, ShmRing, StatusPage
    from ..link_messages import NewWorker, Stop, decode

    # The supervisor decides when the model stops (after the workers drained): group signals are not for us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    status = StatusPage(fds["status"])

    def exit_now(code: int) -> None:
        sys.stdout.flush()
        os._exit(code)

    runner = ModelRunner(settings, status, on_exit=exit_now, server_started_at=server_started_at)
    _watch_parent(fds["alive"], lambda: exit_now(0 if runner.exit_code == 0 else runner.exit_code))
    runner.start()
    control = socket.socket(fileno=fds["control"])
    while True:
        try:
            message, received, _, _ = socket.recv_fds(control, 4096, 3)
        except OSError:
            break
        if not message:
            break
        command = decode(orjson.loads(message), [])
        if isinstance(command, NewWorker) and len(received) == 3:
            link, requests, responses = received
            channel = Channel(socket.socket(fileno=link), ShmRing(responses), ShmRing(requests))
            os.close(requests)
            os.close(responses)
            runner.add_link(channel, command.name)
        elif isinstance(command, Stop):
            break
    runner.stop()
    log.info("model process stopped", extra={"exit_code": runner.exit_code})
    return runner.exit_code


def run_worker(settings, index: int, fds: dict[str, int], ready_before_serving: bool = False) -> int:
    from ..front.client import ModelClient
    from ..front.server import run_worker as serve
    from ..front.service import WorkerService
    from ..ipc import Channel, ShmRing, StatusPage

    channel = Channel(socket.socket(fileno=fds["link"]), ShmRing(fds["requests"]), ShmRing(fds["responses"]))
    os.close(fds["requests"])
    os.close(fds["responses"])
    client = ModelClient(channel, StatusPage(fds["status"]))
    service = WorkerService(settings, client, worker=index)
    listen = socket.socket(fileno=fds["listen"])
    _watch_parent(fds["alive"], lambda: service.request_exit(1))
    if ready_before_serving:  # its siblings serve meanwhile; accepting now would answer "loading"
        service.start()
        deadline = time.monotonic() + 2 * settings.ready_probe_interval_s + settings.request_timeout_s + 60
        while service.readiness() is not None and time.monotonic() < deadline and not service.client.failed:
            time.sleep(0.02)
    return serve(settings, service, listen)


def main() -> int:
    spec = orjson.loads(os.environ.pop(CHILD_ENV))
    settings = load_settings([], spec["settings"])
    configure_logging(settings.log_level, {"model": settings.model_name, "model_version": settings.model_version})
    confine_library_caches(settings.model_cache_dir)
    if spec["role"] == "model":
        return run_model(settings, spec["fds"], spec.get("server_started_at"))
    return run_worker(settings, spec["index"], spec["fds"], spec.get("ready_before_serving", False))


if __name__ == "__main__":
    sys.exit(main())
