"""The OpenTelemetry SDK's finished spans to an OTLP/HTTP endpoint as protobuf, in batches, from the worker's event
loop: a span processor doing what the SDK's BatchSpanProcessor and OTLPSpanExporter do, but sending from a task on
the loop over one kept-alive connection instead of from a thread of its own. An export thread, waking about once a
second at 1 % of the null model's 6,000-9,000 requests a second, cost the loop's thread 5-8 µs of CPU a request (the
same process serving requests with 1 % sampled against none; the same batches written on the loop itself cost
nothing measurable), the GIL passed back and forth (bench/README.md, "Tracing's cost"). A batch is encoded by the
SDK's own OTLP encoder (opentelemetry-exporter-otlp-proto-common, what its HTTP and gRPC exporters use).

The standard variables it reads (the SDK's names and defaults): OTEL_BSP_SCHEDULE_DELAY (ms, 5000),
OTEL_BSP_MAX_QUEUE_SIZE (2048), OTEL_BSP_MAX_EXPORT_BATCH_SIZE (512), OTEL_EXPORTER_OTLP_[TRACES_]HEADERS,
OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT (seconds, 10) and OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION (gzip or none).
"""

from __future__ import annotations

import asyncio
import collections
import gzip
import logging
import os
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.util.re import parse_env_headers

log = logging.getLogger(__name__)

RETRIED = frozenset({429, 502, 503, 504})  # the OTLP/HTTP specification's retryable statuses
HEAD_LIMIT = 65536  # an answer's status line and headers, at most


def _variable(environ: Mapping[str, str], name: str, default: str = "") -> str:
    """OTEL_EXPORTER_OTLP_TRACES_<name>, else OTEL_EXPORTER_OTLP_<name>."""
    return environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or environ.get(f"OTEL_EXPORTER_OTLP_{name}") or default


def _positive(text: str | None, default: float) -> float:
    """``text`` as a positive number, else ``default`` (unset, not a number, or not positive)."""
    try:
        value = float(text) if text else default
    except ValueError:
        return default
    return value if value > 0 else default


