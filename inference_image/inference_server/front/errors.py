"""Every error is JSON: {"error": {"code": ..., "message": ...}} with a 4xx/5xx status, never an HTML page."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ExceptionHandler

log = logging.getLogger(__name__)

STATUS_CODES = {
    400: "invalid_json",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    500: "internal_error",
    503: "unavailable",
    504: "timeout",
}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, dict(headers or {})


def not_ready(reason: str) -> ApiError:
    return ApiError(503, "not_ready", f"the model is not ready: {reason}", {"Retry-After": "5"})


def draining() -> ApiError:
    return ApiError(503, "draining", "the server is shutting down; retry on another instance", {"Retry-After": "1"})


def overloaded(detail: str) -> ApiError:
    return ApiError(503, "overloaded", f"the server is at capacity ({detail})", {"Retry-After": "1"})


def model_unavailable() -> ApiError:
    return ApiError(503, "model_unavailable", "the model failed; this instance is being replaced", {"Retry-After": "1"})


def error_body(code: str, message: str, details: list[dict[str, Any]] | None = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    return orjson.dumps({"error": error})


def error_response(
    status: int,
    code: str,
    message: str,
    headers: Mapping[str, str] | None = None,
    details: list[dict[str, Any]] | None = None,
) -> Response:
    return Response(
        error_body(code, message, details),
        status_code=status,
        headers=dict(headers or {}),
        media_type="application/json",
    )


def _validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    # Without "input": the offending text could be megabytes long, or private.
    return [
        {"loc": [str(part) for part in err.get("loc", ())], "type": err.get("type", ""), "msg": err.get("msg", "")}
        for err in exc.errors()
    ]


async def _api_error(request: Request, exc: ApiError) -> Response:
    return error_response(exc.status, exc.code, exc.message, exc.headers)


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    errors = exc.errors()
    if any(err.get("type") == "json_invalid" for err in errors):
        return error_response(400, "invalid_json", "the body is not valid JSON")
    if any(err.get("type") == "missing" and tuple(err.get("loc", ())) == ("body",) for err in errors):
        return error_response(400, "invalid_json", "the body is empty; send a JSON object")
    return error_response(
        422, "invalid_request", "the request does not match the schema", details=_validation_details(exc)
    )


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    code = STATUS_CODES.get(exc.status_code, "error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    if exc.status_code == 404:
        message = f"no route {request.url.path}"
    elif exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    return error_response(exc.status_code, code, message, exc.headers)


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    log.error("unhandled error", exc_info=exc)
    return error_response(500, "internal_error", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    # Starlette types every handler as taking Exception, though it calls each only with the class it is registered for.
    app.add_exception_handler(ApiError, cast(ExceptionHandler, _api_error))
    app.add_exception_handler(RequestValidationError, cast(ExceptionHandler, _validation_error))
    app.add_exception_handler(StarletteHTTPException, cast(ExceptionHandler, _http_error))
    app.add_exception_handler(Exception, _unexpected_error)
