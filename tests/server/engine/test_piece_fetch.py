"""Piece digests in the manifest, and the S3 fetch that checks each piece as it streams (moto)."""

from __future__ import annotations

import hashlib
import json
import logging

import pytest

from inference_server.engine import artifacts, piece_fetch
from inference_server.engine.artifacts import ArtifactError, fetch_model
from inference_server.engine.piece_fetch import Piece, StreamedFile, pieces_of
from inference_server.manifest import FileEntry, Manifest, ManifestError, build_manifest, sha256_file
from inference_server.publish import publish

PIECE = 16 * 1024  # the tiny model's 162 KB weights span 10 pieces
WEIGHTS = "model.safetensors"


def test_a_file_larger_than_a_piece_lists_each_pieces_digest(tiny_classifier_dir):
    manifest = build_manifest(tiny_classifier_dir, "tiny", "1", piece_bytes=PIECE)
    data = (tiny_classifier_dir / WEIGHTS).read_bytes()
    expected = [hashlib.sha256(data[i : i + PIECE]).hexdigest() for i in range(0, len(data), PIECE)]
    assert len(expected) > 1 and manifest.files[WEIGHTS].pieces == tuple(expected)
    assert manifest.files[WEIGHTS].sha256 == sha256_file(tiny_classifier_dir / WEIGHTS)
    assert manifest.files["config.json"].pieces == ()  # one piece: its digest is the file's
    doc = json.loads(manifest.to_json())
    assert doc["piece_bytes"] == PIECE and "pieces" not in doc["files"]["config.json"]
    assert Manifest.from_json(manifest.to_json()) == manifest


def test_a_manifest_of_small_files_lists_no_pieces_and_says_its_piece_size(tiny_classifier_dir):
    """The size is written even so: a file of 20 MiB read with another default would look unpieced."""
    manifest = build_manifest(tiny_classifier_dir, "tiny", "1", piece_bytes=64 * 1024 * 1024)
    doc = json.loads(manifest.to_json())
    assert doc["piece_bytes"] == 64 * 1024 * 1024 and not any("pieces" in e for e in doc["files"].values())
    assert Manifest.from_json(manifest.to_json()) == manifest


def _doc(size: int, pieces, piece_bytes=4) -> bytes:
    return json.dumps(
        {
            "format": 1,
            "model_name": "m",
            "version": "1",
            "created_at": "t",
            "piece_bytes": piece_bytes,
            "files": {"w": {"sha256": "0" * 64, "size": size, "pieces": pieces}},
        }
    ).encode()


@pytest.mark.parametrize(
    "doc",
    [
        _doc(10, ["0" * 64] * 2),  # 10 bytes in 4-byte pieces are 3 pieces
        _doc(10, ["0" * 64] * 2 + ["xyz"]),
        _doc(4, ["0" * 64]),  # one piece: its digest is the file's, so none are listed
        _doc(10, "0" * 64),
        _doc(10, ["0" * 64] * 3, piece_bytes=0),
    ],
)
def test_malformed_piece_digests_are_refused(doc):
    with pytest.raises(ManifestError, match="piece"):
        Manifest.from_json(doc)


def test_pieces_cover_the_file_exactly():
    entry = FileEntry("f" * 64, 10, ("a" * 64, "b" * 64, "c" * 64))
    assert [(p.start, p.end) for p in pieces_of(entry, 4) or []] == [(0, 4), (4, 8), (8, 10)]
    assert pieces_of(FileEntry("f" * 64, 4), 4) == [Piece(0, 0, 4, "f" * 64)]
    assert pieces_of(FileEntry("f" * 64, 5), 4) is None  # published before pieces existed


@pytest.fixture
def published(s3, bucket, tiny_classifier_dir):
    uri = f"s3://{bucket}/models/tiny/1/"
    publish(tiny_classifier_dir, uri, piece_bytes=PIECE)
    return uri


