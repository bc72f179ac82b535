"""The environment's alarm thresholds and cost settings (:class:`MonitoringProps`), and the GPU fleet's storage costs
they price: plain data and arithmetic without aws_cdk, for the constructs and the sizing advisor alike."""

from __future__ import annotations

from dataclasses import dataclass

from .alarm_thresholds import ERROR_RATE_PERCENT, PAGING_P95_FACTOR, PAGING_P99_FACTOR
from .capacity_props import GP3_BASELINE_IOPS, GP3_BASELINE_MIB_S, CapacityGroupProps, root_volume_performance
from .errors import require, require_range

HOURS_PER_MONTH = 730  # how AWS turns a monthly EBS price into an hourly one (Amazon EBS pricing examples)


@dataclass(frozen=True)
class MonitoringProps:
    """The environment's alarm thresholds and cost settings. Latency thresholds are each model's own
    (``ModelProps.alarms``, from its ``scaling.latency_p95_ms``): one environment-wide number pages all day on a
    model whose goal is above it, so ``latency_p95_ms`` and ``latency_p99_ms`` here are refused with that fix.

    Defaults: 1 % target and load-balancer 5xx; 3 minutes unhealthy; 15 minutes
    below desired; queue depth 200; 10 shed requests a minute; GPU memory 90 %; GPU under 10 % for 6
    hours; 3 Spot interruptions in 15 minutes; Spot at 0.4 of On-Demand; ``hourly_price_usd`` the
    catalog's On-Demand price of the preferred type; each instance's gp3 root volume at us-east-1's list prices
    (``gp3_gib_month_usd``, ``gp3_iops_month_usd`` above 3,000 IOPS, ``gp3_mib_s_month_usd`` above 125 MiB/s).
    """

    latency_p95_ms: int | None = None
    """Refused: each model pages at its own latency goal (``ModelProps.alarms``). Default: None."""
    latency_p99_ms: int | None = None
    """Refused, as ``latency_p95_ms``. Default: None."""
    target_5xx_percent: float = ERROR_RATE_PERCENT
    """Share of a model's requests answered 5xx by its server that alarms. Default: 1.0."""
    elb_5xx_percent: float = ERROR_RATE_PERCENT
    """Share of requests answered 5xx by the load balancer itself that alarms. Default: 1.0."""
    unhealthy_hosts_minutes: int = 3
    """Minutes a task fails its readiness check before it alarms (1-1440). Default: 3."""
    tasks_below_desired_minutes: int = 15
    """Minutes with fewer tasks running than desired before it alarms (1-1440). Default: 15."""
    queue_depth: int = 200
    """A server's queue (the bundled server's QueueDepth alarm) above this for 3 minutes alarms. Default: 200."""
    rejected_requests_per_minute: int = 10
    """Requests a minute shed with 503 that alarm (the bundled server's RejectedRequests). Default: 10."""
    gpu_memory_percent: int = 90
    """GPU memory above this alarms (the bundled server's GpuMemory). Default: 90."""
    low_gpu_utilization_percent: int = 10
    """GPU busy below this for ``low_gpu_utilization_hours`` alarms (idle GPUs). Default: 10."""
    low_gpu_utilization_hours: int = 6
    """Hours of low GPU utilisation before it alarms (1-24). Default: 6."""
    spot_interruptions_per_15_minutes: int = 3
    """Spot interruption warnings in 15 minutes that alarm. Default: 3."""
    spot_price_fraction: float = 0.4
    """Spot's price as a fraction of On-Demand, for the cost estimate. Default: 0.4."""
    hourly_price_usd: float | None = None
    """The first capacity group's On-Demand price per hour. Default: None (the catalog's price of its preferred
    type)."""
    # us-east-1 list prices for the rest of the bill per request, read 2026-12-03: CloudWatch Logs standard-class
    # ingestion per GB (CloudWatch pricing, https://aws.amazon.com/cloudwatch/pricing/), ALB per hour and per LCU-hour
    # (Elastic Load Balancing pricing page's US-East-1 examples). Set your region's or your negotiated rates here.
    logs_ingestion_usd_per_gb: float = 0.50
    """CloudWatch Logs standard-class ingestion per GB (us-east-1, read 2026-12-03). Default: 0.50."""
    load_balancer_hourly_usd: float = 0.0225
    """An ALB per hour (us-east-1). Default: 0.0225."""
    load_balancer_lcu_hourly_usd: float = 0.008
    """An ALB LCU per hour (us-east-1). Default: 0.008."""
    # gp3 per GiB-month, per provisioned IOPS-month above 3,000 and per provisioned MiB/s-month above 125, us-east-1
    # (Amazon EBS pricing page; docs/aws-facts.md): each GPU instance's root volume, billed while it runs.
    gp3_gib_month_usd: float = 0.08
    """gp3 per GiB-month (us-east-1): each GPU instance's root volume. Default: 0.08."""
    gp3_iops_month_usd: float = 0.005
    """gp3 per provisioned IOPS-month above 3,000 (us-east-1). Default: 0.005."""
    gp3_mib_s_month_usd: float = 0.04
    """gp3 per provisioned MiB/s-month above 125 (us-east-1). Default: 0.04."""

    def __post_init__(self) -> None:
        for key in ("latency_p95_ms", "latency_p99_ms"):
            require(
                getattr(self, key) is None,
                key,
                f"is no longer an environment setting: each model pages at its own latency goal. Remove it, and set "
                f"models[].alarms.{key} where a model needs another threshold than the default (latency_p95_ms "
                f"{PAGING_P95_FACTOR} x its scaling.latency_p95_ms, "
                f"latency_p99_ms {PAGING_P99_FACTOR} x latency_p95_ms; "
                "in Python: ModelProps(alarms=LatencyAlarmProps(...)))",
            )
        for key in ("target_5xx_percent", "elb_5xx_percent"):
            value = getattr(self, key)
            require(0 < value <= 100, key, f"{value} is out of range; a percentage above 0, at most 100")
        for key in ("unhealthy_hosts_minutes", "tasks_below_desired_minutes"):
            value = getattr(self, key)
            require(1 <= value <= 1440, key, f"{value} is out of range; allowed 1 to 1440 minutes")
        require(self.queue_depth >= 1, "queue_depth", f"{self.queue_depth} must be at least 1")
        require(
            self.rejected_requests_per_minute >= 1,
            "rejected_requests_per_minute",
            f"{self.rejected_requests_per_minute} must be at least 1",
        )
        for key in ("gpu_memory_percent", "low_gpu_utilization_percent"):
            value = getattr(self, key)
            require_range(value, 1, 100, key)
        require_range(self.low_gpu_utilization_hours, 1, 24, "low_gpu_utilization_hours")
        require(
            self.spot_interruptions_per_15_minutes >= 1,
            "spot_interruptions_per_15_minutes",
            f"{self.spot_interruptions_per_15_minutes} must be at least 1",
        )
        require(
            0 < self.spot_price_fraction <= 1,
            "spot_price_fraction",
            f"{self.spot_price_fraction} is out of range; a fraction of the On-Demand price above 0, at most 1",
        )
        if self.hourly_price_usd is not None:
            require(self.hourly_price_usd > 0, "hourly_price_usd", f"{self.hourly_price_usd} must be greater than 0")
        for key in (
            "logs_ingestion_usd_per_gb",
            "load_balancer_hourly_usd",
            "load_balancer_lcu_hourly_usd",
            "gp3_gib_month_usd",
            "gp3_iops_month_usd",
            "gp3_mib_s_month_usd",
        ):
            value = getattr(self, key)
            require(0 <= value <= 100, key, f"{value} is out of range; a price in USD from 0 to 100")


