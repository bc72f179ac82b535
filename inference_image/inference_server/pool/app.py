"""A pool's HTTP routes, under /<pool>/ as the ALB's path rule forwards them (and /health, /ready bare too):

- OpenAI:  POST /<pool>/v1/embeddings              {"model": "<model>", "input": "text" | ["text", ...]}
- OIP:     POST /<pool>/v2/models/<model>/infer    {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [n],
                                                                "data": ["text", ...]}]}
- native:  POST /<pool>/models/<model>/predict     {"text": "..."} or {"texts": ["...", ...]}
- GET /<pool>/v1/models: the registered models.

A model name that is not plain is a 400 and one the registry does not name a 404 naming the pool; neither reaches
storage. Errors are {"error": {"code": ..., "message": ...}} (OIP: {"error": "..."}), a 503 with Retry-After.

Before every route but the probes, the gate (gate.py): the API key, the drain, the request's span. A sampled request's
span gets its model, version, hit or miss and the load it waited for as attributes here.

With peers (peer_router.py), a request for a model another live task owns is forwarded to it once, after the key,
body size and model name are checked here; X-Request-Timeout-Ms (milliseconds, REQUEST_TIMEOUT_S at most) sets a
request's deadline, and a hop sets it to what is left."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..front.cache_values import input_key, key_prefix
from ..front.protocols.oip_codec import Tensor, encode_response
from ..front.shared_cache import SharedCache
from ..front.tracing import TRACE
from ..inputs import InputError
from ..tensor_spec import datatype_of
from .gate import Gate
from .loaded import DEVICE
from .peer_router import FORWARDED_HEADER, TIMEOUT_HEADER, PeerRouter
from .resident import ModelPool, PoolError

if TYPE_CHECKING:
    from ..front.spans import RequestTrace, Tracing

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
MAX_TEXT_CHARS = 100_000
PROBES = ("/health", "/ready")  # answered without a key, for the target group and the container health check
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
        tracing: Tracing | None = None,
        drain_timeout_s: float = 70.0,
        shared_cache: SharedCache | None = None,
        router: PeerRouter | None = None,
    ) -> None:
        self.pool, self.router = pool, router
        self.request_timeout_s, self.max_client_batch = request_timeout_s, max_client_batch
        self.shared_cache = shared_cache  # None: no SHARED_CACHE_ENDPOINT
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
        self.gate = Gate(
            self.app,
            open_paths=frozenset(path for probe in PROBES for path in (probe, f"{prefix}{probe}")),
            api_keys=api_keys,
            tracing=tracing,
            drain_timeout_s=drain_timeout_s,
            on_draining_refusal=pool.metrics.record_shed,
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if self.router is not None:
                await self.router.aclose()

    async def __call__(self, scope, receive, send) -> None:
        await self.gate(scope, receive, send)

    # -- probes ------------------------------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return _json({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        """Ready once the registry has been read: a pool loads its models on demand, none before; not while draining
        (the load balancer stops sending)."""
        if self.gate.draining:
            return _json({"error": {"code": "draining", "message": "this task is stopping"}}, 503)
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
            predictions, tokens = await self.predictions(name, texts, request.scope.get(TRACE), deadline)
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
            predictions, _ = await self.predictions(name, texts, request.scope.get(TRACE), deadline)
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
            outputs, _, version = await self.run(name, texts, request.scope.get(TRACE), deadline, as_tensors=True)
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

    async def predictions(
        self, name: str, texts: list[str], trace: RequestTrace | None, deadline: float | None = None
    ) -> tuple[list[Any], int]:
        """:meth:`run` behind the shared result cache when there is one: the inputs found under (pool, model,
        registered version, input) are answered from it (no load, no model), the rest run and are stored under the
        version that served them, so a registry move to another version finds none of the old one's. The token
        count is the inputs the model ran."""
        shared = self.shared_cache
        if shared is None:
            predictions, tokens, _ = await self.run(name, texts, trace, deadline)
            return predictions, tokens
        started = time.monotonic()
        version = self.pool.version_for(name)  # 400 or 404 before the cache is asked
        keys = [input_key(pool_key_prefix(self.pool.pool, name, version), text) for text in texts]
        found = await shared.get_many(keys)
        missing = [index for index, prediction in enumerate(found) if prediction is None]
        if trace is not None:
            trace.child(
                "cache lookup", started, time.monotonic(), {"cache.inputs": len(texts), "cache.misses": len(missing)}
            )
        if not missing:
            if trace is not None:
                trace.set({"model.name": name, "model.version": version, "pool.result": "cached"})
            self.pool.metrics.record_cached(name, time.monotonic() - started)
            return found, 0
        fresh, tokens, served = await self.run(name, [texts[index] for index in missing], trace, deadline)
        predictions = list(found)
        for index, prediction in zip(missing, fresh, strict=True):
            predictions[index] = prediction
        if served == version:
            shared.store_many([(keys[index], prediction) for index, prediction in zip(missing, fresh, strict=True)])
        return predictions, tokens

    async def run(
        self,
        name: str,
        texts: list[str],
        trace: RequestTrace | None = None,
        deadline: float | None = None,
        as_tensors: bool = False,
    ) -> tuple[Any, int, str]:
        """The model's predictions for texts (as_tensors: as the handler's output tensors), their token count and the
        version that served them. Everything that reads the handler runs while the model is
        held: a registry change may retire and unload it the moment it is released. ``trace``: a sampled request's,
        which gets the model, hit or miss, the load waited for, and the phases' spans."""
        pool = self.pool
        started = time.monotonic()
        if deadline is None:
            deadline = started + self.request_timeout_s
        pool.version_for(name)  # 400 or 404 before anything is counted against the name
        if trace is not None:
            trace.set({"model.name": name})
        try:
            model, tier = await pool.acquire(name, deadline, len(texts))
        except PoolError:
            pool.metrics.record_error(name)
            raise
        acquired = time.monotonic()
        if trace is not None:
            trace.set(_acquired_attributes(model.version, tier, acquired - started))
            if tier != DEVICE:
                trace.child("model load", started, acquired, {"pool.tier": tier})
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
            submitted = time.monotonic()
            if trace is not None:
                trace.child("preprocess", acquired, submitted, {"inputs": len(texts)})
            result = await pool.infer(model, items, deadline, traced=trace is not None)
            postprocessing = time.monotonic()
            predictions = handler.postprocess(result.outputs, len(texts))
            if as_tensors:
                predictions = handler.to_tensors(predictions)
            if trace is not None:
                trace.model(submitted, result)
                trace.child("postprocess", postprocessing, time.monotonic())
        except PoolError as exc:
            pool.metrics.record_error(name)
            if exc.status == 504:
                pool.metrics.record_timed_out()
            raise
        finally:
            pool.release(model)
        pool.metrics.record_request(name, tier, time.monotonic() - started)
        return predictions, result.input_tokens, model.version


def _acquired_attributes(version: str, tier: str, waited_s: float) -> dict[str, Any]:
    """A request span's pool attributes: the version that served, a hit (on the device) or a miss (and the tier it
    was loaded from: host memory, local disk or S3), and how long the request waited for its model."""
    return {
        "model.version": version,
        "pool.result": "hit" if tier == DEVICE else "miss",
        "pool.tier": tier,
        "pool.load_ms": round(waited_s * 1000, 3),
    }


def pool_key_prefix(pool: str, model: str, version: str) -> str:
    """The shared cache's key prefix of a pool's model version: the single-model server's form
    (``ic:<model>:<version>:<task>:<options hash>:``) with ``<pool>/<model>`` as the model and ``pool`` as the task, so
    no pool's keys meet another's or a single model's."""
    return key_prefix(f"{pool}/{model}", version, "pool")
