"""Build the library's props dataclasses from plain JSON-like data (an app's configuration: this repository's app
reads ``cdk.json`` context with it, in its own form, stacks/config.py).

Strict: unknown keys, missing required keys and values of the wrong type are errors that
name the key path. Range and cross-field checks live in each dataclass's ``__post_init__``
and raise :class:`ConfigError`; this loader prefixes them with the path they were found at.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union, get_args, get_origin

from .errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


def from_dict(cls: type[T], data: Any, path: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; errors name the dotted ``path`` of the bad key."""
    if not isinstance(data, dict):
        raise ConfigError(path or "<root>", f"expected an object, got {_describe(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            _join(path, unknown[0]),
            f"unknown key; allowed keys here: {', '.join(sorted(fields))}",
        )
    kwargs = {}
    for name, field in fields.items():
        key = _join(path, name)
        if name in data:
            kwargs[name] = _convert(hints[name], data[name], key)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(key, "required key is missing")
    try:
        return cls(**kwargs)
    except ConfigError as error:
        raise (error.within(path) if path else error) from None


def _convert(hint: Any, value: Any, key: str) -> Any:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = get_args(hint)
        if value is None and type(None) in options:
            return None
        built = [
            option
            for option in options
            if isinstance(option, type) and dataclasses.is_dataclass(option) and isinstance(value, option)
        ]
        if built:
            return value
        (inner,) = [option for option in options if option is not type(None)]
        return _convert(inner, value, key)
    if origin is Literal:
        allowed = get_args(hint)
        if value not in allowed:
            raise ConfigError(key, f"{value!r} is not allowed; use one of: {', '.join(map(repr, allowed))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise ConfigError(key, f"expected a list, got {_describe(value)}")
        item_hint = get_args(hint)[0]
        items = [_convert(item_hint, item, f"{key}[{index}]") for index, item in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(key, f"expected an object, got {_describe(value)}")
        value_hint = get_args(hint)[1]
        return {k: _convert(value_hint, v, _join(key, k)) for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return value if isinstance(value, hint) else from_dict(hint, value, key)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {_describe(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected a whole number, got {_describe(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"expected a number, got {_describe(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(key, f"expected a string, got {_describe(value)}")
        return value
    raise TypeError(f"settings loader does not support type {hint!r} (at {key})")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"
