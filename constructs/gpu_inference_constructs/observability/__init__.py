"""What shows and pages: ``InferenceMonitoring``, ``ModelAlarms``, the environment dashboard and its cost, and task
starts (``TaskStarts``). Imported on first use, like the package root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
