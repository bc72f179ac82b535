"""What a ModelService checks of its inputs and builds before its task: the props' types, its log group, and the
validation that a server told to use the shared cache got one."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_logs
from constructs import Construct, IValidation

from ..core.errors import require
from ..core.model_props import ModelProps
from ..core.service_timing import ServiceTimingProps
from ..rollout.deployment import RollbackThresholds
from ..shared.log_retention import retention_days
from .checks import service_log_group_name
from .props import ServiceAccess, ServiceLogs


def service_log_group(
    scope: Construct, props: ServiceLogs, environment_name: str, model_name: str
) -> aws_logs.LogGroup:
    assert props.retention_days is not None and props.name_prefix is not None  # service_identity completed them
    return aws_logs.LogGroup(
        scope,
        "Logs",
        log_group_name=service_log_group_name(environment_name, model_name, props.name_prefix),
        encryption_key=props.key,
        retention=retention_days(props.retention_days, "logs.retention_days"),
        # Kept when the model is removed, but not after a failed first create: with a fixed name, a group kept
        # then makes the retry (or adding the model back) fail with "already exists".
        removal_policy=cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
    )


_PROPS_TYPES: dict[str, tuple[type, str]] = {
    "model": (ModelProps, "a ModelProps"),
    "access": (
        ServiceAccess,
        "ServiceAccess(api_keys_secret=None, allow_unauthenticated=False, subnets=None), or None",
    ),
    "timing": (ServiceTimingProps, "a ServiceTimingProps, or None"),
    "rollback_thresholds": (RollbackThresholds, "a RollbackThresholds, or None"),
}


def require_prop_types(**given: object) -> None:
    """Each of ModelService's props is its own type (None where optional), or a ConfigError naming the key."""
    for key, value in given.items():
        expected, what = _PROPS_TYPES[key]
        require(
            isinstance(value, expected) or (value is None and what.endswith("or None")),
            key,
            f"got {type(value).__name__}: pass {what}",
        )


@jsii.implements(IValidation)
class CacheAttached:
    """A model whose server was told to use the shared cache (``shared_cache.enabled`` True) and that no
    ResultCache was connected to by synth: its tasks would never learn of any cache."""

    def __init__(self, service: Any) -> None:  # a ModelService
        self._service = service

    def validate(self) -> list[str]:
        service = self._service
        props = service._cache_props
        if props is None or props.enabled is not True or service.result_cache is not None:
            return []
        return [
            f"models[{service.model.name}].shared_cache.enabled is true but no ResultCache is connected: add a "
            "ResultCache to the app and call ModelService.use_cache(cache) for this model, or set enabled to "
            "false"
        ]
