"""manifest.json: the list of a model version's files with their SHA-256, written by publish, checked by the loader.

    {"format": 1, "model_name": "minilm", "version": "3", "task": "text-embedding",
     "created_at": "2026-01-01T00:00:00Z", "files": {"model.safetensors": {"sha256": "...", "size": 123}}}
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
FORMAT = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 4 * 1024 * 1024


class ManifestError(Exception):
    """The manifest is malformed, or files do not match it."""


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    size: int


@dataclass(frozen=True)
class Manifest:
    model_name: str
    version: str
    files: dict[str, FileEntry]
    task: str | None = None
    created_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    # runtime name -> its accuracy gate result at publish (runtimes.GateResult.to_json()); eager needs none
    runtimes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {"format": FORMAT, "model_name": self.model_name, "version": self.version}
        if self.task:
            doc["task"] = self.task
        doc["created_at"] = self.created_at
        if self.runtimes:
            doc["runtimes"] = self.runtimes
        doc["files"] = {path: {"sha256": e.sha256, "size": e.size} for path, e in sorted(self.files.items())}
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"

    def to_sha256sums(self) -> bytes:
        """`sha256sum --check --strict` input: one "<digest>  <path>" line per file (publish refuses newlines in
        paths through check_relative_path)."""
        return "".join(f"{e.sha256}  {path}\n" for path, e in sorted(self.files.items())).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ManifestError(f"{MANIFEST_FILE} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ManifestError(f"{MANIFEST_FILE} must be an object with \"format\": {FORMAT}")
        for key in ("model_name", "version", "created_at"):
            if not isinstance(doc.get(key), str):
                raise ManifestError(f"{MANIFEST_FILE}: {key!r} must be a string")
        if doc.get("task") is not None and not isinstance(doc["task"], str):
            raise ManifestError(f"{MANIFEST_FILE}: 'task' must be a string")
        files = doc.get("files")
        if not isinstance(files, dict) or not files:
            raise ManifestError(f"{MANIFEST_FILE}: 'files' must be a non-empty object")
        entries = {}
        for path, entry in files.items():
            check_relative_path(path)
            if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
                    and _SHA256.fullmatch(entry["sha256"]) and type(entry.get("size")) is int and entry["size"] >= 0):
                raise ManifestError(f"{MANIFEST_FILE}: entry for {path!r} needs a hex sha256 and a size")
            entries[path] = FileEntry(entry["sha256"], entry["size"])
        runtimes = doc.get("runtimes", {})
        if not isinstance(runtimes, dict) or not all(isinstance(v, dict) for v in runtimes.values()):
            raise ManifestError(f"{MANIFEST_FILE}: 'runtimes' must map runtime names to gate results")
        return cls(doc["model_name"], doc["version"], entries, doc.get("task"), doc["created_at"], runtimes)


def check_relative_path(path: str) -> None:
    """Refuse paths that could escape the model directory."""
    pure = PurePosixPath(path)
    if (not path or "\\" in path or "\n" in path or "\r" in path or pure.is_absolute() or ".." in pure.parts
            or str(pure) != path or path in (MANIFEST_FILE, SHA256SUMS_FILE)):
        raise ManifestError(f"{MANIFEST_FILE}: unsafe or invalid file path {path!r}")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def model_files(directory: Path) -> list[str]:
    """Relative POSIX paths of every file under directory except the manifest and its SHA256SUMS."""
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*")
                  if p.is_file() and p.relative_to(directory).as_posix() not in (MANIFEST_FILE, SHA256SUMS_FILE))


def build_manifest(directory: Path, model_name: str, version: str, task: str | None = None,
                   workers: int = 8, runtimes: dict[str, dict[str, Any]] | None = None) -> Manifest:
    paths = model_files(directory)
    if not paths:
        raise ManifestError(f"{directory} has no files")
    for path in paths:
        check_relative_path(path)
    with ThreadPoolExecutor(workers) as pool:
        digests = pool.map(lambda p: sha256_file(directory / p), paths)
        files = {p: FileEntry(d, (directory / p).stat().st_size) for p, d in zip(paths, digests, strict=False)}
    return Manifest(model_name, version, files, task, runtimes=runtimes or {})


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
        problems = [p for p in pool.map(lambda item: verify_file(directory / item[0], *item),
                                        manifest.files.items()) if p]
    if problems:
        raise ManifestError("model files do not match the manifest: " + "; ".join(sorted(problems)))


def read_manifest(directory: Path) -> Manifest | None:
    path = directory / MANIFEST_FILE
    return Manifest.from_json(path.read_bytes()) if path.is_file() else None


def unlisted_files(directory: Path, manifest: Manifest) -> Iterable[str]:
    return [p for p in model_files(directory) if p not in manifest.files]
