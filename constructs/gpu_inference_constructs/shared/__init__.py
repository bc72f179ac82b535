"""The aws_cdk pieces every concept shares: the environment's identity (``InferenceEnvironment``: its name, name prefix,
topic, logs key and retention), the ``NotificationTopic`` alarms and events go to, acknowledged validation
findings, typed interfaces of CDK constructs, inline Lambda functions, log retention. Imported on first use, like the
package root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .environment import InferenceEnvironment
    from .log_retention import retention_days
    from .notifications import NotificationTopic, topic_target

__all__: list[str] = [
    "InferenceEnvironment",
    "NotificationTopic",
    "retention_days",
    "topic_target",
]

_MODULE_OF = {
    "InferenceEnvironment": "environment",
    "retention_days": "log_retention",
    "NotificationTopic": "notifications",
    "topic_target": "notifications",
}


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
