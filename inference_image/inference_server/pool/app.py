"""A pool's HTTP routes, under /<pool>/ as the ALB's path rule forwards them (and /health, /ready bare too):

- OpenAI:  POST /<pool>/v1/embeddings              {"model": "<model>", "input": "text" | ["text", ...]}
- OIP:     POST /<pool>/v2/models/<model>/infer    {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [n],
                                                                "data": ["text", ...]}]}
- native:  POST /<pool>/models/<model>/predict     {"text": "..."} or {"texts": ["...", ...]}
- GET /<pool>/v1/models: the registered models.

A model name that is not plain is a 400 and one the registry does not name a 404 naming the pool; neither reaches
storage. Errors are {"error": {"code": ..., "message": ...}} (OIP: {"error": "..."}), a 503 with Retry-After.

With peers (peer_router.py), a request for a model another live task owns is forwarded to it once, after the key,
body size and model name are checked here; X-Request-Timeout-Ms (milliseconds, REQUEST_TIMEOUT_S at most) sets a
request's deadline, and a hop sets it to what is left."""

from __future__ import annotations

import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..front.protocols.oip_codec import Tensor, encode_response
from ..inputs import InputError
from ..tensor_spec import datatype_of
from .peer_router import FORWARDED_HEADER, TIMEOUT_HEADER, PeerRouter
from .resident import ModelPool, PoolError

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
MAX_TEXT_CHARS = 100_000
LONGEST_TIMEOUT_MS = 1e12


def _json(content: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY), status, headers, media_type="application/json"
    )


def _error(exc: PoolError, oip: bool = False) -> Response:
    headers = {"Retry-After": str(max(1, round(exc.retry_after_s)))} if exc.retry_after_s is not None else None
    body: Any = {"error": exc.message} if oip else {"error": {"code": exc.code, "message": exc.message}}
    return _json(body, exc.status, headers)


def _bad(message: str) -> PoolError:
    return PoolError(400, "invalid_request", message)


def _texts(value: Any, what: str, limit: int) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
        raise PoolError(422, "invalid_input", f"{what} must be a non-empty text or a list of non-empty texts")
    if len(texts) > limit:
        raise PoolError(422, "invalid_input", f"{what} holds {len(texts)} texts; the limit is {limit}")
    if any(len(t) > MAX_TEXT_CHARS for t in texts):
        raise PoolError(422, "invalid_input", f"a text is over {MAX_TEXT_CHARS} characters")
    return texts


