"""The server's first process: it binds the port, starts one model process and the HTTP workers, and watches them.

- The model process owns the device and the batcher; each worker gets its own link to it (a Unix socket and two
  shared-memory rings), handed to the model process over a control socket (SCM_RIGHTS) and to the worker at
  start. Every worker accepts on the same listening socket.
- SIGTERM/SIGINT: the status page says "draining" (every worker's /ready fails at once), each worker drains its
  accepted requests (at most DRAIN_TIMEOUT_S) and exits; then the model process stops and this process exits 0.
- The model process exits (a CUDA error, a failed load, a crash): the status page says "failed" (every worker's
  /ready and predict answer 503 at once), the workers are stopped and this process exits non-zero, so ECS
  replaces the task.
- A worker dies: it is replaced (its in-flight requests are lost; the model process drops its queued inputs).
  More than MAX_WORKER_RESTARTS within a minute means something is wrong with every worker: exit 1.
- When this process dies, its children see their pipe close and exit.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import orjson

from .. import facts
from ..ipc import LinkEnds, ModelState, Slot, StatusPage
from ..link_messages import NewWorker, Stop, encode
from ..settings import Settings

log = logging.getLogger("inference_server.supervisor")
CHILD_ENV = "INFERENCE_SERVER_CHILD"
MAX_WORKER_RESTARTS = 5
WORKER_STOP_GRACE_S = float(facts.EXIT_GRACE_S)
MODEL_STOP_GRACE_S = 15.0


def task_cpus() -> int:
    """CPUs this task may use: the affinity mask, capped by a cgroup v2 CPU quota when there is one."""
    cpus = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cpus


def worker_count(settings: Settings) -> int:
    return settings.workers or max(1, task_cpus() - 1)


def settings_environment(settings: Settings) -> dict[str, str]:
    """Settings as the environment variables that load_settings reads back to the same values."""
    env = {}
    for f in dataclasses.fields(Settings):
        value = getattr(settings, f.name)
        if value is None:
            continue
        if isinstance(value, bool):
            raw = "true" if value else "false"
        elif f.name == "api_keys":
            raw = json.dumps(dict(value)) if value else ""  # names survive: a JSON object of names to keys
        elif isinstance(value, tuple):
            raw = ",".join(map(str, value))
        elif isinstance(value, float):
            raw = repr(value)
        else:
            raw = str(value)
        if raw or not isinstance(value, tuple):
            env[f.name.upper()] = raw
    return env


@dataclass
class Child:
    role: str
    index: int
    process: subprocess.Popen
    pidfd: int


def process_started_at() -> float:
    """The wall-clock time this process started (Linux: its start in /proc, so the interpreter's own start counts);
    now where /proc has no answer."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return time.time()
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


class Supervisor:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.started_at = process_started_at()
        self.count = worker_count(settings)
        self.status = StatusPage.create()
        self.listen = socket.create_server((settings.host, settings.port), backlog=2048, reuse_port=False)
        self.listen.set_inheritable(True)
        self.control, self._model_control = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._alive_r, self._alive_w = os.pipe()  # children see EOF on alive_r when this process is gone
        self.selector = selectors.DefaultSelector()
        self.model: Child | None = None
        self.workers: dict[int, Child] = {}
        self.restarts: deque[float] = deque()
        self.stopping = False
        self.exit_code = 0
        self._signal_r, self._signal_w = os.pipe()
        os.set_blocking(self._signal_w, False)
        os.set_blocking(self._signal_r, False)

    # -- children ----------------------------------------------------------------------------------------------

    def _spawn(self, role: str, index: int, fds: dict[str, int], **options) -> Child:
        fds = {**fds, "status": self.status.fd, "alive": self._alive_r}
        env = {
            **os.environ,
            CHILD_ENV: orjson.dumps(
                {"role": role, "index": index, "fds": fds, **options, "settings": settings_environment(self.settings)}
            ).decode(),
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "inference_server.supervisor.children"],
            env=env,
            pass_fds=tuple(fds.values()),
            stdin=subprocess.DEVNULL,
        )
        child = Child(role, index, process, os.pidfd_open(process.pid))
        self.selector.register(child.pidfd, selectors.EVENT_READ, child)
        log.info("process started", extra={"role": role, "index": index, "pid": process.pid})
        return child

    def _start_model(self) -> None:
        self.model = self._spawn(
            "model", 0, {"control": self._model_control.fileno()}, server_started_at=self.started_at
        )
        self._model_control.close()
        self.status.set(Slot.MODEL_PID, self.model.process.pid)

    def _start_worker(self, index: int) -> None:
        link = LinkEnds()
        message = orjson.dumps(encode(NewWorker(str(index)))[0])
        socket.send_fds(self.control, [message], [link.model_sock.fileno(), link.requests_fd, link.responses_fd])
        self.workers[index] = self._spawn(
            "worker",
            index,
            {
                "listen": self.listen.fileno(),
                "link": link.worker_sock.fileno(),
                "requests": link.requests_fd,
                "responses": link.responses_fd,
            },
            # A replacement joins ready workers: it accepts once ready itself.
            ready_before_serving=self.status.state == ModelState.READY,
        )
        link.worker_sock.close()
        link.model_sock.close()
        link.close_ring_fds()

    # -- the loop ----------------------------------------------------------------------------------------------

    def run(self) -> int:
        signal.set_wakeup_fd(self._signal_w)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: None)  # handled through the wakeup fd
        self.selector.register(self._signal_r, selectors.EVENT_READ, "signal")
        log.info("starting", extra={"workers": self.count, "port": self.settings.port})
        self._start_model()
        for index in range(self.count):
            self._start_worker(index)
        deadline = None
        while self.model is not None or self.workers:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            events = self.selector.select(timeout)
            if deadline is not None and time.monotonic() >= deadline:
                self._kill_stragglers()
                deadline = None
            for key, _ in events:
                if key.data == "signal":
                    self._on_signals()
                    if self.stopping and deadline is None:
                        deadline = time.monotonic() + self.settings.drain_timeout_s + WORKER_STOP_GRACE_S
                else:
                    self._on_exit(key.data)
        log.info("exiting", extra={"exit_code": self.exit_code})
        return self.exit_code

    def _on_signals(self) -> None:
        try:
            received = os.read(self._signal_r, 64)
        except BlockingIOError:
            return
        for number in received:
            name = signal.Signals(number).name
            if not self.stopping:
                log.info(
                    "signal received; draining",
                    extra={"signal": name, "drain_timeout_s": self.settings.drain_timeout_s},
                )
                self._stop_all(draining=True)
            else:  # a second signal: hurry the workers along
                for child in self.workers.values():
                    self._signal(child, signal.SIGINT)

    def _stop_all(self, draining: bool) -> None:
        self.stopping = True
        # Only the workers keep the port open now: when the last one closes it, connections are refused
        # rather than left in the backlog of a socket nobody accepts on.
        self.listen.close()
        if draining:
            self.status.set(Slot.DRAINING, 1)
        for child in self.workers.values():
            self._signal(child, signal.SIGTERM)
        if not self.workers:
            self._stop_model()

    def _stop_model(self) -> None:
        if self.model is None:
            return
        try:
            self.control.send(orjson.dumps(encode(Stop())[0]))
        except OSError:
            pass
        self.control.close()

    def _signal(self, child: Child, sig: int) -> None:
        try:
            child.process.send_signal(sig)
        except ProcessLookupError:
            pass

    def _kill_stragglers(self) -> None:
        for child in [*self.workers.values(), *([self.model] if self.model else [])]:
            log.warning("did not stop in time; killing", extra={"role": child.role, "index": child.index})
            child.process.kill()

    def _on_exit(self, child: Child) -> None:
        code = child.process.wait()
        self.selector.unregister(child.pidfd)
        os.close(child.pidfd)
        if child.role == "model":
            self.model = None
            if not self.stopping or code != 0:
                # The model process logs its own reason (CRITICAL) when it can; a crash or a kill cannot.
                reported = self.status.state == ModelState.FAILED
                self.status.set(Slot.STATE, ModelState.FAILED)
                if not self.stopping:
                    (log.error if reported else log.critical)(
                        "the model process exited; stopping the workers and failing the task", extra={"exit_code": code}
                    )
                self.exit_code = code if code > 0 else 1
                if not self.stopping:
                    self._stop_all(draining=False)
            return
        del self.workers[child.index]
        if self.stopping:
            if not self.workers:
                self._stop_model()
            return
        now = time.monotonic()
        while self.restarts and now - self.restarts[0] > 60:
            self.restarts.popleft()
        if len(self.restarts) >= MAX_WORKER_RESTARTS or self.model is None:
            log.critical(
                "HTTP workers keep dying; failing the task",
                extra={"worker": child.index, "exit_code": code, "restarts_last_minute": len(self.restarts)},
            )
            self.exit_code = 1
            self._stop_all(draining=False)
            return
        self.restarts.append(now)
        log.error("an HTTP worker exited; replacing it", extra={"worker": child.index, "exit_code": code})
        self._start_worker(child.index)


def run(settings: Settings) -> int:
    return Supervisor(settings).run()
