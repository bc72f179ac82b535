"""The front door, plain ASGI: the predict routes, /health and /ready are answered here without FastAPI (the hot
path: gate, body, validation, prediction, response), everything else goes on to the FastAPI app; the protocols'
routes (gated_paths: /v1/embeddings, /v2/.../infer) pass the same gate on their way there. With API keys set,
every path but the probes (/health, /ready, /metrics: for the target group, the container health check and a
local scrape, never forwarded by the load balancer) needs a valid key first, known route or not, so a route added
later is private until listed in OPEN_ROUTES. Every request is counted in the interval metrics, by key name too;
an access log line is written for errors, slow requests (each up to a rate: access_log.py) and a sample of the
rest."""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .access_log import AccessLog
from .errors import ApiError, error_body, not_ready, overloaded
from .service import WorkerService
from .trace_context import request_id
from .tracing import TRACE

if TYPE_CHECKING:
    from .spans import RequestTrace

access_log = logging.getLogger("inference_server.access")
log = logging.getLogger(__name__)
LOG_FIELDS = "inference_server.log"  # scope key: a dict the routes add log fields to
_JSON_HEADERS = [(b"content-type", b"application/json")]
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
# Answered without a key (below / and /<model>): what the target group, the container health check and a local
# metrics scrape need. The load balancer's rule forwards none of them.
OPEN_ROUTES = ("/health", "/ready", "/metrics")
NO_KEY = "-"  # the key-name label of requests without a valid key (no key name can start with '-')
SHED = "shed"  # a log field: the request was shed (no access log line)
TIMEOUT_HEADER = b"x-request-timeout-ms"  # the client's deadline, milliseconds from arrival
_LONGEST_MS = 1e12


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def _timeout_s(raw: bytes) -> float:
    """X-Request-Timeout-Ms as seconds: a non-negative number of milliseconds (0: never admitted)."""
    try:
        ms = float(raw)
    except ValueError:
        ms = -1.0
    if not 0 <= ms <= _LONGEST_MS:  # NaN and infinity too
        raise ApiError(400, "invalid_timeout", "X-Request-Timeout-Ms is not a non-negative number of milliseconds")
    return ms / 1000


def _validation_error(exc: ValidationError) -> ApiError:
    details = [
        {
            "loc": ["body", *(str(part) for part in err.get("loc", ()))],
            "type": err.get("type", ""),
            "msg": err.get("msg", ""),
        }
        for err in exc.errors()
    ]
    error = ApiError(422, "invalid_request", "the request does not match the schema")
    error.details = details  # type: ignore[attr-defined]
    return error


UNAUTHORIZED = ApiError(401, "unauthorized", "a valid x-api-key (or Authorization: Bearer) header is required")


class _IdentifiedResponse:
    """Passes the app's response on with the request id header; status is what it started (500 until then)."""

    __slots__ = ("_send", "_rid_header", "status")

    def __init__(self, send: Send, rid_header: tuple[bytes, bytes]) -> None:
        self._send, self._rid_header, self.status = send, rid_header, 500

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            message["headers"] = [*message.get("headers", ()), self._rid_header]
        await self._send(message)


