"""How a new revision replaces the old one and rolls back: deployment strategies, rollback alarms and the revision's
health. Imported on first use, like the package root's names."""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .deployment import DeploymentProps, RollbackAlarms, RollbackProps, RollbackThresholds

__all__ = [
    "DeploymentProps",
    "RollbackAlarms",
    "RollbackProps",
    "RollbackThresholds",
]

_MODULE_OF = {
    "DeploymentProps": "deployment",
    "RollbackAlarms": "deployment",
    "RollbackProps": "deployment",
    "RollbackThresholds": "deployment",
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
