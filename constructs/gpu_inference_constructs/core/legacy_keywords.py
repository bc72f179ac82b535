"""The keywords 0.2 took and this version does not, each with what to write instead (constructs/CHANGELOG.md's
tables), in one place: :func:`accepts_legacy_keywords` wraps a constructor so that a call using any of them answers
with one ConfigError listing every one (Python would report the first unknown keyword only), and a pure rename
keeps working for one minor version with a DeprecationWarning."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from .errors import ConfigError

# The release after which a renamed keyword is refused like a removed one.
RENAMES_ACCEPTED_UNTIL = "0.3"


@dataclass(frozen=True)
class Legacy:
    """One keyword of 0.2: ``instead`` is what to write now; ``rename`` is the new keyword when the value passes
    unchanged (then the old keyword still works, with a DeprecationWarning)."""

    instead: str
    rename: str | None = None


_CLUSTER = "capacity=ClusterCapacity(cluster, capacity_provider_name, instance_type)"
_LOGS = "logs=ServiceLogs(key, retention_days=..., name_prefix=...)"
_ACCESS = "access=ServiceAccess(api_keys_secret=..., allow_unauthenticated=..., subnets=...)"
_BUNDLED_SCALING = "BundledServer(BundledServerProps(scaling=BundledScalingProps({keyword}=...)))"

# Constructor name -> 0.2 keyword -> what to write (constructs/CHANGELOG.md; tests/consumer/test_legacy_keywords.py
# holds this table to the 0.2 API, tests/consumer/api_0_2_0.json).
LEGACY_KEYWORDS: Mapping[str, Mapping[str, Legacy]] = {
    "GpuCapacity": {
        "notification_topic": Legacy("topic=", rename="topic"),
    },
    "ServiceScaling": {
        "model_service": Legacy("service=", rename="service"),
    },
    "ModelProps": {
        "listener_priority": Legacy(
            "ModelService(route=LoadBalancerRoute(load_balancer, priority=...)) or "
            "ListenerRoute(listener, priority): routing is the service's"
        ),
    },
    "ModelScalingProps": {
        keyword: Legacy(f"the bundled server's props: {_BUNDLED_SCALING.format(keyword=keyword)}")
        for keyword in (
            "gpu_utilization_percent",
            "cpu_percent",
            "queue_depth_scale_out",
            "queue_signal_period_seconds",
            "queue_signal_periods",
        )
    },
    "ServerContract": {
        "bundled_metrics": Legacy(
            "scaling_signals=... and alarms=... (the bundled server's: "
            "bundled_signals.bundled_scaling_signals(...), BUNDLED_ALARMS)"
        ),
    },
    "ModelService": {
        "environment_name": Legacy(
            "environment= (an InferenceEnvironment, or the environment's name as before)", rename="environment"
        ),
        "cluster": Legacy(_CLUSTER),
        "capacity_provider_name": Legacy(_CLUSTER),
        "instance_type": Legacy(_CLUSTER),
        "model_store": Legacy("model_source=", rename="model_source"),
        "model_bucket": Legacy("model_source=ModelBucket(bucket, prefix=...)"),
        "models_prefix": Legacy("model_source=ModelBucket(bucket, prefix=...)"),
        "load_balancer": Legacy(
            "route=load_balancer, or route=LoadBalancerRoute(load_balancer, priority=...) "
            "(ListenerRoute(listener, priority, load_balancer=...) behind a listener of your own)"
        ),
        "listener": Legacy("route=ListenerRoute(listener, priority, load_balancer=None)"),
        "listener_priority": Legacy(
            "route=LoadBalancerRoute(load_balancer, priority=...) or ListenerRoute(listener, priority)"
        ),
        "logs_key": Legacy(_LOGS),
        "log_retention_days": Legacy(_LOGS),
        "name_prefix": Legacy(_LOGS),
        "api_keys_secret": Legacy(_ACCESS),
        "allow_unauthenticated": Legacy(_ACCESS),
        "subnets": Legacy(_ACCESS),
        "image": Legacy("server=BundledServer(image=...), VllmServer(..., image=...) or a ServerContract"),
    },
}

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)


def legacy_keywords_message(name: str, used: Mapping[str, Legacy]) -> str:
    """Every 0.2 keyword of one call, each with what to write instead."""
    listed = "; ".join(f"{keyword}= -> {legacy.instead}" for keyword, legacy in used.items())
    return (
        f"{name}() got {len(used)} keyword(s) of 0.2 that this version does not take (constructs/CHANGELOG.md): "
        f"{listed}"
    )


def translate(name: str, keywords: dict[str, Any]) -> dict[str, Any]:
    """``keywords`` with each pure rename moved to its new name (a DeprecationWarning each), or a ConfigError
    listing every 0.2 keyword used where any has no one-to-one replacement or a new keyword is also given."""
    table = LEGACY_KEYWORDS[name]
    used = {keyword: table[keyword] for keyword in keywords if keyword in table}
    if not used:
        return keywords
    renames_only = all(legacy.rename is not None and legacy.rename not in keywords for legacy in used.values())
    if not renames_only:
        raise ConfigError(", ".join(used), legacy_keywords_message(name, used))
    translated = dict(keywords)
    for keyword, legacy in used.items():
        assert legacy.rename is not None  # renames_only
        warnings.warn(
            f"{name}({keyword}=...) is renamed {legacy.rename}=...; {keyword}= is refused after "
            f"{RENAMES_ACCEPTED_UNTIL}",
            DeprecationWarning,
            stacklevel=3,
        )
        translated[legacy.rename] = translated.pop(keyword)
    return translated


def accepts_legacy_keywords(name: str) -> Callable[[F], F]:
    """Wrap the constructor ``__init__`` of ``name`` (a key of LEGACY_KEYWORDS) with :func:`translate`. Its signature,
    as ``inspect.signature`` and type checkers read it, is unchanged."""
    if name not in LEGACY_KEYWORDS:
        raise KeyError(f"{name} has no 0.2 keywords in LEGACY_KEYWORDS")

    def wrap(init: F) -> F:
        @functools.wraps(init)
        def wrapped(self: object, *args: Any, **keywords: Any) -> None:
            init(self, *args, **translate(name, keywords))

        return wrapped  # type: ignore[return-value]

    return wrap


def with_legacy_keywords(name: str) -> Callable[[C], C]:
    """The same for a dataclass, whose ``__init__`` the dataclass decorator writes: put it above ``@dataclass``."""

    def wrap(cls: C) -> C:
        cls.__init__ = accepts_legacy_keywords(name)(cls.__init__)  # type: ignore[misc]
        return cls

    return wrap
