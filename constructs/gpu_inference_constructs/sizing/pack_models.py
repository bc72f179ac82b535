"""MODELS.json for ``sizing pack``: each entry read into a model, its traffic and the task size it asks for, or
refused naming the entry's key and the fix."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.model_props import MODEL_NAME
from ..core.scaling_props import ModelScalingProps
from ..servers.bundled import TASKS, BundledServerProps
from .model_shape import BYTES_PER_PARAM, ModelShape, from_model_dir
from .runtimes import RUNTIME_FACTORS
from .workload import Workload


@dataclass(frozen=True)
class PackModel:
    """One entry of MODELS.json: the model, its traffic, and the task size it asks for (None: the advisor's)."""

    name: str
    shape: ModelShape
    workload: Workload
    version: str = "1"
    """The model's version in the snippet (its S3 prefix). Default: "1"."""
    cpu: int | None = None
    """The task's CPU units from MODELS.json. Default: None (the estimate from the server's measured ceiling)."""
    memory_mib: int | None = None
    """The task's memory from MODELS.json. Default: None (the estimate: server processes, CUDA host side, weights)."""
    task: str | None = None
    """What the bundled server does with the model (BundledServerProps.task: text-classification, text-embedding,
    ...). Default: None (the fragment says text-embedding, and a note says so)."""


# MODELS.json's keys: the single-model advisor's flags without the dashes ('hidden_size' or 'hidden-size'), plus the
# task's size. LLMs are not packed (see refuse_llm), so neither concurrency nor PROMPT,OUTPUT tokens are taken.
MODEL_KEYS = (
    "name",
    "version",
    "model_dir",
    "params",
    "dtype",
    "kind",
    "layers",
    "hidden_size",
    "heads",
    "kv_heads",
    "intermediate_size",
    "requests_per_second",
    "p95_ms",
    "tokens_per_request",
    "max_batch_size",
    "runtime",
    "cpu",
    "memory_mib",
    "task",
)

EXAMPLE = (
    '[{"name": "minilm", "params": 22000000, "dtype": "fp16", "kind": "encoder", "layers": 6, "hidden_size": 384, '
    '"heads": 12, "intermediate_size": 1536, "requests_per_second": 50, "p95_ms": 100}]'
)


def read_models(path: str | Path) -> list[PackModel]:
    """MODELS.json: a list of models (model_dir is relative to the file's folder)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            "MODELS.json", f"{str(path)!r} does not exist; give a JSON file with a list of models, e.g. {EXAMPLE}"
        ) from None
    except json.JSONDecodeError as error:
        raise ConfigError("MODELS.json", f"{str(path)!r} is not JSON ({error})") from None
    return parse_models(data, path.parent)


def parse_models(data: Any, base: Path = Path()) -> list[PackModel]:
    if not isinstance(data, list):
        raise ConfigError(
            "models", f"expected a list of models, got {type(data).__name__}: write MODELS.json as {EXAMPLE}"
        )
    if not data:
        raise ConfigError("models", f"the list is empty: give at least one model, e.g. {EXAMPLE}")
    models: list[PackModel] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(data):
        key = f"models[{index}]"
        if not isinstance(raw, dict):
            raise ConfigError(
                key, f"expected an object with the model's keys, got {type(raw).__name__}, e.g. {EXAMPLE[1:-1]}"
            )
        entry: dict[str, Any] = {}
        spelled: dict[str, str] = {}
        for raw_key, value in raw.items():
            name = str(raw_key).replace("-", "_")
            if name not in MODEL_KEYS:
                raise ConfigError(
                    f"{key}.{raw_key}",
                    f"unknown key; allowed keys: {', '.join(MODEL_KEYS)} (the single-model "
                    "advisor's flags, with '_' or '-')",
                )
            if name in entry:
                raise ConfigError(f"{key}.{name}", f"given twice, as {spelled[name]!r} and {raw_key!r}: keep one")
            entry[name], spelled[name] = value, str(raw_key)
        if "name" not in entry:
            raise ConfigError(
                f"{key}.name",
                'required key is missing: name the model (its path /<name>/ and S3 prefix), e.g. "name": "minilm"',
            )
        name = entry["name"]
        if not isinstance(name, str) or not MODEL_NAME.match(name):
            raise ConfigError(
                f"{key}.name",
                f"{name!r} is not a model name: 2-40 lowercase letters, digits and '-', "
                "starting with a letter (it becomes the path /<name>/)",
            )
        if name in seen:
            raise ConfigError(
                f"{key}.name",
                f"{name!r} is listed twice (also models[{seen[name]}]): model names must be unique; rename one",
            )
        seen[name] = index
        models.append(_pack_model(entry, key, base))
    return models


def _pack_model(entry: dict[str, Any], key: str, base: Path) -> PackModel:
    try:
        shape = _shape(entry, key, base)
        workload = _workload(entry, key)
    except ConfigError as error:
        if error.key.startswith("--"):  # ModelShape's and Workload's own checks name the CLI's flag
            raise ConfigError(f"{key}.{error.key[2:].replace('-', '_')}", error.detail) from None
        raise
    if shape.kind == "llm":
        raise ConfigError(
            f"{key}.kind",
            "an LLM is not packed: vLLM takes gpu_memory_utilization of the GPU it sees and a "
            "latency goal of seconds leaves nothing to share; size it alone with "
            "python -m gpu_inference_constructs.sizing --kind llm ... (whole GPUs)",
        )
    version = entry.get("version", "1")
    if not isinstance(version, str):
        raise ConfigError(f"{key}.version", f'{version!r}: give the version as a string, e.g. "1"')
    cpu = _integer(entry, "cpu", key, low=256, hint="CPU units (1024 = one vCPU), at least 256")
    memory = _integer(entry, "memory_mib", key, low=512, hint="MiB the task reserves, at least 512")
    task = entry.get("task")
    if task is not None and task not in TASKS:
        raise ConfigError(f"{key}.task", f"{task!r}: give the bundled server's task, one of {', '.join(TASKS)}")
    return PackModel(entry["name"], shape, workload, version, cpu, memory, task)


def _shape(entry: dict[str, Any], key: str, base: Path) -> ModelShape:
    dtype, kind = entry.get("dtype"), entry.get("kind")
    if dtype is not None and dtype not in BYTES_PER_PARAM:
        raise ConfigError(f"{key}.dtype", f"{dtype!r} is not supported; use one of: {', '.join(BYTES_PER_PARAM)}")
    if kind is not None and kind not in ("encoder", "llm"):
        raise ConfigError(f"{key}.kind", f"{kind!r} is not supported; use encoder")
    if "model_dir" in entry and "params" in entry:
        raise ConfigError(f"{key}.model_dir", "give model_dir or params, not both")
    if "model_dir" in entry:
        if not isinstance(entry["model_dir"], str):
            raise ConfigError(
                f"{key}.model_dir", f"{entry['model_dir']!r}: give a directory path (relative to MODELS.json's folder)"
            )
        try:
            shape = from_model_dir(base / entry["model_dir"], dtype, kind)
        except ConfigError as error:
            raise ConfigError(f"{key}.{error.key[2:].replace('-', '_')}", error.detail) from None
        return replace(shape, name=entry["name"])
    if "params" not in entry:
        raise ConfigError(
            f"{key}.params",
            'describe the model: "params" with "dtype" and "kind" (and its geometry: '
            'layers, hidden_size, heads), or "model_dir"',
        )
    params = _number(entry, "params", key)
    if dtype is None or kind is None:
        raise ConfigError(
            f"{key}.{'dtype' if dtype is None else 'kind'}",
            "with params also give dtype (fp16, bf16, fp32, int8, int4) and kind (encoder)",
        )
    geometry = {
        k: _integer(entry, k, key, low=1, hint="a positive whole number")
        for k in ("layers", "hidden_size", "heads", "kv_heads", "intermediate_size")
    }
    given = [k for k in ("layers", "hidden_size", "heads") if geometry[k] is not None]
    if given and len(given) < 3:
        missing = next(k for k in ("layers", "hidden_size", "heads") if geometry[k] is None)
        raise ConfigError(f"{key}.{missing}", "give layers, hidden_size and heads together (or none)")
    return ModelShape(
        params=int(params),
        dtype=dtype,
        kind=kind,
        name=entry["name"],
        layers=geometry["layers"],
        hidden_size=geometry["hidden_size"],
        heads=geometry["heads"],
        kv_heads=geometry["kv_heads"],
        intermediate_size=geometry["intermediate_size"],
    )


def _workload(entry: dict[str, Any], key: str) -> Workload:
    if "requests_per_second" not in entry:
        raise ConfigError(f"{key}.requests_per_second", "required key is missing: the model's traffic, e.g. 50")
    tokens = entry.get("tokens_per_request", BundledServerProps.max_sequence_length)
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise ConfigError(
            f"{key}.tokens_per_request",
            f"{tokens!r}: give the tokens per text as a whole number, e.g. 128 (an encoder's; LLMs are not packed)",
        )
    runtime = entry.get("runtime", "eager")
    if runtime not in RUNTIME_FACTORS:
        raise ConfigError(f"{key}.runtime", f"{runtime!r}: use one of {', '.join(RUNTIME_FACTORS)}")
    batch = _integer(entry, "max_batch_size", key, low=1, hint="the server's largest batch, 1 to 512")
    return Workload(
        _number(entry, "requests_per_second", key),
        _number(entry, "p95_ms", key) if "p95_ms" in entry else float(ModelScalingProps.latency_p95_ms),
        tokens,
        max_batch_size=batch or BundledServerProps.max_batch_size,
        runtime=runtime,
    )


def _number(entry: dict[str, Any], name: str, key: str) -> float:
    value = entry[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key}.{name}", f"{value!r}: give a number")
    return float(value)


def _integer(entry: dict[str, Any], name: str, key: str, low: int, hint: str) -> int | None:
    if name not in entry:
        return None
    value = entry[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{key}.{name}", f"{value!r}: give {hint}")
    return value
