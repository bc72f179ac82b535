"""The HTTP API. Every route is served at /<route> and again at /<model-name>/<route>, so ALB path routing
needs no rewrite; the OpenAPI document lists the short form."""

import copy
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import APIRouter, FastAPI, Security
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.security import APIKeyHeader
from starlette.responses import HTMLResponse, Response

from .. import __version__
from .errors import install_error_handlers
from .metrics import PROMETHEUS_CONTENT_TYPE
from .middleware import FrontDoor
from .protocols.errors import ProtocolErrorMiddleware, drop_rewritten_statuses
from .protocols.oip import add_oip_routes
from .protocols.openai import add_openai_routes
from .schemas import ErrorResponse, HealthResponse, ReadyResponse, Schemas, build_schemas
from .service import WorkerService

_JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def _error(description: str, **extra: Any) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description, **extra}


_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "string"}}}


def _predict_errors(with_auth: bool) -> dict[int | str, dict[str, Any]]:
    errors: dict[int | str, dict[str, Any]] = {
        400: _error("Malformed JSON, an empty body, a bad Content-Length or a bad X-Request-Timeout-Ms"),
        413: _error("The body is over MAX_BODY_BYTES"),
        415: _error("The body is not application/json"),
        422: _error(
            "The JSON does not match the schema (empty or oversize text, too many texts, extra fields, "
            "wrong types) or the model cannot take the input"
        ),
        500: _error("Inference failed"),
        503: _error(
            "Loading, draining, the queue is full or would make the request miss its deadline, or the model failed",
            headers=_RETRY_AFTER,
        ),
        504: _error("No result within REQUEST_TIMEOUT_S"),
    }
    if with_auth:
        errors[401] = _error("Missing or wrong x-api-key")
    return dict(sorted(errors.items()))


def json_response(content: Any) -> Response:
    return Response(orjson.dumps(content, option=_JSON_OPTIONS), media_type="application/json")


def _add_docs_routes(app: FastAPI, prefix: str, title: str) -> None:
    """OpenAPI JSON and Swagger UI at {prefix}/openapi.json and {prefix}/docs; under the model prefix the document
    names that prefix as its server, so "Try it out" goes through the ALB's path rule."""
    cached: list[bytes] = []

    async def openapi_json() -> Response:
        if not cached:
            doc = copy.deepcopy(app.openapi())
            if prefix:
                doc["servers"] = [{"url": prefix}]
            cached.append(orjson.dumps(doc))
        return Response(cached[0], media_type="application/json")

    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=f"{prefix}/openapi.json", title=title)

    app.add_api_route(f"{prefix}/openapi.json", openapi_json, include_in_schema=False)
    app.add_api_route(f"{prefix}/docs", docs, include_in_schema=False)


_ANSWERED_BY_FRONT_DOOR = RuntimeError("FrontDoor answers this route before FastAPI sees it")


class InferenceApp(FastAPI):
    """FastAPI behind the FrontDoor (inside the protocols' error rewriting): the hot routes never enter FastAPI's
    middleware stack."""

    front_door: ProtocolErrorMiddleware

    async def __call__(self, scope, receive, send) -> None:
        await self.front_door(scope, receive, send)

    async def serve_rest(self, scope, receive, send) -> None:
        await super().__call__(scope, receive, send)


def _documented_routes(service: WorkerService, schemas: Schemas, auth: list[Any]) -> APIRouter:
    """The probes' and the predict routes, as the OpenAPI document shows them."""
    settings = service.settings
    PredictRequest, BatchRequest = schemas.predict_request, schemas.batch_request
    router = APIRouter()

    @router.get(
        "/health",
        response_model=HealthResponse,
        tags=["probes"],
        summary="Liveness: the process is up (never shed, never behind auth)",
    )
    async def health() -> Response:
        raise _ANSWERED_BY_FRONT_DOOR

    @router.get(
        "/ready",
        response_model=ReadyResponse,
        tags=["probes"],
        summary="Readiness: model loaded, warmed up and a recent test inference succeeded",
        responses={503: _error("Loading, draining, or no recent successful test inference")},
    )
    async def ready() -> Response:
        raise _ANSWERED_BY_FRONT_DOOR

    @router.get(
        "/metrics",
        tags=["probes"],
        summary="Prometheus metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    async def metrics() -> Response:
        return Response(service.metrics.prometheus_text(), media_type=PROMETHEUS_CONTENT_TYPE)

    # The predict routes, /health and /ready are answered by FrontDoor (middleware.py), which every request
    # passes first (InferenceApp.__call__); these definitions only document them in the OpenAPI document.
    @router.post(
        "/predict",
        response_model=schemas.predict_response,
        tags=["predict"],
        dependencies=auth,
        summary="Predict one text",
        responses=_predict_errors(bool(auth)),
    )
    async def predict(body: PredictRequest) -> Response:  # type: ignore[valid-type]
        raise _ANSWERED_BY_FRONT_DOOR

    @router.post(
        "/predict/batch",
        response_model=schemas.batch_response,
        tags=["predict"],
        dependencies=auth,
        summary=f"Predict up to {settings.max_client_batch} texts",
        responses=_predict_errors(bool(auth)),
    )
    async def predict_batch(body: BatchRequest) -> Response:  # type: ignore[valid-type]
        raise _ANSWERED_BY_FRONT_DOOR

    return router


def create_app(service: WorkerService) -> FastAPI:
    settings = service.settings
    schemas = build_schemas(settings, service.prediction_model)
    PredictRequest, BatchRequest = schemas.predict_request, schemas.batch_request
    api_key = APIKeyHeader(
        name="x-api-key", auto_error=False, description="One of API_KEYS (also accepted as Authorization: Bearer <key>)"
    )
    # The key itself is checked by FrontDoor before the body is read; this documents it.
    auth = [Security(api_key)] if settings.api_keys else []
    model = settings.model_name

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.start(on_loop=True)  # idempotent; whoever created the service stops it (test clients restart lifespans)
        yield

    app = InferenceApp(
        title=f"{model} inference",
        version=__version__,
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        redirect_slashes=False,
        description='Dynamic-batching model server. Errors are `{"error": {"code": ..., "message": ...}}`.',
    )
    router = _documented_routes(service, schemas, auth)
    app.include_router(router)
    app.include_router(router, prefix=f"/{model}", include_in_schema=False)
    embedding_paths = add_openai_routes(app, service, [f"/{model}"], auth)
    infer_paths = add_oip_routes(app, service, [f"/{model}"], auth)
    drop_rewritten_statuses(app)

    if settings.docs_enabled:
        for prefix in ("", f"/{model}"):
            _add_docs_routes(app, prefix, title=f"{model} inference")

    install_error_handlers(app)
    # The protocols' routes pass FrontDoor's gate (key, shedding, body size) on their way to FastAPI; their errors
    # leave in the protocol's own error body.
    gated = {**{path: "embeddings" for path in embedding_paths}, **{path: "infer" for path in infer_paths}}
    front_door = FrontDoor(
        app.serve_rest,
        service=service,
        model_prefix=f"/{model}",
        predict_request=PredictRequest,
        batch_request=BatchRequest,
        gated_paths=gated,
        any_content_type_paths=infer_paths,
    )
    app.front_door = ProtocolErrorMiddleware(front_door, model_name=model)
    return app
