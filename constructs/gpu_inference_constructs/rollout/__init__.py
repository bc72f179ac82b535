"""How a new revision replaces the old one and rolls back: deployment strategies, rollback alarms and the revision's
health. Imported on first use, like the package root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
