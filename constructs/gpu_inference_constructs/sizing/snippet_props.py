"""The advisor's ``models[]`` blocks as the library's props: the ModelProps keys beside either a ``vllm`` block
(VllmServer) or the bundled server's keys (BundledServer), the only shapes the advisor writes. cdk.json's own form
(pools, Neuron blocks, renamed keys) is the app's (stacks/model_entry.py), which loads the same blocks: tests/sizing
loads each snippet through it."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.errors import ConfigError
from ..core.model_props import ModelProps
from ..core.settings import from_dict
from ..servers.bundled import BundledServer, BundledServerProps
from ..servers.vllm import VllmProps, VllmServer

MODEL_KEYS = frozenset(field.name for field in dataclasses.fields(ModelProps))


def block_props(block: dict[str, Any], key: str) -> tuple[ModelProps, BundledServer | VllmServer]:
    """(the block's ModelProps, the server that serves it); errors name the block's key under ``key``."""
    model = from_dict(ModelProps, {name: value for name, value in block.items() if name in MODEL_KEYS}, key)
    server_keys = {name: value for name, value in block.items() if name not in MODEL_KEYS}
    if "vllm" not in server_keys:
        return model, BundledServer(props=from_dict(BundledServerProps, server_keys, key))
    beside = sorted(set(server_keys) - {"vllm"})
    if beside:
        raise ConfigError(f"{key}.{beside[0]}", "is a key of the bundled server, beside a vllm block")
    return model, VllmServer(props=from_dict(VllmProps, server_keys["vllm"], f"{key}.vllm"))
