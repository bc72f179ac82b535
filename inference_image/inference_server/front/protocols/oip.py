"""Open Inference Protocol v2 REST routes (KServe v2, Triton's HTTP API), on the same service as /predict: the same
gate (API key, shedding, body limit), batcher, deadline and metrics. Errors are the protocol's {"error": "..."}
(see protocols.errors)."""

from collections.abc import Callable
from typing import Annotated, Any, Literal

import numpy as np
import orjson
from fastapi import APIRouter, FastAPI, Path, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from ... import __version__
from ...tensor_spec import DATATYPES, Signature
from ..errors import ApiError, not_ready
from ..middleware import LOG_FIELDS
from ..service import WorkerService
from ..tracing import TRACE
from .oip_codec import InferRequest, Tensor, TensorError, decode_request, encode_response

HEADER_LENGTH = "Inference-Header-Content-Length"
SERVER_NAME = "inference-server"


class OipError(BaseModel):
    error: str


class TensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


class ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class ServerLive(BaseModel):
    live: bool


class ServerReady(BaseModel):
    ready: bool


class ModelReady(BaseModel):
    name: str
    ready: bool


# The JSON form of an inference request, for the OpenAPI document only: the route decodes the body itself
# (oip_codec), since a binary body is not JSON.
class _InputTensor(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    shape: list[int] = Field(max_length=8)
    datatype: Literal[tuple(DATATYPES)]  # type: ignore[valid-type]
    parameters: dict[str, Any] | None = None
    data: list[Any]


class _OutputRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    parameters: dict[str, Any] | None = None


class _InferenceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = None
    parameters: dict[str, Any] | None = None
    inputs: list[_InputTensor] = Field(min_length=1)
    outputs: list[_OutputRequest] | None = None


class _OutputTensor(BaseModel):
    name: str
    datatype: str
    shape: list[int]
    parameters: dict[str, Any] | None = None
    data: list[Any] | None = None


class InferenceResponse(BaseModel):
    model_name: str
    model_version: str
    id: str | None = None
    outputs: list[_OutputTensor]


def _oip_error(description: str) -> dict[str, Any]:
    return {"model": OipError, "description": description}


def _infer_errors(with_auth: bool) -> dict[int | str, dict[str, Any]]:
    errors: dict[int | str, dict[str, Any]] = {
        400: _oip_error(
            "Malformed request: bad JSON, unknown or missing tensors, wrong datatype or shape, "
            "data that does not match the shape, truncated binary data, an undecodable image"
        ),
        404: _oip_error("No such model or version"),
        413: _oip_error("The body is over MAX_BODY_BYTES"),
        415: _oip_error("Not JSON or binary tensor data, or a compressed body"),
        500: _oip_error("Inference failed"),
        503: _oip_error("Loading, draining, the queue is full, or the model failed"),
        504: _oip_error("No result within REQUEST_TIMEOUT_S"),
    }
    if with_auth:
        errors[401] = _oip_error("Missing or wrong API key")
    return dict(sorted(errors.items()))


def _json(content: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type="application/json")


def request_items(
    inputs: list[Tensor], signature: Signature, input_kind: str, *, max_batch: int, max_text_chars: int
) -> list[Any]:
    """The request's tensors as one input per batch row, in the handler's input_kind. Raises TensorError."""
    given = {tensor.name: tensor for tensor in inputs}
    declared = [spec.name for spec in signature.inputs]
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise TensorError(f"unknown input(s) {unknown}; the model takes {declared}")
    missing = [name for name in declared if name not in given]
    if missing:
        raise TensorError(f"missing input(s) {missing}; the model takes {declared}")
    batch = None
    for spec in signature.inputs:
        tensor = given[spec.name]
        if tensor.datatype != spec.datatype:
            raise TensorError(f"input {spec.name!r}: datatype {tensor.datatype}, the model takes {spec.datatype}")
        if len(tensor.shape) != len(spec.shape) or tensor.shape[1:] != spec.shape[1:]:
            raise TensorError(
                f"input {spec.name!r}: shape {list(tensor.shape)}, the model takes "
                f"{list(spec.shape)} (-1: any batch size)"
            )
        if batch is None:
            batch = tensor.shape[0]
        elif tensor.shape[0] != batch:
            raise TensorError(f"input {spec.name!r}: batch size {tensor.shape[0]}, other inputs have {batch}")
    assert batch is not None
    if not 1 <= batch <= max_batch:
        raise TensorError(f"batch size {batch}: send 1 to {max_batch} (MAX_CLIENT_BATCH) rows")
    if input_kind == "tensors":
        return [{name: tensor.data[row] for name, tensor in given.items()} for row in range(batch)]
    (tensor,) = given.values()
    elements = list(tensor.data.reshape(-1))
    if input_kind == "bytes":
        if not all(elements):
            raise TensorError(f"input {tensor.name!r}: an element is empty")
        return elements
    texts = []
    for element in elements:
        try:
            text = element.decode("utf-8")
        except UnicodeDecodeError:
            raise TensorError(f"input {tensor.name!r}: an element is not UTF-8 text") from None
        if not 1 <= len(text) <= max_text_chars:
            raise TensorError(f"input {tensor.name!r}: each text must have 1 to {max_text_chars} characters")
        texts.append(text)
    return texts


def output_tensors(
    request: InferRequest, signature: Signature, arrays: dict[str, np.ndarray]
) -> tuple[list[Tensor], set[str]]:
    """The outputs to return (all, or the requested ones in their order) and which of them go as binary."""
    declared = [spec.name for spec in signature.outputs]
    if request.outputs is None:
        chosen = [(name, request.binary_output) for name in declared]
    else:
        unknown = sorted({o.name for o in request.outputs} - set(declared))
        if unknown:
            raise TensorError(f"unknown output(s) {unknown}; the model returns {declared}")
        chosen = [(o.name, request.binary_output if o.binary is None else o.binary) for o in request.outputs]

    def datatype(name: str) -> str:
        spec = signature.output(name)
        assert spec is not None  # chosen names are declared outputs
        return spec.datatype

    tensors = [Tensor(name, datatype(name), tuple(arrays[name].shape), arrays[name]) for name, _ in chosen]
    return tensors, {name for name, binary in chosen if binary}


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """schema with its $defs references replaced by the definitions (the OpenAPI document has no $defs)."""
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return resolve(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(value) for value in node]
        return node

    return resolve(schema)


async def _infer(service: WorkerService, request: Request, signature: Callable[[], Signature]) -> Response:
    """One /v2 inference: the JSON or binary request decoded against the handler's signature, predicted, encoded
    (the signature asked for after the headers are checked, as a loading server has none yet)."""
    settings = service.settings
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity":
        raise ApiError(
            415, "unsupported_media_type", f"Content-Encoding {encoding} is not supported; send the body uncompressed"
        )
    raw_length = request.headers.get(HEADER_LENGTH)
    if raw_length is not None and not raw_length.strip().isdigit():
        raise ApiError(400, "invalid_request", f"{HEADER_LENGTH} must be a non-negative integer")
    handler = service.loaded_handler()
    sig = signature()
    body = await request.body()
    try:
        parsed = decode_request(body, int(raw_length) if raw_length is not None else None)
        items = request_items(
            parsed.inputs,
            sig,
            handler.input_kind,
            max_batch=settings.max_client_batch,
            max_text_chars=settings.max_text_chars,
        )
    except TensorError as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None
    fields = request.scope[LOG_FIELDS]
    fields["items"] = len(items)
    predictions = await service.predict(items, fields, trace=request.scope.get(TRACE))
    try:
        tensors, binary = output_tensors(parsed, sig, handler.to_tensors(predictions))
        content, header_length = encode_response(
            settings.model_name, settings.model_version, parsed.id, tensors, binary
        )
    except TensorError as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None
    if header_length is None:
        return Response(content, media_type="application/json")
    return Response(content, media_type="application/octet-stream", headers={HEADER_LENGTH: str(header_length)})


def _infer_doc() -> dict[str, Any]:
    """The infer routes' request body in OpenAPI: only the JSON form can be described; the binary form is in the
    description."""
    return {
        "requestBody": {
            "required": True,
            "description": f"JSON tensors; or the binary tensor data extension: a JSON header of {HEADER_LENGTH} "
            "bytes (that header says how many), then each binary input's bytes in order, sent as "
            "application/octet-stream",
            "content": {"application/json": {"schema": _inline(_InferenceRequest.model_json_schema())}},
        }
    }


def _add_server_routes(
    router: APIRouter, service: WorkerService, unauthorized: dict[int | str, dict[str, Any]]
) -> None:
    """The server's metadata, liveness and readiness."""

    @router.get("/v2", response_model=ServerMetadata, summary="Server metadata", responses=unauthorized)
    async def server_metadata() -> Response:
        return _json({"name": SERVER_NAME, "version": __version__, "extensions": ["binary_tensor_data"]})

    @router.get("/v2/health/live", response_model=ServerLive, summary="Liveness", responses=unauthorized)
    async def live() -> Response:
        return _json({"live": True})

    @router.get(
        "/v2/health/ready",
        response_model=ServerReady,
        summary="Readiness, as /ready",
        responses={**unauthorized, 503: _oip_error("Loading, draining, or no recent successful test inference")},
    )
    async def ready() -> Response:
        reason = service.readiness()
        if reason is not None:
            raise not_ready(reason)
        return _json({"ready": True})


def _model_path_endpoints(model: str, version: str) -> tuple[Callable, Callable]:
    """Wrappers that make a model route an endpoint of the unversioned path and of the versioned one."""
    # Any name and version are accepted (others get a 404); the document names the served ones.
    ModelName = Annotated[str, Path(json_schema_extra={"enum": [model]})]
    ModelVersion = Annotated[str, Path(json_schema_extra={"enum": [version]})]

    def unversioned(route):
        async def endpoint(request: Request, model_name: ModelName) -> Response:  # pyright: ignore[reportInvalidTypeForm]
            return await route(request, model_name, None)

        return endpoint

    def versioned(route):
        async def endpoint(
            request: Request,
            model_name: ModelName,  # pyright: ignore[reportInvalidTypeForm]
            model_version: ModelVersion,  # pyright: ignore[reportInvalidTypeForm]
        ) -> Response:
            return await route(request, model_name, model_version)

        return endpoint

    return unversioned, versioned


def add_oip_routes(app: FastAPI, service: WorkerService, prefixes: list[str], auth: list[Any]) -> list[str]:
    """Add the /v2 routes at each prefix; returns the infer paths, for the predict gate."""
    settings = service.settings
    model, version = settings.model_name, settings.model_version
    router = APIRouter(tags=["open inference protocol"], dependencies=auth)
    unauthorized: dict[int | str, dict[str, Any]] = {401: _oip_error("Missing or wrong API key")} if auth else {}

    def check_model(model_name: str, model_version: str | None) -> None:
        if model_name != model or model_version not in (None, version):
            raise ApiError(
                404,
                "not_found",
                f"no model {model_name!r}"
                + (f" version {model_version!r}" if model_version else "")
                + f"; this server has "
                f"{model!r} version {version!r}",
            )

    def signature() -> Signature:
        sig = service.loaded_handler().signature()
        if sig is None:
            raise ApiError(404, "not_found", f"the handler of {model!r} declares no tensors for this protocol")
        return sig

    _add_server_routes(router, service, unauthorized)

    async def metadata(request: Request, model_name: str, model_version: str | None) -> Response:
        check_model(model_name, model_version)
        sig = signature()
        return _json(
            {
                "name": model,
                "versions": [version],
                "platform": sig.platform,
                "inputs": [spec.metadata() for spec in sig.inputs],
                "outputs": [spec.metadata() for spec in sig.outputs],
            }
        )

    async def model_ready(request: Request, model_name: str, model_version: str | None) -> Response:
        check_model(model_name, model_version)
        reason = service.readiness()
        if reason is not None:
            raise not_ready(reason)
        return _json({"name": model, "ready": True})

    async def infer(request: Request, model_name: str, model_version: str | None) -> Response:
        check_model(model_name, model_version)
        return await _infer(service, request, signature)

    unversioned, versioned = _model_path_endpoints(model, version)

    for path, route in (
        ("/v2/models/{model_name}", unversioned),
        ("/v2/models/{model_name}/versions/{model_version}", versioned),
    ):
        router.add_api_route(
            path,
            route(metadata),
            methods=["GET"],
            response_model=ModelMetadata,
            summary="Model metadata: input and output tensors",
            responses={
                **unauthorized,
                404: _oip_error("No such model or version"),
                503: _oip_error("The model is loading"),
            },
        )
        router.add_api_route(
            f"{path}/ready",
            route(model_ready),
            methods=["GET"],
            response_model=ModelReady,
            summary="Model readiness",
            responses={
                **unauthorized,
                404: _oip_error("No such model or version"),
                503: _oip_error("Loading, draining, or failing"),
            },
        )
        router.add_api_route(
            f"{path}/infer",
            route(infer),
            methods=["POST"],
            response_model=InferenceResponse,
            summary="Inference: JSON tensors, or the binary tensor data extension",
            responses=_infer_errors(bool(auth)),
            openapi_extra=_infer_doc(),
        )
    app.include_router(router)
    for prefix in prefixes:
        app.include_router(router, prefix=prefix, include_in_schema=False)
    bases = [f"/v2/models/{model}", f"/v2/models/{model}/versions/{version}"]
    return [f"{prefix}{base}/infer" for prefix in ["", *prefixes] for base in bases]
