"""One ``models[]`` entry of cdk.json: the server-neutral ModelProps keys beside either the bundled server's keys, a
``vllm`` block or a ``neuron`` block. An entry with a ``pool`` block is a model pool: the bundled server's keys beside
it serve every model of the pool. The entry stays flat for whoever writes it; here it is split into what the library
keeps apart (the app's form: the library takes the typed props)."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpu_inference_constructs import (
    DEFAULT_POOL_VERSION,
    BundledScalingProps,
    BundledServer,
    BundledServerProps,
    ConfigError,
    ModelProps,
    NeuronServer,
    NeuronServerProps,
    PoolProps,
    ServerDefinition,
    VllmProps,
    VllmServer,
    from_dict,
)

MODEL_KEYS = frozenset(f.name for f in dataclasses.fields(ModelProps))
BUNDLED_KEYS = frozenset(f.name for f in dataclasses.fields(BundledServerProps)) - {"scaling"}
# Keys of an entry's ``scaling`` block that set the bundled server's own signals (BundledServerProps.scaling).
BUNDLED_SCALING_KEYS = frozenset(f.name for f in dataclasses.fields(BundledScalingProps))
# Keys an entry had before the props were split by server (0.x): the fix is named, not guessed.
MOVED_KEYS = {
    "compile": 'use runtime: "compile" (publish the version with --runtime compile)',
}
ServerProps = BundledServerProps | VllmProps | NeuronServerProps
# An entry's blocks of another server than the bundled one: the key, and the server's name in messages.
SERVER_BLOCKS = {"vllm": "vLLM", "neuron": "TorchServe on Neuron"}
# An entry's block that makes it a model pool (PoolProps), beside the bundled server's keys.
POOL_BLOCK = "pool"
# LoRA adapters are a setting of a server that takes them (its block's ``lora``), never of the entry itself.
LORA_KEY = "lora"


def split_model_entry(
    entry: dict[str, Any], key: str, *, app_keys: frozenset[str] = frozenset()
) -> tuple[dict[str, Any], ServerProps]:
    """(the entry's ModelProps keys, its server's props). ``app_keys`` are the caller's own keys, left for it to
    read; any other key is refused, and so is a bundled-server key beside a ``vllm`` block (vLLM would ignore it)."""
    for name in sorted(entry):
        if name in MOVED_KEYS:
            raise ConfigError(f"{key}.{name}", f"is no longer a key: {MOVED_KEYS[name]}")
    if isinstance(entry.get("vllm"), dict) and "longest_generation_seconds" in entry["vllm"]:
        raise ConfigError(
            f"{key}.vllm.longest_generation_seconds",
            "is now longest_request_seconds (the same meaning, one name with the other presets)",
        )
    allowed = MODEL_KEYS | BUNDLED_KEYS | set(SERVER_BLOCKS) | {POOL_BLOCK, LORA_KEY} | app_keys
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ConfigError(f"{key}.{unknown[0]}", f"unknown key; allowed keys here: {', '.join(sorted(allowed))}")
    scaling = entry.get("scaling")
    bundled_scaling = sorted(set(scaling) & BUNDLED_SCALING_KEYS) if isinstance(scaling, dict) else []
    bundled_keys = sorted(set(entry) & BUNDLED_KEYS) + [f"scaling.{name}" for name in bundled_scaling]
    blocks = [name for name in SERVER_BLOCKS if name in entry]
    if len(blocks) > 1:
        raise ConfigError(f"{key}.{blocks[1]}", f"beside a {blocks[0]} block: a model runs one server; keep one block")
    if blocks and POOL_BLOCK in entry:
        raise ConfigError(
            f"{key}.{blocks[0]}",
            f"beside a {POOL_BLOCK} block: a pool runs the bundled server; remove "
            f"the {blocks[0]} block, or the {POOL_BLOCK} block",
        )
    if blocks:
        block = blocks[0]
        if bundled_keys:
            raise ConfigError(
                f"{key}.{bundled_keys[0]}",
                f"is a key of the bundled server, but this model runs "
                f"{SERVER_BLOCKS[block]} (its {block} block), which would ignore "
                f"it: remove it, or set the server's own key in {block}",
            )
        server: ServerProps = from_dict(
            VllmProps if block == "vllm" else NeuronServerProps, entry[block], f"{key}.{block}"
        )
    else:
        props = {name: entry[name] for name in sorted(set(entry) & BUNDLED_KEYS)}
        if bundled_scaling:
            assert isinstance(scaling, dict)  # bundled_scaling is empty otherwise
            props["scaling"] = {name: scaling[name] for name in bundled_scaling}
        server = from_dict(BundledServerProps, props, key)
    if LORA_KEY in entry:
        refuse_entry_lora(server_for(server), blocks[0] if blocks else None, f"{key}.{LORA_KEY}")
    model = {name: value for name, value in entry.items() if name in MODEL_KEYS}
    if POOL_BLOCK in entry:
        model.setdefault("version", DEFAULT_POOL_VERSION)
    if bundled_scaling:
        model["scaling"] = {name: value for name, value in model["scaling"].items() if name not in BUNDLED_SCALING_KEYS}
    return model, server


def refuse_entry_lora(server: ServerDefinition, block: str | None, key: str) -> None:
    """A ``lora`` key beside the entry's server: inside the block of a server that takes adapters, refused with the
    server's own answer (``takes_lora_adapters``) otherwise."""
    if server.takes_lora_adapters and block is not None:
        raise ConfigError(key, f"goes inside the {block} block ({block}.lora): it is a setting of the server")
    raise ConfigError(
        key,
        f"the {server.name} server cannot serve LoRA adapters; serve the model with vLLM (a vllm block with "
        "vllm.lora) or SGLang (SglangProps.lora), or remove it",
    )


def server_for(props: ServerProps) -> BundledServer | VllmServer | NeuronServer:
    """The preset that serves with ``props``."""
    if isinstance(props, NeuronServerProps):
        return NeuronServer(props=props)
    return VllmServer(props=props) if isinstance(props, VllmProps) else BundledServer(props=props)


def longest_request_key(props: ServerProps) -> str:
    """The entry's key that bounds its longest request (the load balancer's idle timeout follows it)."""
    if isinstance(props, NeuronServerProps):
        return "neuron.request_timeout_seconds"
    return "vllm.longest_request_seconds" if isinstance(props, VllmProps) else "request_timeout_seconds"


def pool_of_entry(entry: dict[str, Any], key: str) -> PoolProps | None:
    """The entry's ``pool`` block as PoolProps (the entry is a model pool), or None (a model)."""
    if POOL_BLOCK not in entry:
        return None
    return from_dict(PoolProps, entry[POOL_BLOCK], f"{key}.{POOL_BLOCK}")
