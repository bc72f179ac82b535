"""A versioned registry document: one JSON object naming its owner (a pool, a base model), every entry it serves and
the version of each, and a revision that grows by one with each change:

    {"<owner key>": "<owner>", "<entries key>": {"<name>": {"version": "<version>"}, ...}, "revision": <int>}

A kind (a subclass) names its two keys, the noun of an entry for messages, and where it lives in the store. It is
written whole (s3.py), so a reader sees the document before or after a change, never half of one."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Self

import orjson

from ..settings import MODEL_NAME_PATTERN

REGISTRY_FILE = "registry.json"
# A version is one path segment of the store: no "/", no "..", nothing a shell or a URL would treat specially.
VERSION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class RegistryError(ValueError):
    """The registry document is malformed, or a change to it is not allowed."""


def check_name(name: str, noun: str = "model") -> str:
    if not MODEL_NAME_PATTERN.fullmatch(name):
        raise RegistryError(f"{noun} name {name!r} is not a plain {noun} name ([a-z0-9-]+, at most 64 characters)")
    return name


def check_version(version: str) -> str:
    if not VERSION_PATTERN.fullmatch(version) or ".." in version:
        raise RegistryError(f"version {version!r} is not a plain version ([A-Za-z0-9._-]+, no '..')")
    return version


@dataclass(frozen=True)
class VersionRegistry:
    OWNER_KEY: ClassVar[str]  # "pool", "base"
    ENTRIES_KEY: ClassVar[str]  # "models", "adapters"
    NOUN: ClassVar[str]  # what one entry is, in messages
    OWNER_NOUN: ClassVar[str]

    owner: str
    entries: Mapping[str, str] = field(default_factory=dict)  # entry name -> version
    revision: int = 0

    def __post_init__(self) -> None:
        check_name(self.owner, self.OWNER_NOUN)
        for name, version in self.entries.items():
            check_name(name, self.NOUN)
            check_version(version)
        object.__setattr__(self, "entries", MappingProxyType(dict(self.entries)))

    # -- where it lives (a kind's layout in the store) ---------------------------------------------------------

    @classmethod
    def prefix(cls, owner: str) -> str:
        """The owner's prefix in the model store bucket, ending in "/": the registry and every version below it."""
        raise NotImplementedError

    @classmethod
    def version_prefix(cls, owner: str, name: str, version: str) -> str:
        """A published version's prefix, below the bucket's root."""
        raise NotImplementedError

    @classmethod
    def publish_hint(cls, bucket: str, owner: str, name: str, version: str) -> str:
        """The command that publishes a version (named where an unpublished one is registered)."""
        raise NotImplementedError

    @classmethod
    def key(cls, owner: str) -> str:
        return cls.prefix(owner) + REGISTRY_FILE

    # -- reading and changing ----------------------------------------------------------------------------------

    def version_of(self, name: str) -> str | None:
        return self.entries.get(name)

    def with_version(self, name: str, version: str) -> Self:
        entries = {**self.entries, check_name(name, self.NOUN): check_version(version)}
        return type(self)(self.owner, entries, self.revision + 1)

    def without(self, name: str) -> Self:
        if name not in self.entries:
            raise RegistryError(f"{self.NOUN} {name!r} is not registered to {self.OWNER_NOUN} {self.owner!r}")
        return type(self)(self.owner, {k: v for k, v in self.entries.items() if k != name}, self.revision + 1)

    def to_json(self) -> bytes:
        doc = {
            self.OWNER_KEY: self.owner,
            self.ENTRIES_KEY: {name: {"version": v} for name, v in sorted(self.entries.items())},
            "revision": self.revision,
        }
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, body: bytes) -> Self:
        try:
            doc: Any = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise RegistryError(f"the registry is not JSON: {exc}") from None
        owner, entries = cls.OWNER_KEY, cls.ENTRIES_KEY
        if not isinstance(doc, dict) or not isinstance(doc.get(owner), str) or not isinstance(doc.get(entries), dict):
            raise RegistryError(f'the registry must be {{"{owner}": ..., "{entries}": {{...}}, "revision": ...}}')
        revision = doc.get("revision", 0)
        if not isinstance(revision, int) or isinstance(revision, bool) or revision < 0:
            raise RegistryError(f"the registry's revision must be a non-negative integer, got {revision!r}")
        versions = {}
        for name, entry in doc[entries].items():
            if not isinstance(entry, dict) or not isinstance(entry.get("version"), str):
                raise RegistryError(f'{cls.NOUN} {name!r}: expected {{"version": "<version>"}}, got {entry!r}')
            versions[name] = entry["version"]
        return cls(doc[owner], versions, revision)
