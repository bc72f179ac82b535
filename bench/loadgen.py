"""A closed-loop HTTP/1.1 load generator: `concurrency` keep-alive connections, each sending its next request as
soon as the previous response is complete. Requests are pre-encoded bytes, responses are parsed by httptools on
uvloop, and the next request is written from the parser's callback (no task or future per request), so the
generator costs little CPU per request (see `client_cpu_s`)."""

from __future__ import annotations

import asyncio
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import cast

import httptools
import uvloop

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class LoadResult:
    concurrency: int
    duration_s: float
    requests: int
    errors: int  # non-2xx responses and broken connections
    connections: int  # connections opened: `concurrency` when the server keeps them alive
    throughput_rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    client_cpu_s: float  # this process's CPU time during the window
    server_cpu_s: float | None  # the server's CPU time (all its processes and threads) during the window
    statuses: dict[str, int] | None = None  # responses by status code
    shed_p50_ms: float | None = None  # median latency of the 503 answers
    # Cores each named process of the server used over the window (its threads together), and the generator's.
    cores_by_process: dict[str, float] | None = None
    # With a deadline: the 200s that arrived within it (goodput counts only these) and their p99.
    deadline_ms: float | None = None
    within_deadline: int | None = None
    within_deadline_p99_ms: float | None = None

    @property
    def answers(self) -> int:
        return sum((self.statuses or {}).values())

    @property
    def goodput_rps(self) -> float:
        """200s per second; with a deadline, only those within it."""
        good = self.requests if self.within_deadline is None else self.within_deadline
        return good / self.duration_s if self.duration_s else 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return math.nan
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def encode_requests(
    host: str, port: int, path: str, bodies: list[bytes], headers: dict[str, str] | None = None
) -> list[bytes]:
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    return [
        (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n"
        ).encode()
        + body
        for body in bodies
    ]


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def descendants(pid: int) -> list[int]:
    """pid and every process below it (Linux /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields:
                parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(parents.get(current, ()))
    return found


def rss_mib(pid: int) -> float | None:
    """Resident memory of one process, in MiB (Linux /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), None)
    return kib / 1024 if kib is not None else None


