"""What a pool's every request passes before its route, as the single-model server's front door
(front/middleware.py) does, but the probes (the target group's and the container health check's):

- the API key (x-api-key, or Authorization: Bearer), on every path, known route or not, so a route added later is
  private until it is made a probe;
- the drain: once SIGTERM came (front/draining.py calls begin_drain), 503 ``draining`` with Retry-After and
  DRAINING_HEADER, by which a peer that forwarded the request knows to serve it itself (peer_router.py);
- the request's span, when it is sampled (front/spans.py), its status set as the answer starts; the routes add their
  phases and the pool's attributes (app.py);
- the requests in flight, which the drain waits for."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..front.draining import wait_until_answered
from ..front.trace_context import request_id
from ..front.tracing import TRACE

if TYPE_CHECKING:
    from ..front.spans import Tracing

log = logging.getLogger(__name__)
DRAINING_RETRY_AFTER_S = 5  # what a request refused while draining is told: another task serves it by then
DRAINING_HEADER = "x-pool-draining"  # on the 503 of a draining task: the request was refused unread, serve it elsewhere
_DRAINING_MARKS = ((b"retry-after", str(DRAINING_RETRY_AFTER_S).encode()), (DRAINING_HEADER.encode(), b"1"))


async def _refuse(send: Send, status: int, code: str, message: str, headers: Sequence[tuple[bytes, bytes]]) -> None:
    body = orjson.dumps({"error": {"code": code, "message": message}})
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


class Gate:
    def __init__(
        self,
        app: ASGIApp,
        *,
        open_paths: frozenset[str],
        api_keys: tuple[tuple[str, str], ...] = (),
        tracing: Tracing | None = None,
        drain_timeout_s: float = 70.0,
        on_draining_refusal: Callable[[], None] = lambda: None,
    ) -> None:
        self.app = app
        self.open_paths = open_paths  # answered without a key, even while draining: the probes
        self._keys = [key.encode() for _, key in api_keys]
        self.tracing = tracing  # None: nothing traced
        self.drain_timeout_s = drain_timeout_s
        self._on_draining_refusal = on_draining_refusal
        self.draining = False
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            return await self.app(scope, receive, send)
        if self._keys and not self._has_key(scope["headers"]):
            return await _refuse(send, 401, "unauthorized", "missing or wrong x-api-key", [])
        if self.draining:
            self._on_draining_refusal()
            return await _refuse(send, 503, "draining", "this task is stopping; retry", _DRAINING_MARKS)
        method, path = scope["method"], scope["path"]
        trace = None
        if self.tracing is not None and method == "POST":
            trace = self.tracing.start(scope["headers"], method, path, request_id(scope["headers"]))
        scope[TRACE] = trace
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.in_flight += 1
        try:
            await self.app(scope, receive, sending)
        finally:
            self.in_flight -= 1
            if trace is not None:
                trace.end(status)

    def _has_key(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """x-api-key, else Authorization: Bearer; every key compared in constant time."""
        given = b""
        for name, value in headers:
            if name == b"x-api-key":
                given = value
                break
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                given = value[7:].strip()
        return any(hmac.compare_digest(given, key) for key in self._keys)

    # -- draining (front/draining.py) --------------------------------------------------------------------------

    def begin_drain(self) -> None:
        if not self.draining:
            self.draining = True
            log.info("draining", extra={"in_flight": self.in_flight})

    async def wait_drained(self, timeout: float) -> bool:
        """Until the accepted requests have been answered (True), or the timeout (False)."""
        return await wait_until_answered(lambda: self.in_flight, timeout, log)
