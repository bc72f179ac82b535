"""A pool against moto S3 with tiny BERTs published as `publish --pool` does: every protocol's route, 404/400 before
storage, registry changes without a restart (move, roll back, remove), every version verified against its manifest,
a version failing its published probe refused while the previous serves, the disk tier, and the settings."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

from inference_server import publish as publish_cli
from inference_server.pool.loaded import DEVICE
from inference_server.pool.pool_settings import load_pool_settings
from inference_server.pool.registry import Registry, RegistryError
from inference_server.pool.registry_write import read_registry
from inference_server.pool.server import PoolServer
from inference_server.pool.store import DISK, S3
from inference_server.publish import publish_to_pool
from inference_server.settings import SettingsError
from inference_server.testing import build_tiny_bert

POOL = "pool-a"


@pytest.fixture(scope="module")
def second_classifier_dir(tmp_path_factory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-classifier-2"), "text-classification", seed=1)


@pytest.fixture
def store(s3, bucket, tiny_classifier_dir, tiny_embedder_dir) -> str:
    publish_to_pool(tiny_classifier_dir, f"s3://{bucket}/", POOL, "clf", "1", task="text-classification", client=s3)
    publish_to_pool(tiny_embedder_dir, f"s3://{bucket}/", POOL, "emb", "1", task="text-embedding", client=s3)
    return f"s3://{bucket}/pools/{POOL}/"


@pytest.fixture
def server(store, tmp_path):
    servers: list[PoolServer] = []

    def make(**overrides) -> PoolServer:
        settings = load_pool_settings(
            {},
            pool_name=POOL,
            store_uri=store,
            cache_dir=tmp_path / "cache",
            max_batch_size=8,
            max_sequence_length=64,
            metrics_interval_s=3600.0,
            signal_interval_s=3600.0,  # the scale-out signal also logs "metrics"
            registry_poll_s=3600.0,
            **overrides,
        )
        made = PoolServer(settings)
        made.start()
        servers.append(made)
        return made

    yield make
    for made in servers:
        made.stop()


def spy_fetches(server: PoolServer) -> list[tuple[str, str]]:
    fetched: list[tuple[str, str]] = []
    fetch = server.store.fetch

    def spy(model: str, version: str):
        fetched.append((model, version))
        return fetch(model, version)

    server.store.fetch = spy  # type: ignore[method-assign]
    return fetched


def oip(client: TestClient, model: str, texts: list[str]):
    return client.post(
        f"/{POOL}/v2/models/{model}/infer",
        json={"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(texts)], "data": texts}]},
    )


def wait_for_version(client: TestClient, server: PoolServer, model: str, version: str) -> None:
    server.poll_registry()
    deadline = time.monotonic() + 60
    while oip(client, model, ["hello"]).json().get("model_version") != version:
        assert time.monotonic() < deadline, f"{model} never served version {version}"
        time.sleep(0.05)


def test_every_protocol_serves_a_registered_model_by_name(server):
    app = server()
    with TestClient(app.app) as client:
        assert client.get(f"/{POOL}/ready").status_code == 200
        native = client.post(f"/{POOL}/models/clf/predict", json={"text": "good service"})
        assert native.status_code == 200 and native.json()["prediction"]["label"] in ("negative", "positive")
        many = client.post(f"/{POOL}/models/clf/predict", json={"texts": ["good", "bad"]})
        assert len(many.json()["predictions"]) == 2
        embeddings = client.post(f"/{POOL}/v1/embeddings", json={"model": "emb", "input": ["a", "b"]})
        assert embeddings.status_code == 200 and len(embeddings.json()["data"]) == 2
        assert embeddings.json()["model"] == "emb" and embeddings.json()["usage"]["prompt_tokens"] > 0
        infer = oip(client, "clf", ["good", "bad"])
        assert infer.status_code == 200 and infer.json()["model_version"] == "1"
        assert infer.json()["outputs"][0]["shape"][0] == 2
        listed = client.get(f"/{POOL}/v1/models").json()["data"]
        assert [m["id"] for m in listed] == ["clf", "emb"]


@pytest.mark.parametrize(
    "path, body",
    [
        ("/{pool}/models/ghost/predict", {"text": "x"}),
        (
            "/{pool}/v2/models/ghost/infer",
            {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["x"]}]},
        ),
        ("/{pool}/v1/embeddings", {"model": "ghost", "input": "x"}),
    ],
)
def test_an_unknown_model_is_a_404_naming_the_pool_and_never_fetched(server, path, body):
    app = server()
    fetched = spy_fetches(app)
    with TestClient(app.app) as client:
        response = client.post(path.format(pool=POOL), json=body)
    assert response.status_code == 404 and POOL in response.text and "ghost" in response.text
    assert not fetched


@pytest.mark.parametrize("name", ["Clf", "clf_1", "-clf", "a.b", "a" * 65])
def test_a_name_that_is_not_plain_is_a_400_and_never_fetched(server, name):
    app = server()
    fetched = spy_fetches(app)
    with TestClient(app.app) as client:
        native = client.post(f"/{POOL}/models/{name}/predict", json={"text": "x"})
        openai = client.post(f"/{POOL}/v1/embeddings", json={"model": name, "input": "x"})
    assert native.status_code == 400 and openai.status_code == 400, (native.text, openai.text)
    assert not fetched


def test_bad_requests_are_4xx_not_500(server):
    app = server()
    with TestClient(app.app) as client:
        assert client.post(f"/{POOL}/models/clf/predict", content=b"not json").status_code == 400
        assert client.post(f"/{POOL}/models/clf/predict", json={"text": ""}).status_code == 422
        assert client.post(f"/{POOL}/models/clf/predict", json={"text": "x", "extra": 1}).status_code == 422
        assert client.post(f"/{POOL}/v1/embeddings", json={"model": "clf", "input": "x"}).status_code == 400
        assert client.post(f"/{POOL}/v1/embeddings", json={"input": "x"}).status_code == 400
        assert oip(client, "clf", []).status_code == 422


def test_the_registry_moves_rolls_back_and_removes_without_a_restart(server, s3, bucket, second_classifier_dir):
    app = server()
    with TestClient(app.app) as client:
        first = oip(client, "clf", ["good service"]).json()
        assert first["model_version"] == "1"
        assert (
            publish_cli.main(
                [
                    str(second_classifier_dir),
                    f"s3://{bucket}/",
                    "--pool",
                    POOL,
                    "--model-name",
                    "clf",
                    "--version",
                    "2",
                    "--task",
                    "text-classification",
                ]
            )
            == 0
        )
        wait_for_version(client, app, "clf", "2")
        assert oip(client, "clf", ["good service"]).json()["outputs"] != first["outputs"]  # other weights
        assert publish_cli.main(["--pool", POOL, "--store", f"s3://{bucket}/", "--set-version", "clf=1"]) == 0
        wait_for_version(client, app, "clf", "1")
        assert oip(client, "clf", ["good service"]).json()["outputs"] == first["outputs"]
        assert publish_cli.main(["--pool", POOL, "--store", f"s3://{bucket}/", "--remove", "emb"]) == 0
        app.poll_registry()
        assert client.post(f"/{POOL}/v1/embeddings", json={"model": "emb", "input": "x"}).status_code == 404
    registry, _ = read_registry(s3, bucket, POOL)
    assert dict(registry.models) == {"clf": "1"} and registry.revision == 5


def test_a_version_whose_files_do_not_match_its_manifest_is_refused_and_the_previous_serves(
    server, s3, bucket, second_classifier_dir
):
    app = server()
    publish_to_pool(second_classifier_dir, f"s3://{bucket}/", POOL, "clf", "3", task="text-classification", client=s3)
    s3.put_object(Bucket=bucket, Key=f"pools/{POOL}/models/clf/3/model.safetensors", Body=b"tampered")
    with TestClient(app.app) as client:
        app.pool.apply_registry(Registry(POOL, {"clf": "1", "emb": "1"}, 99))  # clf 1 serving first
        assert oip(client, "clf", ["x"]).json()["model_version"] == "1"
        app.poll_registry()  # the store's registry names clf 3
        deadline = time.monotonic() + 60
        while ("clf", "3") not in app.pool._failed:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert "manifest" in app.pool._failed[("clf", "3")].error
        assert oip(client, "clf", ["x"]).json()["model_version"] == "1"


def test_a_version_that_fails_its_published_probe_is_refused_and_the_previous_serves(server, s3, bucket):
    app = server()
    with TestClient(app.app) as client:
        assert oip(client, "clf", ["x"]).json()["model_version"] == "1"
        source = f"pools/{POOL}/models/clf/1/"
        for obj in s3.list_objects_v2(Bucket=bucket, Prefix=source)["Contents"]:
            body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            name = obj["Key"][len(source) :]
            if name == "manifest.json":  # the same files, but a probe answer the weights do not give
                doc = orjson.loads(body)
                doc["version"] = "4"
                scores = doc["probe"]["answer"]["scores"]
                doc["probe"]["answer"]["scores"] = {label: 0.9 if i == 0 else 0.1 for i, label in enumerate(scores)}
                body = orjson.dumps(doc)
            s3.put_object(Bucket=bucket, Key=f"pools/{POOL}/models/clf/4/{name}", Body=body)
        assert publish_cli.main(["--pool", POOL, "--store", f"s3://{bucket}/", "--set-version", "clf=4"]) == 0
        app.poll_registry()
        deadline = time.monotonic() + 60
        while ("clf", "4") not in app.pool._failed:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert "does not answer as published" in app.pool._failed[("clf", "4")].error
        response = oip(client, "clf", ["x"])
        assert response.status_code == 200 and response.json()["model_version"] == "1"


def test_a_model_evicted_past_host_memory_reloads_from_the_disk_cache_not_s3(server):
    app = server(max_resident_models=1, host_memory_mib=0)

    async def tier(name: str) -> str:
        model, where = await app.pool.acquire(name, time.monotonic() + 30)
        app.pool.release(model)
        return where

    import asyncio

    assert [asyncio.run(tier(name)) for name in ("clf", "clf", "emb", "clf")] == [S3, DEVICE, S3, DISK]


def test_publish_refuses_to_register_a_version_never_published(s3, bucket, store):
    assert publish_cli.main(["--pool", POOL, "--store", f"s3://{bucket}/", "--set-version", "clf=9"]) == 1
    assert publish_cli.main(["--pool", POOL, "--store", f"s3://{bucket}/", "--remove", "ghost"]) == 1
    assert publish_cli.main(["--store", f"s3://{bucket}/", "--remove", "clf"]) == 1  # no --pool
    registry, _ = read_registry(s3, bucket, POOL)
    assert dict(registry.models) == {"clf": "1", "emb": "1"}


def test_a_concurrent_registry_write_is_retried_not_lost(s3, bucket, store, monkeypatch):
    from inference_server.pool import registry_write
    from inference_server.registry import s3 as shared  # the pool's and the adapters' one implementation

    real = shared.read_registry
    raced = []

    def racing(client, bucket_, kind, owner):
        result = real(client, bucket_, kind, owner)
        if not raced:  # another publisher writes between this read and its write
            raced.append(True)
            registry_write.update_registry(client, bucket_, owner, lambda r: r.without("emb"))
        return result

    monkeypatch.setattr(shared, "read_registry", racing)
    registry_write.set_version(s3, bucket, POOL, "clf", "1")
    registry, _ = registry_write.read_registry(s3, bucket, POOL)
    assert "emb" not in registry.models  # the other change survived


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b"{}",
        b'{"pool": "p", "models": {"A": {"version": "1"}}}',
        b'{"pool": "p", "models": {"a": {"version": "../1"}}}',
        b'{"pool": "p", "models": {"a": "1"}}',
        b'{"pool": "p", "models": {}, "revision": -1}',
    ],
)
def test_a_malformed_registry_is_refused(body):
    with pytest.raises(RegistryError):
        Registry.from_json(body)


def test_the_store_uri_must_be_the_pools_own_prefix():
    with pytest.raises(SettingsError, match="MODEL_STORE_URI"):
        load_pool_settings({"POOL_NAME": POOL, "MODEL_STORE_URI": "s3://bucket/pools/other/"})
    with pytest.raises(SettingsError, match="POOL_NAME"):
        load_pool_settings({"MODEL_STORE_URI": "s3://bucket/pools/other/"})
    settings = load_pool_settings(
        {"POOL_NAME": POOL, "MODEL_STORE_URI": f"s3://bucket/pools/{POOL}/", "POOL_GPU_MEMORY_MIB": "2048"}
    )
    assert settings.gpu_memory_bytes == 2048 << 20 and settings.registry_poll_s == 10.0


def test_a_verified_file_is_not_hashed_again_until_it_changes_then_it_is_and_is_refused(tmp_path, tiny_classifier_dir):
    import shutil

    from inference_server.engine.artifacts import ArtifactError
    from inference_server.manifest import build_manifest
    from inference_server.pool.store import ModelStore

    version_dir = tmp_path / "pools" / POOL / "models" / "clf" / "1"
    shutil.copytree(tiny_classifier_dir, version_dir)
    (version_dir / "manifest.json").write_bytes(build_manifest(tiny_classifier_dir, "clf", "1").to_json())
    store = ModelStore(str(tmp_path / "pools" / POOL), tmp_path / "cache", 1 << 30)
    assert store.fetch("clf", "1").verified_now
    assert not store.fetch("clf", "1").verified_now
    weights = version_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(ArtifactError, match="model.safetensors"):
        store.fetch("clf", "1")


def test_pool_metrics_are_one_document_and_one_line_per_model_with_requests(server, caplog):
    import logging

    from inference_server import facts

    app = server()
    with TestClient(app.app) as client:
        for _ in range(2):
            client.post(f"/{POOL}/models/clf/predict", json={"text": "good"})
        client.post(f"/{POOL}/v1/embeddings", json={"model": "emb", "input": "x"})
        client.post(f"/{POOL}/models/ghost/predict", json={"text": "x"})  # a 404: no line for a name not registered
        with caplog.at_level(logging.INFO, logger="inference_server.pool.server"):
            app.emit_metrics()
    records = [r for r in caplog.records if r.name == "inference_server.pool.server"]
    # QueueDepth is the scale-out signal's own document (test_pool_service.py), not the interval's.
    (document,) = [r.fields for r in records if r.getMessage() == "metrics"]  # type: ignore[attr-defined]
    names = {m["Name"] for m in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert names == {
        facts.POOL_RESIDENT_MODELS,
        facts.POOL_HIT_RATE,
        facts.POOL_LOADS,
        facts.POOL_LOAD_TIME,
        facts.POOL_EVICTIONS,
        facts.POOL_FAILED_LOADS,
        facts.REQUEST_LATENCY,
        facts.REJECTED_REQUESTS,
        facts.TIMED_OUT_REQUESTS,
    }
    assert document[facts.REQUEST_LATENCY]["Count"] == 3 and document[facts.POOL_LOAD_TIME]["Count"] == 2
    assert document["ModelName"] == POOL and document[facts.POOL_HIT_RATE] == pytest.approx(100 / 3, abs=0.01)
    lines = {
        r.fields["PoolModel"]: r.fields
        for r in records  # type: ignore[attr-defined]
        if r.getMessage() == facts.POOL_MODEL_MESSAGE
    }
    assert set(lines) == {"clf", "emb"} and lines["clf"]["PoolModelRequests"] == 2
    assert set(lines["clf"]) == set(facts.POOL_MODEL_FIELDS)


def test_the_server_command_runs_a_pool_when_pool_name_is_set(monkeypatch):
    from inference_server import __main__ as server_main
    from inference_server.pool import __main__ as pool_main

    monkeypatch.setenv("POOL_NAME", POOL)
    monkeypatch.setattr(pool_main, "main", lambda: 42)
    assert server_main.main() == 42


def test_api_keys_guard_every_model_route_but_not_the_probes(server):
    app = server(api_keys=(("team", "sk-pool"),))
    with TestClient(app.app) as client:
        assert client.post(f"/{POOL}/models/clf/predict", json={"text": "x"}).status_code == 401
        assert (
            client.post(
                f"/{POOL}/v1/embeddings", json={"model": "emb", "input": "x"}, headers={"x-api-key": "wrong"}
            ).status_code
            == 401
        )
        assert (
            client.post(
                f"/{POOL}/models/clf/predict", json={"text": "x"}, headers={"Authorization": "Bearer sk-pool"}
            ).status_code
            == 200
        )
        assert client.get(f"/{POOL}/ready").status_code == 200 and client.get("/health").status_code == 200


def test_an_oip_answer_is_encoded_before_its_model_is_let_go(server):
    """A registry change may retire a model and unload it the moment its last request releases it (resident.py);
    the OIP route's output tensors are read from the handler, so they are made before the release. Here every
    last release unloads the model at once, as a retired model's does (in a clean clone's CI run the registry's
    rollback came between a batch and its encoding: an AttributeError, a 500)."""
    app = server()
    release = app.pool.release

    def release_and_unload(model):
        release(model)
        if model.in_flight == 0:  # the last holder gone: a retired model is unloaded here
            model.handler.unload()

    app.pool.release = release_and_unload  # type: ignore[method-assign]
    with TestClient(app.app) as client:
        infer = oip(client, "clf", ["good", "bad"])
        assert infer.status_code == 200 and infer.json()["model_version"] == "1"