def root_volume_hourly_usd(capacity: CapacityGroupProps, prices: MonitoringProps) -> float:
    """USD per hour of one instance's gp3 root volume: its size, and the IOPS and throughput above gp3's included
    3,000 and 125 MiB/s (billed per month of 730 hours)."""
    iops = root_volume_performance(capacity.root_volume_throughput_mib_s).get("iops", GP3_BASELINE_IOPS)
    monthly = (
        capacity.root_volume_gib * prices.gp3_gib_month_usd
        + (iops - GP3_BASELINE_IOPS) * prices.gp3_iops_month_usd
        + (capacity.root_volume_throughput_mib_s - GP3_BASELINE_MIB_S) * prices.gp3_mib_s_month_usd
    )
    return round(monthly / HOURS_PER_MONTH, 6)


def warm_pool_monthly_usd(capacity: CapacityGroupProps, prices: MonitoringProps) -> float:
    """USD a month of the group's warm pool at its minimum size (``warm_pool.min_size`` stopped instances): a stopped
    instance bills its EBS volumes only (EC2 Auto Scaling user guide, warm pools), here its root volume with the IOPS
    and throughput above gp3's included (:func:`root_volume_hourly_usd`). 0 without a pool. Each warming also runs one
    instance On-Demand for up to ``warm_pool.prepare_seconds``, which the dashboard counts as it happens."""
    if capacity.warm_pool is None:
        return 0.0
    return round(capacity.warm_pool.min_size * root_volume_hourly_usd(capacity, prices) * HOURS_PER_MONTH, 2)
