"""Getting a model version onto local disk: from S3 (parallel download into the cache) or a local directory,
verified against its manifest."""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..manifest import (
    MANIFEST_FILE,
    FileEntry,
    Manifest,
    ManifestError,
    check_relative_path,
    read_manifest,
    unlisted_files,
    verify_directory,
    verify_file,
)
from .piece_fetch import PieceError, StreamedFile, pieces_of

log = logging.getLogger(__name__)
# Ranged GETs in flight. One S3 connection carries on the order of 100 MB/s (not AWS-documented; see
# docs/aws-facts.md), so 16 keep up with a gp3 volume's 1,000 MiB/s maximum.
DOWNLOAD_WORKERS = 16


class ArtifactError(Exception):
    """The model cannot be fetched, or does not match its manifest."""


@dataclass(frozen=True)
class ModelArtifact:
    directory: Path
    manifest: Manifest | None


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix), the prefix ending in '/' unless empty."""
    if not uri.startswith("s3://"):
        raise ArtifactError(f"not an s3:// URI: {uri!r}")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if not bucket:
        raise ArtifactError(f"no bucket in {uri!r}")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def s3_client(workers: int = DOWNLOAD_WORKERS):
    import boto3
    from botocore.config import Config

    # AWS_ENDPOINT_URL_S3 (and AWS_ENDPOINT_URL) are honoured by boto3 itself.
    return boto3.client("s3", config=Config(max_pool_connections=workers * 4, retries={"mode": "standard"}))


def s3_error_code(exc: Exception) -> str | None:
    """The S3 error code of a botocore ClientError (None for anything else)."""
    return getattr(exc, "response", {}).get("Error", {}).get("Code")


def is_not_found(exc: Exception) -> bool:
    return s3_error_code(exc) in ("404", "NoSuchKey", "NotFound")


def read_s3_manifest(client, bucket: str, prefix: str) -> Manifest | None:
    try:
        body = client.get_object(Bucket=bucket, Key=prefix + MANIFEST_FILE)["Body"].read()
    except Exception as exc:
        if is_not_found(exc):
            return None
        raise ArtifactError(f"cannot read s3://{bucket}/{prefix}{MANIFEST_FILE}: {exc}") from exc
    try:
        return Manifest.from_json(body)
    except ManifestError as exc:
        raise ArtifactError(str(exc)) from None


def read_manifest_at(uri: str) -> Manifest | None:
    """The manifest of a model location, without downloading the model."""
    try:
        if uri.startswith("s3://"):
            return read_s3_manifest(s3_client(), *parse_s3_uri(uri))
        return read_manifest(Path(uri))
    except ManifestError as exc:
        raise ArtifactError(str(exc)) from None


def fetch_model(uri: str, cache_dir: Path, require_manifest: bool) -> ModelArtifact:
    if uri.startswith("s3://"):
        return _fetch_s3(uri, cache_dir, require_manifest)
    return _check_local(Path(uri), require_manifest)


def _check_local(directory: Path, require_manifest: bool) -> ModelArtifact:
    if not directory.is_dir():
        raise ArtifactError(f"model directory {directory} does not exist")
    try:
        manifest = read_manifest(directory)
        if manifest is None:
            if require_manifest:
                raise ArtifactError(f"{directory} has no {MANIFEST_FILE} and REQUIRE_MANIFEST is true")
            log.warning("model has no manifest; files not verified", extra={"model_dir": str(directory)})
            return ModelArtifact(directory, None)
        verify_directory(directory, manifest)
    except ManifestError as exc:
        raise ArtifactError(str(exc)) from None
    extra = unlisted_files(directory, manifest)
    if extra:
        log.warning("files not in the manifest are not verified", extra={"files": extra})
    log.info("model verified", extra={"model_dir": str(directory), "files": len(manifest.files)})
    return ModelArtifact(directory, manifest)


def _fetch_s3(uri: str, cache_dir: Path, require_manifest: bool) -> ModelArtifact:
    bucket, prefix = parse_s3_uri(uri)
    client = s3_client()
    started = time.monotonic()
    manifest = read_s3_manifest(client, bucket, prefix)
    if manifest is None:
        if require_manifest:
            raise ArtifactError(f"{uri}{MANIFEST_FILE} not found and REQUIRE_MANIFEST is true")
        log.warning("model has no manifest; files not verified", extra={"model_uri": uri})
        paths = _list_keys(client, bucket, prefix)
        if not paths:
            raise ArtifactError(f"no files under {uri}")
    else:
        paths = list(manifest.files)
    target = cache_dir / "models" / bucket / prefix
    target.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(DOWNLOAD_WORKERS) as pool:
        if manifest is None:
            problems = list(pool.map(lambda p: _download_whole(client, bucket, prefix, target, p, None), paths))
        else:
            needed = [
                p
                for p, ok in zip(
                    paths, pool.map(lambda p: _is_cached(target, p, manifest.files[p]), paths), strict=True
                )
                if not ok
            ]
            problems = _download_checked(pool, client, bucket, prefix, target, manifest, needed)
    problems = [p for p in problems if p]
    if problems:
        raise ArtifactError("model files do not match the manifest: " + "; ".join(sorted(problems)))
    for stale in unlisted_files(target, manifest) if manifest else []:
        (target / stale).unlink()
    size = sum((target / p).stat().st_size for p in paths)
    log.info(
        "model downloaded and verified" if manifest else "model downloaded",
        extra={"model_uri": uri, "files": len(paths), "bytes": size, "seconds": round(time.monotonic() - started, 3)},
    )
    return ModelArtifact(target, manifest)


def download_verified(client, bucket: str, prefix: str, target: Path, manifest: Manifest) -> None:
    """Every file the manifest lists, from s3://bucket/prefix into target, each checked as it streams (piece by piece)
    or hashed after; ArtifactError listing every file that does not match."""
    target.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(DOWNLOAD_WORKERS) as pool:
        problems = _download_checked(pool, client, bucket, prefix, target, manifest, list(manifest.files))
    problems = [p for p in problems if p]
    if problems:
        raise ArtifactError("files do not match the manifest: " + "; ".join(sorted(problems)))


def _is_cached(target: Path, relpath: str, entry: FileEntry) -> bool:
    return (target / relpath).is_file() and verify_file(target / relpath, relpath, entry) is None


def _download_checked(
    pool: ThreadPoolExecutor, client, bucket: str, prefix: str, target: Path, manifest: Manifest, paths: list[str]
) -> list[str | None]:
    """Every piece of every file at once on the pool, each checked as it streams; a file without piece digests is
    downloaded whole and hashed after. Whatever happens, every file this opened is closed, and kept only when each
    of its pieces matched."""
    streamed: dict[str, tuple[StreamedFile, list[Future]]] = {}
    whole: list[Future] = []
    problems: list[str | None] = []
    failure: ArtifactError | None = None
    try:
        for relpath in paths:
            entry = manifest.files[relpath]
            pieces = pieces_of(entry, manifest.piece_bytes)
            if pieces is None:
                log.warning(
                    "published before piece digests: the file is hashed after its download; publish the "
                    "version again to check it while it streams",
                    extra={"file": relpath},
                )
                whole.append(pool.submit(_download_whole, client, bucket, prefix, target, relpath, entry))
                continue
            file = StreamedFile(target / relpath, entry.size)
            streamed[relpath] = (file, [pool.submit(file.fetch, client, bucket, prefix + relpath, p) for p in pieces])
    except OSError as exc:
        failure = ArtifactError(f"cannot write the model under {target}: {exc}")
    for relpath, (file, futures) in streamed.items():
        problem = None
        for future in futures:
            if failure is not None:
                future.cancel()  # a piece already running ends on its own
            try:
                future.result()
            except CancelledError:
                problem = problem or "cancelled"
            except PieceError as exc:
                problem = problem or f"{relpath}: {exc}"
            except Exception as exc:
                if is_not_found(exc):
                    problem = problem or f"{relpath}: missing in S3"
                else:
                    problem = problem or str(exc)
                    failure = failure or ArtifactError(f"cannot download s3://{bucket}/{prefix}{relpath}: {exc}")
        file.finish(ok=problem is None)  # every piece has ended, so the file can be closed
        problems.append(problem)
    if failure is not None:
        for future in whole:
            future.cancel()
        raise failure
    return problems + [f.result() for f in whole]


def _download_whole(
    client, bucket: str, prefix: str, target: Path, relpath: str, entry: FileEntry | None
) -> str | None:
    dest = target / relpath
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    try:
        client.download_file(bucket, prefix + relpath, str(partial))
    except Exception as exc:
        partial.unlink(missing_ok=True)
        if is_not_found(exc):
            return f"{relpath}: missing in S3"
        raise ArtifactError(f"cannot download s3://{bucket}/{prefix}{relpath}: {exc}") from exc
    os.replace(partial, dest)
    return verify_file(dest, relpath, entry) if entry else None


def _list_keys(client, bucket: str, prefix: str) -> list[str]:
    paths = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            relpath = obj["Key"][len(prefix) :]
            if relpath and not relpath.endswith("/"):
                try:
                    check_relative_path(relpath)
                except ManifestError as exc:
                    raise ArtifactError(str(exc)) from None
                paths.append(relpath)
    return paths
