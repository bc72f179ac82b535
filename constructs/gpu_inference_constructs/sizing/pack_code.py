"""The packed fragment as library code: the same capacity, models and servers the cdk.json fragment loads into,
written as the props a team passes to GpuCapacity and ModelService (each field that is not its default)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .pack_result import PackResult
from .pack_snippet import validate
from .snippet_props import block_props


def props_source(value: Any) -> str:
    """``value`` as Python that rebuilds it: a props dataclass with its non-default fields, else its repr."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        given = [
            f"{item.name}={props_source(getattr(value, item.name))}"
            for item in dataclasses.fields(value)
            if item.init and getattr(value, item.name) != _default(item)
        ]
        return f"{type(value).__name__}({', '.join(given)})"
    if isinstance(value, tuple):
        return f"({', '.join(props_source(item) for item in value)}{',' if len(value) == 1 else ''})"
    return repr(value)


def _default(item: dataclasses.Field) -> Any:
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return item.default


def library_code(result: PackResult) -> str:
    """The fragment's capacity group and models as ``GpuCapacity`` and ``ModelService`` arguments."""
    capacity, models = validate(result)
    servers = [block_props(block, f"models[{index}]")[1].props for index, block in enumerate(result.model_blocks)]
    pairs = ",\n    ".join(
        f"({props_source(model)}, {props_source(props)})" for model, props in zip(models, servers, strict=True)
    )
    server = type(block_props(result.model_blocks[0], "models[0]")[1]).__name__
    return (
        f'shared = GpuCapacity(stack, "SharedGpus", vpc=vpc, props={props_source(capacity)})\n'
        f"for model, server in [\n    {pairs},\n]:\n"
        f"    ModelService(stack, model.name, model=model, server={server}(server), capacity=shared, ...)"
    )
