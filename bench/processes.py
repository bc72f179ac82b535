"""Server processes under test: start on a free 127.0.0.1 port, wait until ready, stop."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@dataclass
class ServerProcess:
    name: str
    port: int
    process: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self, path: str, timeout_s: float, interval_s: float = 0.1) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                conn = http.client.HTTPConnection(HOST, self.port, timeout=2)
                conn.request("GET", path)
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(interval_s)
        self.stop()
        raise TimeoutError(f"{self.name} not ready after {timeout_s:g} s:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL for the process and anything it started that outlived it (LitServe's
        workers do)."""
        from .loadgen import descendants

        tree = descendants(self.process.pid) if self.process.poll() is None else []
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pid in tree[1:]:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of a process onto cpus (a process's affinity is per thread on Linux)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except OSError:
            pass


def start_server(
    name: str, command: list[str], env: dict[str, str], port: int, log_dir: Path, cpus: set[int] | None = None
) -> ServerProcess:
    """Start command with env on top of this process's environment (on `cpus`, inherited by what it starts);
    its output goes to log_dir/<name>.log."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
    return ServerProcess(name, port, process, log_path)


def log_entries(log_path: Path) -> Iterator[Any]:
    """Each JSON line of our server's log (other lines, such as a library's own output, skipped)."""
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            yield orjson.loads(line)
        except orjson.JSONDecodeError:
            continue


def server_processes(log_path: Path) -> dict[int, str]:
    """Our server logs each child it starts: pid -> "model", "worker-0", ... (the latest of each)."""
    named: dict[str, int] = {}
    for entry in log_entries(log_path):
        if entry.get("message") == "process started" and entry.get("role"):
            role = entry["role"] if entry["role"] == "model" else f"{entry['role']}-{entry.get('index', 0)}"
            named[role] = entry["pid"]
    return {pid: role for role, pid in named.items()}
