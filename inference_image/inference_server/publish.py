"""Publish a model version to S3 with its manifest:

    python -m inference_server.publish ./my-model s3://bucket/models/<model-name>/<version>/ [--task ...] [--force]

or to a model pool (docs/server.md, "Model pools"), which publishes it under s3://bucket/pools/<pool>/models/<model-name>/
<version>/ and then registers it in the pool's registry (one atomic write), and changes the registry alone:

    python -m inference_server.publish ./my-model s3://bucket/ --pool <pool> --model-name <m> --version <v> [--task ...]
    python -m inference_server.publish --pool <pool> --store s3://bucket/ --set-version <m>=<v>   # move or roll back
    python -m inference_server.publish --pool <pool> --store s3://bucket/ --remove <m>

or a LoRA adapter (PEFT's adapter_config.json and adapter_model.safetensors) for an LLM service's base model, checked
against the base (its id, its modules, the rank limit), published under s3://bucket/adapters/<base>/<adapter>/<version>/
and registered in the base's adapter registry (docs/lora-adapters.md):

    python -m inference_server.publish --adapter ./my-adapter s3://bucket/ --base <base> --base-model BASE \
        --model-name <adapter> --version <v> [--max-rank 16]
    python -m inference_server.publish --base <base> --store s3://bucket/ --set-version <adapter>=<v>
    python -m inference_server.publish --base <base> --store s3://bucket/ --remove <adapter>

(BASE: the base model's local directory or its published version, s3://bucket/models/<base>/<version>/.)

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

from .adapters.base_model import read_base_model
from .adapters.check import check_adapter
from .adapters.peft_config import AdapterError
from .adapters.registry import AdapterRegistry, adapter_prefix
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
    AdapterFacts,
    Manifest,
    ManifestError,
    build_manifest,
)
from .pool.registry import RegistryError, model_prefix, pool_prefix
from .pool.registry_write import remove_model, set_version
from .registry import s3 as registry_s3
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


def publish(
    model_dir: Path,
    uri: str,
    *,
    task: str | None = None,
    model_name: str | None = None,
    version: str | None = None,
    force: bool = False,
    client=None,
    runtimes: Sequence[str] = (),
    piece_bytes: int = PIECE_BYTES,
    adapter: AdapterFacts | None = None,
) -> Manifest:
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
    manifest = build_manifest(
        model_dir, model_name, version, task, runtimes=gates, piece_bytes=piece_bytes, probe=probe, adapter=adapter
    )

    def upload(relpath: str) -> None:
        client.upload_file(str(model_dir / relpath), bucket, prefix + relpath)

    with ThreadPoolExecutor(DOWNLOAD_WORKERS) as pool:
        list(pool.map(upload, manifest.files))
    client.put_object(
        Bucket=bucket, Key=prefix + SHA256SUMS_FILE, Body=manifest.to_sha256sums(), ContentType="text/plain"
    )
    client.put_object(
        Bucket=bucket, Key=prefix + SHA256PIECES_FILE, Body=manifest.to_sha256pieces(), ContentType="text/plain"
    )
    client.put_object(
        Bucket=bucket, Key=prefix + MANIFEST_FILE, Body=manifest.to_json(), ContentType="application/json"
    )
    stale = existing - {prefix + p for p in manifest.files} - {prefix + name for name in PUBLISHED_FILES}
    for key in sorted(stale):
        client.delete_object(Bucket=bucket, Key=key)
    log.info(
        "model published",
        extra={
            "model_uri": f"s3://{bucket}/{prefix}",
            "model_name": model_name,
            "version": version,
            "files": len(manifest.files),
            "bytes": sum(e.size for e in manifest.files.values()),
            "probe_answer": describe(manifest.probe["answer"]) if manifest.probe else None,
        },
    )
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
    parser = argparse.ArgumentParser(
        prog="python -m inference_server.publish",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model_dir", nargs="?", help="local model directory")
    parser.add_argument("uri", nargs="?", help="s3://bucket/models/<model-name>/<version>/ (with --pool: s3://bucket/)")
    parser.add_argument("--task", choices=TASKS, help="recorded in the manifest; the server's default MODEL_TASK")
    parser.add_argument("--model-name", help="default: taken from the URI")
    parser.add_argument("--version", help="default: taken from the URI")
    parser.add_argument("--force", action="store_true", help="overwrite an existing version")
    parser.add_argument(
        "--runtime",
        action="append",
        choices=RUNTIMES,
        default=[],
        dest="runtimes",
        help="convert for this runtime (repeatable) and refuse to publish if it fails its accuracy "
        "gate against eager; writes model.onnx / model.int8.onnx into model_dir",
    )
    parser.add_argument("--pool", help="publish to this model pool and register the version in its registry")
    parser.add_argument("--store", help="with --set-version or --remove: the model store, s3://bucket/")
    parser.add_argument(
        "--set-version",
        metavar="MODEL=VERSION",
        help="register MODEL at VERSION (already published to the pool): add, move or roll back",
    )
    parser.add_argument("--remove", metavar="MODEL", help="take MODEL out of the pool's registry")
    parser.add_argument("--adapter", metavar="DIR", type=Path, help="publish this PEFT LoRA adapter (with --base)")
    parser.add_argument(
        "--base", help="the base model whose adapter registry --adapter, --set-version, --remove change"
    )
    parser.add_argument(
        "--base-model",
        metavar="BASE",
        help="with --adapter: the base model to check it against, a local directory or s3://bucket/models/<base>/<v>/",
    )
    parser.add_argument("--max-rank", type=int, help="with --adapter: refuse an adapter of a higher LoRA rank")
    args = parser.parse_args(argv)
    configure_logging()
    try:
        if args.pool and args.base:
            raise PublishError("give --pool (a model pool) or --base (an LLM's adapters), not both")
        if args.pool:
            _pool_command(args)
        elif args.base or args.adapter:
            _adapter_command(args)
        elif args.set_version or args.remove or args.store:
            raise PublishError(
                "--set-version, --remove and --store change a registry: give --pool (a model pool) or --base (adapters)"
            )
        elif args.model_dir is None or args.uri is None:
            raise PublishError("give a model directory and s3://bucket/models/<model-name>/<version>/")
        else:
            publish(
                Path(args.model_dir),
                args.uri,
                task=args.task,
                model_name=args.model_name,
                version=args.version,
                force=args.force,
                runtimes=args.runtimes,
            )
    except (PublishError, AdapterError, ArtifactError, ManifestError, RegistryError, BotoCoreError, ClientError) as exc:
        log.error("publish refused", extra={"error": str(exc)})
        return 1
    return 0


def _pool_command(args: argparse.Namespace) -> None:
    """--pool: publish and register a version, or (--set-version, --remove) change the registry alone."""
    changes = [flag for flag in (args.set_version, args.remove) if flag]
    if changes:
        if len(changes) > 1 or args.model_dir is not None or not args.store:
            raise PublishError(
                "give one of --set-version or --remove, with --store s3://bucket/ and no model directory"
            )
        bucket, _ = parse_s3_uri(args.store)
        client = s3_client()
        if args.remove:
            remove_model(client, bucket, args.pool, args.remove)
            return
        model, sep, version = args.set_version.partition("=")
        if not sep:
            raise PublishError(f"--set-version takes MODEL=VERSION, got {args.set_version!r}")
        set_version(client, bucket, args.pool, model, version)
        return
    if args.model_dir is None or args.uri is None or not args.model_name or not args.version:
        raise PublishError("--pool publishes DIR s3://bucket/ --model-name <m> --version <v>")
    publish_to_pool(
        Path(args.model_dir),
        args.uri,
        args.pool,
        args.model_name,
        args.version,
        task=args.task,
        force=args.force,
        runtimes=args.runtimes,
    )


def publish_to_pool(
    model_dir: Path,
    store: str,
    pool: str,
    model_name: str,
    version: str,
    *,
    task: str | None = None,
    force: bool = False,
    client=None,
    runtimes: Sequence[str] = (),
    piece_bytes: int = PIECE_BYTES,
) -> Manifest:
    """Publish under s3://bucket/pools/<pool>/models/<model>/<version>/ (exactly as a single model is), then register
    that version in the pool's registry: the registry names only complete versions."""
    bucket, _ = parse_s3_uri(store)
    uri = f"s3://{bucket}/{pool_prefix(pool)}{model_prefix(model_name, version)}"
    client = client or s3_client()
    manifest = publish(
        model_dir,
        uri,
        task=task,
        model_name=model_name,
        version=version,
        force=force,
        client=client,
        runtimes=runtimes,
        piece_bytes=piece_bytes,
    )
    set_version(client, bucket, pool, model_name, version)
    return manifest


