"""Each protocol's error body. The server's errors are {"error": {"code", "message", "details"?}} wherever they
arise (routes, validation, the predict gate, 404s); this middleware rewrites them for the protocol of the path:

- /v1/... (OpenAI): {"error": {"message", "type", "param", "code"}}, and schema violations are 400, as OpenAI
  answers them (its clients raise BadRequestError);
- /v2/... (Open Inference Protocol): {"error": "<message>"}, schema violations 400 as Triton answers them.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

OPENAI, OIP = "openai", "oip"


def openai_type(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 429:
        return "rate_limit_error"
    return "server_error" if status >= 500 else "invalid_request_error"


def openai_body(status: int, message: str, param: str | None = None, code: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": openai_type(status), "param": param, "code": code}})


def openai_error(status: int, message: str, *, param: str | None = None, code: str | None = None) -> Response:
    return Response(openai_body(status, message, param, code), status_code=status, media_type="application/json")


def _param(details: Any) -> str | None:
    if isinstance(details, list) and details and isinstance(details[0], dict):
        loc = [str(part) for part in details[0].get("loc", []) if str(part) != "body"]
        return ".".join(loc) or None
    return None


def rewrite(protocol: str, status: int, body: bytes) -> tuple[int, bytes] | None:
    """(status, body) in the protocol's shape, or None to leave the response as it is."""
    try:
        doc = orjson.loads(body)
        error = doc["error"]
        code, message = error["code"], error["message"]
        if "type" in error:
            return None  # already in OpenAI's shape
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None  # already in the protocol's shape, or not an error body of ours
    details = error.get("details")
    if status == 422:
        status = 400
    if details:
        message = f"{message}: " + "; ".join(
            f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg', '')}" for d in details if isinstance(d, dict)
        )
    if protocol == OPENAI:
        return status, openai_body(status, message, _param(details), code)
    return status, orjson.dumps({"error": message})


class ProtocolErrorMiddleware:
    def __init__(self, app: ASGIApp, model_name: str) -> None:
        self.app = app
        self.prefixes = {OPENAI: ("/v1/", f"/{model_name}/v1/"), OIP: ("/v2/", f"/{model_name}/v2/")}
        self.exact = {OIP: ("/v2", f"/{model_name}/v2")}

    def protocol(self, path: str) -> str | None:
        for protocol, prefixes in self.prefixes.items():
            if path.startswith(prefixes) or path in self.exact.get(protocol, ()):
                return protocol
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        protocol = self.protocol(scope["path"]) if scope["type"] == "http" else None
        if protocol is None:
            return await self.app(scope, receive, send)
        start: Message | None = None
        chunks: list[bytes] = []

        async def rewriting_send(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                if message["status"] < 400:
                    return await send(message)
                start = message
                return None
            if start is None:
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return None
            status, body = start["status"], b"".join(chunks)
            rewritten = rewrite(protocol, status, body)
            if rewritten is not None:
                status, body = rewritten
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, rewriting_send)


def drop_rewritten_statuses(app) -> None:
    """The OpenAPI document of /v1 and /v2 routes without FastAPI's default 422, which they answer as 400."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            doc = build()
            for path, operations in doc.get("paths", {}).items():
                if path.startswith(("/v1/", "/v2")):
                    for operation in operations.values():
                        operation.get("responses", {}).pop("422", None)
        assert app.openapi_schema is not None  # build() stores the document it returns
        return app.openapi_schema

    app.openapi = openapi
