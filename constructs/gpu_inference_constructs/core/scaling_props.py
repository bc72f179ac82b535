"""How one model scales (ModelScalingProps) and the environment's schedules and forecast (ScalingProps): the props
that ModelProps carries and ServiceScaling reads, in their own module so both import it and neither the other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .errors import require, require_range
from .legacy_keywords import with_legacy_keywords
from .schedules import CapacityPrewarm, ServiceSchedule


@with_legacy_keywords("ModelScalingProps")
@dataclass(frozen=True)
class ModelScalingProps:
    """Per-model scaling thresholds that hold for any server. A server's own signals and their thresholds are in its
    contract (the bundled server's: ``BundledServerProps.scaling``). Defaults: each field's, below."""

    requests_per_target_per_minute: int = 600
    """What one task sustains at your latency goal (measure it with ``make bench``). Default: 600."""
    scale_out_cooldown_seconds: int = 60
    """Seconds after a scale-out before the next (0-3600). Default: 60."""
    scale_in_cooldown_seconds: int = 300
    """Seconds after a scale-in before the next (0-3600). Default: 300."""
    latency_p95_ms: int = 250
    """The latency goal: ALB p95 above it adds tasks (1-60000 ms). Default: 250."""

    def __post_init__(self) -> None:
        require(
            self.requests_per_target_per_minute > 0,
            "requests_per_target_per_minute",
            f"{self.requests_per_target_per_minute} must be greater than 0",
        )
        for key in ("scale_out_cooldown_seconds", "scale_in_cooldown_seconds"):
            value = getattr(self, key)
            require_range(value, 0, 3600, key)
        require_range(self.latency_p95_ms, 1, 60_000, "latency_p95_ms")


@dataclass(frozen=True)
class PredictiveScalingProps:
    """Predictive scaling of the service on the ALB request count. Defaults: ``ForecastOnly`` (forecasts,
    does not act), 600 s scheduling buffer, ``HonorMaxCapacity``."""

    mode: Literal["off", "ForecastOnly", "ForecastAndScale"] = "ForecastOnly"
    """off, ForecastOnly (forecasts, does not act) or ForecastAndScale. Default: ForecastOnly."""
    scheduling_buffer_seconds: int = 600
    """How far ahead of the forecast tasks start (0-3599). Default: 600."""
    max_capacity_breach_behavior: Literal["HonorMaxCapacity", "IncreaseMaxCapacity"] = "HonorMaxCapacity"
    """Whether a forecast above ``max_tasks`` may raise it. Default: HonorMaxCapacity."""
    max_capacity_buffer_percent: int | None = None
    """How far above the forecast IncreaseMaxCapacity may go (0-100; required with it). Default: None."""

    def __post_init__(self) -> None:
        require(
            0 <= self.scheduling_buffer_seconds < 3600,
            "scheduling_buffer_seconds",
            f"{self.scheduling_buffer_seconds} is out of range; allowed 0 to 3599 (less than the forecast interval)",
        )
        increase = self.max_capacity_breach_behavior == "IncreaseMaxCapacity"
        require(
            (self.max_capacity_buffer_percent is not None) == increase,
            "max_capacity_buffer_percent",
            "is required with IncreaseMaxCapacity and not allowed with HonorMaxCapacity",
        )
        if self.max_capacity_buffer_percent is not None:
            require_range(self.max_capacity_buffer_percent, 0, 100, "max_capacity_buffer_percent")


@dataclass(frozen=True)
class ScalingProps:
    """Environment-wide scaling: schedules for every model service, predictive scaling, GPU pre-warm floors.
    Defaults: no schedules, predictive ``ForecastOnly``, no pre-warm (ServiceScaling without ``scaling``
    turns predictive off)."""

    schedules: tuple[ServiceSchedule, ...] = ()
    """Task ranges by time of day, for every model service. Default: none."""
    predictive: PredictiveScalingProps = field(default_factory=PredictiveScalingProps)
    """Predictive scaling on the ALB request count. Default: PredictiveScalingProps() (ForecastOnly)."""
    capacity_prewarm: tuple[CapacityPrewarm, ...] = ()
    """GPU capacity floors ahead of known peaks. Default: none."""

    def __post_init__(self) -> None:
        names = [s.name for s in self.schedules] + [p.name for p in self.capacity_prewarm]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        require(not duplicates, "schedules", f"schedule names must be unique; repeated: {duplicates}")
