"""The copy-to-scratch init containers' scripts (scratch-owner, then model-fetch), exactly as staging's vLLM task
definition holds them, run with stand-ins for what the containers have: `aws s3 sync` copies a local directory (the
S3 prefix), `chown` is recorded.
A model published by `python -m inference_server.publish` is verified against its SHA256SUMS before the server
starts, its files side by side, with OpenSSL's SHA-256 where the image has it and sha256sum where it does not; a
tampered or incomplete one stops the task."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpu_inference_constructs.store.model_store import MANIFEST_FILE, SHA256PIECES_FILE, SHA256SUMS_FILE
from inference_server import manifest as server_manifest
from inference_server.manifest import build_manifest

FAKE_AWS = """#!/bin/sh
# aws s3 sync [flags] SRC DST: copy the stand-in prefix to DST
[ "$1 $2" = "s3 sync" ] || exit 2
eval "destination=\\${$#}"
mkdir -p "$destination" && cp -R "$FAKE_S3_PREFIX/." "$destination/"
"""
FAKE_CHOWN = """#!/bin/sh
echo "$@" >> "$CHOWN_LOG"
"""


@pytest.fixture(scope="module")
def fetcher(synthesized):
    template = synthesized.inference_template("staging")
    definitions = [r for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    (definition,) = [
        d for d in definitions if any(c["Name"] == "model-fetch" for c in d["Properties"]["ContainerDefinitions"])
    ]
    return {c["Name"]: c for c in definition["Properties"]["ContainerDefinitions"]}


# What the scripts and the stand-ins run, for a PATH that lacks a tool (the image without openssl).
TOOLS = ("mkdir", "cp", "ls", "cut", "cat", "sha256sum", "openssl", "sleep", "touch", "wc", "rm", "dd")


def run_container(
    container: dict,
    tmp_path: Path,
    prefix: Path,
    without: tuple[str, ...] = (),
    stand_ins: tuple[tuple[str, str], ...] = (),
) -> subprocess.CompletedProcess:
    bin_dir, scratch = tmp_path / "bin", tmp_path / "scratch"
    bin_dir.mkdir(exist_ok=True)
    scratch.mkdir(exist_ok=True)
    for name, body in (("aws", FAKE_AWS), ("chown", FAKE_CHOWN), *stand_ins):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"
    if without:
        tools = tmp_path / "tools"
        tools.mkdir(exist_ok=True)
        for tool in set(TOOLS) - set(without):
            found = shutil.which(tool)
            assert found, tool
            if not (tools / tool).exists():
                (tools / tool).symlink_to(found)
        path = f"{bin_dir}:{tools}"
    # MODEL_URI joins the bucket's Ref: the stand-in aws ignores the source, so any URI does.
    environment = {
        e["Name"]: e["Value"].replace("/scratch", str(scratch))
        if isinstance(e["Value"], str)
        else "s3://bucket/models/llama-13b/1/"
        for e in container["Environment"]
    }
    # Staging's llama-13b serves LoRA adapters: the scratch owner hands their volume (/adapters) over too.
    script = container["Command"][0].replace("/scratch", str(scratch)).replace("/adapters", str(tmp_path / "adapters"))
    env = {"PATH": path, "FAKE_S3_PREFIX": str(prefix), "CHOWN_LOG": str(tmp_path / "chown"), **environment}
    return subprocess.run([*container["EntryPoint"], script], env=env, capture_output=True, text=True, timeout=60)


def run_fetch(fetcher, tmp_path: Path, prefix: Path, **tools) -> subprocess.CompletedProcess:
    """scratch-owner (as root: creates the folders, hands scratch to the server's user), then model-fetch."""
    owned = run_container(fetcher["scratch-owner"], tmp_path, prefix)
    assert owned.returncode == 0, owned.stderr
    return run_container(fetcher["model-fetch"], tmp_path, prefix, **tools)


@pytest.fixture
def published(tmp_path) -> Path:
    """A model version as publish leaves it in S3: the files, SHA256SUMS and manifest.json."""
    prefix = tmp_path / "s3-prefix"
    (prefix / "tokenizer").mkdir(parents=True)
    (prefix / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (prefix / "model-00001-of-00002.safetensors").write_bytes(os.urandom(4096))
    (prefix / "model-00002-of-00002.safetensors").write_bytes(os.urandom(4096))
    (prefix / "tokenizer" / "tokenizer config.json").write_text("{}")  # a space in a name
    manifest = build_manifest(prefix, "llama-13b", "1")
    (prefix / SHA256SUMS_FILE).write_bytes(manifest.to_sha256sums())
    (prefix / MANIFEST_FILE).write_bytes(manifest.to_json())
    return prefix


def test_the_library_and_the_server_name_the_same_files():
    assert (MANIFEST_FILE, SHA256SUMS_FILE, SHA256PIECES_FILE) == server_manifest.PUBLISHED_FILES


def test_a_published_model_is_verified_copied_and_handed_to_the_servers_user(fetcher, tmp_path, published):
    done = run_fetch(fetcher, tmp_path, published)
    assert done.returncode == 0, done.stderr
    model = tmp_path / "scratch" / "model"
    assert (model / "model-00002-of-00002.safetensors").read_bytes() == (
        published / "model-00002-of-00002.safetensors"
    ).read_bytes()
    assert (tmp_path / "chown").read_text().split() == [
        "-R",
        "1000:1000",
        str(tmp_path / "scratch"),
        str(tmp_path / "adapters"),
    ]
    assert "not verified" not in done.stderr


def test_a_tampered_file_stops_the_task_before_the_server_starts(fetcher, tmp_path, published):
    shard = published / "model-00001-of-00002.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # a changed byte (writing 0 left a random 0 unchanged)
    done = run_fetch(fetcher, tmp_path, published)
    assert done.returncode != 0
    assert (
        "do not match SHA256SUMS" in done.stderr
        and "model-00001-of-00002.safetensors: FAILED" in done.stdout + done.stderr
    )
    # Only scratch-owner's chown, before the fetch; the server depends on model-fetch's SUCCESS (test_service.py).
    assert (tmp_path / "chown").read_text().split() == [
        "-R",
        "1000:1000",
        str(tmp_path / "scratch"),
        str(tmp_path / "adapters"),
    ]


def test_a_missing_file_stops_the_task(fetcher, tmp_path, published):
    (published / "model-00002-of-00002.safetensors").unlink()
    done = run_fetch(fetcher, tmp_path, published)
    assert done.returncode != 0 and "do not match SHA256SUMS" in done.stderr


def test_a_manifest_without_its_sums_stops_the_task_and_says_to_publish_again(fetcher, tmp_path, published):
    (published / SHA256SUMS_FILE).unlink()
    done = run_fetch(fetcher, tmp_path, published)
    assert done.returncode != 0 and "publish it again with python -m inference_server.publish" in done.stderr


def test_a_prefix_copied_without_publish_is_served_unverified_and_says_so(fetcher, tmp_path, published):
    for name in (MANIFEST_FILE, SHA256SUMS_FILE):
        (published / name).unlink()
    done = run_fetch(fetcher, tmp_path, published)
    assert done.returncode == 0 and "files not verified" in done.stderr


def test_an_empty_prefix_stops_the_task(fetcher, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = run_fetch(fetcher, tmp_path, empty)
    assert done.returncode != 0 and "no model files" in done.stderr


def test_the_last_sums_line_is_checked_without_its_newline(fetcher, tmp_path, published):
    sums = published / SHA256SUMS_FILE
    lines = sums.read_text().splitlines()
    last = lines[-1].split("  ", 1)[1]
    sums.write_text("\n".join(lines))  # no newline after the last line
    (published / last).write_bytes((published / last).read_bytes() + b"tampered")
    done = run_fetch(fetcher, tmp_path, published)
    assert done.returncode != 0 and f"{last}: FAILED" in done.stdout


def test_a_sums_line_that_is_not_a_sha256_stops_the_task(fetcher, tmp_path, published):
    sums = published / SHA256SUMS_FILE
    sums.write_text(sums.read_text() + "not-a-digest  config.json\n")
    done = run_fetch(fetcher, tmp_path, published)
    assert done.returncode != 0 and "config.json: FAILED (not a SHA256SUMS line)" in done.stdout


def test_a_listed_name_outside_the_model_directory_stops_the_task(fetcher, tmp_path, published):
    sums = published / SHA256SUMS_FILE
    sums.write_text(sums.read_text() + f"{'0' * 64}  ../home/.profile\n")
    done = run_fetch(fetcher, tmp_path, published)
    assert done.returncode != 0 and "../home/.profile: FAILED (outside the model directory)" in done.stdout


# A hasher that says how many of its kind ran at once: each waits (up to 5 s) for a second before it hashes.
CONCURRENT_HASHER = """#!/bin/sh
touch "{hashers}/$$"
for _ in 1 2 3 4 5 6 7 8 9 10; do [ "$(ls "{hashers}" | wc -l)" -ge 2 ] && break; sleep 0.5; done
ls "{hashers}" | wc -l >> "{hashers}.seen"
{real} "$@"; status=$?
rm "{hashers}/$$"
exit $status
"""


@pytest.mark.parametrize("hasher", ["openssl", "sha256sum"])
def test_the_files_are_checked_side_by_side_with_the_fastest_hasher_in_the_image(fetcher, tmp_path, published, hasher):
    """OpenSSL's SHA-256 (SHA-NI) where the image has openssl, else sha256sum; either way one process per file."""
    hashers = tmp_path / "hashers"
    hashers.mkdir()
    stand_in = CONCURRENT_HASHER.format(hashers=hashers, real=shutil.which(hasher))
    done = run_fetch(
        fetcher,
        tmp_path,
        published,
        without=() if hasher == "openssl" else ("openssl",),
        stand_ins=((hasher, stand_in),),
    )
    assert done.returncode == 0, done.stderr
    seen = [int(n) for n in Path(f"{hashers}.seen").read_text().split()]
    assert len(seen) == len((published / SHA256SUMS_FILE).read_text().splitlines()), "one hasher per listed file"
    assert max(seen) >= 2, f"one file at a time: {seen}"


PIECE = 1024  # each 4,096-byte shard is 4 pieces


@pytest.fixture
def published_in_pieces(published) -> Path:
    """The same version published with pieces: SHA256PIECES lists each shard's 4 pieces."""
    manifest = build_manifest(published, "llama-13b", "1", piece_bytes=PIECE)
    (published / SHA256PIECES_FILE).write_bytes(manifest.to_sha256pieces())
    (published / MANIFEST_FILE).write_bytes(manifest.to_json())
    assert len(manifest.to_sha256pieces().splitlines()) == 8
    return published


def test_a_file_with_pieces_is_checked_piece_by_piece_side_by_side(fetcher, tmp_path, published_in_pieces):
    """Each piece is one hasher of its own, several at once: one large file is hashed on several cores."""
    hashers = tmp_path / "hashers"
    hashers.mkdir()
    stand_in = CONCURRENT_HASHER.format(hashers=hashers, real=shutil.which("sha256sum"))
    done = run_fetch(fetcher, tmp_path, published_in_pieces, without=("openssl",), stand_ins=(("sha256sum", stand_in),))
    assert done.returncode == 0, done.stderr
    seen = [int(n) for n in Path(f"{hashers}.seen").read_text().split()]
    assert len(seen) == 8 + 2, "a hasher per piece of the two shards, and one per smaller file"
    assert max(seen) >= 2, f"one piece at a time: {seen}"


def test_a_tampered_piece_is_named(fetcher, tmp_path, published_in_pieces):
    shard = published_in_pieces / "model-00001-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    data[2 * PIECE + 7] ^= 1
    shard.write_bytes(bytes(data))
    done = run_fetch(fetcher, tmp_path, published_in_pieces)
    assert done.returncode != 0
    assert done.stdout.splitlines() == ["model-00001-of-00002.safetensors: FAILED (piece 2)"]


def test_bytes_appended_after_the_last_piece_are_found_by_the_size(fetcher, tmp_path, published_in_pieces):
    shard = published_in_pieces / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes() + os.urandom(PIECE))  # a whole extra piece: every listed piece matches
    done = run_fetch(fetcher, tmp_path, published_in_pieces)
    assert done.returncode != 0 and "model-00002-of-00002.safetensors: FAILED (not 4096 bytes)" in done.stdout


@pytest.mark.parametrize("left_out, shard", [(3, "model-00001-of-00002"), (7, "model-00002-of-00002")])
def test_a_pieces_list_that_leaves_out_a_piece_stops_the_task(fetcher, tmp_path, published_in_pieces, left_out, shard):
    """A shard's last piece left out: before the next file's lines, and at the end of the list."""
    pieces = published_in_pieces / SHA256PIECES_FILE
    lines = pieces.read_text().splitlines()
    pieces.write_text("\n".join(lines[:left_out] + lines[left_out + 1 :]) + "\n")
    done = run_fetch(fetcher, tmp_path, published_in_pieces)
    assert done.returncode != 0
    assert f"{shard}.safetensors: FAILED (SHA256PIECES lists 3 of its 4 pieces)" in done.stdout


@pytest.mark.parametrize(
    "line, finding",
    [
        ("not-a-digest 4096 1024 0 config.json", "FAILED (not a SHA256PIECES line)"),
        (f"{'0' * 64} 4096 0 0 config.json", "FAILED (not a SHA256PIECES line)"),
        (f"{'0' * 64} 4096 x 0 config.json", "FAILED (not a SHA256PIECES line)"),
        (f"{'0' * 64} 4096 1024 0 ../home/.profile", "../home/.profile: FAILED (outside the model directory)"),
        (f"{'0' * 64} 4096 1024 1 config.json", "config.json: FAILED (piece 1 out of order in SHA256PIECES)"),
    ],
)
def test_a_malformed_pieces_line_stops_the_task(fetcher, tmp_path, published_in_pieces, line, finding):
    pieces = published_in_pieces / SHA256PIECES_FILE
    pieces.write_text(pieces.read_text() + line + "\n")
    done = run_fetch(fetcher, tmp_path, published_in_pieces)
    assert done.returncode != 0 and finding in done.stdout


def test_a_piece_that_disagrees_with_the_first_on_its_size_stops_the_task(fetcher, tmp_path, published_in_pieces):
    """A hand-edited list whose later lines cover the file in 1-byte pieces would leave most of it unchecked."""
    shard = published_in_pieces / "model-00001-of-00002.safetensors"
    data = shard.read_bytes()
    pieces = published_in_pieces / SHA256PIECES_FILE
    lines = pieces.read_text().splitlines()
    for index in (1, 2, 3):  # each says 1-byte pieces and carries that byte's true digest
        lines[index] = f"{hashlib.sha256(data[index : index + 1]).hexdigest()} 4096 1 {index} {shard.name}"
    pieces.write_text("\n".join(lines) + "\n")
    shard.write_bytes(data[:3000] + bytes([data[3000] ^ 1]) + data[3001:])
    done = run_fetch(fetcher, tmp_path, published_in_pieces)
    assert done.returncode != 0
    assert f"{shard.name}: FAILED (piece 1 disagrees with piece 0 in SHA256PIECES)" in done.stdout


def test_a_padded_byte_count_is_read_as_a_number(fetcher, tmp_path, published_in_pieces):
    """A fetcher image whose wc pads its count (BSD, some busybox) still passes a good file."""
    wc = shutil.which("wc")
    padded = f'#!/bin/sh\nprintf "%8d\\n" "$({wc} "$@")"\n'
    done = run_fetch(fetcher, tmp_path, published_in_pieces, stand_ins=(("wc", padded),))
    assert done.returncode == 0, done.stdout + done.stderr
