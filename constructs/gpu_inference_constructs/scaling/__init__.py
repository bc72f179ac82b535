"""``ServiceScaling``: how a service's task count follows its server's signals, schedules and predictions. Imported on
first use, like the package root's names."""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .service_scaling import ServiceScaling

__all__: list[str] = ["ServiceScaling"]

_MODULE_OF = {
    "ServiceScaling": "service_scaling",
}


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})
