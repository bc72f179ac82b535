"""A pool's registry: one JSON document, pools/<pool>/registry.json in the model store, naming every model the pool
serves and the version of each:

    {"pool": "<pool>", "models": {"<model>": {"version": "<version>"}, ...}, "revision": <int>}

It is written whole by one PutObject (python -m inference_server.publish --pool), so a reader sees the document before
or after a change, never half of one. Nothing outside it can be loaded by a request."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import orjson

from ..settings import MODEL_NAME_PATTERN

REGISTRY_FILE = "registry.json"
# A version is one path segment of the store: no "/", no "..", nothing a shell or a URL would treat specially.
VERSION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class RegistryError(ValueError):
    """The registry document is malformed, or a change to it is not allowed."""


def check_model_name(name: str) -> str:
    if not MODEL_NAME_PATTERN.fullmatch(name):
        raise RegistryError(f"model name {name!r} is not a plain model name ([a-z0-9-]+, at most 64 characters)")
    return name


def check_version(version: str) -> str:
    if not VERSION_PATTERN.fullmatch(version) or ".." in version:
        raise RegistryError(f"version {version!r} is not a plain version ([A-Za-z0-9._-]+, no '..')")
    return version


def pool_prefix(pool: str) -> str:
    """The pool's prefix in the model store bucket: everything its tasks may read."""
    return f"pools/{check_model_name(pool)}/"


def model_prefix(model: str, version: str) -> str:
    """A model version's prefix below the pool's prefix (published as a single model is)."""
    return f"models/{check_model_name(model)}/{check_version(version)}/"


@dataclass(frozen=True)
class Registry:
    pool: str
    models: Mapping[str, str] = field(default_factory=dict)  # model name -> version
    revision: int = 0

    def __post_init__(self) -> None:
        check_model_name(self.pool)
        for name, version in self.models.items():
            check_model_name(name)
            check_version(version)
        object.__setattr__(self, "models", MappingProxyType(dict(self.models)))

    def version_of(self, model: str) -> str | None:
        return self.models.get(model)

    def with_version(self, model: str, version: str) -> Registry:
        return Registry(self.pool, {**self.models, check_model_name(model): check_version(version)}, self.revision + 1)

    def without(self, model: str) -> Registry:
        if model not in self.models:
            raise RegistryError(f"model {model!r} is not registered to pool {self.pool!r}")
        return Registry(self.pool, {k: v for k, v in self.models.items() if k != model}, self.revision + 1)

    def to_json(self) -> bytes:
        doc = {
            "pool": self.pool,
            "models": {name: {"version": v} for name, v in sorted(self.models.items())},
            "revision": self.revision,
        }
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, body: bytes) -> Registry:
        try:
            doc: Any = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise RegistryError(f"the registry is not JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("pool"), str) or not isinstance(doc.get("models"), dict):
            raise RegistryError('the registry must be {"pool": ..., "models": {...}, "revision": ...}')
        revision = doc.get("revision", 0)
        if not isinstance(revision, int) or isinstance(revision, bool) or revision < 0:
            raise RegistryError(f"the registry's revision must be a non-negative integer, got {revision!r}")
        models = {}
        for name, entry in doc["models"].items():
            if not isinstance(entry, dict) or not isinstance(entry.get("version"), str):
                raise RegistryError(f'model {name!r}: expected {{"version": "<version>"}}, got {entry!r}')
            models[name] = entry["version"]
        return cls(doc["pool"], models, revision)
