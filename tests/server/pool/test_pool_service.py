"""A pool as a service beside the single-model server, against the fake loader (pool_fakes.py): the same request
spans (received by a real OTLP/HTTP receiver, otlp_receiver.py) with the pool's model, hit or miss and the load waited
for as attributes; the same scale-out signal (QueueDepth, the high-resolution peak every SIGNAL_INTERVAL_S); the
drain's answers (readiness fails, new requests 503 with Retry-After, the probes still answer); the shared result
cache on a real Valkey (valkey_server.py), keyed by pool, model and version."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import httpx
import pytest

from inference_server import facts
from inference_server.pool.pool_settings import load_pool_settings
from inference_server.pool.registry import Registry
from inference_server.pool.server import PoolServer
from inference_server.pool.store import DISK

from ..otlp_receiver import otlp_receiver
from ..pool_fakes import FakeLoader
from ..valkey_server import ValkeyServer

POOL = "pool-a"
PARENT_SPAN = "00f067aa0ba902b7"
MISS_TRACE, HIT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"
# The single-model server's request spans (tests/server/front/test_tracing.py) but the result cache's, which a pool
# has none of, and the load a miss waited for.
PHASES = {"preprocess", "queue wait", "batch formation", "forward", "postprocess"}


@pytest.fixture
def fake_server(tmp_path):
    made: list[PoolServer] = []

    def make(loader: FakeLoader | None = None, **overrides) -> PoolServer:
        settings = load_pool_settings(
            {},
            pool_name=POOL,
            store_uri=str(tmp_path / "pools" / POOL),
            cache_dir=tmp_path / "cache",
            metrics_interval_s=3600.0,
            signal_interval_s=3600.0,
            registry_poll_s=3600.0,
            **overrides,
        )
        server = PoolServer(settings, loader=loader or FakeLoader())
        server.pool.apply_registry(Registry(POOL, {"a": "1", "b": "1"}))
        server.pool.start()
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()


async def post(app, path: str, body: dict, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        return await client.post(path, json=body, headers=headers or {})


def traceparent(trace_id: str) -> dict[str, str]:
    return {"traceparent": f"00-{trace_id}-{PARENT_SPAN}-01"}


def test_a_sampled_request_gets_the_single_model_servers_spans_with_its_model_hit_or_miss_and_load(fake_server):
    with otlp_receiver() as receiver:
        server = fake_server(otel_exporter_otlp_endpoint=receiver.endpoint, trace_sample_ratio=0.0)
        path = f"/{POOL}/models/a/predict"

        async def main() -> list[int]:
            return [
                (await post(server.app, path, {"text": "first"}, traceparent(MISS_TRACE))).status_code,
                (await post(server.app, path, {"text": "again"}, traceparent(HIT_TRACE))).status_code,
                (await post(server.app, path, {"text": "not sampled at ratio 0"})).status_code,
            ]

        assert asyncio.run(main()) == [200, 200, 200]
        assert server.tracing is not None and server.tracing.flush()
        spans = list(receiver.spans)
    assert {span.trace_id for span in spans} == {MISS_TRACE, HIT_TRACE}  # the unsampled request sent nothing
    for trace_id, result in ((MISS_TRACE, "miss"), (HIT_TRACE, "hit")):
        trace = [span for span in spans if span.trace_id == trace_id]
        (root,) = [span for span in trace if span.name == f"POST {path}"]
        assert root.parent_span_id == PARENT_SPAN
        assert {key: root.attributes[key] for key in ("model.name", "model.version", "pool.result")} == {
            "model.name": "a",
            "model.version": "1",
            "pool.result": result,
        }
        assert root.attributes["http.response.status_code"] == 200 and root.attributes["pool.load_ms"] >= 0
        assert (root.resource["service.name"], root.resource["pool.name"]) == (POOL, POOL)
        children = [span for span in trace if span is not root]
        assert {span.parent_span_id for span in children} == {root.span_id}
        for span in children:
            assert root.start_ns <= span.start_ns <= span.end_ns <= root.end_ns, span.name
        names = {span.name for span in children}
        if result == "miss":
            assert names == PHASES | {"model load"} and root.attributes["pool.tier"] == DISK
            (load,) = [span for span in children if span.name == "model load"]
            assert load.end_ns <= min(span.start_ns for span in children if span.name == "preprocess")
        else:
            assert names == PHASES and root.attributes["pool.load_ms"] < 1000


def test_the_queue_signal_is_the_deepest_queue_since_the_last_at_high_resolution(fake_server, caplog):
    """As the single-model server's model process writes it (queue_signal.py): its own document every
    SIGNAL_INTERVAL_S (5 s by default, half the scaling alarm's 10 s period), the peak between two samples, stored at
    1-second resolution; the 10 s interval document no longer carries it."""
    loader = FakeLoader()
    server = fake_server(loader)
    assert load_pool_settings({"POOL_NAME": POOL, "MODEL_STORE_URI": f"/s/pools/{POOL}/"}).signal_interval_s <= 5.0
    loader.forward_gate.clear()

    async def burst() -> list[int]:
        def request():
            return asyncio.ensure_future(post(server.app, f"/{POOL}/models/a/predict", {"texts": ["x", "y"]}))

        deadline = time.monotonic() + 10
        requests = [request()]
        while not loader.runs:  # the first batch holds the inference thread at the gate
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        requests += [request() for _ in range(4)]
        while server.pool.scheduler.total_queued < 8:  # the other four queue behind it: 8 inputs
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        threading.Timer(0.05, loader.forward_gate.set).start()
        return [response.status_code for response in await asyncio.gather(*requests)]

    assert asyncio.run(burst()) == [200] * 5
    assert server.pool.scheduler.total_queued == 0
    with caplog.at_level(logging.INFO, logger="inference_server.pool.server"):
        server.emit_signals()
        server.emit_signals()
        server.emit_metrics()
    documents = [r.fields for r in caplog.records if r.getMessage() == "metrics"]  # type: ignore[attr-defined]
    peak, after, interval = documents
    assert peak[facts.QUEUE_DEPTH] >= 8 and after[facts.QUEUE_DEPTH] == 0  # the burst, drained before the sample
    (definition,) = peak["_aws"]["CloudWatchMetrics"][0]["Metrics"]
    assert definition == {"Name": facts.QUEUE_DEPTH, "Unit": "Count", "StorageResolution": 1}
    assert peak["ModelName"] == POOL
    assert facts.QUEUE_DEPTH not in interval


def test_draining_fails_readiness_and_refuses_new_requests_with_a_retry_after_while_probes_answer(fake_server):
    server = fake_server(api_keys=(("team", "sk-pool"),))
    key = {"x-api-key": "sk-pool"}

    async def main() -> dict[str, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url="http://t") as client:
            before = await client.get(f"/{POOL}/ready")
            server.begin_drain()
            return {
                "before": before,
                "ready": await client.get(f"/{POOL}/ready"),
                "health": await client.get("/health"),
                "predict": await client.post(f"/{POOL}/models/a/predict", json={"text": "x"}, headers=key),
                "keyless": await client.post(f"/{POOL}/models/a/predict", json={"text": "x"}),
            }

    answers = asyncio.run(main())
    assert answers["before"].status_code == 200
    assert answers["ready"].status_code == 503 and answers["ready"].json()["error"]["code"] == "draining"
    assert answers["health"].status_code == 200
    assert answers["predict"].status_code == 503 and answers["predict"].json()["error"]["code"] == "draining"
    assert int(answers["predict"].headers["retry-after"]) >= 1
    assert answers["keyless"].status_code == 401  # the key first: a stopping task tells a stranger nothing more
    assert server.in_flight == 0 and asyncio.run(server.wait_drained(1.0))


@pytest.fixture
def valkey_server(tmp_path):
    server = ValkeyServer(tmp_path).start()
    yield server
    server.stop()


def test_tasks_share_results_by_pool_model_and_version_and_a_registry_move_misses_by_key(fake_server, valkey_server):
    """Two tasks of a pool on a real Valkey: the second answers what the first computed without loading the model;
    after the registry moves the model to version 2 no answer of version 1 is found (the key names the version)."""
    cache = {"shared_cache_endpoint": valkey_server.endpoint, "shared_cache_tls": False}
    first_loader, second_loader = FakeLoader(), FakeLoader()
    first, second = fake_server(first_loader, **cache), fake_server(second_loader, **cache)
    path, texts = f"/{POOL}/models/a/predict", {"texts": ["one", "two"]}

    async def main() -> list[list[float]]:
        answers = []
        for server in (first, second):
            assert server.shared_cache is not None and await server.shared_cache.connected()
            answers.append((await post(server.app, path, texts)).json()["predictions"])
            await server.shared_cache.flush()
        second.pool.apply_registry(Registry(POOL, {"a": "2", "b": "1"}))
        answers.append((await post(second.app, path, texts)).json()["predictions"])
        await second.shared_cache.flush()
        return answers

    computed, shared, moved = asyncio.run(main())
    assert computed == shared == [1.0, 1.0] and moved == [2.0, 2.0]  # each version's own answer (pool_fakes.py)
    assert first_loader.loads == {("a", "1"): 1} and second_loader.loads == {("a", "2"): 1}
    keys = valkey_server.client().keys("*")
    assert sorted({tuple(key.split(b":")[1:4]) for key in keys}) == [
        (f"{POOL}/a".encode(), b"1", b"pool"),
        (f"{POOL}/a".encode(), b"2", b"pool"),
    ]
    assert len(keys) == 4 and not any(b"one" in key or b"two" in key for key in keys)  # inputs are hashed
    interval = second.pool.metrics.take(second.pool.resident)[1]
    assert interval["cached_requests"] == 1 and interval["requests"] == 1  # the cached one is no hit or miss
