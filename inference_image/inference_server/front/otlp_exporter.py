"""Finished spans to an OTLP/HTTP endpoint as protobuf, in batches, on one daemon thread per worker: what the
OpenTelemetry SDK's BatchSpanProcessor and OTLPSpanExporter do, for spans built directly as protobuf messages.
A sampled request's seven spans cost about 60 µs so, against about 250 µs through the SDK's span objects and its
per-attribute encoding (bench/README.md, "Tracing's cost").

The standard variables it reads (the SDK's names and defaults): OTEL_BSP_SCHEDULE_DELAY (ms, 5000),
OTEL_BSP_MAX_QUEUE_SIZE (2048), OTEL_BSP_MAX_EXPORT_BATCH_SIZE (512), OTEL_EXPORTER_OTLP_[TRACES_]HEADERS,
OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT (seconds, 10) and OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION (gzip or none).
"""

from __future__ import annotations

import collections
import gzip
import logging
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

log = logging.getLogger(__name__)

RETRIED = frozenset({429, 502, 503, 504})  # the OTLP/HTTP specification's retryable statuses


def attribute(key: str, value: Any) -> KeyValue:
    """One attribute as OTLP writes it: bool, int, float or string."""
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def attributes(values: Mapping[str, Any] | None) -> list[KeyValue]:
    return [attribute(key, value) for key, value in values.items()] if values else []


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
        self._resource = Resource(attributes=attributes(resource))
        self._scope = InstrumentationScope(name=scope[0], version=scope[1])
        self._queue: collections.deque[Span] = collections.deque()
        self._wake = threading.Condition()
        self._busy = False  # a batch is being sent
        self._stopping = False
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="otlp-export", daemon=True)
        self._thread.start()

    def add(self, spans: list[Span]) -> None:
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

    def _send(self, spans: list[Span]) -> None:
        """One POST of ``spans``, retried within the timeout on a retryable answer; a batch not sent is logged."""
        body = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
            resource=self._resource, scope_spans=[ScopeSpans(scope=self._scope, spans=spans)])]).SerializeToString()
        if self.gzip:
            body = gzip.compress(body)
        deadline, pause = time.monotonic() + self.timeout_s, 1.0
        while True:
            request = urllib.request.Request(self.endpoint, data=body, headers=self.headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=max(0.1, deadline - time.monotonic())) as answer:
                    answer.read()
                return
            except urllib.error.HTTPError as error:
                retried = error.code in RETRIED
                reason = f"HTTP {error.code}"
            except (OSError, ValueError) as error:  # refused, reset, timed out, a bad URL
                retried, reason = True, str(error)
            if not retried or time.monotonic() + pause > deadline:
                log.warning("spans not exported (%d): %s", len(spans), reason)
                return
            time.sleep(pause)
            pause *= 2

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
