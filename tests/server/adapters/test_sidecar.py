"""The adapter-sync sidecar against moto S3 and a fake vLLM (or SGLang) server: a task's first sync (/ready 503 until
every registered adapter is loaded, then 200), an adapter added, removed (unloaded before its files go), moved to
another
version, one refused for its rank, a failed load's backoff, a server that lost its adapters, and the settings."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from inference_server import facts
from inference_server.adapters.__main__ import Sidecar
from inference_server.adapters.registry import AdapterRegistry
from inference_server.adapters.sidecar_settings import load_sidecar_settings
from inference_server.publish import publish_adapter
from inference_server.registry import s3 as registry_s3
from inference_server.settings import SettingsError
from tests.server.adapters.fake_llm_server import FakeLlmServer
from tests.server.adapters.peft_files import write_llama_base, write_lora_adapter

BASE = "tiny-llama"
KEY = "test-key"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the servers are on localhost


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return write_llama_base(tmp_path_factory.mktemp("base") / BASE)


@pytest.fixture
def published(s3, bucket, base_dir, tmp_path):
    """publish(name, version, rank=8, register=True): an adapter in the store (and in the registry)."""

    def make(name: str, version: str = "1", rank: int = 8, seed: int = 0) -> None:
        adapter = write_lora_adapter(tmp_path / "src" / f"{name}-{version}", rank=rank, seed=seed)
        publish_adapter(adapter, f"s3://{bucket}/", BASE, str(base_dir), name, version, client=s3)

    return make


@pytest.fixture
def server():
    made: list[FakeLlmServer] = []

    def make(kind: str = "vllm") -> FakeLlmServer:
        made.append(FakeLlmServer(kind, KEY))
        return made[-1]

    yield make
    for fake in made:
        fake.stop()


@pytest.fixture
def sidecar(s3, bucket, tmp_path):
    def make(fake: FakeLlmServer, **overrides) -> Sidecar:
        settings = load_sidecar_settings(
            {},
            registry_uri=f"s3://{bucket}/adapters/{BASE}/registry.json",
            adapter_dir=tmp_path / "adapters",
            server_url=fake.url,
            server_kind=fake.kind,
            server_api_key=KEY,
            **overrides,
        )
        return Sidecar(settings, client=s3)

    return make


def registered(s3, bucket) -> dict[str, str]:
    return dict(registry_s3.read_registry(s3, bucket, AdapterRegistry, BASE)[0].adapters)


def completion(fake: FakeLlmServer, model: str) -> int:
    request = urllib.request.Request(
        fake.url + "/v1/completions",
        data=json.dumps({"model": model, "prompt": "hi"}).encode(),
        headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
    )
    try:
        with OPENER.open(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_task_serves_every_registered_adapter_before_it_is_ready(server, sidecar, published, tmp_path):
    for name in ("alpha", "beta", "gamma"):
        published(name)
    fake = server()
    fake.answering = False  # the server is still starting
    car = sidecar(fake)
    car.poll()
    status = car.sync.status
    assert not status.ready and status.to_json()["server"] == "not answering"
    fake.answering = True
    car.poll()
    assert car.sync.status.ready and set(fake.adapters) == {"alpha", "beta", "gamma"}
    assert completion(fake, "beta") == 200 and completion(fake, "ghost") == 404
    assert Path(fake.adapters["alpha"]) == tmp_path / "adapters" / "alpha" / "1"
    assert not (tmp_path / "adapters" / ".partial").exists() or not any((tmp_path / "adapters" / ".partial").iterdir())


def test_ready_answers_503_naming_what_is_missing_then_200(server, sidecar, published):
    from inference_server.adapters.ready import ready_server

    published("alpha")
    fake = server()
    car = sidecar(fake)
    http = ready_server("127.0.0.1", 0, lambda: car.sync.status)
    url = f"http://127.0.0.1:{http.server_address[1]}"
    try:
        with pytest.raises(urllib.error.HTTPError) as before:
            OPENER.open(url + "/ready", timeout=5)
        assert before.value.code == 503 and json.loads(before.value.read())["registry_revision"] is None
        fake.answering = False
        car.poll()  # the registry is read, the server does not answer: alpha is missing
        with pytest.raises(urllib.error.HTTPError) as starting:
            OPENER.open(url + "/ready", timeout=5)
        body = json.loads(starting.value.read())
        assert starting.value.code == 503 and body["missing"] == ["alpha"] and body["server"] == "not answering"
        fake.answering = True
        car.poll()
        with OPENER.open(url + "/ready", timeout=5) as ready:
            assert ready.status == 200 and json.loads(ready.read())["loaded"] == 1
        with pytest.raises(urllib.error.HTTPError) as other:
            OPENER.open(url + "/other", timeout=5)
        assert other.value.code == 404
    finally:
        http.shutdown()


def test_an_added_adapter_is_loaded_and_a_removed_one_unloaded_before_its_files_go(
    s3, bucket, server, sidecar, published, tmp_path
):
    published("alpha")
    fake = server()
    car = sidecar(fake)
    car.poll()
    published("beta")
    car.poll()
    assert set(fake.adapters) == {"alpha", "beta"} and completion(fake, "beta") == 200
    registry_s3.remove(s3, bucket, AdapterRegistry, BASE, "alpha")
    car.poll()
    assert set(fake.adapters) == {"beta"} and completion(fake, "alpha") == 404
    assert fake.files_at_unload["alpha"], "the server still had the files when it unloaded the adapter"
    assert not (tmp_path / "adapters" / "alpha").exists(), "then the files are deleted"
    assert car.sync.status.ready


def test_a_version_move_loads_the_new_version_and_deletes_the_old(s3, bucket, server, sidecar, published, tmp_path):
    published("alpha", "1")
    fake = server()
    car = sidecar(fake)
    car.poll()
    published("alpha", "2", seed=1)
    car.poll()
    assert fake.adapters["alpha"] == str(tmp_path / "adapters" / "alpha" / "2")
    assert fake.calls[-1] == ("load", "alpha") and ("unload", "alpha") not in fake.calls, "in place: never a 404"
    assert not (tmp_path / "adapters" / "alpha" / "1").exists()
    registry_s3.set_version(s3, bucket, AdapterRegistry, BASE, "alpha", "1")  # roll back
    car.poll()
    assert fake.adapters["alpha"].endswith("alpha/1") and car.sync.status.loaded == {"alpha": "1"}


def test_a_version_that_fails_to_load_leaves_the_previous_serving_on_vllm(server, sidecar, published, tmp_path):
    published("alpha", "1")
    fake = server()
    car = sidecar(fake)
    car.poll()
    fake.fail_loads["alpha"] = "Loading lora alpha failed: shape mismatch"
    published("alpha", "2", seed=1)
    car.poll()
    status = car.sync.status
    assert fake.adapters["alpha"].endswith("alpha/1") and status.loaded == {"alpha": "1"}
    assert status.failed["alpha"].version == "2" and status.ready, "the failed version is named; the old one serves"
    assert (tmp_path / "adapters" / "alpha" / "1").is_dir()


def test_an_sglang_move_unloads_then_loads(server, sidecar, published):
    published("alpha", "1")
    fake = server("sglang")
    car = sidecar(fake)
    car.poll()
    published("alpha", "2", seed=1)
    car.poll()
    assert fake.calls[-2:] == [("unload", "alpha"), ("load", "alpha")] and fake.adapters["alpha"].endswith("alpha/2")


def test_an_adapter_above_the_max_rank_is_refused_without_a_download_and_named(server, sidecar, published, tmp_path):
    published("small", rank=8)
    published("large", rank=32)
    fake = server()
    car = sidecar(fake, max_rank=16)
    car.poll()
    status = car.sync.status.to_json()
    assert set(fake.adapters) == {"small"} and not (tmp_path / "adapters" / "large").exists()
    assert (
        "ADAPTER_MAX_RANK 16" in status["failed"]["large"]["error"] and status["failed"]["large"]["retry_in_s"] is None
    )
    assert status["ready"], "a refused adapter is named, and does not hold the task's readiness"
    car.poll()
    assert ("load", "large") not in fake.calls


def test_a_failed_load_backs_off_and_is_retried_after_it(server, sidecar, published):
    published("alpha")
    fake = server()
    fake.fail_loads["alpha"] = "Loading lora alpha failed: shape mismatch"
    car = sidecar(fake, backoff_s=30.0, max_backoff_s=60.0)
    now = [1000.0]
    car.sync.clock = lambda: now[0]
    car.poll()
    failed = car.sync.status.to_json()["failed"]["alpha"]
    assert "shape mismatch" in failed["error"] and failed["retry_in_s"] == 30.0 and failed["attempts"] == 1
    car.poll()
    car.poll()
    assert fake.calls.count(("load", "alpha")) == 1, "not retried every poll"
    now[0] += 31
    car.poll()
    assert fake.calls.count(("load", "alpha")) == 2 and car.sync.status.failed["alpha"].attempts == 2
    assert car.sync.status.to_json()["failed"]["alpha"]["retry_in_s"] == 60.0, "doubled, capped"
    del fake.fail_loads["alpha"]
    now[0] += 61
    car.poll()
    assert "alpha" in fake.adapters and not car.sync.status.failed


def test_a_server_that_lost_its_adapters_gets_them_again(server, sidecar, published):
    published("alpha")
    fake = server()
    car = sidecar(fake)
    car.poll()
    fake.restart()
    car.poll()
    assert "alpha" in fake.adapters and fake.calls.count(("load", "alpha")) == 2


def test_a_sidecar_restart_takes_over_adapters_the_server_already_has(server, sidecar, published):
    published("alpha")
    fake = server()
    sidecar(fake).poll()
    sidecar(fake).poll()  # a new sidecar process: it loads the registered version in place of what the server has
    assert "alpha" in fake.adapters and fake.calls == [("load", "alpha"), ("load", "alpha")]


def test_sglang_endpoints_are_used_for_an_sglang_server(server, sidecar, published):
    published("alpha")
    fake = server("sglang")
    car = sidecar(fake)
    car.poll()
    assert car.sync.status.ready and "alpha" in fake.adapters


def test_each_poll_emits_one_emf_line_with_the_adapter_figures(server, sidecar, published, capsys, restore_logging):
    from inference_server.logs import configure_logging

    published("alpha")
    configure_logging()
    car = sidecar(server())
    car.poll()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"CloudWatchMetrics"' in line]
    (doc,) = lines
    names = [m["Name"] for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
    assert set(names) <= set(facts.ADAPTER_METRIC_NAMES) and doc[facts.ADAPTER_LOADS] == 1
    assert doc[facts.ADAPTERS_REGISTERED] == doc[facts.ADAPTERS_LOADED] == 1
    assert doc[facts.DIMENSION_MODEL] == BASE and doc["adapters_loaded_now"] == ["alpha"]
    assert doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [[facts.DIMENSION_ENVIRONMENT, facts.DIMENSION_MODEL]]


def test_adapter_metric_names_are_the_contract():
    assert facts.ADAPTER_METRIC_NAMES == (
        "AdapterLoads", "AdapterLoadSeconds", "AdapterFailedLoads", "AdaptersRegistered", "AdaptersLoaded",
    )  # fmt: skip


@pytest.mark.parametrize(
    "env, variable",
    [
        ({}, "ADAPTER_REGISTRY_URI"),
        ({"ADAPTER_REGISTRY_URI": "s3://b/pools/p/registry.json"}, "ADAPTER_REGISTRY_URI"),
        ({"ADAPTER_REGISTRY_URI": "s3://b/adapters/Bad_Name/registry.json"}, "ADAPTER_REGISTRY_URI"),
        (
            {"ADAPTER_REGISTRY_URI": "s3://b/adapters/x/registry.json", "ADAPTER_SERVER_KIND": "tgi"},
            "ADAPTER_SERVER_KIND",
        ),
        (
            {"ADAPTER_REGISTRY_URI": "s3://b/adapters/x/registry.json", "ADAPTER_POLL_SECONDS": "0"},
            "ADAPTER_POLL_SECONDS",
        ),
    ],
)
def test_a_bad_setting_names_its_variable(env, variable):
    with pytest.raises(SettingsError) as error:
        load_sidecar_settings(env)
    assert error.value.variable == variable


def test_settings_take_the_base_and_bucket_from_the_registry_uri():
    settings = load_sidecar_settings({"ADAPTER_REGISTRY_URI": "s3://models/adapters/llama-3-8b/registry.json"})
    assert (settings.bucket, settings.base, settings.registry_key) == (
        "models", "llama-3-8b", "adapters/llama-3-8b/registry.json",
    )  # fmt: skip
    assert settings.poll_s == 10.0 and settings.ready_port == 8081 and settings.adapter_dir == Path("/adapters")


def test_the_command_exits_2_on_a_bad_setting(monkeypatch, restore_logging):
    from inference_server.adapters.__main__ import main

    monkeypatch.delenv("ADAPTER_REGISTRY_URI", raising=False)
    assert main() == 2
