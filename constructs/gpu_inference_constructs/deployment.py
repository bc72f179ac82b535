"""How a new model version replaces the old one: ECS's built-in deployment strategies, their traffic steps and
bake times, the alarms that roll a deployment back, and the checks that keep them safe on a GPU fleet.

``rolling`` replaces tasks behind one target group (circuit breaker plus alarms). ``canary``, ``linear`` and
``blue_green`` start a full set of new tasks behind a second target group, shift the model's one listener rule's
weights to it step by step, bake, then stop the old tasks; any rollback alarm in ALARM sends traffic back, and a
version that never becomes healthy trips revision_health's alarm. The deployment circuit breaker stops rolling and
blue/green deployments too (ECS developer guide, deployment-failure-detection: "Both methods only support rolling
update deployment and blue/green deployment types"); no AWS page names it for linear or canary.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import aws_cdk as cdk
import jsii
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from constructs import Construct

from .errors import require, require_range
from .latency_goal import GoalMultiple
from .target_group_metrics import TargetGroupMetrics

Strategy = Literal["rolling", "canary", "linear", "blue_green"]
BUILT_IN_ALARMS = ("target_5xx_rate", "latency_p95")
# The built-in rollback alarms breach after this many one-minute periods; a bake shorter than that ends
# before they can fire, so traffic would move on (or the old tasks stop) with the alarm still evaluating.
ALARM_MINUTES = 3
MAX_BAKE_MINUTES = 1440  # ECS API limit for every bake time
# CloudFormation rejects canary and linear deployments whose configured bake times exceed 33 hours (it times out at 36).
CLOUDFORMATION_DEPLOYMENT_MINUTES = 33 * 60
DEFAULTS = {
    # strategy: (step_percent, step_bake_minutes, bake_minutes). Bake times are always written to the template:
    # ECS's own default for non-rolling strategies would hold the doubled GPU capacity for longer.
    "canary": (10.0, 10, 10),
    "linear": (25.0, 5, 10),
    "blue_green": (None, None, 10),
    "rolling": (None, None, None),
}
STEP_RANGES = {"canary": (0.1, 100.0), "linear": (3.0, 100.0)}
# The strategies the ECS developer guide's deployment-failure-detection page names for the circuit breaker.
CIRCUIT_BREAKER_STRATEGIES = ("rolling", "blue_green")


@dataclass(frozen=True)
class DeploymentProps:
    """How a new version goes out. Unset values take the strategy's default (``DEFAULTS``).

    ``rollback_alarms`` are the built-in per-model alarms (target 5xx rate, p95 latency, watched on both target
    groups); ``alarm_names`` are existing CloudWatch alarms that also roll back. ``circuit_breaker`` applies to
    ``rolling`` and ``blue_green`` (on by default there; CIRCUIT_BREAKER_STRATEGIES).
    """

    strategy: Strategy = "rolling"
    """``rolling``, ``canary``, ``linear`` or ``blue_green`` (ECS's built-in strategies). Default: "rolling"."""
    step_percent: float | None = None
    """The share of traffic each step shifts, a multiple of 0.1: 0.1-100 for canary, 3-100 for linear; canary and
    linear only. Default: None (the strategy's: canary 10.0, linear 25.0)."""
    step_bake_minutes: int | None = None
    """Minutes between traffic steps, 3-1440; canary and linear only. Default: None (the strategy's: canary 10,
    linear 5)."""
    bake_minutes: int | None = None
    """Minutes after the last traffic shift before the old tasks stop, 3-1440; not for rolling. Default: None (10 for
    canary, linear and blue_green)."""
    circuit_breaker: bool | None = None
    """The deployment circuit breaker (rolling and blue_green only). Default: None (on for rolling and blue_green)."""
    rollback_alarms: tuple[str, ...] = BUILT_IN_ALARMS
    """The built-in per-model alarms that roll a deployment back (any of ``BUILT_IN_ALARMS``). Default:
    ("target_5xx_rate", "latency_p95")."""
    alarm_names: tuple[str, ...] = ()
    """Names of existing CloudWatch alarms that also roll a deployment back. Default: () (none)."""

    def __post_init__(self) -> None:
        require(self.strategy in DEFAULTS, "strategy", f"{self.strategy!r} is not a strategy; use one of: {', '.join(DEFAULTS)}")
        stepped = self.strategy in STEP_RANGES
        for key in ("step_percent", "step_bake_minutes"):
            require(
                stepped or getattr(self, key) is None,
                key,
                f"only canary and linear shift traffic in steps; remove {key} or use strategy canary or linear",
            )
        require(
            self.strategy != "rolling" or self.bake_minutes is None,
            "bake_minutes",
            "a rolling deployment has no bake time (the circuit breaker and alarms watch it); remove bake_minutes "
            "or use strategy canary, linear or blue_green",
        )
        require(
            self.strategy in CIRCUIT_BREAKER_STRATEGIES or not self.circuit_breaker,
            "circuit_breaker",
            f"AWS documents the deployment circuit breaker for rolling and blue/green deployments only; remove it for "
            f"{self.strategy} (its rollback alarms, the never-healthy one included, stop it instead)",
        )
        if stepped:
            low, high = STEP_RANGES[self.strategy]
            percent, step_bake = self.traffic_step_percent, self.step_bake
            assert percent is not None and step_bake is not None  # canary and linear have defaults for both
            require_range(percent, low, high, "step_percent", hint=f" for {self.strategy}")
            require(math.isclose(percent * 10, round(percent * 10)), "step_percent", f"{percent} must be a multiple of 0.1")
            self._check_bake(step_bake, "step_bake_minutes", "before the next traffic shift")
        if self.shifts_traffic:
            final_bake = self.final_bake
            assert final_bake is not None  # every strategy that shifts traffic has a default bake time
            self._check_bake(final_bake, "bake_minutes", "before the old tasks stop")
            total = self.worst_case_minutes
            require(
                total <= CLOUDFORMATION_DEPLOYMENT_MINUTES,
                "step_bake_minutes" if stepped else "bake_minutes",
                f"the bake times add up to {total} minutes; CloudFormation rejects deployments over "
                f"{CLOUDFORMATION_DEPLOYMENT_MINUTES} minutes (33 hours)",
            )
        unknown = sorted(set(self.rollback_alarms) - set(BUILT_IN_ALARMS))
        require(not unknown, "rollback_alarms", f"{unknown} are not built-in alarms; use any of: {', '.join(BUILT_IN_ALARMS)}")
        require(len(set(self.rollback_alarms)) == len(self.rollback_alarms), "rollback_alarms", "lists an alarm twice")
        for index, name in enumerate(self.alarm_names):
            require(0 < len(name) <= 255, f"alarm_names[{index}]", f"{name!r} is not a CloudWatch alarm name (1 to 255 characters)")
        require(len(set(self.alarm_names)) == len(self.alarm_names), "alarm_names", "lists an alarm twice")
        require(
            not self.shifts_traffic or bool(self.rollback_alarms or self.alarm_names),
            "rollback_alarms",
            f"a {self.strategy} deployment without alarms shifts all traffic once the bake time ends, whatever the "
            "new version does; keep the built-in rollback_alarms or list alarm_names",
        )

    def _check_bake(self, minutes: int, key: str, before: str) -> None:
        require(
            ALARM_MINUTES <= minutes <= MAX_BAKE_MINUTES,
            key,
            f"{minutes} is out of range; allowed {ALARM_MINUTES} to {MAX_BAKE_MINUTES} minutes (the rollback alarms "
            f"need {ALARM_MINUTES} minutes to fire {before})",
        )

    @property
    def shifts_traffic(self) -> bool:
        """True for the strategies that run a second target group and shift the listener rule's weights."""
        return self.strategy != "rolling"

    @property
    def uses_circuit_breaker(self) -> bool:
        return self.strategy in CIRCUIT_BREAKER_STRATEGIES and self.circuit_breaker is not False

    @property
    def traffic_step_percent(self) -> float | None:
        return self.step_percent if self.step_percent is not None else DEFAULTS[self.strategy][0]

    @property
    def step_bake(self) -> int | None:
        return self.step_bake_minutes if self.step_bake_minutes is not None else DEFAULTS[self.strategy][1]

    @property
    def final_bake(self) -> int | None:
        return self.bake_minutes if self.bake_minutes is not None else DEFAULTS[self.strategy][2]

    @property
    def traffic_steps(self) -> int:
        """Step bakes before the last shift, counted the way CloudFormation counts them."""
        if self.strategy == "canary":
            return 1
        if self.strategy == "linear":
            percent = self.traffic_step_percent
            assert percent is not None  # linear has a default step
            ratio = 100 / percent
            return round(ratio) - 1 if math.isclose(ratio, round(ratio)) else math.floor(ratio)
        return 0

    @property
    def worst_case_minutes(self) -> int:
        """The bake time a deployment holds both task sets for, at least (without task start-up)."""
        return (self.final_bake or 0) + (self.step_bake or 0) * self.traffic_steps

    def peak_tasks(self, max_tasks: int, max_healthy_percent: int = 200) -> int:
        """Tasks one model runs at most during a deployment at ``max_tasks``.

        Rolling starts up to ``max_healthy_percent`` of the desired count. The other strategies start a full set of
        new tasks behind the second target group while the old set keeps serving, and hold both through the bake.
        """
        if self.shifts_traffic:
            return 2 * max_tasks
        return math.floor(max_tasks * max_healthy_percent / 100)

    def service_options(self) -> dict:
        """Keyword arguments for ``ecs.Ec2Service`` / ``FargateService`` (everything but the alarms)."""
        breaker = ecs.DeploymentCircuitBreaker(enable=True, rollback=True) if self.uses_circuit_breaker else None
        if not self.shifts_traffic:
            return {"circuit_breaker": breaker}
        final_bake, step_bake = self.final_bake, self.step_bake
        assert final_bake is not None  # every strategy that shifts traffic has a default bake time
        options: dict = {
            "circuit_breaker": breaker,
            "deployment_strategy": {
                "canary": ecs.DeploymentStrategy.CANARY,
                "linear": ecs.DeploymentStrategy.LINEAR,
                "blue_green": ecs.DeploymentStrategy.BLUE_GREEN,
            }[self.strategy],
            "bake_time": cdk.Duration.minutes(final_bake),
        }
        if self.strategy in STEP_RANGES:
            assert step_bake is not None  # canary and linear have a default step bake
            shift = ecs.TrafficShiftConfig(step_percent=self.traffic_step_percent, step_bake_time=cdk.Duration.minutes(step_bake))
            options[f"{self.strategy}_configuration"] = shift
        return options


@jsii.implements(cdk.IStableListProducer)
class _Names:
    def __init__(self, names: list[str]) -> None:
        self._names = names

    def produce(self) -> list[str]:
        return list(self._names)


class RollbackAlarmNames:
    """The alarm names a service rolls back on; alarms added later still reach the template.

    (aws-cdk-lib's ``enable_deployment_alarms`` drops the names of a second call: it concatenates into a discarded list.)
    """

    def __init__(self) -> None:
        self.names: list[str] = []
        self.token = cdk.Lazy.list(_Names(self.names))

    def add(self, name: str) -> None:
        self.names.append(name)

    def config(self) -> ecs.DeploymentAlarmConfig:
        return ecs.DeploymentAlarmConfig(alarm_names=self.token, behavior=ecs.AlarmBehavior.ROLLBACK_ON_ALARM)


def _ids(label: str, count: int) -> list[str]:
    """Metric ids unique within any expression that nests this one (CloudWatch ids: lowercase start, [a-z0-9_])."""
    stem = re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
    return [f"m_{stem}_{index}" for index in range(count)]


def sum_over(metrics: Sequence[cloudwatch.Metric], label: str) -> cloudwatch.IMetric:
    """The sum of one metric across target groups (the one metric itself when there is one)."""
    if len(metrics) == 1:
        return metrics[0].with_(label=label)
    names = _ids(label, len(metrics))
    return cloudwatch.MathExpression(
        expression=" + ".join(f"FILL({name}, 0)" for name in names),
        using_metrics=dict(zip(names, metrics, strict=False)),
        period=metrics[0].period,
        label=label,
    )


def worst_of(metrics: Sequence[cloudwatch.Metric | cloudwatch.MathExpression], label: str) -> cloudwatch.IMetric:
    """The highest of one metric across target groups: a percentile of the sum cannot be computed from its parts,
    and the new version's own percentile is what a rollback must see."""
    if len(metrics) == 1:
        return metrics[0].with_(label=label)
    names = _ids(label, len(metrics))
    return cloudwatch.MathExpression(
        expression=f"MAX([{', '.join(names)}])",
        using_metrics=dict(zip(names, metrics, strict=False)),
        period=metrics[0].period,
        label=label,
    )


@dataclass(frozen=True)
class RollbackThresholds:
    """Where one model's built-in rollback alarms trip, each for 3 minutes (RollbackProps says how a model's are
    chosen). Defaults: p95 latency of a target group at or above ``latency_p95_ms`` 500, or ``target_5xx_percent``
    1.0 % of its requests answered 5xx."""

    latency_p95_ms: int = 500
    """The p95 latency of a target group, in ms, at or above which the latency alarm trips, 1-120000. Default: 500."""
    target_5xx_percent: float = 1.0
    """The share of a target group's requests answered 5xx, in percent, at or above which the error alarm trips
    (above 0, at most 100). Default: 1.0."""

    def __post_init__(self) -> None:
        require_range(self.latency_p95_ms, 1, 120_000, "latency_p95_ms")
        require(0 < self.target_5xx_percent <= 100, "target_5xx_percent", f"{self.target_5xx_percent} is out of range; a percentage above 0, at most 100")

    def check_above_scaling(self, scaling_latency_p95_ms: int, key: str = "latency_p95_ms") -> None:
        """A rollback p95 below the model's scaling target would roll back versions for latency the model is
        configured to run at: the service only adds tasks once p95 passes that target."""
        ROLLBACK_LATENCY.check(self.latency_p95_ms, scaling_latency_p95_ms, key)


# A version still this many times slower than the model's latency goal after scaling had its say is slow, not busy.
ROLLBACK_LATENCY_FACTOR = 2
ROLLBACK_LATENCY = GoalMultiple(ROLLBACK_LATENCY_FACTOR, "every release would roll back under load it is sized for",
                                f"{ROLLBACK_LATENCY_FACTOR} x scaling.latency_p95_ms")


@dataclass(frozen=True)
class RollbackProps:
    """One model's rollback thresholds (``rollback`` in its cdk.json block). ``latency_p95_ms`` defaults to
    ``ROLLBACK_LATENCY_FACTOR`` x the model's own ``scaling.latency_p95_ms`` and may not be below that target;
    ``target_5xx_percent`` defaults to the environment's ``monitoring.target_5xx_percent`` (1 % in the library)."""

    latency_p95_ms: int | None = None
    """:attr:`RollbackThresholds.latency_p95_ms` for this model, at least its ``scaling.latency_p95_ms``. Default: None (computed: ``ROLLBACK_LATENCY_FACTOR`` (2) x the model's
    ``scaling.latency_p95_ms``)."""
    target_5xx_percent: float | None = None
    """:attr:`RollbackThresholds.target_5xx_percent` for this model. Default: None (the environment's
    ``monitoring.target_5xx_percent``; 1.0 in the library)."""

    def __post_init__(self) -> None:
        RollbackThresholds(**{k: v for k, v in vars(self).items() if v is not None})  # the same ranges

    def thresholds(self, scaling_latency_p95_ms: int, target_5xx_percent: float = RollbackThresholds.target_5xx_percent) -> RollbackThresholds:
        latency = ROLLBACK_LATENCY.or_default(self.latency_p95_ms, scaling_latency_p95_ms)
        errors = self.target_5xx_percent if self.target_5xx_percent is not None else target_5xx_percent
        thresholds = RollbackThresholds(latency_p95_ms=latency, target_5xx_percent=errors)
        thresholds.check_above_scaling(scaling_latency_p95_ms)
        return thresholds


class RollbackAlarms(Construct):
    """The built-in rollback alarms of one model, each watching every target group the model serves from, so a
    canary's errors count however little traffic it has (``target_groups``: the TargetGroupMetrics of each). Attribute ``alarms``: name (``BUILT_IN_ALARMS``) -> Alarm."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_name: str,
        target_groups: Sequence[TargetGroupMetrics],
        thresholds: RollbackThresholds,
        enabled: Sequence[str] = BUILT_IN_ALARMS,
    ) -> None:
        super().__init__(scope, construct_id)
        minute = cdk.Duration.minutes(1)
        per_group_rates = [
            cloudwatch.MathExpression(
                expression=f"IF(FILL(requests_{index}, 0) > 0, 100 * FILL(errors_{index}, 0) / requests_{index}, 0)",
                using_metrics={
                    f"errors_{index}": tg.http_code_target(elbv2.HttpCodeTarget.TARGET_5XX_COUNT, period=minute, statistic="Sum"),
                    f"requests_{index}": tg.request_count(period=minute, statistic="Sum"),
                },
                period=minute,
                label=f"{model_name} target 5xx % ({index})",
            )
            for index, tg in enumerate(target_groups)
        ]
        latencies = [tg.target_response_time(statistic="p95", period=minute) for tg in target_groups]
        definitions = {
            "target_5xx_rate": (
                worst_of(per_group_rates, f"{model_name} target 5xx % (worst target group)"),
                thresholds.target_5xx_percent,
                f"{model_name}: more than {thresholds.target_5xx_percent}% of a target group's requests answered 5xx for "
                f"{ALARM_MINUTES} minutes; rolls back a deployment in progress",
            ),
            "latency_p95": (
                worst_of(latencies, f"{model_name} p95 (worst target group)"),
                thresholds.latency_p95_ms / 1000,
                f"{model_name}: p95 latency of a target group above {thresholds.latency_p95_ms} ms for {ALARM_MINUTES} "
                "minutes; rolls back a deployment in progress",
            ),
        }
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        for name in enabled:
            metric, threshold, description = definitions[name]
            self.alarms[name] = cloudwatch.Alarm(
                self,
                name.replace("_", "-"),
                metric=metric,
                threshold=threshold,
                evaluation_periods=ALARM_MINUTES,
                datapoints_to_alarm=ALARM_MINUTES,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=description,
            )