class PoolApp:
    def __init__(
        self,
        pool: ModelPool,
        *,
        request_timeout_s: float = 10.0,
        max_client_batch: int = 64,
        api_keys: tuple[tuple[str, str], ...] = (),
        router: PeerRouter | None = None,
    ) -> None:
        self.pool, self.router = pool, router
        self.request_timeout_s, self.max_client_batch = request_timeout_s, max_client_batch
        self._keys = [key.encode() for _, key in api_keys]
        prefix = f"/{pool.pool}"
        routes = [Route(path, self.health, methods=["GET"]) for path in ("/health", f"{prefix}/health")]
        routes += [Route(path, self.ready, methods=["GET"]) for path in ("/ready", f"{prefix}/ready")]
        routes += [
            Route(f"{prefix}/v1/embeddings", self.embeddings, methods=["POST"]),
            Route(f"{prefix}/v1/models", self.list_models, methods=["GET"]),
            Route(f"{prefix}/v2/models/{{name}}/infer", self.infer, methods=["POST"]),
            Route(f"{prefix}/models/{{name}}/predict", self.predict, methods=["POST"]),
        ]
        self.app = Starlette(routes=routes, lifespan=self._lifespan)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if self.router is not None:
                await self.router.aclose()

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)

    # -- probes ------------------------------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return _json({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        """Ready once the registry has been read: a pool loads its models on demand, none before."""
        if self.pool.ready:
            return _json({"status": "ready", **self.pool.figures()})
        return _json({"error": {"code": "not_ready", "message": "the registry has not been read yet"}}, 503)

    # -- routes ------------------------------------------------------------------------------------------------

    async def list_models(self, request: Request) -> Response:
        registry = self.pool.registry
        names = sorted(registry.models) if registry else []
        return _json(
            {"object": "list", "data": [{"id": n, "object": "model", "owned_by": self.pool.pool} for n in names]}
        )

    async def embeddings(self, request: Request) -> Response:
        try:
            deadline = self._deadline(request)
            raw, body = await self._body(request)
            name = body.get("model")
            if not isinstance(name, str):
                raise _bad('"model" must name a model of the pool')
            answer = await self._forward(request, name, raw, deadline)
            if answer is not None:
                return answer
            texts = _texts(body.get("input"), '"input"', self.max_client_batch)
            predictions, tokens = await self.run(name, texts, deadline)
            if not all(isinstance(p, dict) and "embedding" in p for p in predictions):
                raise PoolError(400, "invalid_request", f"model {name!r} is not an embedding model")
        except PoolError as exc:
            return _error(exc)
        data = [{"object": "embedding", "index": i, "embedding": p["embedding"]} for i, p in enumerate(predictions)]
        return _json(
            {"object": "list", "data": data, "model": name, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        )

    async def predict(self, request: Request) -> Response:
        name = request.path_params["name"]
        try:
            deadline = self._deadline(request)
            raw, body = await self._body(request)
            answer = await self._forward(request, name, raw, deadline)
            if answer is not None:
                return answer
            single = "text" in body
            if single == ("texts" in body) or set(body) - {"text", "texts"}:
                raise PoolError(422, "invalid_input", 'send {"text": "..."} or {"texts": ["...", ...]}')
            texts = _texts(
                body["text"] if single else body["texts"],
                '"text"' if single else '"texts"',
                1 if single else self.max_client_batch,
            )
            predictions, _ = await self.run(name, texts, deadline)
        except PoolError as exc:
            return _error(exc)
        return _json({"prediction": predictions[0]} if single else {"predictions": predictions})

    async def infer(self, request: Request) -> Response:
        name = request.path_params["name"]
        try:
            deadline = self._deadline(request)
            raw, body = await self._body(request)
            answer = await self._forward(request, name, raw, deadline)
            if answer is not None:
                return answer
            inputs = body.get("inputs")
            if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
                raise _bad("a pool model takes one input tensor: a BYTES tensor of texts")
            tensor = inputs[0]
            if tensor.get("datatype") != "BYTES":
                raise _bad("the input tensor's datatype must be BYTES (texts)")
            texts = _texts(tensor.get("data"), "the input tensor's data", self.max_client_batch)
            if tensor.get("shape") != [len(texts)]:
                raise _bad(f"the input tensor's shape must be [{len(texts)}]")
            (outputs, version), _ = await self.run(name, texts, deadline, as_tensors=True)
        except PoolError as exc:
            return _error(exc, oip=True)
        except NotImplementedError as exc:
            return _json({"error": str(exc)}, 400)
        tensors = [
            Tensor(key, datatype_of(value.dtype) if value.dtype != object else "BYTES", tuple(value.shape), value)
            for key, value in outputs.items()
        ]
        request_id = body.get("id")
        encoded, _ = encode_response(name, version, request_id if isinstance(request_id, str) else None, tensors, set())
        return Response(encoded, media_type="application/json")

    # -- the model ---------------------------------------------------------------------------------------------

    def _deadline(self, request: Request) -> float:
        """When the request must be answered: X-Request-Timeout-Ms from now (a hop sets it), REQUEST_TIMEOUT_S at
        most."""
        budget_s = self.request_timeout_s
        raw = request.headers.get(TIMEOUT_HEADER)
        if raw is not None:
            try:
                ms = float(raw)
            except ValueError:
                ms = -1.0
            if not 0 <= ms <= LONGEST_TIMEOUT_MS:  # NaN and infinity too
                raise _bad("X-Request-Timeout-Ms is not a non-negative number of milliseconds")
            budget_s = min(budget_s, ms / 1000)
        return time.monotonic() + budget_s

    async def _forward(self, request: Request, name: str, raw: bytes, deadline: float) -> Response | None:
        """The owner's answer when another live task owns ``name`` and this request was not forwarded already;
        None: serve it here. The name is checked here first (400, 404): a bad one never crosses the hop."""
        router = self.router
        if router is None:
            return None
        self.pool.version_for(name)
        if FORWARDED_HEADER in request.headers:
            router.note_served_for_peer()
            return None
        owner = router.owner(name)
        if owner is None:
            return None
        answer = await router.forward(owner, request.url.path, raw, request.headers, deadline)
        if answer is None:
            return None
        return Response(answer.body, answer.status, answer.headers)

    async def _body(self, request: Request) -> tuple[bytes, dict[str, Any]]:
        if self._keys:
            given = (
                request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
            ).encode()
            if not any(hmac.compare_digest(given, key) for key in self._keys):
                raise PoolError(401, "unauthorized", "missing or wrong x-api-key")
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:
            raise PoolError(413, "too_large", f"the body is over {MAX_BODY_BYTES} bytes")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise _bad("the body is not JSON") from None
        if not isinstance(body, dict):
            raise _bad("the body must be a JSON object")
        return raw, body

    async def run(
        self, name: str, texts: list[str], deadline: float | None = None, as_tensors: bool = False
    ) -> tuple[Any, int]:
        """The model's predictions for texts, and their token count (or, as_tensors: (the predictions as the
        handler's output tensors, the model's version)). Everything that reads the handler runs while the model is
        held: a registry change may retire and unload it the moment it is released."""
        pool = self.pool
        started = time.monotonic()
        if deadline is None:
            deadline = started + self.request_timeout_s
        pool.version_for(name)  # 400 or 404 before anything is counted against the name
        try:
            model, tier = await pool.acquire(name, deadline, len(texts))
        except PoolError:
            pool.metrics.record_error(name)
            raise
        try:
            handler = model.handler
            if handler.input_kind != "text":
                raise PoolError(422, "invalid_input", f"model {name} takes {handler.input_kind}, not texts")
            try:
                items = handler.preprocess(texts)
            except InputError as exc:
                raise PoolError(422, "invalid_input", str(exc)) from None
            reason = pool.shed_reason(model, len(items), deadline - time.monotonic())
            if reason is not None:
                pool.metrics.record_shed()
                raise PoolError(503, "overloaded", f"model {name}: {reason}", 1.0)
            result = await pool.infer(model, items, deadline)
            predictions = handler.postprocess(result.outputs, len(texts))
            if as_tensors:
                predictions = (handler.to_tensors(predictions), model.version)
        except PoolError as exc:
            pool.metrics.record_error(name)
            if exc.status == 504:
                pool.metrics.record_timed_out()
            raise
        finally:
            pool.release(model)
        pool.metrics.record_request(name, tier, time.monotonic() - started)
        return predictions, result.input_tokens
