"""manifest.json: the list of a model version's files with their SHA-256, written by publish, checked by the loader.

    {"format": 1, "model_name": "minilm", "version": "3", "task": "text-embedding",
     "created_at": "2026-01-01T00:00:00Z", "piece_bytes": 16777216,
     "files": {"model.safetensors": {"sha256": "...", "size": 123, "pieces": ["...", "..."]}}}

With a built-in text task, "probe" records the model's answer to a fixed text at publish (model_check.py), which the
server checks before it is ready:

    "probe": {"text": "...", "task": "text-classification", "runtime": "eager", "device": "cpu", "dtype": "float32",
              "versions": {"torch": "...", "transformers": "..."},
              "answer": {"label": "positive", "scores": {"negative": 0.01, "positive": 0.99}}}

(an embedder's answer is {"embedding": [...]}, the whole vector). A LoRA adapter's manifest (publish --adapter) also
records what it was checked against:

    "kind": "lora-adapter", "base_model": "<base>", "rank": 8, "target_modules": ["q_proj", "v_proj"]

A file larger than one piece also lists the SHA-256 of each consecutive ``piece_bytes`` piece, so the loader can check
each ranged GET as it streams (piece_fetch.py) instead of reading the whole file back to hash it.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

MANIFEST_FILE = "manifest.json"
# The same digests in `sha256sum --check` format, for fetchers that have coreutils but no JSON parser (the AWS CLI
# image of the copy-to-scratch init container).
SHA256SUMS_FILE = "SHA256SUMS"
# The pieces' digests in the same spirit, for that fetcher to hash one large file on several cores: one line per
# piece, "<sha256> <file size> <piece bytes> <piece index> <path>".
SHA256PIECES_FILE = "SHA256PIECES"
PUBLISHED_FILES = (MANIFEST_FILE, SHA256SUMS_FILE, SHA256PIECES_FILE)
FORMAT = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 4 * 1024 * 1024
# AWS: "Typical sizes for byte-range requests are 8 MB or 16 MB" (Best Practices Design Patterns: Optimizing Amazon
# S3 Performance, "Use Byte-Range Fetches"); a multiple of the 8 MiB multipart chunk publish uploads with.
PIECE_BYTES = 16 * 1024 * 1024


class ManifestError(Exception):
    """The manifest is malformed, or files do not match it."""


ADAPTER_KIND = "lora-adapter"


@dataclass(frozen=True)
class AdapterFacts:
    """A LoRA adapter's facts, checked against its base model at publish."""

    base_model: str
    rank: int
    target_modules: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": ADAPTER_KIND,
            "base_model": self.base_model,
            "rank": self.rank,
            "target_modules": list(self.target_modules),
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> AdapterFacts | None:
        if doc.get("kind") is None:
            return None
        modules = doc.get("target_modules")
        if not (
            doc["kind"] == ADAPTER_KIND
            and isinstance(doc.get("base_model"), str)
            and type(doc.get("rank")) is int
            and doc["rank"] > 0
            and isinstance(modules, list)
            and all(isinstance(m, str) for m in modules)
        ):
            raise ManifestError(
                f'{MANIFEST_FILE}: an adapter needs "kind": "{ADAPTER_KIND}", a string "base_model", a positive '
                f'"rank" and a list of "target_modules"'
            )
        return cls(doc["base_model"], doc["rank"], tuple(modules))


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    size: int
    pieces: tuple[str, ...] = ()  # the SHA-256 of each piece_bytes piece, for a file larger than one piece


