"""What shows and pages: ``InferenceMonitoring``, ``ModelAlarms``, the environment dashboard and its cost, and task
starts (``TaskStarts``). Imported on first use, like the package root's names."""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .monitoring import InferenceMonitoring, ModelAlarms, MonitoringProps
    from .task_starts import TaskStarts

__all__ = [
    "InferenceMonitoring",
    "ModelAlarms",
    "MonitoringProps",
    "TaskStarts",
]

_MODULE_OF = {
    "InferenceMonitoring": "monitoring",
    "ModelAlarms": "monitoring",
    "MonitoringProps": "monitoring",
    "TaskStarts": "task_starts",
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
