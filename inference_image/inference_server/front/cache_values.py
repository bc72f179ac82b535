"""The shared cache's keys and values: keys name the model, its version, the task and a hash of the request's options
and of the normalised input (``ic:<model>:<version>:<task>:<options hash>:<input hash>``; no input ever appears in a
key); values are JSON (orjson) with numpy arrays and scalars tagged by dtype, so a hit answers exactly what the model
answered."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

__all__ = ["KEY_PREFIX", "decode_value", "encode_value", "input_key", "key_prefix", "normalised_input"]

KEY_PREFIX = "ic"
_ND, _NP = "\x00nd", "\x00np"  # tags of an encoded numpy array / scalar (no JSON object from a handler has them)


def normalised_input(value: str | bytes) -> bytes:
    """The bytes an input is hashed from: its type (text or raw bytes) and its exact contents. No Unicode or
    whitespace folding: a tokenizer may tell such inputs apart, and a cache must never change an answer."""
    return b"b" + value if isinstance(value, bytes) else b"s" + value.encode("utf-8", "surrogatepass")


def key_prefix(model: str, version: str, task: str, options: Mapping[str, Any] | None = None) -> str:
    opts = orjson.dumps(dict(options or {}), option=orjson.OPT_SORT_KEYS)
    return f"{KEY_PREFIX}:{model}:{version}:{task}:{hashlib.blake2b(opts, digest_size=8).hexdigest()}:"


def input_key(prefix: str, value: str | bytes) -> str:
    return prefix + hashlib.blake2b(normalised_input(value), digest_size=16).hexdigest()


def _tag_numpy(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError("object arrays are not cached")
        data = np.ascontiguousarray(value)
        return {_ND: [data.dtype.str, list(data.shape), base64.b64encode(data.tobytes()).decode()]}
    if isinstance(value, np.generic):
        return {_NP: [value.dtype.str, base64.b64encode(value.tobytes()).decode()]}
    raise TypeError(f"{type(value).__name__} is not cached")


def encode_value(prediction: Any) -> bytes:
    return orjson.dumps(prediction, default=_tag_numpy)


def decode_value(raw: bytes) -> Any:
    return _untag(orjson.loads(raw))


def _untag(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1:
            if _ND in value:
                dtype, shape, data = value[_ND]
                return np.frombuffer(base64.b64decode(data), dtype=np.dtype(dtype)).reshape(shape).copy()
            if _NP in value:
                dtype, data = value[_NP]
                return np.frombuffer(base64.b64decode(data), dtype=np.dtype(dtype))[0]
        return {k: _untag(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_untag(v) for v in value]
    return value
