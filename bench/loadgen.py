"""A closed-loop HTTP/1.1 load generator: `concurrency` keep-alive connections, each sending its next request as
soon as the previous response is complete. Requests are pre-encoded bytes and responses are parsed by httptools
on uvloop, so the generator costs a few microseconds of CPU per request (see `client_cpu_s`)."""

from __future__ import annotations

import asyncio
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httptools
import uvloop

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class LoadResult:
    concurrency: int
    duration_s: float
    requests: int
    errors: int  # non-2xx responses and broken connections
    throughput_rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    client_cpu_s: float  # this process's CPU time during the window
    server_cpu_s: float | None  # the server process's CPU time (all threads) during the window

    def as_dict(self) -> dict:
        return asdict(self)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return math.nan
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def encode_requests(host: str, port: int, path: str, bodies: list[bytes],
                    headers: dict[str, str] | None = None) -> list[bytes]:
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    return [(f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
             f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body for body in bodies]


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process, all its threads (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)

    def connection_lost(self, exc) -> None:
        self._fail(exc or ConnectionError("connection closed"))

    def on_message_complete(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(self.parser.get_status_code())

    def _fail(self, exc: BaseException) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError(str(exc)))

    def send(self, request: bytes) -> asyncio.Future:
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.waiter


class _Run:
    def __init__(self, host: str, port: int, requests: list[bytes]) -> None:
        self.host, self.port, self.requests = host, port, requests
        self.recording = False
        self.stopping = False
        self.latencies_ns: list[int] = []
        self.errors = 0

    async def _connect(self) -> _Connection:
        _, conn = await asyncio.get_running_loop().create_connection(_Connection, self.host, self.port)
        return conn

    async def worker(self, offset: int) -> None:
        requests, count = self.requests, len(self.requests)
        conn, i = await self._connect(), offset
        while not self.stopping:
            started = time.perf_counter_ns()
            try:
                status = await conn.send(requests[i % count])
            except ConnectionError:
                if self.recording:
                    self.errors += 1
                conn = await self._connect()
                continue
            if self.recording:
                if 200 <= status < 300:
                    self.latencies_ns.append(time.perf_counter_ns() - started)
                else:
                    self.errors += 1
            if not conn.parser.should_keep_alive():
                conn.transport.close()
                conn = await self._connect()
            i += 1
        conn.transport.close()


async def _drive(host: str, port: int, requests: list[bytes], concurrency: int, warmup_s: float,
                 duration_s: float, server_pid: int | None) -> LoadResult:
    run = _Run(host, port, requests)
    stride = max(1, len(requests) // concurrency)
    workers = [asyncio.ensure_future(run.worker(n * stride)) for n in range(concurrency)]
    await asyncio.sleep(warmup_s)
    run.recording = True
    server_cpu = process_cpu_s(server_pid) if server_pid else None
    client_cpu, started = time.process_time(), time.perf_counter()
    await asyncio.sleep(duration_s)
    run.recording = False
    elapsed = time.perf_counter() - started
    client_cpu = time.process_time() - client_cpu
    if server_cpu is not None:
        server_cpu = process_cpu_s(server_pid) - server_cpu
    run.stopping = True
    _, pending = await asyncio.wait(workers, timeout=30)
    for task in pending:
        task.cancel()
    for task in workers:
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()
    latencies = sorted(ns / 1e6 for ns in run.latencies_ns)
    return LoadResult(concurrency=concurrency, duration_s=round(elapsed, 3), requests=len(latencies),
                      errors=run.errors, throughput_rps=len(latencies) / elapsed,
                      p50_ms=percentile(latencies, 0.50), p95_ms=percentile(latencies, 0.95),
                      p99_ms=percentile(latencies, 0.99), client_cpu_s=client_cpu, server_cpu_s=server_cpu)


def run_load(host: str, port: int, requests: list[bytes], concurrency: int, warmup_s: float, duration_s: float,
             server_pid: int | None = None) -> LoadResult:
    """Drive the server for warmup_s (not recorded), then duration_s (recorded), with `concurrency` clients."""
    return uvloop.run(_drive(host, port, requests, concurrency, warmup_s, duration_s, server_pid))