@pytest.fixture
def ranges(monkeypatch):
    """The byte ranges GET for each key, and no file read back to be hashed."""
    seen: dict[str, list[str]] = {}
    fetch_once = StreamedFile._fetch_once

    def recording(self, client, bucket, key, piece):
        seen.setdefault(key.rsplit("/", 1)[-1], []).append(f"{piece.start}-{piece.end - 1}")
        return fetch_once(self, client, bucket, key, piece)

    def no_read_back(*args):
        raise AssertionError("a downloaded file was read back to be checked")

    monkeypatch.setattr(StreamedFile, "_fetch_once", recording)
    monkeypatch.setattr(artifacts, "verify_file", no_read_back)
    return seen


def test_each_piece_is_checked_as_it_streams_and_no_file_is_read_back(published, tiny_classifier_dir, tmp_path, ranges):
    artifact = fetch_model(published, tmp_path, require_manifest=True)
    data = (tiny_classifier_dir / WEIGHTS).read_bytes()
    assert (artifact.directory / WEIGHTS).read_bytes() == data
    assert sorted(ranges[WEIGHTS], key=lambda r: int(r.split("-")[0])) == [
        f"{i}-{min(len(data), i + PIECE) - 1}" for i in range(0, len(data), PIECE)
    ]
    assert len(ranges["config.json"]) == 1
    assert not list(artifact.directory.rglob("*.partial"))


def _replace(s3, bucket: str, key: str, change) -> None:
    original = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    s3.put_object(Bucket=bucket, Key=key, Body=change(original))


def test_a_corrupted_piece_is_named_and_nothing_is_left_behind(s3, bucket, published, tmp_path):
    flip = 3 * PIECE + 5
    _replace(s3, bucket, f"models/tiny/1/{WEIGHTS}", lambda b: b[:flip] + bytes([b[flip] ^ 1]) + b[flip + 1 :])
    with pytest.raises(ArtifactError, match=rf"{WEIGHTS}: piece 3 .*sha256"):
        fetch_model(published, tmp_path, require_manifest=True)
    directory = tmp_path / "models" / bucket / "models/tiny/1"
    assert not (directory / WEIGHTS).exists() and not list(directory.rglob("*.partial"))
    assert (directory / "config.json").is_file()  # the intact files are kept for the next try


def test_an_object_longer_than_the_manifest_says_is_refused(s3, bucket, published, tmp_path):
    """Every piece's range would match; the object's size in Content-Range does not."""
    _replace(s3, bucket, f"models/tiny/1/{WEIGHTS}", lambda b: b + b"appended")
    with pytest.raises(ArtifactError, match=rf"{WEIGHTS}: size.*manifest"):
        fetch_model(published, tmp_path, require_manifest=True)


def test_a_broken_stream_is_fetched_again(published, tiny_classifier_dir, tmp_path, monkeypatch):
    fetch_once = StreamedFile._fetch_once
    broken: list[int] = []

    def breaks_once(self, client, bucket, key, piece):
        if key.endswith(WEIGHTS) and piece.index == 2 and not broken:
            broken.append(piece.index)
            raise ConnectionError("connection reset mid-piece")
        return fetch_once(self, client, bucket, key, piece)

    monkeypatch.setattr(StreamedFile, "_fetch_once", breaks_once)
    artifact = fetch_model(published, tmp_path, require_manifest=True)
    assert broken == [2]
    assert (artifact.directory / WEIGHTS).read_bytes() == (tiny_classifier_dir / WEIGHTS).read_bytes()


def test_a_stream_that_keeps_breaking_fails_the_fetch(published, tmp_path, monkeypatch):
    def always_breaks(self, client, bucket, key, piece):
        raise ConnectionError("connection reset")

    monkeypatch.setattr(StreamedFile, "_fetch_once", always_breaks)
    with pytest.raises(ArtifactError, match=rf"{WEIGHTS}: piece \d+ .*connection reset"):
        fetch_model(published, tmp_path, require_manifest=True)
    assert not list(tmp_path.rglob("*.partial"))


