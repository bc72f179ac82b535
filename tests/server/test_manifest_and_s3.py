"""manifest.json, the publish command and loading from S3 (moto) or a local directory, with verification."""

from __future__ import annotations

import json
import logging
import time

import pytest

from inference_server import publish as publish_cli
from inference_server.engine.artifacts import ArtifactError, fetch_model, parse_s3_uri, read_manifest_at
from inference_server.manifest import (
    MANIFEST_FILE,
    PUBLISHED_FILES,
    SHA256PIECES_FILE,
    SHA256SUMS_FILE,
    Manifest,
    ManifestError,
    build_manifest,
    read_manifest,
    sha256_file,
    verify_directory,
)
from inference_server.publish import PublishError, publish

from .conftest import make_settings, started


def test_manifest_round_trip(tiny_classifier_dir):
    manifest = build_manifest(tiny_classifier_dir, "tiny", "7", "text-classification")
    doc = json.loads(manifest.to_json())
    assert doc["format"] == 1 and doc["model_name"] == "tiny" and doc["version"] == "7"
    assert doc["task"] == "text-classification" and doc["created_at"].endswith("Z")
    assert set(doc["files"]) == {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    }
    weights = tiny_classifier_dir / "model.safetensors"
    assert doc["files"]["model.safetensors"] == {"sha256": sha256_file(weights), "size": weights.stat().st_size}
    assert Manifest.from_json(manifest.to_json()) == manifest
    verify_directory(tiny_classifier_dir, manifest)


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "a/../../b", "a\\b", "", "./a", MANIFEST_FILE])
def test_manifest_refuses_paths_that_leave_the_model_directory(path):
    doc = {
        "format": 1,
        "model_name": "m",
        "version": "1",
        "created_at": "now",
        "files": {path: {"sha256": "0" * 64, "size": 1}},
    }
    with pytest.raises(ManifestError, match="unsafe"):
        Manifest.from_json(json.dumps(doc).encode())


@pytest.mark.parametrize(
    "doc",
    [
        b"not json",
        b"[]",
        b'{"format": 2}',
        b'{"format": 1, "model_name": "m", "version": "1", "created_at": "t", "files": {}}',
        b'{"format": 1, "model_name": "m", "version": "1", "created_at": "t", '
        b'"files": {"a": {"sha256": "xyz", "size": 1}}}',
        b'{"format": 1, "model_name": "m", "version": 1, "created_at": "t", "files": {"a": {"sha256": "'
        + b"0" * 64
        + b'", "size": 1}}}',
        b'{"format": 1, "model_name": "m", "version": "1", "created_at": "t", "files": {"a": {"sha256": "'
        + b"0" * 64
        + b'", "size": 1}}, "probe": {"text": "x", "task": "text-classification", "answer": {"label": "a"}}}',
    ],
)
def test_malformed_manifests_are_refused(doc):
    with pytest.raises(ManifestError):
        Manifest.from_json(doc)


def test_parse_s3_uri():
    assert parse_s3_uri("s3://b/models/m/1/") == ("b", "models/m/1/")
    assert parse_s3_uri("s3://b/models/m/1") == ("b", "models/m/1/")
    assert parse_s3_uri("s3://b") == ("b", "")
    with pytest.raises(ArtifactError):
        parse_s3_uri("s3:///x")


def test_publish_uploads_every_file_and_the_manifest(s3, bucket, tiny_classifier_dir):
    uri = f"s3://{bucket}/models/tiny/3/"
    publish(tiny_classifier_dir, uri, task="text-classification")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    files = {p.name for p in tiny_classifier_dir.iterdir()}
    assert keys == {f"models/tiny/3/{name}" for name in files | set(PUBLISHED_FILES)}
    manifest = read_manifest_at(uri)
    assert manifest is not None
    assert (manifest.model_name, manifest.version, manifest.task) == ("tiny", "3", "text-classification")
    assert manifest.files == build_manifest(tiny_classifier_dir, "tiny", "3").files
    sums = s3.get_object(Bucket=bucket, Key=f"models/tiny/3/{SHA256SUMS_FILE}")["Body"].read().decode()
    assert sums.splitlines() == [f"{e.sha256}  {path}" for path, e in sorted(manifest.files.items())]
    # Written even when no file is larger than a piece, so that a forced publish replaces an older list.
    assert s3.get_object(Bucket=bucket, Key=f"models/tiny/3/{SHA256PIECES_FILE}")["Body"].read() == b""


def test_a_file_name_with_a_newline_cannot_be_published(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "weights\nother").write_text("x")  # would split its SHA256SUMS line in two
    with pytest.raises(ManifestError, match="unsafe"):
        build_manifest(tmp_path, "m", "1")


def test_publish_refuses_to_overwrite_a_version_unless_forced(s3, bucket, tiny_classifier_dir, tmp_path):
    uri = f"s3://{bucket}/models/tiny/1/"
    publish(tiny_classifier_dir, uri)
    with pytest.raises(PublishError, match="already exists"):
        publish(tiny_classifier_dir, uri)
    smaller = tmp_path / "smaller"
    smaller.mkdir()
    (smaller / "config.json").write_text("{}")
    publish(smaller, uri, force=True)
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert keys == {
        "models/tiny/1/config.json",
        *(f"models/tiny/1/{name}" for name in PUBLISHED_FILES),
    }  # stale removed


