"""What the bundled server declares in its contract for scaling, alarms and the load balancer: the signals its EMF
metrics give (:class:`BundledScalingProps` sets their thresholds), its alarms and its prediction routes."""

from __future__ import annotations

from dataclasses import dataclass

from ..core import metric_names
from ..core.alarm_thresholds import PAGING_MINUTES, SHED_MINUTES
from ..core.errors import require_range
from ..core.server_signals import SERVICE_CPU, ExpressionSignal, ScalingSignal, ServerAlarm, require_alarm_period

# Its routes whose bodies are prediction inputs (/predict, /predict/batch, OpenAI /v1/embeddings, Open Inference
# Protocol /v2/models/<m>[/versions/<v>]/infer). tests/infra/test_service.py derives the server's POST routes from its
# own app and proves each is here.
BUNDLED_PREDICTION_ROUTES = (
    "/predict",
    "/predict/batch",
    "/v1/embeddings",
    "/v2/models/{model}/infer",
    "/v2/models/{model}/versions/{version}/infer",
)


@dataclass(frozen=True)
class BundledScalingProps:
    """The thresholds of the bundled server's own scaling signals (cdk.json: in the model's ``scaling`` block)."""

    gpu_utilization_percent: int = 85
    """GPU utilisation above which tasks are added (whole GPUs only: on a share it is every co-tenant's).
    Default: 85."""
    cpu_percent: int = 80
    """Service CPU above which a growing queue adds tasks. Default: 80."""
    queue_depth_scale_out: int = 16
    """A task's model queue deeper than this adds tasks; below ``max_queue_size``. Default: 16."""
    queue_signal_period_seconds: int = 10
    """The queue signal's period: 10, 20 or 30 (the queue is stored at 1-second resolution) or a multiple of 60.
    Default: 10."""
    queue_signal_periods: int = 3
    """Periods the queue stays deep before tasks are added (1-10). Default: 3."""

    def __post_init__(self) -> None:
        for key in ("gpu_utilization_percent", "cpu_percent"):
            require_range(getattr(self, key), 1, 100, key)
        require_range(self.queue_depth_scale_out, 1, 100_000, "queue_depth_scale_out")
        require_alarm_period(self.queue_signal_period_seconds, "queue_signal_period_seconds")
        require_range(self.queue_signal_periods, 1, 10, "queue_signal_periods")


def bundled_scaling_signals(
    scaling: BundledScalingProps, queue_capacity: int
) -> tuple[ScalingSignal | ExpressionSignal, ...]:
    """Its model queue (high resolution, seconds), GPU utilisation, and CPU high while its queue grows (a CPU spike
    alone does not scale)."""
    return (
        ScalingSignal(
            metric_names.QUEUE_DEPTH,
            "Maximum",
            scale_out_above=scaling.queue_depth_scale_out,
            maximum=queue_capacity,
            period_seconds=scaling.queue_signal_period_seconds,
            evaluation_periods=scaling.queue_signal_periods,
            name="QueueBacklog",
        ),
        ScalingSignal(
            metric_names.GPU_UTILIZATION,
            "Average",
            scale_out_above=scaling.gpu_utilization_percent,
            maximum=100,
            name="GpuUtilization",
            whole_gpu_only=True,
        ),
        ExpressionSignal(
            "CpuAndQueueGrowing",
            f"IF(cpu > {scaling.cpu_percent} AND DIFF(queue) > 0, 1, 0)",
            {"cpu": (SERVICE_CPU, "Average"), "queue": (metric_names.QUEUE_DEPTH, "Maximum")},
            "CPU high and queue growing",
            scale_out_above=1,
            maximum=1,
            evaluation_periods=3,
        ),
    )


# Thresholds from the environment's MonitoringProps; on a GPU share the device's figures are every co-tenant's (the
# server plans within its share, docs/server.md), so the GPU alarms are for whole GPUs.
BUNDLED_ALARMS = (
    ServerAlarm(
        "QueueDepth",
        metric_names.QUEUE_DEPTH,
        "Maximum",
        threshold_setting="queue_depth",
        periods=PAGING_MINUTES,
        description="server queue above {threshold} requests for {periods} minutes",
    ),
    ServerAlarm(
        "RejectedRequests",
        metric_names.REJECTED_REQUESTS,
        "Sum",
        threshold_setting="rejected_requests_per_minute",
        periods=SHED_MINUTES,
        description="more than {threshold} requests a minute shed with 503 (queue full or draining)",
    ),
    ServerAlarm(
        "GpuMemory",
        metric_names.GPU_MEMORY_UTILIZATION,
        "Maximum",
        threshold_setting="gpu_memory_percent",
        periods=PAGING_MINUTES,
        whole_gpu_only=True,
        description="GPU memory above {threshold}% (risk of CUDA out-of-memory)",
    ),
    ServerAlarm(
        "LowGpuUtilization",
        metric_names.GPU_UTILIZATION,
        "Average",
        threshold_setting="low_gpu_utilization_percent",
        periods_setting="low_gpu_utilization_hours",
        period_seconds=3600,
        below=True,
        whole_gpu_only=True,
        description="GPU below {threshold}% busy for {periods} hours: paying for idle GPUs "
        "(lower min_tasks or add a schedule)",
    ),
)