def _adapter_command(args: argparse.Namespace) -> None:
    """--base: publish and register an adapter (--adapter), or (--set-version, --remove) change the registry alone."""
    if not args.base:
        raise PublishError("--adapter needs --base <base-model>: the LLM service's base model whose registry it joins")
    changes = [flag for flag in (args.set_version, args.remove) if flag]
    if changes:
        if len(changes) > 1 or args.adapter is not None or not args.store:
            raise PublishError("give one of --set-version or --remove, with --store s3://bucket/ and no --adapter")
        bucket, _ = parse_s3_uri(args.store)
        client = s3_client()
        if args.remove:
            registry_s3.remove(client, bucket, AdapterRegistry, args.base, args.remove)
            return
        adapter, sep, version = args.set_version.partition("=")
        if not sep:
            raise PublishError(f"--set-version takes ADAPTER=VERSION, got {args.set_version!r}")
        registry_s3.set_version(client, bucket, AdapterRegistry, args.base, adapter, version)
        return
    store = args.uri or args.model_dir
    if args.adapter is None or not store or (args.uri and args.model_dir) or not args.base_model:
        raise PublishError(
            "--adapter publishes DIR s3://bucket/ --base <base> --base-model BASE --model-name <a> --version <v>"
        )
    if not args.model_name or not args.version:
        raise PublishError(
            "--adapter needs --model-name (the adapter's name, what clients send as model) and --version"
        )
    publish_adapter(
        args.adapter,
        store,
        args.base,
        args.base_model,
        args.model_name,
        args.version,
        max_rank=args.max_rank,
        force=args.force,
    )


def publish_adapter(
    adapter_dir: Path,
    store: str,
    base: str,
    base_model: str,
    name: str,
    version: str,
    *,
    max_rank: int | None = None,
    force: bool = False,
    client=None,
) -> Manifest:
    """Check a PEFT adapter against its base model (the base's id, its modules, the rank limit), publish it under
    s3://bucket/adapters/<base>/<name>/<version>/ with its manifest, then register that version in the base's adapter
    registry: a refused adapter uploads nothing, and the registry names only complete versions."""
    if not adapter_dir.is_dir():
        raise PublishError(f"{adapter_dir} is not a directory")
    if max_rank is not None and max_rank < 1:
        raise PublishError(f"--max-rank must be a positive integer, got {max_rank}")
    bucket, _ = parse_s3_uri(store)
    uri = f"s3://{bucket}/{adapter_prefix(base, name, version)}"
    client = client or s3_client()
    facts = check_adapter(adapter_dir, read_base_model(base_model, base, client), base, max_rank)
    manifest = publish(adapter_dir, uri, model_name=name, version=version, force=force, client=client, adapter=facts)
    registry_s3.set_version(client, bucket, AdapterRegistry, base, name, version)
    return manifest


if __name__ == "__main__":
    sys.exit(main())