def own_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of one process, all its threads (Linux /proc)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS if fields else None


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process and all its descendants, all their threads (Linux /proc)."""
    seconds = [s for s in map(own_cpu_s, descendants(pid)) if s is not None]
    return sum(seconds) if seconds else None


class _Connection(asyncio.Protocol):
    """One client: sends a request, and the next from the callback that completes the response."""

    transport: asyncio.Transport  # set by connection_made, which asyncio calls before any other callback

    def __init__(self, run: _Run, offset: int) -> None:
        self.run, self.next = run, offset
        self.parser = httptools.HttpResponseParser(self)
        self.started = 0
        self.in_flight = self.keep_alive = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream protocol is handed a Transport; asyncio.Protocol's signature names only the base class.
        self.transport = cast(asyncio.Transport, transport)
        self._send()

    def _send(self) -> None:
        requests = self.run.requests
        self.in_flight, self.started = True, time.perf_counter_ns()
        self.transport.write(requests[self.next % len(requests)])
        self.next += 1

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_headers_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()

    def on_message_complete(self) -> None:
        self.in_flight = False
        self.run.record(self.started, self.parser.get_status_code())
        if self.run.stopping or not self.keep_alive:
            self.transport.close()
        else:
            self._send()

    def connection_lost(self, exc) -> None:
        self.run.closed(self)


class _Run:
    def __init__(self, host: str, port: int, requests: list[bytes]) -> None:
        self.host, self.port, self.requests = host, port, requests
        self.recording = self.stopping = False
        self.latencies_ns: list[int] = []
        self.shed_ns: list[int] = []
        self.statuses: dict[int, int] = {}
        self.errors = 0
        self.open = self.opened = 0
        self.all_closed = asyncio.Event()
        self.connect_errors: list[BaseException] = []

    def connect(self, offset: int) -> None:
        self.open += 1
        self.opened += 1
        task = asyncio.ensure_future(
            asyncio.get_running_loop().create_connection(lambda: _Connection(self, offset), self.host, self.port)
        )
        task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Future) -> None:
        if task.cancelled() or task.exception() is not None:
            self.connect_errors.append(task.exception() or ConnectionError("connect cancelled"))
            self._one_closed()

    def record(self, started: int, status: int) -> None:
        if self.recording:
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if 200 <= status < 300:
                self.latencies_ns.append(time.perf_counter_ns() - started)
            else:
                self.errors += 1
                if status == 503:
                    self.shed_ns.append(time.perf_counter_ns() - started)

    def closed(self, conn: _Connection) -> None:
        if conn.in_flight and self.recording:
            self.errors += 1
        self._one_closed()
        if not self.stopping:
            self.connect(conn.next)  # the server closed the connection: reconnect

    def _one_closed(self) -> None:
        self.open -= 1
        if self.open == 0:
            self.all_closed.set()


async def _drive(
    host: str,
    port: int,
    requests: list[bytes],
    concurrency: int,
    warmup_s: float,
    duration_s: float,
    server_pid: int | None,
    min_per_client: int = 2,
    processes: dict[int, str] | None = None,
    deadline_ms: float | None = None,
) -> LoadResult:
    run = _Run(host, port, requests)
    stride = max(1, len(requests) // concurrency)
    for n in range(concurrency):
        run.connect(n * stride)
    await asyncio.sleep(warmup_s)
    if run.connect_errors:
        raise ConnectionError(f"cannot connect to {host}:{port}: {run.connect_errors[0]!r}")
    run.recording = True
    server_cpu = process_cpu_s(server_pid) if server_pid else None
    named_cpu = {pid: own_cpu_s(pid) for pid in processes or {}}
    client_cpu, started = time.process_time(), time.perf_counter()
    await asyncio.sleep(duration_s)
    # A slow server may not finish a round in a short window: extend it to two responses per client.
    give_up = started + max(10 * duration_s, 30.0)
    while len(run.latencies_ns) < min_per_client * concurrency and time.perf_counter() < give_up:
        await asyncio.sleep(0.02)
    run.recording = False
    elapsed = time.perf_counter() - started
    client_cpu = time.process_time() - client_cpu
    if server_pid and server_cpu is not None:
        after = process_cpu_s(server_pid)
        assert after is not None, f"the server (pid {server_pid}) exited during the window"
        server_cpu = after - server_cpu
    cores = None
    if processes:
        cores = {"generator": round(client_cpu / elapsed, 3)}
        for pid, before in named_cpu.items():
            after = own_cpu_s(pid)
            if before is not None and after is not None:
                cores[processes[pid]] = round((after - before) / elapsed, 3)
    run.stopping = True
    await asyncio.wait_for(run.all_closed.wait(), timeout=60)
    latencies = sorted(ns / 1e6 for ns in run.latencies_ns)
    shed = sorted(ns / 1e6 for ns in run.shed_ns)
    good = [ms for ms in latencies if ms <= deadline_ms] if deadline_ms is not None else None
    return LoadResult(
        concurrency=concurrency,
        duration_s=round(elapsed, 3),
        requests=len(latencies),
        errors=run.errors + len(run.connect_errors),
        connections=run.opened,
        throughput_rps=len(latencies) / elapsed,
        p50_ms=percentile(latencies, 0.50),
        p95_ms=percentile(latencies, 0.95),
        p99_ms=percentile(latencies, 0.99),
        client_cpu_s=client_cpu,
        server_cpu_s=server_cpu,
        statuses={str(k): v for k, v in sorted(run.statuses.items())},
        shed_p50_ms=percentile(shed, 0.50) if shed else None,
        cores_by_process=cores,
        deadline_ms=deadline_ms,
        within_deadline=None if good is None else len(good),
        within_deadline_p99_ms=percentile(good, 0.99) if good else None,
    )


def run_load(
    host: str,
    port: int,
    requests: list[bytes],
    concurrency: int,
    warmup_s: float,
    duration_s: float,
    server_pid: int | None = None,
    min_per_client: int = 2,
    processes: dict[int, str] | None = None,
    deadline_ms: float | None = None,
) -> LoadResult:
    """Drive the server for warmup_s (not recorded), then at least duration_s (recorded) with `concurrency`
    clients, each sending its next request as soon as an answer (a 503 too) arrives; the window is extended
    until each client had min_per_client successful answers (at most 10 x duration_s). processes: pid -> name,
    the server's processes whose cores to report. deadline_ms: also count the 200s that took at most that."""
    return uvloop.run(
        _drive(
            host, port, requests, concurrency, warmup_s, duration_s, server_pid, min_per_client, processes, deadline_ms
        )
    )
