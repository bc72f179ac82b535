"""``ServiceScaling``: how a service's task count follows its server's signals, schedules and predictions. Imported on
first use, like the package root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .service_scaling import ServiceScaling

__all__: list[str] = ["ServiceScaling"]

_MODULE_OF = {
    "ServiceScaling": "service_scaling",
}


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
