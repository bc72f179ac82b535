"""An OTLP/HTTP trace sink for the tracing comparison (bench/tracing_cost.py), in a process of its own so that decoding
the exports takes nothing from the load generator: POST /v1/traces is decoded as an ExportTraceServiceRequest and its
spans counted; GET /count answers {"spans": n, "traces": n}. Prints its port, then serves until killed.

    python -m bench.otlp_sink
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

_counts = {"spans": 0, "traces": 0}  # traces: spans that start a trace here (a request's span, no parent)
_lock = threading.Lock()
_ANSWER = ExportTraceServiceResponse().SerializeToString()


class _Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # connections kept alive, as a collector keeps them

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers.get("content-length", "0"))))
        spans = [span for resource in request.resource_spans for scope in resource.scope_spans for span in scope.spans]
        with _lock:
            _counts["spans"] += len(spans)
            _counts["traces"] += sum(1 for span in spans if not span.parent_span_id)
        self._answer(_ANSWER, "application/x-protobuf")

    def do_GET(self) -> None:  # noqa: N802
        with _lock:
            body = orjson.dumps(_counts)
        self._answer(body, "application/json")

    def _answer(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
