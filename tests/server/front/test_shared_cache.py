"""The shared result cache against a real Valkey server: hits across services, version isolation, TTL expiry,
oversized values, a cache that stops or hangs (requests still succeed, the circuit opens and closes again),
and its keys, values, circuit and settings."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from botocore.credentials import Credentials

from inference_server import facts as m
from inference_server.front.cache_values import decode_value, encode_value, input_key, key_prefix
from inference_server.front.shared_cache import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    CircuitBreaker,
    SharedCache,
    SharedCacheConfig,
    config_from_settings,
    iam_auth_token,
)
from inference_server.settings import SettingsError

from ..conftest import make_settings, model_handler, started
from ..valkey_server import ValkeyServer


@pytest.fixture
def valkey_server(tmp_path):
    server = ValkeyServer(tmp_path).start()
    yield server
    server.stop()


def cache_settings(model_dir, server: ValkeyServer, **overrides):
    # Every shape warm before ready: the background warm-up's forwards would count as the model's work.
    values = dict(shared_cache_endpoint=server.endpoint, shared_cache_tls=False, result_cache_size=0, warmup="all")
    values.update(overrides)
    return make_settings(model_dir, **values)


class ForwardCounter:
    """Counts the inputs the model side actually runs."""

    def __init__(self, service) -> None:
        handler = model_handler(service)
        self.inputs, self._forward = 0, handler.forward

        def forward(batch):
            self.inputs += batch.count
            return self._forward(batch)

        handler.forward = forward


@pytest.fixture
def cached_services(tiny_classifier_dir, valkey_server):
    made = []

    def make(**overrides):
        service = started(cache_settings(tiny_classifier_dir, valkey_server, **overrides))
        made.append(service)
        return service, ForwardCounter(service)

    yield make
    for service in made:
        service.local_model.stop()


def predict(service, texts, **options):
    """Predictions through the service (each call on a new event loop, so a new client: connect first)."""

    async def run():
        assert await service.shared_cache.connected(), "the shared cache did not connect"
        predictions = await service.predict(texts, {}, options=options or None)
        await service.shared_cache.flush()
        return predictions

    return asyncio.run(run())


def counts(service) -> dict:
    return service.shared_cache.metrics.take_interval()


# -- through the service ------------------------------------------------------------------------------------------


def test_a_second_service_answers_from_the_cache_without_running_the_model(cached_services, valkey_server):
    first, first_model = cached_services()
    second, second_model = cached_services()
    texts = ["a shared input", "another one", "a third"]
    expected = predict(first, texts)
    assert first_model.inputs == 3
    assert predict(second, texts) == expected  # numpy scalars and all: the same answer
    assert second_model.inputs == 0
    assert counts(second)[m.SHARED_CACHE_HITS] == 3
    keys = valkey_server.client().keys("*")
    assert len(keys) == 3 and not any(b"shared" in key or b"input" in key for key in keys)


def test_a_new_version_never_sees_the_old_versions_results(cached_services, valkey_server):
    old, _ = cached_services(model_version="1")
    new, new_model = cached_services(model_version="2")
    predict(old, ["versioned input"])
    predict(new, ["versioned input"])
    assert new_model.inputs == 1
    assert counts(new)[m.SHARED_CACHE_HITS] == 0
    assert sorted(key.split(b":")[2] for key in valkey_server.client().keys("*")) == [b"1", b"2"]


def test_options_are_part_of_the_key(cached_services):
    service, model = cached_services()
    predict(service, ["same text"], top_k=1)
    predict(service, ["same text"], top_k=2)
    assert model.inputs == 2


def test_entries_expire_after_the_models_ttl(cached_services, valkey_server):
    service, model = cached_services(shared_cache_ttl_s=1)
    predict(service, ["short lived"])
    (key,) = valkey_server.client().keys("*")
    assert 0 < valkey_server.client().pttl(key) <= 1000
    predict(service, ["short lived"])
    assert model.inputs == 1
    time.sleep(1.1)
    predict(service, ["short lived"])
    assert model.inputs == 2


def test_oversized_predictions_are_answered_but_not_stored(cached_services, valkey_server):
    service, model = cached_services(shared_cache_max_value_bytes=64)
    (prediction,) = predict(service, ["too big to keep"])
    assert prediction["label"]
    assert valkey_server.client().dbsize() == 0
    assert counts(service)[m.SHARED_CACHE_OVERSIZED] == 1


def test_a_stopped_cache_costs_nothing_and_is_used_again_when_it_returns(cached_services, valkey_server):
    service, model = cached_services()
    cache = service.shared_cache

    async def run():
        assert await cache.connected()
        await service.predict(["before"], {})
        valkey_server.stop()
        for i in range(8):
            started_at = time.monotonic()
            await service.predict([f"during {i}"], {})
            assert time.monotonic() - started_at < 1.0
            await cache.flush()
        assert cache.circuit.state in (OPEN, HALF_OPEN)
        values = counts(service)
        assert values[m.SHARED_CACHE_ERRORS] >= 3 and values[m.SHARED_CACHE_OPEN] == 1
        valkey_server.start()
        deadline = time.monotonic() + cache.config.open_for_s + 5
        while cache.circuit.state != CLOSED or not cache._connected:
            assert time.monotonic() < deadline, "the circuit did not close after the cache returned"
            await service.predict(["after"], {})
            await asyncio.sleep(0.1)
        await service.predict(["after"], {})
        await cache.flush()
        seen = model.inputs
        await service.predict(["after"], {})
        assert model.inputs == seen  # a hit again
        assert counts(service)[m.SHARED_CACHE_OPEN] == 0

    asyncio.run(run())


def test_a_hung_cache_times_out_fast(cached_services, valkey_server):
    service, _ = cached_services(shared_cache_timeout_ms=50)
    cache = service.shared_cache

    async def run():
        assert await cache.connected()
        await service.predict(["warm the connection"], {})
        os.kill(valkey_server.process.pid, signal.SIGSTOP)
        try:
            timings = []
            for i in range(6):
                started_at = time.monotonic()
                await service.predict([f"hung {i}"], {})
                timings.append(time.monotonic() - started_at)
            assert cache.circuit.state == OPEN
            assert max(timings) < 2.0, timings  # bounded by the 50 ms timeout (a hung cache never answers), at any load
        finally:
            os.kill(valkey_server.process.pid, signal.SIGCONT)

    asyncio.run(run())


# -- the parts ----------------------------------------------------------------------------------------------------


def test_the_circuit_opens_after_failures_and_a_trial_success_closes_it():
    now = [0.0]
    states = []
    circuit = CircuitBreaker(3, 2.0, clock=lambda: now[0], on_change=states.append)
    for _ in range(2):
        assert circuit.allow()
        circuit.failed()
    assert circuit.state == CLOSED
    circuit.failed()
    assert circuit.state == OPEN and not circuit.allow()
    now[0] = 2.0
    assert circuit.allow() and circuit.state == HALF_OPEN
    assert not circuit.allow()  # one trial at a time
    circuit.failed()
    assert circuit.state == OPEN and not circuit.allow()
    now[0] = 4.0
    assert circuit.allow()
    circuit.succeeded()
    assert circuit.state == CLOSED and circuit.allow()
    assert states == [OPEN, HALF_OPEN, OPEN, HALF_OPEN, CLOSED]


def test_values_round_trip_exactly():
    value = {
        "label": "pos",
        "score": np.float32(0.9),
        "scores": {"pos": np.float32(0.9), "neg": np.float32(0.1)},
        "embedding": np.arange(6, dtype=np.float16).reshape(2, 3),
        "ids": [1, 2],
        "n": None,
    }
    back = decode_value(encode_value(value))
    assert back["score"].dtype == np.float32 and back["score"] == value["score"]
    assert back["embedding"].dtype == np.float16 and back["embedding"].shape == (2, 3)
    assert np.array_equal(back["embedding"], value["embedding"])
    assert back["ids"] == [1, 2] and back["n"] is None and back["scores"]["neg"] == np.float32(0.1)


def test_keys_hash_the_input_and_the_options():
    prefix = key_prefix("tiny", "1", "text-classification", {"b": 1, "a": 2})
    assert prefix == key_prefix("tiny", "1", "text-classification", {"a": 2, "b": 1})
    assert prefix != key_prefix("tiny", "1", "text-classification", {"a": 3, "b": 1})
    assert input_key(prefix, "secret text") != input_key(prefix, b"secret text")
    assert "secret" not in input_key(prefix, "secret text")
    assert input_key(prefix, "x").startswith("ic:tiny:1:text-classification:")


def test_store_and_lookup_are_one_round_trip_each(valkey_server):
    config = SharedCacheConfig(host="127.0.0.1", port=valkey_server.port, tls=False)
    monitor = valkey_server.client()
    before = monitor.info("stats")["total_commands_processed"]

    async def run():
        cache = SharedCache(config)
        assert await cache.connected()
        cache.store_many([(f"ic:k{i}", {"i": i}) for i in range(20)])
        await cache.flush()
        found = await cache.get_many([f"ic:k{i}" for i in range(25)])
        # ten requests looking up at once (one turn of the event loop) share one MGET
        together = await asyncio.gather(*(cache.get_many([f"ic:k{i}", "ic:none"]) for i in range(10)))
        await cache.close()
        return found, together

    found, together = asyncio.run(run())
    assert found[:20] == [{"i": i} for i in range(20)] and found[20:] == [None] * 5
    assert together == [[{"i": i}, None] for i in range(10)]
    stats = monitor.info("commandstats")
    assert stats["cmdstat_mget"]["calls"] == 2 and stats["cmdstat_set"]["calls"] == 20
    # one MGET, the 20 SETs pipelined (one write), plus the client's connection set-up commands
    assert monitor.info("stats")["total_commands_processed"] - before <= 20 + 2 + 4 + 2


def test_a_cluster_mode_cache_spreads_keys_over_slots(tmp_path):
    server = ValkeyServer(tmp_path)
    server.start_cluster()
    try:
        config = SharedCacheConfig(host="127.0.0.1", port=server.port, tls=False, cluster=True)

        async def run():
            cache = SharedCache(config)
            assert await cache.connected()
            keys = [input_key("ic:tiny:1:t:0:", f"text {i}") for i in range(10)]
            cache.store_many([(key, i) for i, key in enumerate(keys)])
            await cache.flush()
            found = await cache.get_many(keys)
            await cache.close()
            return found

        assert asyncio.run(run()) == list(range(10))
    finally:
        server.stop()


def test_settings_name_the_variable_at_fault(tmp_path):
    def config(**values):
        return config_from_settings(make_settings(tmp_path, **values), {"AWS_REGION": "eu-west-1"})

    assert config() is None
    with pytest.raises(SettingsError, match="SHARED_CACHE_ENDPOINT"):
        config(shared_cache_endpoint="no-port")
    with pytest.raises(SettingsError, match="SHARED_CACHE_NAME"):
        config(shared_cache_endpoint="cache:6379", shared_cache_iam_user="tasks")
    with pytest.raises(SettingsError, match="AWS_REGION"):
        config_from_settings(
            make_settings(tmp_path, shared_cache_endpoint="c:6379", shared_cache_iam_user="u", shared_cache_name="n"),
            {},
        )
    made = config(
        shared_cache_endpoint="cache.example:6379",
        shared_cache_iam_user="tasks",
        shared_cache_name="c",
        shared_cache_ttl_s=60,
        shared_cache_cluster=True,
    )
    assert made is not None
    assert (made.host, made.port, made.tls, made.cluster, made.ttl_s, made.region) == (
        "cache.example",
        6379,
        True,
        True,
        60,
        "eu-west-1",
    )


def test_iam_tokens_are_presigned_connect_requests():
    token = iam_auth_token(
        "model-tasks", "staging-results", "eu-west-1", credentials=Credentials("AKIDEXAMPLE", "secret")
    )
    assert not token.startswith("http")
    parts = urlsplit("http://" + token)
    query = parse_qs(parts.query)
    assert parts.netloc == "staging-results"
    assert query["Action"] == ["connect"] and query["User"] == ["model-tasks"]
    assert query["ResourceType"] == ["ServerlessCache"]
    assert query["X-Amz-Expires"] == ["900"] and query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert "/eu-west-1/elasticache/aws4_request" in query["X-Amz-Credential"][0]


def test_the_interval_metrics_document_carries_the_cache_and_its_circuit(cached_services):
    from inference_server import emf

    service, _ = cached_services()
    predict(service, ["counted"])
    predict(service, ["counted"])
    doc = emf.document("test", "tiny", counts(service))
    names = {metric["Name"]: metric["Unit"] for metric in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert names[m.SHARED_CACHE_LATENCY] == "Milliseconds" and names[m.SHARED_CACHE_OPEN] == "Count"
    assert (doc[m.SHARED_CACHE_HITS], doc[m.SHARED_CACHE_MISSES], doc[m.SHARED_CACHE_STORED]) == (1, 1, 1)
    assert doc[m.SHARED_CACHE_OPEN] == 0 and doc[m.SHARED_CACHE_LATENCY]["Count"] >= 3