def test_publish_command_line(s3, bucket, tiny_classifier_dir, capsys, restore_logging):
    uri = f"s3://{bucket}/models/tiny-cli/2/"
    assert publish_cli.main([str(tiny_classifier_dir), uri, "--task", "text-classification"]) == 0
    assert publish_cli.main([str(tiny_classifier_dir), uri]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    lines = [line for line in lines if line["logger"] == "inference_server.publish"]
    assert lines[0]["message"] == "model published" and lines[0]["model_name"] == "tiny-cli"
    assert lines[1]["level"] == "ERROR" and "--force" in lines[1]["error"]
    assert publish_cli.main([str(tiny_classifier_dir), f"s3://{bucket}/models/Bad_Name/1/"]) == 1
    assert publish_cli.main([str(tiny_classifier_dir), f"s3://{bucket}/"]) == 1


def test_fetch_from_s3_verifies_and_reuses_the_cache(s3, bucket, tiny_classifier_dir, tmp_path, caplog):
    uri = f"s3://{bucket}/models/tiny/1/"
    publish(tiny_classifier_dir, uri)
    artifact = fetch_model(uri, tmp_path, require_manifest=True)
    assert artifact.manifest is not None  # require_manifest=True
    assert artifact.directory == tmp_path / "models" / bucket / "models/tiny/1"
    assert read_manifest(artifact.directory) is None  # the manifest is read from S3, not trusted from disk
    verify_directory(artifact.directory, artifact.manifest)
    weights = artifact.directory / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    time.sleep(0.01)
    fetch_model(uri, tmp_path, require_manifest=True)
    assert weights.stat().st_mtime_ns == mtime  # intact cached files are not downloaded again
    weights.write_bytes(b"tampered on disk")
    fetch_model(uri, tmp_path, require_manifest=True)
    assert sha256_file(weights) == artifact.manifest.files["model.safetensors"].sha256


def test_a_corrupted_file_in_s3_is_refused(s3, bucket, tiny_classifier_dir, tmp_path):
    uri = f"s3://{bucket}/models/tiny/1/"
    publish(tiny_classifier_dir, uri)
    original = s3.get_object(Bucket=bucket, Key="models/tiny/1/model.safetensors")["Body"].read()
    flipped = bytes([original[-1] ^ 1])
    s3.put_object(Bucket=bucket, Key="models/tiny/1/model.safetensors", Body=original[:-1] + flipped)
    with pytest.raises(ArtifactError, match=r"model\.safetensors.*sha256"):
        fetch_model(uri, tmp_path, require_manifest=True)


def test_a_missing_file_in_s3_is_refused(s3, bucket, tiny_classifier_dir, tmp_path):
    uri = f"s3://{bucket}/models/tiny/1/"
    publish(tiny_classifier_dir, uri)
    s3.delete_object(Bucket=bucket, Key="models/tiny/1/tokenizer.json")
    with pytest.raises(ArtifactError, match=r"tokenizer\.json.*missing"):
        fetch_model(uri, tmp_path, require_manifest=True)


def test_a_missing_manifest_is_refused_when_required(s3, bucket, tiny_classifier_dir, tmp_path, caplog):
    for path in tiny_classifier_dir.iterdir():
        s3.upload_file(str(path), bucket, f"models/tiny/1/{path.name}")
    uri = f"s3://{bucket}/models/tiny/1/"
    with pytest.raises(ArtifactError, match=r"manifest\.json.*not found"):
        fetch_model(uri, tmp_path, require_manifest=True)
    with caplog.at_level(logging.WARNING):
        artifact = fetch_model(uri, tmp_path, require_manifest=False)
    assert artifact.manifest is None and (artifact.directory / "model.safetensors").is_file()
    assert "not verified" in caplog.text


def test_local_directories_are_verified_against_their_manifest(tiny_classifier_dir, tmp_path):
    import shutil

    local = tmp_path / "local"
    shutil.copytree(tiny_classifier_dir, local)
    with pytest.raises(ArtifactError, match="REQUIRE_MANIFEST"):
        fetch_model(str(local), tmp_path / "cache", require_manifest=True)
    (local / MANIFEST_FILE).write_bytes(build_manifest(local, "tiny", "1").to_json())
    assert fetch_model(str(local), tmp_path / "cache", require_manifest=True).manifest is not None
    (local / "vocab.txt").write_text("changed")
    with pytest.raises(ArtifactError, match=r"vocab\.txt.*size"):
        fetch_model(str(local), tmp_path / "cache", require_manifest=False)
    (local / "vocab.txt").unlink()
    with pytest.raises(ArtifactError, match=r"vocab\.txt.*missing"):
        fetch_model(str(local), tmp_path / "cache", require_manifest=False)
    with pytest.raises(ArtifactError, match="does not exist"):
        fetch_model(str(tmp_path / "nowhere"), tmp_path / "cache", require_manifest=False)


def test_the_service_serves_a_model_from_s3_with_its_manifests_task(s3, bucket, tiny_embedder_dir, tmp_path):
    uri = f"s3://{bucket}/models/tiny/4/"
    publish(tiny_embedder_dir, uri, task="text-embedding")
    from inference_server.__main__ import resolve_task

    settings = resolve_task(make_settings(uri, model_task=None, model_cache_dir=tmp_path, model_version="4"))
    assert settings.model_task == "text-embedding" and settings.manifest_required
    service = started(settings)
    try:
        assert service.probe()
    finally:
        service.stop()
