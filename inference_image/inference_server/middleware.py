"""Plain ASGI middleware (cheaper than BaseHTTPMiddleware): the per-request log line, and the gate in front of the
predict routes (API key, shedding, content type and body size, all before the body is read)."""

from __future__ import annotations

import hmac
import logging
import re
import time
import uuid
from collections.abc import Collection
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import emf
from . import metric_names as m
from .errors import ApiError, error_body
from .service import ModelService

access_log = logging.getLogger("inference_server.access")
LOG_FIELDS = "inference_server.log"  # scope key: a dict the routes add log fields to
_TRACE_ROOT = re.compile(rb"(?:^|;)\s*Root=([A-Za-z0-9-]{1,64})")


def request_id(headers: list[tuple[bytes, bytes]]) -> str:
    for name, value in headers:
        if name == b"x-amzn-trace-id":
            match = _TRACE_ROOT.search(value)
            if match:
                return match.group(1).decode()
    return uuid.uuid4().hex


class RequestLogMiddleware:
    """One JSON line per request. For a successful predict request the line is also an EMF document carrying
    its timings; failures are left out of the latency metrics (a shed request's fast 503 would hide overload) and
    are counted by the periodic metrics line instead."""

    def __init__(self, app: ASGIApp, service: ModelService, predict_paths: Collection[str],
                 quiet_paths: Collection[str]) -> None:
        self.app, self.service = app, service
        self.predict_paths, self.quiet_paths = frozenset(predict_paths), frozenset(quiet_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        rid = request_id(scope["headers"])
        fields: dict[str, Any] = {}
        scope[LOG_FIELDS] = fields
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self._log(scope, rid, status, time.perf_counter() - started, fields)

    def _log(self, scope: Scope, rid: str, status: int, seconds: float, fields: dict[str, Any]) -> None:
        path = scope["path"]
        s = self.service.settings
        line = {"request_id": rid, "method": scope["method"], "path": path, "status": status,
                "total_ms": round(seconds * 1000, 3), "model": s.model_name, "model_version": s.model_version,
                **fields}
        if path in self.quiet_paths:
            access_log.debug("request", extra={"fields": line})
            return
        if path not in self.predict_paths or scope["method"] != "POST":
            access_log.info("request", extra={"fields": line})
            return
        self.service.metrics.observe_request(path.rsplit("/", 1)[-1], status, seconds)
        if status != 200:
            access_log.info("request", extra={"fields": line})
            return
        values = {m.REQUEST_LATENCY: line["total_ms"]}
        if "queue_wait_ms" in fields:
            values[m.QUEUE_WAIT] = fields["queue_wait_ms"]
            values[m.INFERENCE_TIME] = fields["inference_ms"]
        access_log.info("request", extra={"fields": emf.document(s.deployment_env, s.model_name, values, line)})


async def send_error(send: Send, error: ApiError) -> None:
    headers = [(b"content-type", b"application/json")]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": error_body(error.code, error.message)})


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


class PredictGateMiddleware:
    """Checks a predict request before its body is read: API key (401), shedding (503), content type (415),
    Content-Length (413); then counts streamed body bytes (413) and tracks it as in flight for draining."""

    def __init__(self, app: ASGIApp, service: ModelService, predict_paths: Collection[str],
                 any_content_type_paths: Collection[str] = ()) -> None:
        self.app, self.service = app, service
        self.predict_paths = frozenset(predict_paths)
        # Binary bodies (the Open Inference Protocol's binary tensor data): the route parses them itself.
        self.any_content_type_paths = frozenset(any_content_type_paths)
        self.api_keys = [key.encode() for key in service.settings.api_keys]
        self.max_body = service.settings.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self.predict_paths:
            return await self.app(scope, receive, send)
        try:
            self._check(scope, json_only=scope["path"] not in self.any_content_type_paths)
        except ApiError as error:
            return await send_error(send, error)
        limit, received = self.max_body, 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise HTTPException(413, f"the body is over {limit} bytes")
            return message

        self.service.in_flight += 1
        try:
            await self.app(scope, counting_receive, send)
        finally:
            self.service.in_flight -= 1

    def _check(self, scope: Scope, json_only: bool = True) -> None:
        api_key = content_type = content_length = None
        for name, value in scope["headers"]:
            if name == b"x-api-key":
                api_key = value
            elif name == b"authorization" and api_key is None and value[:7].lower() == b"bearer ":
                api_key = value[7:].strip()  # what OpenAI clients send
            elif name == b"content-type":
                content_type = value
            elif name == b"content-length":
                content_length = value
        if self.api_keys:
            valid = False
            for key in self.api_keys:  # no early exit: compare against every key
                valid |= api_key is not None and hmac.compare_digest(api_key, key)
            if not valid:
                raise ApiError(401, "unauthorized", "a valid x-api-key (or Authorization: Bearer) header is required")
        self.service.admit()
        if json_only and (content_type is None or not _is_json(content_type)):
            raise ApiError(415, "unsupported_media_type", "send the body as application/json")
        if not json_only and content_type is not None and not (
                _is_json(content_type) or content_type.split(b";", 1)[0].strip().lower() == b"application/octet-stream"):
            raise ApiError(415, "unsupported_media_type", "send application/json, or binary tensor data as "
                                                          "application/octet-stream")
        if content_length is not None:
            if not content_length.isdigit():
                raise ApiError(400, "invalid_content_length", "Content-Length is not a number")
            if int(content_length) > self.max_body:
                raise ApiError(413, "payload_too_large", f"the body is over {self.max_body} bytes")
