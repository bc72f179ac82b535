"""How one model scales (ModelScalingProps) and the environment's schedules and forecast (ScalingProps): the props
that ModelProps carries and ServiceScaling reads, in their own module so both import it and neither the other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .errors import require, require_range
from .schedules import CapacityPrewarm, ServiceSchedule


@dataclass(frozen=True)
class ModelScalingProps:
    """Per-model scaling thresholds. Defaults: ``requests_per_target_per_minute`` 600 (what one task
    sustains at your latency goal: measure it with ``make bench``), cooldowns 60 s out / 300 s in,
    ``latency_p95_ms`` 250 (ALB p95 above it adds tasks), ``gpu_utilization_percent`` 85 and
    ``cpu_percent`` 80 (bundled server only), ``queue_depth_scale_out`` 16 (bundled server only: a task's model
    queue deeper than this for ``queue_signal_periods`` (3) high-resolution periods of ``queue_signal_period_seconds``
    (10: CloudWatch accepts 10, 20 or 30 s for metrics stored at 1-second resolution) adds tasks)."""

    requests_per_target_per_minute: int = 600
    scale_out_cooldown_seconds: int = 60
    scale_in_cooldown_seconds: int = 300
    latency_p95_ms: int = 250
    gpu_utilization_percent: int = 85
    cpu_percent: int = 80
    queue_depth_scale_out: int = 16
    queue_signal_period_seconds: int = 10
    queue_signal_periods: int = 3

    def __post_init__(self) -> None:
        require(self.requests_per_target_per_minute > 0, "requests_per_target_per_minute", f"{self.requests_per_target_per_minute} must be greater than 0")
        for key in ("scale_out_cooldown_seconds", "scale_in_cooldown_seconds"):
            value = getattr(self, key)
            require_range(value, 0, 3600, key)
        require_range(self.latency_p95_ms, 1, 60_000, "latency_p95_ms")
        for key in ("gpu_utilization_percent", "cpu_percent"):
            value = getattr(self, key)
            require_range(value, 1, 100, key)
        require_range(self.queue_depth_scale_out, 1, 100_000, "queue_depth_scale_out")
        require(self.queue_signal_period_seconds in HIGH_RESOLUTION_PERIODS
                or (self.queue_signal_period_seconds >= 60 and self.queue_signal_period_seconds % 60 == 0),
                "queue_signal_period_seconds",
                f"{self.queue_signal_period_seconds} is not a CloudWatch alarm period; allowed 10, 20, 30 or a multiple of 60")
        require_range(self.queue_signal_periods, 1, 10, "queue_signal_periods")


HIGH_RESOLUTION_PERIODS = (10, 20, 30)  # CloudWatch PutMetricAlarm: only for metrics stored at 1-second resolution


@dataclass(frozen=True)
class PredictiveScalingProps:
    """Predictive scaling of the service on the ALB request count. Defaults: ``ForecastOnly`` (forecasts,
    does not act), 600 s scheduling buffer, ``HonorMaxCapacity``."""

    mode: Literal["off", "ForecastOnly", "ForecastAndScale"] = "ForecastOnly"
    scheduling_buffer_seconds: int = 600
    max_capacity_breach_behavior: Literal["HonorMaxCapacity", "IncreaseMaxCapacity"] = "HonorMaxCapacity"
    max_capacity_buffer_percent: int | None = None

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
    predictive: PredictiveScalingProps = field(default_factory=PredictiveScalingProps)
    capacity_prewarm: tuple[CapacityPrewarm, ...] = ()

    def __post_init__(self) -> None:
        names = [s.name for s in self.schedules] + [p.name for p in self.capacity_prewarm]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        require(not duplicates, "schedules", f"schedule names must be unique; repeated: {duplicates}")
