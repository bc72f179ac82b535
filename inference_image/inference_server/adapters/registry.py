"""The adapter registry of one LLM service: adapters/<base-model>/registry.json in the model store, naming every LoRA
adapter served over that base and the version of each:

    {"base": "<base-model>", "adapters": {"<adapter>": {"version": "<version>"}, ...}, "revision": <int>}

The versioned registry document (registry/document.py) of kind "base", changed as a pool's is (registry/s3.py). An
adapter's name is what clients send as OpenAI's "model"; a version lives at adapters/<base>/<adapter>/<version>/."""

from __future__ import annotations

from collections.abc import Mapping

from ..registry.document import VersionRegistry, check_name, check_version


def base_prefix(base: str) -> str:
    """The base model's adapter prefix in the model store bucket: everything its tasks' sidecars may read."""
    return f"adapters/{check_name(base, 'base model')}/"


def adapter_prefix(base: str, adapter: str, version: str) -> str:
    """An adapter version's prefix in the model store bucket."""
    return f"{base_prefix(base)}{check_name(adapter, 'adapter')}/{check_version(version)}/"


class AdapterRegistry(VersionRegistry):
    OWNER_KEY = "base"
    ENTRIES_KEY = "adapters"
    NOUN = "adapter"
    OWNER_NOUN = "base model"

    @property
    def base(self) -> str:
        return self.owner

    @property
    def adapters(self) -> Mapping[str, str]:
        """adapter name -> version"""
        return self.entries

    @classmethod
    def prefix(cls, owner: str) -> str:
        return base_prefix(owner)

    @classmethod
    def version_prefix(cls, owner: str, name: str, version: str) -> str:
        return adapter_prefix(owner, name, version)

    @classmethod
    def publish_hint(cls, bucket: str, owner: str, name: str, version: str) -> str:
        return (
            f"python -m inference_server.publish --adapter DIR s3://{bucket}/ --base {owner} --base-model BASE_DIR "
            f"--model-name {name} --version {version}"
        )
