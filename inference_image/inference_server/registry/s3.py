"""A registry document in S3: read it (with its ETag; conditionally, for polling), and change it by reading it, changing
it and writing it back whole in one PutObject that succeeds only while the document is still the one read (If-Match;
If-None-Match: * for the first), so two publishers never lose each other's change: the loser reads again and retries.

Source: Amazon S3 User Guide, "How to prevent object overwrites with conditional writes"
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html): a failed precondition is 412
PreconditionFailed, a concurrent conditional write 409 ConditionalRequestConflict (retry after reading again); a GET
with If-None-Match of the current ETag is 304 Not Modified (GetObject, "IfNoneMatch")."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from ..engine.artifacts import is_not_found, read_s3_manifest, s3_error_code
from ..manifest import MANIFEST_FILE
from .document import RegistryError, VersionRegistry

log = logging.getLogger(__name__)

ATTEMPTS = 5
CONFLICT_CODES = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")
NOT_MODIFIED_CODES = ("304", "NotModified")

R = TypeVar("R", bound=VersionRegistry)


def read_registry(client, bucket: str, kind: type[R], owner: str) -> tuple[R, str | None]:
    """(the registry, its ETag); an empty registry and None where the owner has none yet."""
    try:
        response = client.get_object(Bucket=bucket, Key=kind.key(owner))
    except Exception as exc:
        if is_not_found(exc):
            return kind(owner), None
        raise
    return kind.from_json(response["Body"].read()), response["ETag"]


def read_if_changed(
    client, bucket: str, key: str, kind: type[R], owner: str, etag: str | None
) -> tuple[R | None, str | None]:
    """(the registry, its ETag), or (None, etag) when it is still the one with ``etag`` (a 304 costs no body). A
    missing document is an empty registry."""
    extra = {"IfNoneMatch": etag} if etag else {}
    try:
        response = client.get_object(Bucket=bucket, Key=key, **extra)
    except Exception as exc:
        if s3_error_code(exc) in NOT_MODIFIED_CODES:
            return None, etag
        if is_not_found(exc):
            return kind(owner), None
        raise
    return kind.from_json(response["Body"].read()), response.get("ETag")


def update_registry(client, bucket: str, kind: type[R], owner: str, change: Callable[[R], R]) -> R:
    """Apply ``change`` to the registry atomically (retried on a concurrent write); the registry written."""
    for _ in range(ATTEMPTS):
        current, etag = read_registry(client, bucket, kind, owner)
        updated = change(current)
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            client.put_object(
                Bucket=bucket,
                Key=kind.key(owner),
                Body=updated.to_json(),
                ContentType="application/json",
                **condition,
            )
        except Exception as exc:
            if s3_error_code(exc) in CONFLICT_CODES:
                log.info("the registry changed meanwhile; reading it again", extra={kind.OWNER_KEY: owner})
                continue
            raise
        log.info(
            f"{kind.OWNER_NOUN} registry written",
            extra={kind.OWNER_KEY: owner, "revision": updated.revision, kind.ENTRIES_KEY: len(updated.entries)},
        )
        return updated
    raise RegistryError(f"{kind.OWNER_NOUN} {owner}'s registry kept changing under {ATTEMPTS} attempts; try again")


def set_version(client, bucket: str, kind: type[R], owner: str, name: str, version: str) -> R:
    """Register ``name`` at ``version`` (add it, move it, or roll it back), once that version's manifest exists: a
    version that was never published completely is never registered."""
    prefix = kind.version_prefix(owner, name, version)
    if read_s3_manifest(client, bucket, prefix) is None:
        raise RegistryError(
            f"s3://{bucket}/{prefix}{MANIFEST_FILE} does not exist: publish the version first "
            f"({kind.publish_hint(bucket, owner, name, version)})"
        )
    return update_registry(client, bucket, kind, owner, lambda registry: registry.with_version(name, version))


def remove(client, bucket: str, kind: type[R], owner: str, name: str) -> R:
    """Take ``name`` out of the registry (its versions stay in the store, for a later set_version)."""
    return update_registry(client, bucket, kind, owner, lambda registry: registry.without(name))
