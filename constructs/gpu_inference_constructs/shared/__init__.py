"""The aws_cdk pieces every concept shares: the ``NotificationTopic`` alarms and events go to, acknowledged validation
findings, typed interfaces of CDK constructs, inline Lambda functions, log retention. Imported on first use, like the
package root's names."""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .notifications import NotificationTopic, topic_target

__all__: list[str] = ["NotificationTopic", "topic_target"]

_MODULE_OF = {
    "NotificationTopic": "notifications",
    "topic_target": "notifications",
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