def test_a_manifest_without_piece_digests_is_checked_after_the_download(
    s3, bucket, published, tiny_classifier_dir, tmp_path, caplog
):
    """As one published before pieces existed with a file larger than one piece."""
    key = "models/tiny/1/manifest.json"
    doc = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    for entry in doc["files"].values():
        entry.pop("pieces", None)
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(doc).encode())
    with caplog.at_level(logging.WARNING):
        artifact = fetch_model(published, tmp_path, require_manifest=True)
    assert "published before piece digests" in caplog.text
    assert (artifact.directory / WEIGHTS).read_bytes() == (tiny_classifier_dir / WEIGHTS).read_bytes()
    _replace(s3, bucket, f"models/tiny/1/{WEIGHTS}", lambda b: b[:-1] + bytes([b[-1] ^ 1]))
    with pytest.raises(ArtifactError, match=rf"{WEIGHTS}: sha256"):
        fetch_model(published, tmp_path / "again", require_manifest=True)


class _Head:
    """A client whose objects are all ``length`` bytes long, for the empty-file path (a HEAD, no GET)."""

    def __init__(self, length: int):
        self.length = length

    def head_object(self, Bucket, Key):  # noqa: N803 - boto3's parameter names
        return {"ContentLength": self.length}


def test_an_empty_file_is_checked_by_a_head_without_a_get(tmp_path):
    empty = hashlib.sha256(b"").hexdigest()
    file = StreamedFile(tmp_path / "empty", 0)
    file.fetch(client=_Head(0), bucket="b", key="k", piece=Piece(0, 0, 0, empty))
    file.finish(ok=True)
    assert (tmp_path / "empty").read_bytes() == b""
    with pytest.raises(piece_fetch.SizeMismatch, match="size 5 != 0"):
        StreamedFile(tmp_path / "other", 0).fetch(client=_Head(5), bucket="b", key="k", piece=Piece(0, 0, 0, empty))


def test_an_empty_file_missing_in_s3_is_refused(s3, bucket, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "empty.txt").write_bytes(b"")
    uri = f"s3://{bucket}/models/empty/1/"
    publish(model, uri)
    fetch_model(uri, tmp_path / "cache", require_manifest=True)
    s3.delete_object(Bucket=bucket, Key="models/empty/1/empty.txt")
    with pytest.raises(ArtifactError, match=r"empty\.txt.*missing in S3"):
        fetch_model(uri, tmp_path / "again", require_manifest=True)


def test_short_writes_are_continued(published, tiny_classifier_dir, tmp_path, monkeypatch):
    real = piece_fetch.os.pwrite
    monkeypatch.setattr(piece_fetch.os, "pwrite", lambda fd, data, offset: real(fd, bytes(data[:1000]), offset))
    artifact = fetch_model(published, tmp_path, require_manifest=True)
    assert (artifact.directory / WEIGHTS).read_bytes() == (tiny_classifier_dir / WEIGHTS).read_bytes()


def test_a_volume_that_takes_no_more_bytes_fails_the_fetch_at_once(published, tmp_path, monkeypatch):
    calls: list[int] = []

    def full(fd, data, offset):
        calls.append(offset)
        return 0

    monkeypatch.setattr(piece_fetch.os, "pwrite", full)
    with pytest.raises(ArtifactError, match="cannot write .*No space left|cannot write .*no byte"):
        fetch_model(published, tmp_path, require_manifest=True)
    assert not list(tmp_path.rglob("*.partial"))
    assert len(calls) <= 20, "a write error is not retried"  # one failed write per piece, not three


def test_a_tls_error_mid_piece_is_fetched_again(published, tiny_classifier_dir, tmp_path, monkeypatch):
    """urllib3's SSLError reaches the reader unwrapped by botocore."""
    from urllib3.exceptions import SSLError

    fetch_once = StreamedFile._fetch_once
    broken: list[int] = []

    def breaks_once(self, client, bucket, key, piece):
        if key.endswith(WEIGHTS) and not broken:
            broken.append(piece.index)
            raise SSLError("decryption failed or bad record mac")
        return fetch_once(self, client, bucket, key, piece)

    monkeypatch.setattr(StreamedFile, "_fetch_once", breaks_once)
    artifact = fetch_model(published, tmp_path, require_manifest=True)
    assert len(broken) == 1
    assert (artifact.directory / WEIGHTS).read_bytes() == (tiny_classifier_dir / WEIGHTS).read_bytes()
