"""A pool's model store: its registry, and its model versions fetched onto a bounded local disk cache.

The store is the pool's prefix, s3://<bucket>/pools/<pool>/ (MODEL_STORE_URI), or a local directory laid out alike
(tests, the bench). Every read stays under that prefix. A version fetched from S3 lands in the disk cache (the
tier between host memory and S3) and is verified against its manifest on every load, cached or not; the cache
drops its least recently used versions once it holds more than its budget (POOL_DISK_CACHE_MIB)."""

from __future__ import annotations

import logging
import shutil
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ..engine.artifacts import ArtifactError, ModelArtifact, fetch_model, parse_s3_uri, s3_client
from ..registry.s3 import read_if_changed
from .registry import REGISTRY_FILE, Registry, RegistryError, model_prefix

log = logging.getLogger(__name__)

DISK, S3 = "disk", "s3"  # where a fetch found the version's files


@dataclass(frozen=True)
class Fetched:
    artifact: ModelArtifact
    tier: str  # DISK or S3
    # False: this process verified these very files before (same size, mtime and inode) and they were not hashed again
    verified_now: bool = True


Fingerprint = tuple[tuple[str, int, int, int], ...]


def _fingerprint(artifact: ModelArtifact) -> Fingerprint | None:
    """Each manifest file's size, mtime and inode: what a rewrite of a verified file changes."""
    if artifact.manifest is None:
        return None
    try:
        stats = [(path, (artifact.directory / path).stat()) for path in sorted(artifact.manifest.files)]
    except OSError:
        return None
    return tuple((path, st.st_size, st.st_mtime_ns, st.st_ino) for path, st in stats)


def _tree_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


class ModelStore:
    def __init__(self, uri: str, cache_dir: Path, disk_budget_bytes: int) -> None:
        self.uri = uri if uri.endswith("/") else uri + "/"
        self.is_s3 = uri.startswith("s3://")
        self.cache_dir = cache_dir
        self.disk_budget_bytes = disk_budget_bytes
        self._client = None
        self._lock = threading.Lock()
        self._cached: OrderedDict[Path, int] = OrderedDict()  # version directory -> bytes, least recently used first
        self._verified: dict[Path, tuple[ModelArtifact, Fingerprint]] = {}  # what this process hashed, as it was
        self.disk_evictions = 0

    @property
    def client(self):
        if self._client is None:
            self._client = s3_client()
        return self._client

    # -- the registry ------------------------------------------------------------------------------------------

    def read_registry(self, etag: str | None = None) -> tuple[Registry | None, str | None]:
        """(the registry, its ETag); (None, etag) when it has not changed since ``etag``. A store without a registry
        serves no model (an empty registry)."""
        if not self.is_s3:
            path = Path(self.uri) / REGISTRY_FILE
            if not path.is_file():
                return Registry(_pool_of(self.uri)), None
            body = path.read_bytes()
            tag = str(hash(body))
            return (None, tag) if tag == etag else (Registry.from_json(body), tag)
        bucket, prefix = parse_s3_uri(self.uri)
        return read_if_changed(self.client, bucket, prefix + REGISTRY_FILE, Registry, _pool_of(self.uri), etag)

    # -- model versions ----------------------------------------------------------------------------------------

    def fetch(self, model: str, version: str) -> Fetched:
        """The version's files on local disk, verified against its manifest (a version without one is refused).
        Files this process verified before are not hashed again while their size, mtime and inode are unchanged (a
        published version is immutable: publish refuses to overwrite one without --force)."""
        uri = self.uri + model_prefix(model, version)
        if self.is_s3:
            bucket, prefix = parse_s3_uri(uri)
            directory = self.cache_dir / "models" / bucket / prefix
        else:
            directory = Path(uri)
        with self._lock:
            tier = DISK if directory in self._cached or not self.is_s3 else S3
            known = self._verified.get(directory)
        if known is not None and _fingerprint(known[0]) == known[1]:
            self._touch(directory)
            return Fetched(known[0], DISK, verified_now=False)
        artifact = fetch_model(uri, self.cache_dir, require_manifest=True)
        fingerprint = _fingerprint(artifact)
        with self._lock:
            if fingerprint is not None:
                self._verified[directory] = (artifact, fingerprint)
        if self.is_s3:
            self._cache(directory)
        return Fetched(artifact, tier)

    def _touch(self, directory: Path) -> None:
        with self._lock:
            if directory in self._cached:
                self._cached.move_to_end(directory)

    def _cache(self, directory: Path) -> None:
        size = _tree_bytes(directory)
        with self._lock:
            self._cached[directory] = size
            self._cached.move_to_end(directory)
            total = sum(self._cached.values())
            doomed = []
            while total > self.disk_budget_bytes and len(self._cached) > 1:
                oldest, freed = next(iter(self._cached.items()))
                if oldest == directory:
                    break
                del self._cached[oldest]
                self._verified.pop(oldest, None)
                doomed.append(oldest)
                total -= freed
            self.disk_evictions += len(doomed)
        for path in doomed:
            shutil.rmtree(path, ignore_errors=True)

    @property
    def disk_bytes(self) -> int:
        with self._lock:
            return sum(self._cached.values())


def _pool_of(uri: str) -> str:
    """The pool's name: the last segment of its prefix (pools/<pool>/)."""
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    try:
        return Registry(name).pool
    except RegistryError:
        raise ArtifactError(f"MODEL_STORE_URI {uri!r} does not end in pools/<pool>/") from None
