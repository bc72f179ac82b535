"""Settings dataclasses read from environment variables alone (a model pool's, the adapter sidecar's): each field
declares its variable, its parser and whether it is required; SettingsError names the variable."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .settings import SettingsError

T = TypeVar("T")


def env_field(variable: str, parse: Callable[[str], Any], default: Any, *, required: bool = False) -> Any:
    """A field set from ``variable`` through ``parse`` (``default`` where it is unset)."""
    return dataclasses.field(default=default, metadata={"variable": variable, "parse": parse, "required": required})


def values_from_env(cls: type[T], env: Mapping[str, str] | None, overrides: Mapping[str, Any], what: str) -> dict:
    """``cls``'s field values from ``env`` (default os.environ), ``overrides`` first; a missing required variable
    is a SettingsError saying it is required for ``what``."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        variable = f.metadata["variable"]
        if f.name in overrides:
            values[f.name] = overrides[f.name]
        elif variable in env:
            try:
                values[f.name] = f.metadata["parse"](env[variable])
            except ValueError as exc:
                raise SettingsError(variable, str(exc)) from None
        elif f.metadata["required"]:
            raise SettingsError(variable, f"is required for {what}")
    return values