class FrontDoor:
    def __init__(
        self,
        app: ASGIApp,
        service: WorkerService,
        model_prefix: str,
        predict_request: type[BaseModel],
        batch_request: type[BaseModel],
        gated_paths: Mapping[str, str] | None = None,
        any_content_type_paths: Collection[str] = (),
    ) -> None:
        self.app, self.service = app, service
        self.tracing = service.tracing  # None: nothing traced
        # path -> the endpoint label of its metrics; bodies of any_content_type_paths may be binary.
        self.gated = dict(gated_paths or {})
        self.any_content_type = frozenset(any_content_type_paths)
        s = service.settings
        self.model, self.version = s.model_name, s.model_version
        self.api_keys = [(name, key.encode()) for name, key in s.api_keys]
        self.max_body, self.max_chars, self.max_batch = s.max_body_bytes, s.max_text_chars, s.max_client_batch
        self.predict_request, self.batch_request = predict_request, batch_request
        self.access = AccessLog(s.access_log_sample, s.slow_request_ms)
        service.take_suppressed = self.access.take_suppressed
        self.routes: dict[str, str] = {}
        for prefix in ("", model_prefix):
            self.routes.update(
                {
                    f"{prefix}/predict": "predict",
                    f"{prefix}/predict/batch": "batch",
                    f"{prefix}/health": "health",
                    f"{prefix}/ready": "ready",
                }
            )
        self.open = frozenset(f"{prefix}{route}" for prefix in ("", model_prefix) for route in OPEN_ROUTES)
        self.quiet = (
            frozenset(p for p, r in self.routes.items() if r in ("health", "ready"))
            | frozenset(("/metrics", f"{model_prefix}/metrics"))
            | frozenset(f"{prefix}/v2/health/{probe}" for prefix in ("", model_prefix) for probe in ("live", "ready"))
        )
        self._shed_starts: dict[str, tuple[list[tuple[bytes, bytes]], bytes]] = {}
        self._ready_body = orjson.dumps({"status": "ready"})  # says no more than the status: nothing to learn from it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        rid = request_id(scope["headers"])
        rid_header = (b"x-request-id", rid.encode())
        path, method = scope["path"], scope["method"]
        route = self.routes.get(path)
        fields: dict[str, Any] = {}
        status = 500
        key_name = None
        trace: RequestTrace | None = None
        if self.tracing is not None and method == "POST" and (route in ("predict", "batch") or path in self.gated):
            trace = self.tracing.start(scope["headers"], method, path, rid)
        try:
            if self.api_keys and path not in self.open:
                key_name = self._key_name(scope["headers"])
                if key_name is None:
                    status = await self._error(send, UNAUTHORIZED, rid_header)
                    return
                fields["api_key"] = key_name
            if route in ("predict", "batch") and method == "POST":
                status = await self._predict(route, scope, receive, send, rid_header, fields, trace)
                self.service.metrics.observe_request(
                    route if route == "predict" else "batch", status, time.perf_counter() - started
                )
            elif route is None and method == "POST" and path in self.gated:
                status = await self._gated(scope, receive, send, rid_header, fields, trace)
                self.service.metrics.observe_request(self.gated[path], status, time.perf_counter() - started)
            elif route == "health" and method == "GET":
                status = await self._respond(send, 200, b'{"status":"ok"}', rid_header)
            elif route == "ready" and method == "GET":
                reason = self.service.readiness()
                if reason is None:
                    status = await self._respond(send, 200, self._ready_body, rid_header)
                else:
                    status = await self._error(send, not_ready(reason), rid_header)
            else:
                scope[LOG_FIELDS] = fields
                response = _IdentifiedResponse(send, rid_header)
                try:
                    await self.app(scope, receive, response.send)
                finally:
                    status = response.status
        finally:
            if trace is not None:
                trace.end(status)
            ms = (time.perf_counter() - started) * 1000
            if self.api_keys and path not in self.open:
                self.service.metrics.observe_key(key_name or NO_KEY, status)
            if path not in self.quiet and SHED not in fields and self.access.wants(status, ms):
                access_log.info(
                    "request",
                    extra={
                        "fields": {
                            "request_id": rid,
                            "method": method,
                            "path": path,
                            "status": status,
                            "total_ms": round(ms, 3),
                            "model": self.model,
                            "model_version": self.version,
                            **fields,
                        }
                    },
                )

    async def _gated(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        rid_header: tuple[bytes, bytes],
        fields: dict[str, Any],
        trace: RequestTrace | None,
    ) -> int:
        """The gate of the predict routes, then the FastAPI route, whose streamed body is counted (413)."""
        _, answered = await self._admit(
            scope, send, rid_header, fields, trace, json_only=scope["path"] not in self.any_content_type
        )
        if answered is not None:
            return answered
        scope[LOG_FIELDS], scope[TRACE] = fields, trace
        received, limit = 0, self.max_body

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise HTTPException(413, f"the body is over {limit} bytes")
            return message

        response = _IdentifiedResponse(send, rid_header)
        self.service.in_flight += 1
        try:
            await self.app(scope, counting_receive, response.send)
        finally:
            self.service.in_flight -= 1
        return response.status

    async def _respond(
        self,
        send: Send,
        status: int,
        body: bytes,
        rid_header: tuple[bytes, bytes],
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> int:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            rid_header,
            *(extra or ()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return status

    async def _error(self, send: Send, error: ApiError, rid_header: tuple[bytes, bytes]) -> int:
        extra = [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
        body = error_body(error.code, error.message, getattr(error, "details", None))
        return await self._respond(send, error.status, body, rid_header, extra)

    async def _predict(
        self,
        route: str,
        scope: Scope,
        receive: Receive,
        send: Send,
        rid_header: tuple[bytes, bytes],
        fields: dict[str, Any],
        trace: RequestTrace | None,
    ) -> int:
        service = self.service
        deadline, answered = await self._admit(scope, send, rid_header, fields, trace)
        if answered is not None:
            return answered
        service.in_flight += 1
        try:
            kind = service.input_kind
            if kind not in (None, "text"):
                raise ApiError(
                    422, "invalid_input", f"{self.model} takes {kind}, not text: use POST /v2/models/{self.model}/infer"
                )
            body = await self._read_body(receive)
            texts = self._texts(route, body)
            fields["items"] = len(texts)
            predictions = await service.predict(texts, fields, deadline=deadline, trace=trace)
            if route == "predict":
                content = {"model": self.model, "version": self.version, "prediction": predictions[0]}
            else:
                content = {"model": self.model, "version": self.version, "predictions": predictions}
            return await self._respond(send, 200, orjson.dumps(content, option=_NUMPY), rid_header)
        except ApiError as error:
            return await self._error(send, error, rid_header)
        except Exception as exc:
            log.error("unhandled error", exc_info=exc)
            return await self._error(send, ApiError(500, "internal_error", "internal server error"), rid_header)
        finally:
            service.in_flight -= 1

    def _key_name(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        """The name of the key the request carries (x-api-key, else Authorization: Bearer), or None. Every key is
        compared, in constant time, whether or not an earlier one matched."""
        api_key = None
        for name, value in headers:
            if name == b"x-api-key":
                api_key = value
            elif name == b"authorization" and api_key is None and value[:7].lower() == b"bearer ":
                api_key = value[7:].strip()  # what OpenAI clients send
        if api_key is None:
            return None
        matched = None
        for name, key in self.api_keys:
            if hmac.compare_digest(api_key, key):
                matched = name
        return matched

    async def _admit(
        self,
        scope: Scope,
        send: Send,
        rid_header: tuple[bytes, bytes],
        fields: dict[str, Any],
        trace: RequestTrace | None,
        json_only: bool = True,
    ) -> tuple[float | None, int | None]:
        """The gate before the body (:meth:`_check`): (the deadline, None) when admitted, else (None, the status of
        the answer sent: the check's error or the shed 503)."""
        try:
            deadline, shed = self._check(scope, json_only=json_only)
        except ApiError as error:
            return None, await self._error(send, error, rid_header)
        if trace is not None:
            trace.admitted(shed)
        if shed is not None:
            return None, await self._shed(send, shed, rid_header, fields)
        return deadline, None

    def _check(self, scope: Scope, json_only: bool = True) -> tuple[float | None, str | None]:
        """Not serving (503), content type (415), Content-Length (400/413), before the body is read (the key was
        checked in __call__); then (deadline, shed): the request's deadline (time.monotonic()) when it set one
        (X-Request-Timeout-Ms, milliseconds from now; REQUEST_TIMEOUT_S at most), else None, and why it is to be
        shed (a full queue, or one its deadline would not survive), else None."""
        content_type = content_length = timeout_ms = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value
            elif name == b"content-length":
                content_length = value
            elif name == TIMEOUT_HEADER:
                timeout_ms = value
        deadline = budget_s = None
        if timeout_ms is not None:
            budget_s = _timeout_s(timeout_ms)
            deadline = time.monotonic() + budget_s
        self.service.check_serving()
        if json_only and (content_type is None or not _is_json(content_type)):
            raise ApiError(415, "unsupported_media_type", "send the body as application/json")
        if (
            not json_only
            and content_type is not None
            and not (
                _is_json(content_type) or content_type.split(b";", 1)[0].strip().lower() == b"application/octet-stream"
            )
        ):
            raise ApiError(
                415,
                "unsupported_media_type",
                "send application/json, or binary tensor data as application/octet-stream",
            )
        if content_length is not None:
            if not content_length.isdigit():
                raise ApiError(400, "invalid_content_length", "Content-Length is not a number")
            if int(content_length) > self.max_body:
                raise ApiError(413, "payload_too_large", f"the body is over {self.max_body} bytes")
        return deadline, self.service.shed_reason(budget_s)

    async def _shed(self, send: Send, reason: str, rid_header: tuple[bytes, bytes], fields: dict[str, Any]) -> int:
        """The 503 of overload: a prepared answer, no body read, no log line (counted in the metrics)."""
        start = self._shed_starts.get(reason)
        if start is None:
            error = overloaded(reason)
            body = error_body(error.code, error.message)
            start = self._shed_starts[reason] = (
                [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *((k.lower().encode(), v.encode()) for k, v in error.headers.items()),
                ],
                body,
            )
        fields[SHED] = True
        await send({"type": "http.response.start", "status": 503, "headers": [*start[0], rid_header]})
        await send({"type": "http.response.body", "body": start[1]})
        return 503

    async def _read_body(self, receive: Receive) -> bytes:
        message = await receive()
        body = message.get("body", b"")
        if not message.get("more_body", False):
            if len(body) > self.max_body:
                raise ApiError(413, "payload_too_large", f"the body is over {self.max_body} bytes")
            return body
        chunks, size = [body], len(body)
        while message.get("more_body", False):
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ApiError(400, "invalid_json", "the client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise ApiError(413, "payload_too_large", f"the body is over {self.max_body} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def _texts(self, route: str, body: bytes) -> list[str]:
        """The request's texts. The fast check accepts only what the pydantic model accepts; anything else is
        judged by the model itself (as FastAPI would: stdlib JSON, then strict validation) for its exact error."""
        if not body:
            raise ApiError(400, "invalid_json", "the body is empty; send a JSON object")
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            obj = None
        else:
            if type(obj) is dict and len(obj) == 1:
                if route == "predict":
                    text = obj.get("text")
                    if type(text) is str and 0 < len(text) <= self.max_chars:
                        return [text]
                else:
                    texts = obj.get("texts")
                    if (
                        type(texts) is list
                        and 0 < len(texts) <= self.max_batch
                        and all(type(t) is str and 0 < len(t) <= self.max_chars for t in texts)
                    ):
                        return texts
        model = self.predict_request if route == "predict" else self.batch_request
        try:
            parsed = json.loads(body)
        except Exception:
            raise ApiError(400, "invalid_json", "the body is not valid JSON") from None
        try:
            # Any: the app's request models, whichever they are, have `text` (predict) and `texts` (batch).
            request: Any = model.model_validate(parsed)
        except ValidationError as exc:
            raise _validation_error(exc) from None
        return [request.text] if route == "predict" else list(request.texts)
