"""What a server declares for scaling and alarms: the metrics that drive its task count (:class:`ScalingSignal`,
:class:`ExpressionSignal`) and the alarms its metrics raise (:class:`ServerAlarm`).

Each preset builds its own declarations into its :class:`~.server_contract.ServerContract`; ``ServiceScaling`` and
``ModelAlarms`` iterate over them and never ask which server it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .alarm_thresholds import NOT_KEEPING_UP_MINUTES
from .errors import require, require_range

HIGH_RESOLUTION_PERIODS = (10, 20, 30)  # CloudWatch PutMetricAlarm: only for metrics stored at 1-second resolution
# In an ExpressionSignal's metrics: the ECS service's own CPU utilisation (Average, per minute), not a server metric.
SERVICE_CPU = "ecs:CPUUtilization"


def require_alarm_period(period_seconds: int, key: str) -> None:
    """A period CloudWatch alarms accept: 10, 20 or 30 s (high resolution), or a multiple of 60."""
    require(
        period_seconds in HIGH_RESOLUTION_PERIODS or (period_seconds >= 60 and period_seconds % 60 == 0),
        key,
        f"{period_seconds} is not a CloudWatch alarm period; allowed 10, 20, 30 or a multiple of 60",
    )


@dataclass(frozen=True)
class ScalingSignal:
    """One metric (in namespace ``GpuInference``, this model's dimensions) that drives the task count.

    Set exactly one of ``target`` (target tracking holds the per-task ``statistic`` at it; scales in
    too) and ``scale_out_above`` (a step policy adds one task above it and two above twice it, when the
    metric can reach twice it: ``maximum``, the most it can be, such as 1 for a fraction).
    """

    metric: str
    """The metric's CloudWatch name (a Prometheus name with ':' as '_', or an EMF metric). Required."""
    statistic: str = "Average"
    """The per-task statistic scaling reads. Default: Average."""
    target: float | None = None
    """The value target tracking holds the metric at. Default: None (a step scale-out signal)."""
    scale_out_above: float | None = None
    """The value above which a step policy adds tasks. Default: None (a target tracking signal)."""
    maximum: float | None = None
    """The most the metric can be (1 for a fraction, 100 for a percentage, a queue's capacity). Default: None
    (unbounded: the step above twice the threshold is added)."""
    period_seconds: int = 60
    """The metric's period: 10, 20 or 30 for a metric stored at 1-second resolution, else a multiple of 60.
    Default: 60."""
    evaluation_periods: int = 2
    """Periods above ``scale_out_above`` before a step adds tasks (1-10). Default: 2."""
    name: str | None = None
    """The scaling policy's construct ID. Default: ``Track-<metric>`` or ``ScaleOut-<metric>``."""
    whole_gpu_only: bool = False
    """The signal reads the device (GPU utilisation), which on a GPU share is every co-tenant's: left out for a model
    on a share. Default: false."""

    def __post_init__(self) -> None:
        key = f"scaling_signals[{self.metric}]"
        require(
            (self.target is None) != (self.scale_out_above is None),
            key,
            "set exactly one of target and scale_out_above",
        )
        value = self.target if self.target is not None else self.scale_out_above
        assert value is not None  # exactly one of them is set (checked above)
        require(value > 0, key, f"{value} must be greater than 0")
        if self.maximum is not None:
            require(value < self.maximum, key, f"{value} can never be passed: the metric is at most {self.maximum}")
        require_alarm_period(self.period_seconds, f"{key}.period_seconds")
        require_range(self.evaluation_periods, 1, 10, f"{key}.evaluation_periods")

    @property
    def policy_id(self) -> str:
        return self.name or (f"Track-{self.metric}" if self.target is not None else f"ScaleOut-{self.metric}")


@dataclass(frozen=True)
class ExpressionSignal:
    """A scale-out signal computed with CloudWatch metric math from the server's metrics (and the service's CPU,
    :data:`SERVICE_CPU`), per minute: a step policy adds one task while it is above ``scale_out_above``."""

    name: str
    """The scaling policy's construct ID. Required."""
    expression: str
    """The metric math expression over the ids in ``metrics``. Required."""
    metrics: Mapping[str, tuple[str, str]]
    """Expression id -> (metric name or :data:`SERVICE_CPU`, statistic). Required."""
    label: str
    """What the expression means, on graphs. Required."""
    scale_out_above: float = 1
    """The value above which a task is added. Default: 1."""
    maximum: float | None = None
    """The most the expression can be (1 for a 0/1 condition). Default: None (unbounded)."""
    evaluation_periods: int = 2
    """Minutes above ``scale_out_above`` before a task is added (1-10). Default: 2."""

    def __post_init__(self) -> None:
        require(bool(self.metrics), f"scaling_signals[{self.name}].metrics", "name the metrics the expression reads")
        require_range(self.evaluation_periods, 1, 10, f"scaling_signals[{self.name}].evaluation_periods")

    @property
    def policy_id(self) -> str:
        return self.name


@dataclass(frozen=True)
class ServerAlarm:
    """An alarm on one of the server's metrics (namespace ``GpuInference``, the model's dimensions), named
    ``<model>-<name>``. Its threshold is ``threshold``, or the environment's ``MonitoringProps`` field named by
    ``threshold_setting`` (the environment's operators tune it); likewise its periods."""

    name: str
    """The alarm's name after ``<model>-`` (and its construct ID). Required."""
    metric: str
    """The metric's CloudWatch name. Required."""
    statistic: str
    """The statistic the alarm reads. Required."""
    description: str
    """What the alarm means, after ``<model>: ``; ``{threshold}`` and ``{periods}`` are filled in. Required."""
    threshold: float | None = None
    """The alarm's threshold. Default: None (``threshold_setting`` says it)."""
    threshold_setting: str | None = None
    """The ``MonitoringProps`` field that holds the threshold. Default: None (``threshold`` says it)."""
    periods: int = 1
    """Periods in a row past the threshold before it alarms. Default: 1."""
    periods_setting: str | None = None
    """The ``MonitoringProps`` field that holds the periods. Default: None (``periods`` says them)."""
    period_seconds: int = 60
    """The metric's period (10, 20, 30 or a multiple of 60). Default: 60."""
    below: bool = False
    """Alarm below the threshold (an idle GPU) instead of at or above it. Default: false."""
    whole_gpu_only: bool = False
    """The metric is the device's, every co-tenant's on a GPU share: no alarm for a model on a share. Default: false."""

    def __post_init__(self) -> None:
        key = f"server.alarms[{self.name}]"
        require(
            (self.threshold is None) != (self.threshold_setting is None),
            key,
            "set exactly one of threshold and threshold_setting",
        )
        require_range(self.periods, 1, 1440, f"{key}.periods")
        require_alarm_period(self.period_seconds, f"{key}.period_seconds")

    def resolved(self, settings: object) -> tuple[float, int]:
        """(threshold, periods), read from ``settings`` (the environment's MonitoringProps) where a setting names
        them."""
        return (
            self._setting(settings, self.threshold_setting, "threshold_setting")
            if self.threshold is None
            else self.threshold,
            self.periods
            if self.periods_setting is None
            else self._setting(settings, self.periods_setting, "periods_setting"),
        )

    def _setting(self, settings: object, name: str | None, key: str):
        require(
            hasattr(settings, str(name)),
            f"server.alarms[{self.name}].{key}",
            f"{name!r} is not a field of {type(settings).__name__}: name one of its fields, or set the value itself",
        )
        return getattr(settings, str(name))

    @classmethod
    def not_keeping_up(cls, signal: ScalingSignal) -> ServerAlarm:
        """A scale-out signal held above its threshold for 15 minutes: scaling is not keeping up."""
        assert signal.scale_out_above is not None  # only for scale-out signals
        return cls(
            signal.metric,
            signal.metric,
            signal.statistic,
            threshold=signal.scale_out_above,
            periods=NOT_KEEPING_UP_MINUTES,
            description=f"{signal.metric} ({signal.statistic}) above its scale-out threshold "
            f"{signal.scale_out_above:g} for {NOT_KEEPING_UP_MINUTES} minutes: scaling is not keeping up "
            "(max_tasks or GPU capacity)",
        )


def alarms_of_signals(signals: tuple[ScalingSignal | ExpressionSignal, ...]) -> tuple[ServerAlarm, ...]:
    """The alarms a contract that declares none gets: one per scale-out :class:`ScalingSignal` (``not_keeping_up``)."""
    return tuple(
        ServerAlarm.not_keeping_up(signal)
        for signal in signals
        if isinstance(signal, ScalingSignal) and signal.scale_out_above is not None
    )
