"""Where one model's latency alarms page someone: from the model's own latency goal, not the environment's.

A model's ``scaling.latency_p95_ms`` is the p95 it is configured to run at: the service adds tasks above it. An
alarm below that goal pages under load the model is sized for (a 500 ms threshold on an LLM whose goal is 20 s
pages all day), so each model's thresholds follow its goal, the same way its rollback alarm does
(:class:`~.deployment.RollbackProps`), and an override below the goal is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from .alarm_thresholds import PAGING_P95_FACTOR, PAGING_P99_FACTOR
from .errors import require, require_range
from .latency_goal import GoalMultiple

MAX_THRESHOLD_MS = 3_600_000  # an ALB holds a request at most its idle timeout, 4000 s at most
PAGING_LATENCY = GoalMultiple(
    PAGING_P95_FACTOR,
    "this alarm would page under load the model is sized for",
    f"latency_p95_ms defaults to {PAGING_P95_FACTOR} x scaling.latency_p95_ms, "
    f"latency_p99_ms to {PAGING_P99_FACTOR} x latency_p95_ms",
)


@dataclass(frozen=True)
class LatencyAlarmThresholds:
    """Resolved thresholds of one model's ``LatencyP95`` and ``LatencyP99`` alarms (ALB TargetResponseTime)."""

    latency_p95_ms: int
    latency_p99_ms: int

    def __post_init__(self) -> None:
        for key in ("latency_p95_ms", "latency_p99_ms"):
            require_range(getattr(self, key), 1, MAX_THRESHOLD_MS, key)
        require(
            self.latency_p95_ms <= self.latency_p99_ms,
            "latency_p95_ms",
            f"{self.latency_p95_ms} is above latency_p99_ms {self.latency_p99_ms}",
        )

    def check_above_scaling(self, scaling_latency_p95_ms: int) -> None:
        """Neither alarm may page below the model's own p95 goal, where the service is still adding tasks."""
        for key in ("latency_p95_ms", "latency_p99_ms"):
            PAGING_LATENCY.check(getattr(self, key), scaling_latency_p95_ms, key)


@dataclass(frozen=True)
class LatencyAlarmProps:
    """One model's paging latency thresholds (``alarms`` in its cdk.json block). Unset, ``latency_p95_ms`` is
    ``PAGING_P95_FACTOR`` (2) x the model's ``scaling.latency_p95_ms`` and ``latency_p99_ms`` is
    ``PAGING_P99_FACTOR`` (3) x that p95: 500 ms and 1500 ms for the default 250 ms goal, 40 s and 120 s for a
    20 s goal. Neither may be below ``scaling.latency_p95_ms``."""

    latency_p95_ms: int | None = None
    """The p95 alarm's threshold. Default: None (2 x the model's ``scaling.latency_p95_ms``)."""
    latency_p99_ms: int | None = None
    """The p99 alarm's threshold. Default: None (3 x ``latency_p95_ms``)."""

    def __post_init__(self) -> None:
        for key in ("latency_p95_ms", "latency_p99_ms"):
            value = getattr(self, key)
            if value is not None:
                require_range(value, 1, MAX_THRESHOLD_MS, key)

    def thresholds(self, scaling_latency_p95_ms: int) -> LatencyAlarmThresholds:
        p95 = PAGING_LATENCY.or_default(self.latency_p95_ms, scaling_latency_p95_ms)
        p99 = self.latency_p99_ms if self.latency_p99_ms is not None else min(MAX_THRESHOLD_MS, PAGING_P99_FACTOR * p95)
        thresholds = LatencyAlarmThresholds(latency_p95_ms=p95, latency_p99_ms=p99)
        thresholds.check_above_scaling(scaling_latency_p95_ms)
        return thresholds
