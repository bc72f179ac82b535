"""Changing a pool's registry in S3: read it with its ETag, change it, and write it back whole in one PutObject that
succeeds only while the document is still the one read (If-Match; If-None-Match: * for the first), so two
publishers never lose each other's change: the loser reads again and retries.

Source: Amazon S3 User Guide, "How to prevent object overwrites with conditional writes"
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html): a failed precondition is 412
PreconditionFailed, a concurrent conditional write 409 ConditionalRequestConflict (retry after reading again)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..engine.artifacts import is_not_found, read_s3_manifest, s3_error_code
from ..manifest import MANIFEST_FILE
from .registry import REGISTRY_FILE, Registry, RegistryError, model_prefix, pool_prefix

log = logging.getLogger(__name__)

ATTEMPTS = 5
CONFLICT_CODES = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


def read_registry(client, bucket: str, pool: str) -> tuple[Registry, str | None]:
    """(the registry, its ETag); an empty registry and None where the pool has none yet."""
    try:
        response = client.get_object(Bucket=bucket, Key=pool_prefix(pool) + REGISTRY_FILE)
    except Exception as exc:
        if is_not_found(exc):
            return Registry(pool), None
        raise
    return Registry.from_json(response["Body"].read()), response["ETag"]


def update_registry(client, bucket: str, pool: str, change: Callable[[Registry], Registry]) -> Registry:
    """Apply ``change`` to the pool's registry atomically (retried on a concurrent write); the registry written."""
    for _ in range(ATTEMPTS):
        current, etag = read_registry(client, bucket, pool)
        updated = change(current)
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            client.put_object(
                Bucket=bucket,
                Key=pool_prefix(pool) + REGISTRY_FILE,
                Body=updated.to_json(),
                ContentType="application/json",
                **condition,
            )
        except Exception as exc:
            if s3_error_code(exc) in CONFLICT_CODES:
                log.info("the registry changed meanwhile; reading it again", extra={"pool": pool})
                continue
            raise
        log.info(
            "pool registry written", extra={"pool": pool, "revision": updated.revision, "models": len(updated.models)}
        )
        return updated
    raise RegistryError(f"pool {pool}'s registry kept changing under {ATTEMPTS} attempts; try again")


def set_version(client, bucket: str, pool: str, model: str, version: str) -> Registry:
    """Register ``model`` at ``version`` (add it, move it, or roll it back), once that version's manifest exists
    under the pool: a version that was never published completely is never registered."""
    prefix = pool_prefix(pool) + model_prefix(model, version)
    if read_s3_manifest(client, bucket, prefix) is None:
        raise RegistryError(
            f"s3://{bucket}/{prefix}{MANIFEST_FILE} does not exist: publish the version first "
            f"(python -m inference_server.publish DIR s3://{bucket}/ --pool {pool} "
            f"--model-name {model} --version {version})"
        )
    return update_registry(client, bucket, pool, lambda registry: registry.with_version(model, version))


def remove_model(client, bucket: str, pool: str, model: str) -> Registry:
    """Take ``model`` out of the pool (its versions stay in the store, for a later set_version)."""
    return update_registry(client, bucket, pool, lambda registry: registry.without(model))
