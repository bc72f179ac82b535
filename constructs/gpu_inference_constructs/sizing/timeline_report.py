"""The load-step timeline as text: its phases, the new-instance figure against the goal, and a warm pool's cost."""

from __future__ import annotations

from ..core.capacity_props import GpuCapacityProps
from ..core.monitoring_props import HOURS_PER_MONTH, MonitoringProps, root_volume_hourly_usd, warm_pool_monthly_usd
from .timeline_figures import ESTIMATED, GOAL_S, Phase


def warm_pool_cost(capacity: GpuCapacityProps, prices: MonitoringProps, on_demand_hourly_usd: float) -> str:
    """What the group's warm pool costs, as the dashboard prices it (monitoring.warm_pool_monthly_usd)."""
    pool = capacity.warm_pool
    assert pool is not None
    volume_month = root_volume_hourly_usd(capacity, prices) * HOURS_PER_MONTH
    spot = on_demand_hourly_usd * prices.spot_price_fraction
    return (
        f"warm pool: {pool.min_size} stopped instance(s) x their {capacity.root_volume_gib} GiB gp3 root volume "
        f"(${volume_month:.2f} a month each at ${prices.gp3_gib_month_usd}/GiB-month with provisioned IOPS and "
        f"throughput, the dashboard's prices) = ${warm_pool_monthly_usd(capacity, prices):.2f} a month "
        f"[{ESTIMATED}: list prices; a stopped instance bills its EBS volumes only, EC2 Auto Scaling user guide]; "
        f"each warming runs one instance On-Demand for up to prepare_seconds {pool.prepare_seconds} s "
        f"(${on_demand_hourly_usd * pool.prepare_seconds / 3600:.2f} at ${on_demand_hourly_usd}/h); a pooled "
        f"instance is On-Demand (Auto Scaling cannot stop a Spot instance it launched), "
        f"${on_demand_hourly_usd - spot:.2f}/h more than a Spot one (at {prices.spot_price_fraction:.0%}) while it "
        "serves, until scale-in terminates it"
    )


def goal_line(label: str, cold: list[Phase], warm: list[Phase]) -> str:
    """The new-instance figure against the goal, and the largest phase left when it is missed."""
    cold_s, warm_s = (sum(p.seconds for p in phases) for phases in (cold, warm))
    verdict = "met" if warm_s <= GOAL_S else f"not met, {warm_s - GOAL_S:.0f} s over"
    largest = max(warm, key=lambda p: p.seconds)
    return (
        f"{label}, a task that needs a new instance: {cold_s:.0f} s launched, {warm_s:.0f} s from the warm pool; "
        f"goal {GOAL_S:.0f} s: {verdict} (largest phase left: {largest.name}, {largest.seconds:.0f} s, "
        f"{largest.basis})"
    )


def render(title: str, phases: list[Phase]) -> str:
    total = sum(p.seconds for p in phases)
    lines = [f"{title}: {total:.0f} s from the load step to serving"]
    lines += [f"  {p.seconds:6.0f} s  {p.name:<28} [{p.basis}] {p.source}" for p in phases]
    return "\n".join(lines)
