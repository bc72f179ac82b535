"""publish --adapter against moto S3: the adapter checked against its base (a local directory or its published version),
published with a manifest and hashes like a model and registered in the base's adapter registry (one atomic write);
--set-version and --remove with --base; every refusal exits 1, names what and the fix, and uploads nothing."""

from __future__ import annotations

import orjson
import pytest

from inference_server import publish as publish_cli
from inference_server.adapters.registry import AdapterRegistry
from inference_server.manifest import Manifest
from inference_server.registry.s3 import read_registry
from tests.server.adapters.peft_files import write_llama_base, write_lora_adapter

BASE = "tiny-llama"
pytestmark = pytest.mark.usefixtures("restore_logging")  # main() configures logging


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return write_llama_base(tmp_path_factory.mktemp("base") / BASE)


def publish(bucket, adapter_dir, base_model, name="support", version="1", *extra: str) -> int:
    return publish_cli.main(
        [
            "--adapter", str(adapter_dir), f"s3://{bucket}/", "--base", BASE, "--base-model", str(base_model),
            "--model-name", name, "--version", version, *extra,
        ]
    )  # fmt: skip


def keys(s3, bucket, prefix="adapters/") -> set[str]:
    return {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])}


def test_an_adapter_is_published_with_its_manifest_and_registered(s3, bucket, base_dir, tmp_path):
    assert (
        publish(bucket, write_lora_adapter(tmp_path / "a", rank=8), base_dir, "support", "1", "--max-rank", "16") == 0
    )
    prefix = f"adapters/{BASE}/support/1/"
    assert keys(s3, bucket) >= {
        prefix + "adapter_config.json",
        prefix + "adapter_model.safetensors",
        prefix + "manifest.json",
        prefix + "SHA256SUMS",
        f"adapters/{BASE}/registry.json",
    }
    body = s3.get_object(Bucket=bucket, Key=prefix + "manifest.json")["Body"].read()
    doc = orjson.loads(body)
    assert (doc["kind"], doc["base_model"], doc["rank"], doc["target_modules"]) == (
        "lora-adapter", BASE, 8, ["q_proj", "v_proj"],
    )  # fmt: skip
    manifest = Manifest.from_json(body)
    assert (
        manifest.adapter is not None
        and manifest.adapter.rank == 8
        and set(manifest.files)
        == {
            "adapter_config.json",
            "adapter_model.safetensors",
        }
    )
    registry, _ = read_registry(s3, bucket, AdapterRegistry, BASE)
    assert dict(registry.adapters) == {"support": "1"} and registry.revision == 1
    raw = orjson.loads(s3.get_object(Bucket=bucket, Key=f"adapters/{BASE}/registry.json")["Body"].read())
    assert raw == {"base": BASE, "adapters": {"support": {"version": "1"}}, "revision": 1}


def test_the_base_can_be_its_published_version_in_the_store(s3, bucket, base_dir, tmp_path):
    publish_cli.publish(base_dir, f"s3://{bucket}/models/{BASE}/2026-12-01/", client=s3)
    base_uri = f"s3://{bucket}/models/{BASE}/2026-12-01/"
    assert publish(bucket, write_lora_adapter(tmp_path / "a"), base_uri, "billing", "3") == 0
    assert (
        publish(bucket, write_lora_adapter(tmp_path / "b", config={"target_modules": ["w_proj"]}), base_uri, "x", "1")
        == 1
    )
    assert publish(bucket, write_lora_adapter(tmp_path / "c"), f"s3://{bucket}/models/{BASE}/9/", "y", "1") == 1
    registry, _ = read_registry(s3, bucket, AdapterRegistry, BASE)
    assert dict(registry.adapters) == {"billing": "3"}


@pytest.mark.parametrize(
    "adapter, extra, message",
    [
        ({"rank": 32}, ["--max-rank", "16"], "--max-rank 16"),
        ({"config": {"target_modules": ["q_proj", "c_attn"]}}, [], "c_attn"),
        ({"base": "meta-llama/Llama-3.1-8B"}, [], "base_model_name_or_path"),
    ],
)
def test_a_refused_adapter_exits_1_names_the_fix_and_uploads_nothing(
    s3, bucket, base_dir, tmp_path, capsys, restore_logging, adapter, extra, message
):
    assert publish(bucket, write_lora_adapter(tmp_path / "a", **adapter), base_dir, "support", "1", *extra) == 1
    errors = [orjson.loads(line) for line in capsys.readouterr().out.splitlines() if '"publish refused"' in line]
    assert errors and message in errors[0]["error"], errors
    assert keys(s3, bucket) == set()


def test_set_version_and_remove_change_the_adapter_registry(s3, bucket, base_dir, tmp_path):
    assert publish(bucket, write_lora_adapter(tmp_path / "a"), base_dir, "support", "1") == 0
    assert publish(bucket, write_lora_adapter(tmp_path / "b", seed=1), base_dir, "support", "2") == 0
    store = ["--base", BASE, "--store", f"s3://{bucket}/"]
    assert publish_cli.main([*store, "--set-version", "support=1"]) == 0  # roll back
    assert dict(read_registry(s3, bucket, AdapterRegistry, BASE)[0].adapters) == {"support": "1"}
    assert publish_cli.main([*store, "--set-version", "support=7"]) == 1  # never published
    assert publish_cli.main([*store, "--remove", "ghost"]) == 1
    assert publish_cli.main([*store, "--remove", "support"]) == 0
    registry, _ = read_registry(s3, bucket, AdapterRegistry, BASE)
    assert dict(registry.adapters) == {} and registry.revision == 4
    assert f"adapters/{BASE}/support/2/manifest.json" in keys(s3, bucket), "versions stay for a later --set-version"


@pytest.mark.parametrize(
    "argv",
    [
        ["--adapter", "x", "s3://b/", "--model-name", "a", "--version", "1", "--base-model", "x"],  # no --base
        ["--adapter", "x", "s3://b/", "--base", BASE, "--model-name", "a", "--version", "1"],  # no --base-model
        ["--pool", "p", "--base", BASE, "--store", "s3://b/", "--remove", "a"],  # both registries
        ["--base", BASE, "--store", "s3://b/", "--set-version", "a"],  # no =VERSION
    ],
)
def test_incomplete_adapter_commands_are_refused_before_any_call(argv):
    assert publish_cli.main(argv) == 1