@dataclass(frozen=True)
class Manifest:
    model_name: str
    version: str
    files: dict[str, FileEntry]
    task: str | None = None
    created_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    # runtime name -> its accuracy gate result at publish (runtimes.GateResult.to_json()); eager needs none
    runtimes: dict[str, dict[str, Any]] = field(default_factory=dict)
    piece_bytes: int = PIECE_BYTES
    probe: dict[str, Any] | None = None  # the answer publish recorded (model_check.record_probe); None before probes
    adapter: AdapterFacts | None = None  # a LoRA adapter's facts (publish --adapter); None for a model

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {"format": FORMAT, "model_name": self.model_name, "version": self.version}
        if self.task:
            doc["task"] = self.task
        doc["created_at"] = self.created_at
        if self.runtimes:
            doc["runtimes"] = self.runtimes
        if self.probe:
            doc["probe"] = self.probe
        if self.adapter:
            doc.update(self.adapter.to_json())
        doc["piece_bytes"] = self.piece_bytes  # always: a reader's default must not decide which files have pieces
        doc["files"] = {
            path: {"sha256": e.sha256, "size": e.size, **({"pieces": list(e.pieces)} if e.pieces else {})}
            for path, e in sorted(self.files.items())
        }
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"

    def to_sha256sums(self) -> bytes:
        """`sha256sum --check --strict` input: one "<digest>  <path>" line per file (publish refuses newlines in
        paths through check_relative_path)."""
        return "".join(f"{e.sha256}  {path}\n" for path, e in sorted(self.files.items())).encode()

    def to_sha256pieces(self) -> bytes:
        """The SHA256PIECES lines of every file larger than one piece (none when no file is)."""
        return "".join(
            f"{digest} {e.size} {self.piece_bytes} {index} {path}\n"
            for path, e in sorted(self.files.items())
            for index, digest in enumerate(e.pieces)
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ManifestError(f"{MANIFEST_FILE} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ManifestError(f'{MANIFEST_FILE} must be an object with "format": {FORMAT}')
        for key in ("model_name", "version", "created_at"):
            if not isinstance(doc.get(key), str):
                raise ManifestError(f"{MANIFEST_FILE}: {key!r} must be a string")
        if doc.get("task") is not None and not isinstance(doc["task"], str):
            raise ManifestError(f"{MANIFEST_FILE}: 'task' must be a string")
        files = doc.get("files")
        if not isinstance(files, dict) or not files:
            raise ManifestError(f"{MANIFEST_FILE}: 'files' must be a non-empty object")
        piece_bytes = doc.get("piece_bytes", PIECE_BYTES)
        if type(piece_bytes) is not int or piece_bytes < 1:
            raise ManifestError(f"{MANIFEST_FILE}: 'piece_bytes' must be a positive integer")
        entries = {}
        for path, entry in files.items():
            check_relative_path(path)
            if not (
                isinstance(entry, dict)
                and isinstance(entry.get("sha256"), str)
                and _SHA256.fullmatch(entry["sha256"])
                and type(entry.get("size")) is int
                and entry["size"] >= 0
            ):
                raise ManifestError(f"{MANIFEST_FILE}: entry for {path!r} needs a hex sha256 and a size")
            pieces = entry.get("pieces", [])
            if not (
                isinstance(pieces, list)
                and all(isinstance(d, str) and _SHA256.fullmatch(d) for d in pieces)
                and (not pieces or len(pieces) == piece_count(entry["size"], piece_bytes) > 1)
            ):
                raise ManifestError(
                    f"{MANIFEST_FILE}: 'pieces' of {path!r} must list one hex sha256 for each of its "
                    f"{piece_count(entry['size'], piece_bytes)} pieces of {piece_bytes} bytes"
                )
            entries[path] = FileEntry(entry["sha256"], entry["size"], tuple(pieces))
        runtimes = doc.get("runtimes", {})
        if not isinstance(runtimes, dict) or not all(isinstance(v, dict) for v in runtimes.values()):
            raise ManifestError(f"{MANIFEST_FILE}: 'runtimes' must map runtime names to gate results")
        probe = doc.get("probe")
        if probe is not None and not _is_probe(probe):
            raise ManifestError(
                f"{MANIFEST_FILE}: 'probe' must hold a string 'text' and 'task' and an 'answer': "
                f'{{"embedding": [numbers]}} or {{"label": string, "scores": {{label: number}}}}'
            )
        return cls(
            doc["model_name"],
            doc["version"],
            entries,
            doc.get("task"),
            doc["created_at"],
            runtimes,
            piece_bytes,
            probe,
            AdapterFacts.from_doc(doc),
        )


def _is_probe(probe: Any) -> bool:
    def numbers(values: Any) -> bool:
        return all(type(v) in (int, float) for v in values)

    answer = probe.get("answer") if isinstance(probe, dict) else None
    if not (isinstance(answer, dict) and isinstance(probe.get("text"), str) and isinstance(probe.get("task"), str)):
        return False
    if "embedding" in answer:
        return isinstance(answer["embedding"], list) and bool(answer["embedding"]) and numbers(answer["embedding"])
    scores = answer.get("scores")
    return (
        isinstance(answer.get("label"), str) and isinstance(scores, dict) and bool(scores) and numbers(scores.values())
    )


def piece_count(size: int, piece_bytes: int) -> int:
    return max(1, -(-size // piece_bytes))


def check_relative_path(path: str) -> None:
    """Refuse paths that could escape the model directory."""
    pure = PurePosixPath(path)
    if (
        not path
        or "\\" in path
        or "\n" in path
        or "\r" in path
        or pure.is_absolute()
        or ".." in pure.parts
        or str(pure) != path
        or path in PUBLISHED_FILES
    ):
        raise ManifestError(f"{MANIFEST_FILE}: unsafe or invalid file path {path!r}")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_entry(path: Path, piece_bytes: int = PIECE_BYTES) -> FileEntry:
    """The file's SHA-256 and size, and its pieces' digests when it is larger than one piece: one read."""
    whole = hashlib.sha256()
    pieces = []
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(piece_bytes):
            whole.update(chunk)
            pieces.append(hashlib.sha256(chunk).hexdigest())
            size += len(chunk)
    return FileEntry(whole.hexdigest(), size, tuple(pieces) if len(pieces) > 1 else ())


def model_files(directory: Path) -> list[str]:
    """Relative POSIX paths of every file under directory except the manifest and its digest lists."""
    return sorted(
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if p.is_file() and p.relative_to(directory).as_posix() not in PUBLISHED_FILES
    )


def build_manifest(
    directory: Path,
    model_name: str,
    version: str,
    task: str | None = None,
    workers: int = 8,
    runtimes: dict[str, dict[str, Any]] | None = None,
    piece_bytes: int = PIECE_BYTES,
    probe: dict[str, Any] | None = None,
    adapter: AdapterFacts | None = None,
) -> Manifest:
    paths = model_files(directory)
    if not paths:
        raise ManifestError(f"{directory} has no files")
    for path in paths:
        check_relative_path(path)
    with ThreadPoolExecutor(workers) as pool:
        files = dict(zip(paths, pool.map(lambda p: file_entry(directory / p, piece_bytes), paths), strict=True))
    return Manifest(
        model_name,
        version,
        files,
        task,
        runtimes=runtimes or {},
        piece_bytes=piece_bytes,
        probe=probe,
        adapter=adapter,
    )


def verify_file(path: Path, relpath: str, entry: FileEntry) -> str | None:
    """None when path matches entry, else what is wrong with it."""
    if not path.is_file():
        return f"{relpath}: missing"
    size = path.stat().st_size
    if size != entry.size:
        return f"{relpath}: size {size} != {entry.size} in the manifest"
    actual = sha256_file(path)
    if actual != entry.sha256:
        return f"{relpath}: sha256 {actual} != {entry.sha256} in the manifest"
    return None


def verify_directory(directory: Path, manifest: Manifest, workers: int = 8) -> None:
    """Raise ManifestError listing every missing or altered file."""
    with ThreadPoolExecutor(workers) as pool:
        problems = [
            p for p in pool.map(lambda item: verify_file(directory / item[0], *item), manifest.files.items()) if p
        ]
    if problems:
        raise ManifestError("model files do not match the manifest: " + "; ".join(sorted(problems)))


def read_manifest(directory: Path) -> Manifest | None:
    path = directory / MANIFEST_FILE
    return Manifest.from_json(path.read_bytes()) if path.is_file() else None


def unlisted_files(directory: Path, manifest: Manifest) -> Iterable[str]:
    return [p for p in model_files(directory) if p not in manifest.files]
