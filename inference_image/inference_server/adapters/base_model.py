"""What a base model has, for checking an adapter against it: the ids it goes by and the modules it holds weights for.

Read from the base as it is published (a local directory, or its version in the model store: s3://bucket/models/<name>/
<version>/, a complete version, one with a manifest): config.json for its id and family, and the weight names from
model.safetensors.index.json or each safetensors file's header (a ranged GET of the header alone over S3). Where no
weights can be read (a directory with config.json only), a known family's projection names stand in."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..engine.artifacts import parse_s3_uri, read_s3_manifest
from ..manifest import read_manifest
from .peft_config import HEADER_LIMIT, AdapterError, read_header, safetensors_header

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
# The attention and MLP projections of the Llama family (Hugging Face transformers' modeling_llama.py and its kin).
LLAMA_PROJECTIONS = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
FAMILY_MODULES = {
    family: LLAMA_PROJECTIONS for family in ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "phi3")
}


def model_id(name: str) -> str:
    """The comparable form of a model id or path: its last path segment, lower case ("meta-llama/Llama-3.1-8B" and
    "/models/llama-3.1-8b/" are both "llama-3.1-8b")."""
    return PurePosixPath(name.rstrip("/")).name.lower()


@dataclass(frozen=True)
class BaseModel:
    ids: frozenset[str]  # model_id() of every name it goes by
    module_paths: frozenset[str]  # every module with a weight: model.layers.0.self_attn.q_proj, ...
    model_type: str | None

    @property
    def modules(self) -> frozenset[str]:
        """The modules' own names (q_proj, ...): what a LoRA target_modules list names."""
        return frozenset(path.rsplit(".", 1)[-1] for path in self.module_paths)


def _module_paths(weight_names: list[str]) -> frozenset[str]:
    return frozenset(name.rsplit(".", 1)[0] for name in weight_names if name.endswith((".weight", ".bias")))


def _from(config: Any, weight_names: list[str], names: list[str], where: str) -> BaseModel:
    if not isinstance(config, dict):
        raise AdapterError(f"{where}: {CONFIG} is not a JSON object")
    model_type = config.get("model_type") if isinstance(config.get("model_type"), str) else None
    paths = _module_paths(weight_names)
    if not paths:
        family = FAMILY_MODULES.get(model_type or "")
        if family is None:
            raise AdapterError(
                f"{where}: no weight names to check target_modules against (no {INDEX} or *.safetensors) and "
                f"model_type {model_type!r} is not a known family: give the base's published version or its weights"
            )
        paths = family
    if isinstance(config.get("_name_or_path"), str) and config["_name_or_path"]:
        names.append(config["_name_or_path"])
    return BaseModel(frozenset(model_id(n) for n in names if n), paths, model_type)


def read_local_base(directory: Path, name: str) -> BaseModel:
    """The base model from a local directory (a checkpoint as save_pretrained writes it)."""
    if not (directory / CONFIG).is_file():
        raise AdapterError(
            f"{directory} has no {CONFIG}: --base-model takes the base model's directory or s3:// version"
        )
    config = json.loads((directory / CONFIG).read_text())
    if (directory / INDEX).is_file():
        weights = list(json.loads((directory / INDEX).read_text()).get("weight_map", {}))
    else:
        weights = [key for path in sorted(directory.glob("*.safetensors")) for key in read_header(path)]
    manifest = read_manifest(directory)
    names = [name, directory.resolve().name, *([manifest.model_name] if manifest else [])]
    return _from(config, weights, names, str(directory))


def read_s3_base(client, uri: str, name: str) -> BaseModel:
    """The base model from its published version in the model store (refused unless the version is complete)."""
    bucket, prefix = parse_s3_uri(uri)
    manifest = read_s3_manifest(client, bucket, prefix)
    if manifest is None or CONFIG not in manifest.files:
        raise AdapterError(
            f"{uri} is not a published base model (no manifest.json listing {CONFIG}): publish the base first, "
            f"or give its local directory to --base-model"
        )

    def get(key: str, **extra: Any) -> bytes:
        return client.get_object(Bucket=bucket, Key=prefix + key, **extra)["Body"].read()

    config = json.loads(get(CONFIG))
    if INDEX in manifest.files:
        weights = list(json.loads(get(INDEX)).get("weight_map", {}))
    else:
        weights = []
        for path in sorted(p for p in manifest.files if p.endswith(".safetensors") and "/" not in p):
            head = get(path, Range="bytes=0-7")
            length = int.from_bytes(head[:8], "little") if len(head) == 8 else 0
            if length <= HEADER_LIMIT:
                head = get(path, Range=f"bytes=0-{7 + length}")
            weights += list(safetensors_header(head, path))
    return _from(config, weights, [name, manifest.model_name], uri)


def read_base_model(location: str, name: str, client=None) -> BaseModel:
    if location.startswith("s3://"):
        return read_s3_base(client, location, name)
    return read_local_base(Path(location), name)
