"""An environment's identity, given once to each construct that belongs to it (``environment=``): its name, the prefix
of its fixed names (log groups, alarms, the dashboard), the topic its alarms and events notify, and the KMS key and
retention of its log groups. Before 0.3.1 each construct took these as keywords of its own (``environment_name``,
``topic``, ``logs_key``, ``ServiceLogs(key, retention_days, name_prefix)``); those still work, not beside it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns

from ..core.errors import require
from .log_retention import retention_days

DEFAULT_NAME_PREFIX = "gpu-inference"
NAME_PREFIX = re.compile(r"^[a-z][a-z0-9-]{1,31}$")
ENVIRONMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_LOG_RETENTION_DAYS = 90


def check_name_prefix(name_prefix: str) -> None:
    require(
        isinstance(name_prefix, str) and bool(NAME_PREFIX.match(name_prefix)),
        "name_prefix",
        f"{name_prefix!r}: use 2-32 lowercase letters, digits and '-', starting with a letter (it starts log-group, "
        "alarm and dashboard names; give each team or app its own so two stacks in one account do not collide)",
    )


@dataclass(frozen=True)
class InferenceEnvironment:
    """Who an environment's constructs belong to: ``ModelService``, ``ModelPool``, ``ModelAlarms`` (through its
    service) and ``InferenceMonitoring`` take it as ``environment=`` and read their name, name prefix, topic, logs key
    and log retention from it, so each is said once."""

    name: str
    """The environment's name (``prod``): in log-group, alarm and dashboard names and the metrics' ``Environment``
    dimension; 1-64 letters, digits, '.', '_', '-'. Required."""
    topic: sns.ITopic
    """The SNS topic the environment's alarms and events notify (on alarm and on recovery). Required."""
    logs_key: kms.IKey
    """The KMS key that encrypts the environment's log groups (it must let CloudWatch Logs use it:
    ``grant_logs_service``). Required."""
    name_prefix: str = DEFAULT_NAME_PREFIX
    """Starts the fixed names (``/<prefix>/<environment>/<model>`` log groups, ``<prefix>-<environment>-`` alarms, the
    dashboard): give each team's app its own where two share an account. Default: ``"gpu-inference"``."""
    log_retention_days: int = DEFAULT_LOG_RETENTION_DAYS
    """How long the models' log events are kept, one of CloudWatch Logs' retention periods. Default: 90."""

    def __post_init__(self) -> None:
        require(
            isinstance(self.name, str) and bool(ENVIRONMENT_NAME.match(self.name)),
            "environment.name",
            f"{self.name!r}: 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit, such as 'prod'",
        )
        require(
            hasattr(self.topic, "topic_arn"),
            "environment.topic",
            f"got {type(self.topic).__name__}: pass an sns.ITopic (sns.Topic.from_topic_arn for an imported one)",
        )
        require(
            hasattr(self.logs_key, "key_arn"),
            "environment.logs_key",
            f"got {type(self.logs_key).__name__}: pass a kms.IKey (kms.Key.from_key_arn for an imported one)",
        )
        check_name_prefix(self.name_prefix)
        retention_days(self.log_retention_days, "environment.log_retention_days")

    @staticmethod
    def refuse_beside(construct: str, **given: object) -> None:
        """Each of ``given`` (a keyword ``construct`` took before ``environment=``) is None: the environment says it."""
        for key, value in given.items():
            require(
                value is None,
                key,
                f"is given beside environment=, which says it for {construct}: remove {key} (or set it on the "
                "InferenceEnvironment)",
            )


def require_identity(construct: str, given: Mapping[str, object]) -> None:
    """Without ``environment=``, each value of ``given`` (keyed by how the construct's own keyword gives it) is set."""
    for written, value in given.items():
        require(
            value is not None,
            "environment",
            f"is missing: pass {construct}(environment=InferenceEnvironment(name, topic, logs_key, ...)), or {written}",
        )
