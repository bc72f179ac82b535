"""OpenAI-compatible embeddings: POST /v1/embeddings and GET /v1/models, as the official clients, LangChain and
LlamaIndex call them. Errors are OpenAI's {"error": {"message", "type", "param", "code"}} (see protocols.errors).

`dimensions` truncates the embedding and normalises it again (what OpenAI does for its text-embedding-3 models),
allowed only for the sizes in EMBEDDING_DIMENSIONS, since only a model trained for it (Matryoshka) keeps its quality.
"""

import base64
import time
from typing import Annotated, Any, Literal

import numpy as np
import orjson
from fastapi import APIRouter, FastAPI, Path, Request
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, WithJsonSchema, create_model
from starlette.responses import Response

from ..errors import ApiError
from ..middleware import LOG_FIELDS
from ..schemas import _encodable
from ..service import WorkerService
from ..tracing import TRACE
from .errors import openai_error

OWNER = "inference-server"


class OpenAIErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIError(BaseModel):
    error: OpenAIErrorBody


class EmbeddingObject(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str = Field(description="floats, or base64 of little-endian float32 values")


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"]
    data: list[EmbeddingObject]
    model: str
    usage: Usage


class ModelObject(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelObject]


def embeddings_request_model(
    model: str, max_text_chars: int, max_inputs: int, dimensions: tuple[int, ...]
) -> type[BaseModel]:
    text = Annotated[str, StringConstraints(min_length=1, max_length=max_text_chars), AfterValidator(_encodable)]
    # Validated against the model's size in the route (unknown until it loads); documented as the declared sizes.
    sizes = Annotated[
        int | None,
        WithJsonSchema({"anyOf": [{"enum": list(dimensions)}, {"type": "null"}]} if dimensions else {"type": "null"}),
    ]
    return create_model(
        "EmbeddingsRequest",
        __config__=ConfigDict(extra="forbid", strict=True),
        # Types built at run time for create_model: a type checker sees variables.
        input=(
            text | Annotated[list[text], Field(min_length=1, max_length=max_inputs)],  # pyright: ignore[reportOperatorIssue, reportInvalidTypeForm]
            Field(
                description=f"a text, or a list of 1 to {max_inputs} texts (token arrays are not supported)",
                examples=["The food was delicious."],
            ),
        ),
        # Any name is accepted (another gets a 404, model_not_found); the document names the served one.
        model=(Annotated[str, WithJsonSchema({"enum": [model]})], Field(description="the served model's name")),
        encoding_format=(Literal["float", "base64"], "float"),
        dimensions=(
            sizes,
            Field(
                None,
                ge=1,
                description="truncate to one of these sizes (EMBEDDING_DIMENSIONS), or give the model's full size",
            ),
        ),
        user=(str | None, Field(None, max_length=256, description="accepted and ignored")),
    )


def _error(description: str) -> dict[str, Any]:
    return {"model": OpenAIError, "description": description}


def truncate(vectors: np.ndarray, dimensions: int) -> np.ndarray:
    """The first `dimensions` values of each row, L2-normalised again."""
    cut = vectors[:, :dimensions]
    norms = np.linalg.norm(cut, axis=1, keepdims=True)
    return cut / np.maximum(norms, 1e-12)


def encode_vectors(vectors: np.ndarray, encoding_format: str) -> list[Any]:
    if encoding_format == "base64":
        return [base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") for row in vectors]
    return [row.astype(np.float32) for row in vectors]  # orjson writes float32 arrays as JSON numbers


def _add_model_routes(
    router: APIRouter, model: str, created: int, auth: list[Any], unauthorized: dict[int | str, dict[str, Any]]
) -> None:
    """The model list and the model: the one this server serves."""
    model_object = {"id": model, "object": "model", "created": created, "owned_by": OWNER}

    @router.get(
        "/v1/models",
        response_model=ModelList,
        summary="List models (OpenAI-compatible)",
        dependencies=auth,
        responses=unauthorized,
    )
    async def list_models() -> Response:
        return Response(orjson.dumps({"object": "list", "data": [model_object]}), media_type="application/json")

    @router.get(
        "/v1/models/{model_id}",
        response_model=ModelObject,
        summary="Retrieve a model (OpenAI-compatible)",
        dependencies=auth,
        responses=dict(sorted({404: _error("No such model"), **unauthorized}.items())),
    )
    async def retrieve_model(model_id: Annotated[str, Path(json_schema_extra={"enum": [model]})]) -> Response:
        if model_id != model:
            raise ApiError(404, "model_not_found", f"The model `{model_id}` does not exist; this server has `{model}`")
        return Response(orjson.dumps(model_object), media_type="application/json")


def add_openai_routes(app: FastAPI, service: WorkerService, prefixes: list[str], auth: list[Any]) -> list[str]:
    """Add the /v1 routes at each prefix; returns the embeddings paths, for the predict gate."""
    settings = service.settings
    model = settings.model_name
    created = int(time.time())
    EmbeddingsRequest = embeddings_request_model(
        model, settings.max_text_chars, settings.max_client_batch, settings.embedding_dimensions
    )
    router = APIRouter(tags=["openai"])
    errors = {
        400: _error("Invalid request: schema violation, unknown `dimensions`, or a model without embeddings"),
        404: _error("No such model"),
        413: _error("The body is over MAX_BODY_BYTES"),
        415: _error("The body is not application/json"),
        500: _error("Inference failed"),
        503: _error("Loading, draining, the queue is full, or the model failed"),
        504: _error("No result within REQUEST_TIMEOUT_S"),
    }
    if auth:
        errors[401] = _error("Missing or wrong API key (Authorization: Bearer, or x-api-key)")

    @router.post(
        "/v1/embeddings",
        response_model=EmbeddingsResponse,
        dependencies=auth,
        summary="Create embeddings (OpenAI-compatible)",
        responses=dict(sorted(errors.items())),
    )
    async def embeddings(body: EmbeddingsRequest, request: Request) -> Response:  # type: ignore[valid-type]
        if body.model != model:
            raise ApiError(
                404, "model_not_found", f"The model `{body.model}` does not exist; this server has `{model}`"
            )
        if not service.loaded_handler().provides_embeddings:
            raise ApiError(
                400, "invalid_request", f"the model `{model}` does not produce embeddings; use /v2/models/{model}/infer"
            )
        texts = [body.input] if isinstance(body.input, str) else body.input
        fields = request.scope[LOG_FIELDS]
        fields["items"] = len(texts)
        # Without the result cache: usage needs every input's token count.
        predictions = await service.predict(texts, fields, use_cache=False, trace=request.scope.get(TRACE))
        vectors = np.stack([np.asarray(p["embedding"], dtype=np.float32) for p in predictions])
        full = vectors.shape[1]
        if body.dimensions is not None and body.dimensions != full:
            allowed = [d for d in settings.embedding_dimensions if d < full]
            if body.dimensions not in allowed:
                others = f" or one of {allowed}" if allowed else " (EMBEDDING_DIMENSIONS allows no other size)"
                return openai_error(
                    400,
                    f"dimensions {body.dimensions} is not supported by `{model}`: use {full}{others}",
                    param="dimensions",
                    code="invalid_dimensions",
                )
            vectors = truncate(vectors, body.dimensions)
        tokens = int(fields.get("input_tokens", 0))
        data = [
            {"object": "embedding", "index": i, "embedding": e}
            for i, e in enumerate(encode_vectors(vectors, body.encoding_format))
        ]
        return Response(
            orjson.dumps(
                {
                    "object": "list",
                    "data": data,
                    "model": model,
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                },
                option=orjson.OPT_SERIALIZE_NUMPY,
            ),
            media_type="application/json",
        )

    unauthorized: dict[int | str, dict[str, Any]] = {401: errors[401]} if auth else {}

    _add_model_routes(router, model, created, auth, unauthorized)

    app.include_router(router)
    for prefix in prefixes:
        app.include_router(router, prefix=prefix, include_in_schema=False)
    return [f"{prefix}/v1/embeddings" for prefix in ["", *prefixes]]
