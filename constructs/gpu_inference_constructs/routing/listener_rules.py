"""A model's listener rule on the load balancer: its priority (from its name, or given; never moved) and its path
patterns."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from ..core.errors import ConfigError, require, require_range

MAX_RULE_PRIORITY = 50_000


def priority_from_name(model_name: str) -> int:
    """A listener rule priority (1 to 50000) from the model's name alone."""
    return 1 + int.from_bytes(hashlib.sha256(model_name.encode()).digest()[:4], "big") % MAX_RULE_PRIORITY


def check_rule_priority(priority: int, key: str) -> None:
    require_range(priority, 1, MAX_RULE_PRIORITY, key)


def claim_priority(
    claimed: dict[int, str],
    model_name: str,
    priority: int | None,
    key: str,
    fix_keys: Callable[[str], str] | None = None,
) -> int:
    """``model_name``'s listener rule priority (``priority``, else derived from its name), recorded in ``claimed``
    (priority -> model name). One already claimed is an error under ``key`` naming both models and the keys to set
    (``fix_keys(other model)``, default: listener_priority on either)."""
    chosen = priority_from_name(model_name) if priority is None else priority
    check_rule_priority(chosen, key)
    other = claimed.get(chosen)
    if other is not None:
        keys = {} if fix_keys is None else {"keys": fix_keys(other)}
        raise ConfigError(key, duplicate_priority_detail(model_name, priority, other, chosen, **keys))
    claimed[chosen] = model_name
    return chosen


class ListenerPriorities:
    """The rule priorities of one listener's models, claimed as InferenceLoadBalancer claims each model's rule (an app
    can check its models' priorities before any load balancer exists): a model's own priority (1 to 50000), else one
    derived from its name; a priority claimed twice is a ConfigError at ``key`` naming both models and the keys to
    set (``fix_keys(other model)``; default: listener_priority on one of the two)."""

    def __init__(self) -> None:
        self.claimed: dict[int, str] = {}  # priority -> the model whose rule has it

    def claim(
        self, model_name: str, priority: int | None, key: str, fix_keys: Callable[[str], str] | None = None
    ) -> int:
        """The priority of ``model_name``'s rule, now claimed."""
        return claim_priority(self.claimed, model_name, priority, key, fix_keys)


def duplicate_priority_detail(
    model_name: str,
    priority: int | None,
    other: str,
    chosen: int,
    keys: str = "listener_priority on one of the two models",
) -> str:
    how = "its listener_priority" if priority is not None else "derived from its name"
    return (
        f"listener rule priority {chosen} of {model_name!r} ({how}) is already {other!r}'s: set {keys} "
        f"(1-{MAX_RULE_PRIORITY}, unused on the listener). Priorities never move by themselves: moving one would "
        "rewrite that model's rule and reset its traffic weights (aws/aws-cdk#36649)"
    )


MAX_PATH_PATTERN_CHARS = 128  # each path-pattern value (CloudFormation, ListenerRule PathPatternConfig)


def model_path_patterns(model_name: str, paths: Sequence[str] = ()) -> list[str]:
    """The listener rule's path patterns of a model: its whole prefix, or just ``paths`` below it."""
    patterns = [f"/{model_name}{path}" for path in paths] if paths else [f"/{model_name}", f"/{model_name}/*"]
    for pattern in patterns:
        require(
            len(pattern) <= MAX_PATH_PATTERN_CHARS,
            "server.public_paths",
            f"{pattern!r} is {len(pattern)} characters; an ALB path pattern holds at most {MAX_PATH_PATTERN_CHARS}",
        )
    return patterns
