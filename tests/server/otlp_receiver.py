"""A real OTLP/HTTP trace receiver on a free port, in a thread of the test process: it decodes each POST /v1/traces
body as an ExportTraceServiceRequest (opentelemetry-proto) and keeps the spans, as a collector would receive them.
HTTP/1.1, connections kept alive as a collector keeps them (or dropped after each answer, unannounced, as an idle
timeout drops them)."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

TRACES_PATH = "/v1/traces"


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # 32 hex digits
    span_id: str
    parent_span_id: str  # "" for a trace's first span
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(any_value) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind is not None else None


def _attributes(pairs) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@dataclass
class Receiver:
    endpoint: str  # the base URL (OTEL_EXPORTER_OTLP_ENDPOINT)
    spans: list[ReceivedSpan] = field(default_factory=list)
    posts: list[str] = field(default_factory=list)  # each request's path
    headers: list[dict[str, str]] = field(default_factory=list)  # each request's headers, names lower-case
    refuse: list[int] = field(default_factory=list)  # statuses to answer, one per request, before accepting
    clients: list[tuple[str, int]] = field(default_factory=list)  # each request's client address: its connection
    drop_connections: bool = False  # close each connection after its answer, without saying so
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        received = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.start_time_unix_nano,
                            span.end_time_unix_nano,
                            _attributes(span.attributes),
                            resource,
                        )
                    )
        with self.lock:
            self.spans.extend(received)

    def by_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            receiver.posts.append(self.path)
            receiver.clients.append(self.client_address)
            self.close_connection = receiver.drop_connections
            receiver.headers.append({name.lower(): value for name, value in self.headers.items()})
            if receiver.refuse:
                self.send_response(receiver.refuse.pop(0))
                self.send_header("content-length", "0")
                self.end_headers()
                return
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != TRACES_PATH or self.headers.get("content-type") != "application/x-protobuf":
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            receiver.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
