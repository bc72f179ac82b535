"""Thresholds that follow a model's latency goal (its ``scaling.latency_p95_ms``, the p95 the service scales to).

A rollback or paging threshold below the goal trips under load the model is sized for, so each defaults to a
multiple of the goal and an explicit one below the goal is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import require


@dataclass(frozen=True)
class GoalMultiple:
    """A threshold that defaults to ``factor`` x the goal and may not be below it. ``consequence``: what a threshold
    below the goal would do; ``if_left_out``: what it defaults to, as the error message says it."""

    factor: int
    consequence: str
    if_left_out: str

    def or_default(self, value_ms: int | None, goal_ms: int) -> int:
        """``value_ms``, or ``factor`` x ``goal_ms`` when it is not set."""
        return value_ms if value_ms is not None else self.factor * goal_ms

    def check(self, value_ms: int, goal_ms: int, key: str) -> None:
        require(
            value_ms >= goal_ms,
            key,
            f"{value_ms} ms is below the model's scaling.latency_p95_ms ({goal_ms} ms): the service adds tasks only "
            f"above that p95, so {self.consequence}; set at least {goal_ms} (or leave it out: {self.if_left_out})",
        )
