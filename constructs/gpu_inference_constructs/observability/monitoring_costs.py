"""What the environment costs, as CloudWatch metric math: USD per 1M requests and its parts, each capacity group's warm
spare and warm pool (:class:`CostMetrics`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_elasticloadbalancingv2 as elbv2

from ..capacity.capacity_group import CapacityGroup
from ..core.instance_catalog import PRICES_AS_OF
from ..core.monitoring_props import MonitoringProps, root_volume_hourly_usd, warm_pool_monthly_usd

GIB = 2**30  # a billed GB taken as 2^30 bytes (were it 10^9, the logs figure would be 7 % higher)
HOUR = cdk.Duration.hours(1)
FIVE_MINUTES = cdk.Duration.minutes(5)


def _in_service(name: str, index: int) -> str:
    """Capacity group ``index``'s instances in service, metric ``name``: the other groups may scale to zero (an LLM
    group off hours) and then have no datapoints, so none count 0."""
    return name if index == 0 else f"FILL({name}, 0)"


def on_demand_instances_expression(capacity: CapacityGroup[Any], total: str = "total") -> str:
    """Metric math for the On-Demand share of ``total`` in-service instances that the distribution policy implies
    (no CloudWatch metric splits a mixed-instances group by purchase option)."""
    base = capacity.props.on_demand_base_capacity
    share = capacity.props.on_demand_percentage_above_base / 100
    return f"IF({total} > {base}, {base} + CEIL(({total} - {base}) * {share}), {total})"


class CostMetrics:
    """The cost metrics of capacity groups at ``props``' prices."""

    def __init__(self, props: MonitoringProps) -> None:
        self.props = props

    def instances(self, capacity: CapacityGroup[Any], period: cdk.Duration) -> cloudwatch.Metric:
        return self._group_metric(capacity, "GroupInServiceInstances", period, "GPU instances in service")

    @staticmethod
    def _group_metric(capacity: CapacityGroup[Any], name: str, period: cdk.Duration, label: str) -> cloudwatch.Metric:
        """An Auto Scaling group metric of ``capacity``'s group (every one is collected: ``GroupMetrics.all()``, the
        warm pool's WarmPool* metrics included)."""
        return cloudwatch.Metric(
            namespace="AWS/AutoScaling",
            metric_name=name,
            dimensions_map={"AutoScalingGroupName": capacity.auto_scaling_group.auto_scaling_group_name},
            statistic="Average",
            period=period,
            label=label,
        )

    def _warm_pool_hourly(
        self, capacity: CapacityGroup[Any], index: int, period: cdk.Duration, using: dict[str, cloudwatch.IMetric]
    ) -> str:
        """USD per hour of ``capacity``'s warm pool (a metric math term; its metrics added to ``using``): every
        instance in it bills its root volume (a stopped one nothing else), and one warming runs On-Demand (Auto
        Scaling cannot stop a Spot instance it launched, so the pool's instances are On-Demand)."""
        pooled, warming = f"pool{index}", f"warming{index}"
        using[pooled] = self._group_metric(capacity, "WarmPoolTotalCapacity", period, "instances in the warm pool")
        using[warming] = self._group_metric(capacity, "WarmPoolPendingCapacity", period, "instances warming")
        return (
            f"(FILL({pooled}, 0) * {root_volume_hourly_usd(capacity.props, self.props)} + FILL({warming}, 0) * "
            f"{self._on_demand_price(capacity, index)})"
        )

    def warm_pool_cost(self, capacities: Sequence[CapacityGroup[Any]]) -> list[cloudwatch.MathExpression]:
        """USD per hour of each group's warm pool (the groups with one), labelled with its monthly cost at its
        minimum size (:func:`warm_pool_monthly_usd`)."""
        lines = []
        for index, capacity in enumerate(capacities):
            pool = capacity.props.warm_pool
            if pool is None:
                continue
            using: dict[str, cloudwatch.IMetric] = {}
            hourly = self._warm_pool_hourly(capacity, index, FIVE_MINUTES, using)
            monthly = warm_pool_monthly_usd(capacity.props, self.props)
            lines.append(
                cloudwatch.MathExpression(
                    expression=hourly,
                    using_metrics=using,
                    period=FIVE_MINUTES,
                    label=f"{capacity.instance_types[0].name} group: warm pool, USD/h ({pool.min_size} stopped: their "
                    f"{capacity.props.root_volume_gib} GiB gp3 root volumes, ${monthly:.2f} a month; On-Demand while "
                    "one warms; estimate)",
                )
            )
        return lines

    def _on_demand_price(self, capacity: CapacityGroup[Any], index: int) -> float:
        """Capacity group ``index``'s On-Demand USD per hour: ``hourly_price_usd`` for the first group, else its
        preferred type's catalog price."""
        return (self.props.hourly_price_usd if index == 0 else None) or capacity.instance_types[0].on_demand_hourly_usd

    def _gpu_hourly(self, capacity: CapacityGroup[Any], price: float, running: str) -> str:
        """USD per hour of the group's ``running`` instances (a metric math term) by its purchase policy, On-Demand
        at ``price``."""
        spot_price = round(price * self.props.spot_price_fraction, 5)
        on_demand = on_demand_instances_expression(capacity, running)
        return f"(({on_demand}) * {price} + ({running} - ({on_demand})) * {spot_price})"

    def spare_capacity_cost(self, capacities: Sequence[CapacityGroup[Any]]) -> list[cloudwatch.MathExpression]:
        """USD per hour of each group's warm spare: the share of its instances that no task reserves, (100 -
        CapacityProviderReservation) % (ECS managed scaling's own metric: tasks' need over instances in service, which
        target_capacity_percent below 100 holds below 100), priced like the group's instances and their root
        volumes."""
        spares = []
        for index, capacity in enumerate(capacities):
            total, reserved = f"total{index}", f"reservation{index}"  # ids unique across the graph's expressions
            # No FILL: a group at zero has no spare either.
            gpus = self._gpu_hourly(capacity, self._on_demand_price(capacity, index), total)
            hourly = f"({gpus} + {total} * {root_volume_hourly_usd(capacity.props, self.props)})"
            reservation = cloudwatch.Metric(
                namespace="AWS/ECS/ManagedScaling",
                metric_name="CapacityProviderReservation",
                dimensions_map={
                    "ClusterName": capacity.cluster.cluster_name,
                    "CapacityProviderName": capacity.capacity_provider.capacity_provider_name,
                },
                statistic="Average",
                period=FIVE_MINUTES,
            )
            spares.append(
                cloudwatch.MathExpression(
                    expression=f"IF({reserved} < 100, (1 - {reserved} / 100) * {hourly}, 0)",
                    using_metrics={total: self.instances(capacity, FIVE_MINUTES), reserved: reservation},
                    period=FIVE_MINUTES,
                    label=f"{capacity.instance_types[0].name} group: warm spare, USD/h (target "
                    f"{capacity.props.target_capacity_percent} %, estimate)",
                )
            )
        return spares

    def cost_per_million_requests(
        self,
        capacities: Sequence[CapacityGroup[Any]],
        load_balancer: elbv2.IApplicationLoadBalancer,
        log_group_names: Sequence[str],
    ) -> tuple[cloudwatch.MathExpression, list[cloudwatch.MathExpression]]:
        """USD per 1M requests, hourly: each capacity group's GPU instances by its purchase policy at its preferred
        type's price (``hourly_price_usd`` overrides the first group's), log bytes ingested, the ALB's hour and LCUs.

        ConsumedLCUs is the load balancer's billed capacity (AWS re:Post: the usage averaged over time that billing
        uses), so its hourly Average is that hour's LCU-hours. IncomingBytes is the uncompressed volume ingested, which
        is what CloudWatch Logs bills per GB."""
        props = self.props
        using: dict[str, cloudwatch.IMetric] = {}
        gpu_parts, volume_parts, priced = [], [], []
        for index, capacity in enumerate(capacities):
            name = "total" if index == 0 else f"total{index}"
            using[name] = self.instances(capacity, HOUR)
            price = self._on_demand_price(capacity, index)
            gpu_parts.append(self._gpu_hourly(capacity, price, _in_service(name, index)))
            volume_parts.append(f"{_in_service(name, index)} * {root_volume_hourly_usd(capacity.props, props)}")
            priced.append(f"{capacity.instance_types[0].name} at ${price}/h")
        using["requests"] = load_balancer.metrics.request_count(period=HOUR, statistic="Sum")
        using["lcus"] = load_balancer.metrics.custom("ConsumedLCUs", period=HOUR, statistic="Average")
        for index, name in enumerate(log_group_names):
            using[f"logbytes{index}"] = cloudwatch.Metric(
                namespace="AWS/Logs",
                metric_name="IncomingBytes",
                dimensions_map={"LogGroupName": name},
                statistic="Sum",
                period=HOUR,
            )
        log_bytes = " + ".join(f"FILL(logbytes{i}, 0)" for i in range(len(log_group_names))) or "0"
        pools = [
            self._warm_pool_hourly(capacity, index, HOUR, using)
            for index, capacity in enumerate(capacities)
            if capacity.props.warm_pool is not None
        ]
        parts = {
            "GPU instances": " + ".join(gpu_parts),
            "GPU root volumes": " + ".join(volume_parts),
            **({"warm pool": " + ".join(pools)} if pools else {}),
            "CloudWatch Logs ingestion": f"({log_bytes}) / {GIB} * {props.logs_ingestion_usd_per_gb}",
            "load balancer": f"({props.load_balancer_hourly_usd} + FILL(lcus, 0) * "
            f"{props.load_balancer_lcu_hourly_usd})",
        }

        def per_million(hourly: str, label: str) -> cloudwatch.MathExpression:
            return cloudwatch.MathExpression(
                expression=f"IF(requests > 0, ({hourly}) / requests * 1000000, 0)",
                using_metrics=using,
                period=HOUR,
                label=label,
            )

        total = per_million(
            " + ".join(parts.values()),
            f"USD per 1M requests, estimate: GPU ({', '.join(priced)}, Spot at "
            f"{props.spot_price_fraction:.0%}; prices {PRICES_AS_OF}) + root volumes (gp3 "
            f"${props.gp3_gib_month_usd}/GiB-month, provisioned IOPS and throughput) + "
            + ("warm pool (its instances' root volumes; On-Demand while warming) + " if pools else "")
            + "CloudWatch Logs ingestion "
            f"(${props.logs_ingestion_usd_per_gb}/GB) + ALB (${props.load_balancer_hourly_usd}/h + "
            f"${props.load_balancer_lcu_hourly_usd}/LCU-h)",
        )
        return total, [per_million(hourly, f"{name} (estimate)") for name, hourly in parts.items()]
