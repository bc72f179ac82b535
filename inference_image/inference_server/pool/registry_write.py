"""Changing a pool's registry in S3: the shared atomic read-change-write of registry/s3.py for the pool's kind."""

from __future__ import annotations

from collections.abc import Callable

from ..registry import s3
from .registry import Registry


def read_registry(client, bucket: str, pool: str) -> tuple[Registry, str | None]:
    """(the registry, its ETag); an empty registry and None where the pool has none yet."""
    return s3.read_registry(client, bucket, Registry, pool)


def update_registry(client, bucket: str, pool: str, change: Callable[[Registry], Registry]) -> Registry:
    """Apply ``change`` to the pool's registry atomically (retried on a concurrent write); the registry written."""
    return s3.update_registry(client, bucket, Registry, pool, change)


def set_version(client, bucket: str, pool: str, model: str, version: str) -> Registry:
    """Register ``model`` at ``version`` (add, move, roll back), once that version's manifest exists under the pool."""
    return s3.set_version(client, bucket, Registry, pool, model, version)


def remove_model(client, bucket: str, pool: str, model: str) -> Registry:
    """Take ``model`` out of the pool (its versions stay in the store, for a later set_version)."""
    return s3.remove(client, bucket, Registry, pool, model)
