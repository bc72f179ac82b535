"""The versioned registry document and its atomic write are one implementation for two kinds: a model pool's
(pools/<pool>/registry.json, {"pool", "models"}) and an LLM's adapters (adapters/<base>/registry.json, {"base",
"adapters"}). Each kind reads only its own form; a concurrent write to either is retried, not lost."""

from __future__ import annotations

import orjson
import pytest

from inference_server.adapters.registry import AdapterRegistry, adapter_prefix
from inference_server.pool.registry import Registry
from inference_server.registry import s3 as shared
from inference_server.registry.document import RegistryError


def test_both_kinds_are_the_same_document_under_their_own_keys():
    pool = Registry("pool-a", {"m": "1"}).with_version("n", "2")
    adapters = AdapterRegistry("llama", {"a": "1"}).with_version("b", "2")
    assert orjson.loads(pool.to_json()) == {
        "pool": "pool-a",
        "models": {"m": {"version": "1"}, "n": {"version": "2"}},
        "revision": 1,
    }
    assert orjson.loads(adapters.to_json()) == {
        "base": "llama", "adapters": {"a": {"version": "1"}, "b": {"version": "2"}}, "revision": 1,
    }  # fmt: skip
    assert AdapterRegistry.from_json(adapters.to_json()) == adapters and Registry.from_json(pool.to_json()) == pool
    assert type(adapters.without("a")) is AdapterRegistry and dict(adapters.without("a").adapters) == {"b": "2"}
    assert (Registry.key("pool-a"), AdapterRegistry.key("llama")) == (
        "pools/pool-a/registry.json",
        "adapters/llama/registry.json",
    )
    assert adapter_prefix("llama", "a", "1") == "adapters/llama/a/1/"


def test_each_kind_refuses_the_other_kinds_document():
    with pytest.raises(RegistryError, match='"base"'):
        AdapterRegistry.from_json(Registry("pool-a").to_json())
    with pytest.raises(RegistryError, match='"pool"'):
        Registry.from_json(AdapterRegistry("llama").to_json())


@pytest.mark.parametrize("name", ["Bad", "a/b", "", "x" * 65])
def test_adapter_names_are_plain_model_names(name):
    with pytest.raises(RegistryError, match="adapter name"):
        AdapterRegistry("llama", {name: "1"})
    with pytest.raises(RegistryError, match="not registered"):
        AdapterRegistry("llama").without("a")


def test_a_concurrent_adapter_registry_write_is_retried_not_lost(s3, bucket, monkeypatch):
    shared.update_registry(s3, bucket, AdapterRegistry, "llama", lambda r: r.with_version("b", "1"))
    real = shared.read_registry
    raced = []

    def racing(client, bucket_, kind, owner):
        result = real(client, bucket_, kind, owner)
        if not raced:
            raced.append(True)
            shared.update_registry(client, bucket_, kind, owner, lambda r: r.with_version("c", "1"))
        return result

    monkeypatch.setattr(shared, "read_registry", racing)
    shared.update_registry(s3, bucket, AdapterRegistry, "llama", lambda r: r.with_version("a", "1"))
    registry, _ = real(s3, bucket, AdapterRegistry, "llama")
    assert dict(registry.adapters) == {"a": "1", "b": "1", "c": "1"} and registry.revision == 3


def test_polling_costs_no_body_while_unchanged(s3, bucket):
    key = AdapterRegistry.key("llama")
    empty, etag = shared.read_if_changed(s3, bucket, key, AdapterRegistry, "llama", None)
    assert empty == AdapterRegistry("llama") and etag is None
    shared.update_registry(s3, bucket, AdapterRegistry, "llama", lambda r: r.with_version("a", "1"))
    first, etag = shared.read_if_changed(s3, bucket, key, AdapterRegistry, "llama", None)
    assert first is not None and dict(first.adapters) == {"a": "1"}
    assert shared.read_if_changed(s3, bucket, key, AdapterRegistry, "llama", etag) == (None, etag)