class OtlpExporter(SpanProcessor):
    """The SDK's spans, queued as they end (on the event loop), leave in batches: every schedule delay, or at once when
    a batch is full, one export at a time, sent by a task on the loop that added them. A full queue drops the new spans
    (as the SDK's processor does) and counts them in ``dropped``. :meth:`flush` and :meth:`shutdown` send what is
    left, called on the loop's thread (blocking it) or once its loop has ended (as a worker exits)."""

    def __init__(self, endpoint: str, environ: Mapping[str, str] = os.environ) -> None:
        self.endpoint = endpoint
        self.delay_s = _positive(environ.get("OTEL_BSP_SCHEDULE_DELAY"), 5000) / 1000
        self.max_queue = int(_positive(environ.get("OTEL_BSP_MAX_QUEUE_SIZE"), 2048))
        self.batch_size = min(int(_positive(environ.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"), 512)), self.max_queue)
        self.timeout_s = _positive(_variable(environ, "TIMEOUT"), 10)
        self.gzip = _variable(environ, "COMPRESSION").strip().lower() == "gzip"
        self.headers = {
            **parse_env_headers(_variable(environ, "HEADERS"), liberal=True),
            "content-type": "application/x-protobuf",
        }
        if self.gzip:
            self.headers["content-encoding"] = "gzip"
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._sending: list[ReadableSpan] = []  # the batch the export task is sending
        self._task: asyncio.Task | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._link = _Link()  # the export task's connection
        self.dropped = 0

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        self.add((span,))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.flush(timeout_millis)

    def add(self, spans: Sequence[ReadableSpan]) -> None:
        if len(self._queue) + len(spans) > self.max_queue:
            self.dropped += len(spans)
            return
        self._queue.extend(spans)
        if self._task is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a script, a test): flush() sends them
            return
        if len(self._queue) >= self.batch_size:
            self._export_now(loop)
        elif self._timer is None:
            self._timer = loop.call_later(self.delay_s, self._export_now, loop)

    def _export_now(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is None and self._queue:
            self._task = loop.create_task(self._export(loop))

    async def _export(self, loop: asyncio.AbstractEventLoop) -> None:
        """Full batches at once, then what is left after the schedule delay."""
        batch: list[ReadableSpan] = []
        try:
            while self._queue:
                batch = self._sending = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
                await self._send(batch, self._link)
                batch = []
                if len(self._queue) < self.batch_size:
                    break
        except asyncio.CancelledError:
            if self._task is asyncio.current_task():  # not taken over by flush(), which requeued the batch itself
                self._queue.extendleft(reversed(batch))
            raise
        finally:
            if self._task is asyncio.current_task():
                self._task, self._sending = None, []
                if self._queue and self._timer is None and not loop.is_closed():
                    self._timer = loop.call_later(self.delay_s, self._export_now, loop)

    async def _send(self, spans: list[ReadableSpan], link: _Link) -> None:
        """One POST of ``spans``, retried within the timeout on a retryable answer or a broken connection (at once
        when a kept-alive connection turns out closed); a batch not sent is logged."""
        body = encode_spans(spans).SerializeToString()
        if self.gzip:
            body = gzip.compress(body)
        deadline, pause = time.monotonic() + self.timeout_s, 1.0
        while True:
            reused = link.connection is not None
            try:
                status = await asyncio.wait_for(
                    link.post(self.endpoint, self.headers, body), max(0.1, deadline - time.monotonic())
                )
                if 200 <= status < 300:
                    return
                retried, reason = status in RETRIED, f"HTTP {status}"
            except (
                OSError,
                EOFError,
                ValueError,
                TimeoutError,
                asyncio.IncompleteReadError,
                asyncio.LimitOverrunError,
            ) as error:  # refused, reset, timed out, a bad URL or answer
                link.close()
                if reused:
                    continue  # the endpoint closed an idle connection: a new one, now
                retried, reason = True, str(error) or type(error).__name__
            if not retried or time.monotonic() + pause > deadline:
                log.warning("spans not exported (%d): %s", len(spans), reason)
                return
            await asyncio.sleep(pause)
            pause *= 2

    def flush(self, timeout_ms: int = 30000) -> bool:
        """Send what is queued now, the batch an export task holds included; True when it left (or was given up
        and logged) within ``timeout_ms``. On the loop's thread or after its loop ended (it cancels the loop's export
        task): the sending runs on a loop of its own, in a thread."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            self._queue.extendleft(reversed(self._sending))
        self._sending = []
        self._link = _Link()  # the old one's loop is busy (it called this) or gone
        if not self._queue:
            return True
        if timeout_ms <= 0:
            return False
        done = threading.Event()

        async def drain() -> None:
            link = _Link()
            try:
                while self._queue:
                    batch = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
                    await self._send(batch, link)
                link.close()
            finally:
                done.set()

        threading.Thread(target=asyncio.run, args=(drain(),), name="otlp-flush", daemon=True).start()
        return done.wait(timeout_ms / 1000)

    def shutdown(self, timeout_ms: int = 2000) -> None:
        """What is queued goes, for at most ``timeout_ms``."""
        self.flush(timeout_ms)


class _Link:
    """One kept-alive HTTP/1.1 connection to the endpoint, on the loop that opened it."""

    def __init__(self) -> None:
        self.connection: tuple[asyncio.AbstractEventLoop, asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, endpoint: str, headers: Mapping[str, str], body: bytes) -> int:
        """The answer's status, its body read; the connection stays open for the next batch unless it said close."""
        url = urllib.parse.urlsplit(endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {endpoint!r}")
        loop = asyncio.get_running_loop()
        if self.connection is not None and self.connection[0] is not loop:
            self.connection = None
        if self.connection is None:
            secure = ssl.create_default_context() if url.scheme == "https" else None
            reader, writer = await asyncio.open_connection(
                url.hostname, url.port or (443 if secure else 80), ssl=secure, limit=HEAD_LIMIT
            )
            self.connection = (loop, reader, writer)
        _, reader, writer = self.connection
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        writer.write(
            f"POST {path} HTTP/1.1\r\nhost: {url.netloc}\r\ncontent-length: {len(body)}\r\n{head}\r\n".encode("latin-1")
            + body
        )
        await writer.drain()
        status, close = await _read_answer(reader)
        if close:
            self.close()
        return status

    def close(self) -> None:
        if self.connection is not None:
            self.connection[2].close()
            self.connection = None


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """(status, whether the server closes the connection), the body read: Content-Length, chunked or to the end."""
    lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    version, status = lines[0].split(" ", 2)[:2]
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip().lower()
    close = headers.get("connection") == "close" or version == "HTTP/1.0"
    if "chunked" in headers.get("transfer-encoding", ""):
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            await reader.readexactly(size + 2)
        await reader.readuntil(b"\r\n")
    elif "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    else:
        await reader.read()
        close = True
    return int(status), close
