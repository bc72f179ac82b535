"""A real Valkey server (the engine ElastiCache runs) on 127.0.0.1 and a free port, for the shared cache's tests.
`make setup-dev` installs valkey-server from Debian's bookworm-backports; the tests fail, not skip, without it."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import cast

import valkey


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_cluster_port() -> int:
    """A free port whose cluster bus port (10,000 above it) is free too: Valkey refuses cluster mode above 55535."""
    for _ in range(200):
        port = random.randint(20000, 55535)
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise AssertionError("no free port pair (p, p + 10000) below 55536 for a cluster-mode Valkey")


class ValkeyServer:
    def __init__(self, directory: Path, port: int | None = None) -> None:
        binary = shutil.which("valkey-server")
        assert binary, "valkey-server is not installed: `make setup-dev` installs it (Debian bookworm-backports)"
        self.binary, self.directory = binary, directory
        self.port = port or free_port()
        self._port_chosen_here = port is None
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self) -> valkey.Valkey:
        return valkey.Valkey(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self, *extra: str) -> ValkeyServer:
        log = (self.directory / f"valkey-{self.port}.log").open("ab")
        self.process = subprocess.Popen(
            [
                self.binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                "--protected-mode",
                "yes",
                *extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while True:
            assert self.process.poll() is None, (self.directory / f"valkey-{self.port}.log").read_text()
            try:
                if self.client().ping():
                    return self
            except valkey.ConnectionError:
                pass
            assert time.monotonic() < deadline, "valkey-server did not answer PING within 20 s"
            time.sleep(0.02)

    def start_cluster(self) -> ValkeyServer:
        """A one-node cluster holding every slot: cluster mode as ElastiCache Serverless has it."""
        if self._port_chosen_here:
            self.port = free_cluster_port()
        self.start("--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{self.port}.conf")
        client = self.client()
        client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + 20
        # CLUSTER INFO comes back as raw bytes (no response callback); execute_command is typed ResponseT.
        while b"cluster_state:ok" not in cast(bytes, client.execute_command("CLUSTER", "INFO")):
            assert time.monotonic() < deadline, "the one-node cluster did not become ok"
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None
