"""The target group's readiness check: how soon a new task takes traffic, and how long a failing one keeps it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TargetHealthCheck:
    """ELB's limits (target group HealthCheckIntervalSeconds 5-300, HealthCheckTimeoutSeconds 2-120,
    Healthy/UnhealthyThresholdCount 2-10). A check every 5 s (ELB's shortest) makes a new task healthy 10 s after its
    server is ready; three failed checks in a row, 15 s, take a failing target out (a Spot instance reclaimed before
    its tasks drained, a wedged server). Each server answers its readiness path without queueing behind inference (the
    bundled server's front door), so three misses in a row mean a target that cannot serve, not a busy one."""

    interval_seconds: int = 5
    """Seconds between checks (HealthCheckIntervalSeconds, 5-300). Default: 5 (ELB's shortest)."""
    timeout_seconds: int = 4
    """Seconds a check waits for an answer (HealthCheckTimeoutSeconds, 2-120), less than ``interval_seconds``.
    Default: 4."""
    healthy_threshold: int = 2
    """Passed checks in a row that make a target healthy (HealthyThresholdCount, 2-10). Default: 2."""
    unhealthy_threshold: int = 3
    """Failed checks in a row that take a target out (UnhealthyThresholdCount, 2-10). Default: 3."""

    @property
    def seconds_to_healthy(self) -> int:
        return self.interval_seconds * self.healthy_threshold

    @property
    def seconds_to_unhealthy(self) -> int:
        return self.interval_seconds * self.unhealthy_threshold


TARGET_HEALTH_CHECK = TargetHealthCheck()
