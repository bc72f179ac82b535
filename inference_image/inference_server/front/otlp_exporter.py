"""Finished spans to an OTLP/HTTP endpoint as protobuf, in batches, on one daemon thread per worker: what the
OpenTelemetry SDK's BatchSpanProcessor and OTLPSpanExporter do, over one kept-alive connection. The request path
records a span as a plain tuple (otlp_wire.SpanData), about 1 µs; the export thread writes a whole batch at once
(otlp_wire.SpanWriter). Built as opentelemetry-proto messages one request at a time, a sampled request's spans cost
the serving worker far more than they did in a tight loop: cold code between the 99 requests that run none of it
(bench/README.md, "Tracing's cost").

The standard variables it reads (the SDK's names and defaults): OTEL_BSP_SCHEDULE_DELAY (ms, 5000),
OTEL_BSP_MAX_QUEUE_SIZE (2048), OTEL_BSP_MAX_EXPORT_BATCH_SIZE (512), OTEL_EXPORTER_OTLP_[TRACES_]HEADERS,
OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT (seconds, 10) and OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION (gzip or none).
"""

from __future__ import annotations

import collections
import gzip
import http.client
import logging
import os
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

from .otlp_wire import SpanData, SpanWriter

log = logging.getLogger(__name__)

RETRIED = frozenset({429, 502, 503, 504})  # the OTLP/HTTP specification's retryable statuses


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


def key_values(value: str) -> dict[str, str]:
    """Comma-separated key=value pairs, each URL-encoded, as OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES
    write them (the OpenTelemetry specification); a pair without '=' or without a key is skipped."""
    found = {}
    for pair in value.split(","):
        key, equals, item = pair.partition("=")
        if equals and key.strip():
            found[urllib.parse.unquote(key.strip())] = urllib.parse.unquote(item.strip())
    return found


def headers_of(value: str) -> dict[str, str]:
    """OTEL_EXPORTER_OTLP_HEADERS, names lower-case."""
    return {key.lower(): item for key, item in key_values(value).items()}


class OtlpExporter:
    """Spans queued by :meth:`add` (from the event loop) leave in batches: every schedule delay, or at once when a
    batch is full. A full queue drops the new spans (as the SDK's processor does) and counts them in ``dropped``."""

    def __init__(self, endpoint: str, resource: Mapping[str, Any], scope: tuple[str, str],
                 environ: Mapping[str, str] = os.environ) -> None:
        self.endpoint = endpoint
        self.delay_s = _positive(environ.get("OTEL_BSP_SCHEDULE_DELAY"), 5000) / 1000
        self.max_queue = int(_positive(environ.get("OTEL_BSP_MAX_QUEUE_SIZE"), 2048))
        self.batch_size = min(int(_positive(environ.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"), 512)), self.max_queue)
        self.timeout_s = _positive(_variable(environ, "TIMEOUT"), 10)
        self.gzip = _variable(environ, "COMPRESSION").strip().lower() == "gzip"
        self.headers = {**headers_of(_variable(environ, "HEADERS")), "content-type": "application/x-protobuf"}
        if self.gzip:
            self.headers["content-encoding"] = "gzip"
        self._writer = SpanWriter(resource, *scope)
        self._connection: http.client.HTTPConnection | None = None  # kept alive between batches
        self._path = "/"
        self._queue: collections.deque[SpanData] = collections.deque()
        self._wake = threading.Condition()
        self._busy = False  # a batch is being sent
        self._stopping = False
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="otlp-export", daemon=True)
        self._thread.start()

    def add(self, spans: list[SpanData]) -> None:
        with self._wake:
            if len(self._queue) + len(spans) > self.max_queue:
                self.dropped += len(spans)
                return
            self._queue.extend(spans)
            if len(self._queue) >= self.batch_size:
                self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._stopping and len(self._queue) < self.batch_size:
                    self._wake.wait(self.delay_s)
                if not self._queue:
                    if self._stopping:
                        return
                    continue
                batch = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
                self._busy = True
            try:
                self._send(batch)
            finally:
                with self._wake:
                    self._busy = False
                    self._wake.notify_all()

    def _send(self, spans: list[SpanData]) -> None:
        """One POST of ``spans``, retried within the timeout on a retryable answer or a broken connection (at once
        when a kept-alive connection turns out closed); a batch not sent is logged."""
        body = self._writer.request(spans)
        if self.gzip:
            body = gzip.compress(body)
        deadline, pause = time.monotonic() + self.timeout_s, 1.0
        while True:
            reused = self._connection is not None
            try:
                status = self._post(body, max(0.1, deadline - time.monotonic()))
                if 200 <= status < 300:
                    return
                retried, reason = status in RETRIED, f"HTTP {status}"
            except (OSError, http.client.HTTPException, ValueError) as error:  # refused, reset, timed out, a bad URL
                self._close()
                if reused:
                    continue  # the endpoint closed an idle connection: a new one, now
                retried, reason = True, str(error) or type(error).__name__
            if not retried or time.monotonic() + pause > deadline:
                log.warning("spans not exported (%d): %s", len(spans), reason)
                return
            time.sleep(pause)
            pause *= 2

    def _post(self, body: bytes, timeout_s: float) -> int:
        """The answer's status; the connection stays open for the next batch."""
        if self._connection is None:
            url = urllib.parse.urlsplit(self.endpoint)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ValueError(f"not an http(s) URL: {self.endpoint!r}")
            kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
            self._connection = kind(url.hostname, url.port, timeout=timeout_s)
            self._path = url.path or "/"
            if url.query:
                self._path += "?" + url.query
        connection = self._connection
        connection.timeout = timeout_s
        if connection.sock is not None:
            connection.sock.settimeout(timeout_s)
        connection.request("POST", self._path, body, self.headers)
        answer = connection.getresponse()
        answer.read()
        return answer.status

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def flush(self, timeout_ms: int = 30000) -> bool:
        """Send what is queued now; True when it left within ``timeout_ms``."""
        deadline = time.monotonic() + timeout_ms / 1000
        with self._wake:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._wake.notify_all()  # a partial batch: the thread sends it at once
                self._wake.wait(min(left, 0.05))
        return True

    def shutdown(self, timeout_ms: int = 2000) -> None:
        """What is queued goes (for at most ``timeout_ms``), then the thread ends."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        self._thread.join(timeout_ms / 1000)
        if not self._thread.is_alive():
            self._close()
