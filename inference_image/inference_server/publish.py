"""Publish a model version to S3 with its manifest:

    python -m inference_server.publish ./my-model s3://bucket/models/<model-name>/<version>/ [--task ...] [--force]

Every file is uploaded first, then SHA256SUMS (the same digests for `sha256sum --check`) and SHA256PIECES (the
16 MiB pieces' digests of each larger file, for the copy-to-scratch fetcher), and manifest.json last, so a version
with a manifest is complete. A torch-export or
image-classification artifact (model.pt2 and model.json) is checked before anything is uploaded: the declaration,
no pickled entries in the archive, and the program's inputs and outputs against the declaration. A
text-classification or text-embedding model is loaded as the server loads it, refused where its checkpoint lacks
weights or labels its task needs (model_check.py), and its answer to a fixed probe text goes into the manifest, which
the server checks before it is ready. Each
`--runtime` (compile, onnx, int8; see runtimes.py) is converted here, never at task start, and must pass its
accuracy gate against eager before anything is uploaded; the gate results go into the manifest.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from .engine.artifacts import DOWNLOAD_WORKERS, ArtifactError, parse_s3_uri, s3_client
from .engine.probe_check import PROBED_TASKS, describe
from .facts import RUNTIMES, TASKS
from .handlers.artifact_check import EXPORT_TASKS, ArtifactCheckError, check_export_artifact
from .handlers.checkpoint_check import ModelCheckError
from .handlers.runtimes import RuntimeConversionError
from .logs import configure_logging
from .manifest import (
    MANIFEST_FILE,
    PIECE_BYTES,
    PUBLISHED_FILES,
    SHA256PIECES_FILE,
    SHA256SUMS_FILE,
    Manifest,
    ManifestError,
    build_manifest,
)
from .settings import MODEL_NAME_PATTERN
from .tools.conversion import convert_and_gate, record_probe

log = logging.getLogger("inference_server.publish")


class PublishError(Exception):
    pass


def name_and_version(prefix: str) -> tuple[str, str]:
    """(model name, version) from a prefix ending in <model-name>/<version>/."""
    parts = prefix.strip("/").split("/")
    if len(parts) < 2:
        raise PublishError(f"cannot take model name and version from {prefix!r}: expected .../<model-name>/<version>/")
    return parts[-2], parts[-1]


def publish(model_dir: Path, uri: str, *, task: str | None = None, model_name: str | None = None,
            version: str | None = None, force: bool = False, client=None,
            runtimes: Sequence[str] = (), piece_bytes: int = PIECE_BYTES) -> Manifest:
    if not model_dir.is_dir():
        raise PublishError(f"{model_dir} is not a directory")
    bucket, prefix = parse_s3_uri(uri)
    if not prefix:
        raise PublishError(f"{uri}: give a prefix, s3://bucket/models/<model-name>/<version>/")
    default_name, default_version = name_and_version(prefix)
    model_name, version = model_name or default_name, version or default_version
    if not MODEL_NAME_PATTERN.fullmatch(model_name):
        raise PublishError(f"model name {model_name!r} must be URL-safe ([a-z0-9-]+)")
    if task is not None and task not in TASKS:
        raise PublishError(f"task must be one of {', '.join(TASKS)}")
    if task in EXPORT_TASKS:
        try:
            check_export_artifact(model_dir, task)
        except ArtifactCheckError as exc:
            raise PublishError(str(exc)) from None
    if runtimes and task is None:
        raise PublishError("--runtime needs --task: the conversion and its accuracy gate depend on it")
    client = client or s3_client()
    existing = _existing_keys(client, bucket, prefix)
    if existing and not force:
        raise PublishError(f"{uri} already exists ({len(existing)} objects); pass --force to overwrite it")
    probe = _probe(model_dir, task)
    gates = {}
    for runtime in dict.fromkeys(runtimes):  # before the manifest: the converted files are checksummed with the rest
        assert task is not None  # checked above: --runtime needs --task
        try:
            result = convert_and_gate(model_dir, task, runtime)
        except RuntimeConversionError as exc:
            raise PublishError(str(exc)) from None
        gates[runtime] = result.to_json()
        log.info("runtime converted and gated", extra=gates[runtime])
    manifest = build_manifest(model_dir, model_name, version, task, runtimes=gates, piece_bytes=piece_bytes,
                              probe=probe)

    def upload(relpath: str) -> None:
        client.upload_file(str(model_dir / relpath), bucket, prefix + relpath)

    with ThreadPoolExecutor(DOWNLOAD_WORKERS) as pool:
        list(pool.map(upload, manifest.files))
    client.put_object(Bucket=bucket, Key=prefix + SHA256SUMS_FILE, Body=manifest.to_sha256sums(),
                      ContentType="text/plain")
    client.put_object(Bucket=bucket, Key=prefix + SHA256PIECES_FILE, Body=manifest.to_sha256pieces(),
                      ContentType="text/plain")
    client.put_object(Bucket=bucket, Key=prefix + MANIFEST_FILE, Body=manifest.to_json(),
                      ContentType="application/json")
    stale = existing - {prefix + p for p in manifest.files} - {prefix + name for name in PUBLISHED_FILES}
    for key in sorted(stale):
        client.delete_object(Bucket=bucket, Key=key)
    log.info("model published", extra={"model_uri": f"s3://{bucket}/{prefix}", "model_name": model_name,
                                       "version": version, "files": len(manifest.files),
                                       "bytes": sum(e.size for e in manifest.files.values()),
                                       "probe_answer": describe(manifest.probe["answer"]) if manifest.probe else None})
    return manifest


def _probe(model_dir: Path, task: str | None) -> dict | None:
    """The model's answer to the probe text, for a built-in text task; PublishError where its checkpoint cannot serve
    the task."""
    if task not in PROBED_TASKS:
        return None
    try:
        return record_probe(model_dir, task)
    except ModelCheckError as exc:
        raise PublishError(str(exc)) from None


def _existing_keys(client, bucket: str, prefix: str) -> set[str]:
    keys: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.update(obj["Key"] for obj in page.get("Contents", []))
    return keys


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inference_server.publish", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", type=Path, help="local model directory")
    parser.add_argument("uri", help="s3://bucket/models/<model-name>/<version>/")
    parser.add_argument("--task", choices=TASKS, help="recorded in the manifest; the server's default MODEL_TASK")
    parser.add_argument("--model-name", help="default: taken from the URI")
    parser.add_argument("--version", help="default: taken from the URI")
    parser.add_argument("--force", action="store_true", help="overwrite an existing version")
    parser.add_argument("--runtime", action="append", choices=RUNTIMES, default=[], dest="runtimes",
                        help="convert for this runtime (repeatable) and refuse to publish if it fails its accuracy "
                             "gate against eager; writes model.onnx / model.int8.onnx into model_dir")
    args = parser.parse_args(argv)
    configure_logging()
    try:
        publish(args.model_dir, args.uri, task=args.task, model_name=args.model_name, version=args.version,
                force=args.force, runtimes=args.runtimes)
    except (PublishError, ArtifactError, ManifestError, BotoCoreError, ClientError) as exc:
        log.error("publish refused", extra={"error": str(exc)})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
