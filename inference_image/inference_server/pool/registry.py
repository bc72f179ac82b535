"""A pool's registry: one JSON document, pools/<pool>/registry.json in the model store, naming every model the pool
serves and the version of each:

    {"pool": "<pool>", "models": {"<model>": {"version": "<version>"}, ...}, "revision": <int>}

The versioned registry document (registry/document.py) of kind "pool", written whole by one conditional PutObject
(python -m inference_server.publish --pool), so a reader sees the document before or after a change, never half of one.
Nothing outside it can be loaded by a request."""

from __future__ import annotations

from collections.abc import Mapping

from ..registry.document import REGISTRY_FILE, RegistryError, VersionRegistry, check_name, check_version

__all__ = [
    "REGISTRY_FILE",
    "Registry",
    "RegistryError",
    "check_model_name",
    "check_version",
    "model_prefix",
    "pool_prefix",
]


def check_model_name(name: str) -> str:
    return check_name(name, "model")


def pool_prefix(pool: str) -> str:
    """The pool's prefix in the model store bucket: everything its tasks may read."""
    return f"pools/{check_model_name(pool)}/"


def model_prefix(model: str, version: str) -> str:
    """A model version's prefix below the pool's prefix (published as a single model is)."""
    return f"models/{check_model_name(model)}/{check_version(version)}/"


class Registry(VersionRegistry):
    OWNER_KEY = "pool"
    ENTRIES_KEY = "models"
    NOUN = "model"
    OWNER_NOUN = "pool"

    @property
    def pool(self) -> str:
        return self.owner

    @property
    def models(self) -> Mapping[str, str]:
        """model name -> version"""
        return self.entries

    @classmethod
    def prefix(cls, owner: str) -> str:
        return pool_prefix(owner)

    @classmethod
    def version_prefix(cls, owner: str, name: str, version: str) -> str:
        return pool_prefix(owner) + model_prefix(name, version)

    @classmethod
    def publish_hint(cls, bucket: str, owner: str, name: str, version: str) -> str:
        return (
            f"python -m inference_server.publish DIR s3://{bucket}/ --pool {owner} "
            f"--model-name {name} --version {version}"
        )
