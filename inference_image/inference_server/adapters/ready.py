"""GET /ready on ADAPTER_READY_PORT: 200 when the sync's last status is ready, else 503; the body (JSON) names the
server's state, the adapters still missing and those failed or refused, either way. The service's target group checks
it, so a task takes traffic only once its server serves every registered adapter. Anything else is a 404."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .sync import Status

READY_PATH = "/ready"


def ready_server(host: str, port: int, status: Callable[[], Status]) -> ThreadingHTTPServer:
    """A started server (a daemon thread) answering from ``status()``; shut it down with .shutdown()."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?", 1)[0] != READY_PATH:
                self._answer(404, {"error": f"not found: GET {READY_PATH}"})
                return
            current = status()
            self._answer(200 if current.ready else 503, current.to_json())

        def _answer(self, code: int, body: dict) -> None:
            raw = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
            pass  # a health check every few seconds is not worth a log line

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="adapter-ready", daemon=True).start()
    return server
