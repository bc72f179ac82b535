"""A model's deployment and rollback props: the strategy, its traffic steps and bake times, and where its built-in
rollback alarms trip. Plain data and checks (no aws_cdk), read by the constructs and the sizing advisor alike; the
alarms themselves are deployment.py's."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from .alarm_thresholds import ERROR_RATE_PERCENT, ROLLBACK_LATENCY_FACTOR, ROLLBACK_LATENCY_P95_MS
from .alarm_thresholds import ROLLBACK_MINUTES as ALARM_MINUTES
from .errors import require, require_range
from .latency_goal import GoalMultiple

Strategy = Literal["rolling", "canary", "linear", "blue_green"]
BUILT_IN_ALARMS = ("target_5xx_rate", "latency_p95")
# ALARM_MINUTES: the built-in rollback alarms breach after this many one-minute periods; a bake shorter than that
# ends before they can fire, so traffic would move on (or the old tasks stop) with the alarm still evaluating.
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
        require(
            self.strategy in DEFAULTS,
            "strategy",
            f"{self.strategy!r} is not a strategy; use one of: {', '.join(DEFAULTS)}",
        )
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
            require(
                math.isclose(percent * 10, round(percent * 10)), "step_percent", f"{percent} must be a multiple of 0.1"
            )
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
        require(
            not unknown,
            "rollback_alarms",
            f"{unknown} are not built-in alarms; use any of: {', '.join(BUILT_IN_ALARMS)}",
        )
        require(len(set(self.rollback_alarms)) == len(self.rollback_alarms), "rollback_alarms", "lists an alarm twice")
        for index, name in enumerate(self.alarm_names):
            require(
                0 < len(name) <= 255,
                f"alarm_names[{index}]",
                f"{name!r} is not a CloudWatch alarm name (1 to 255 characters)",
            )
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


@dataclass(frozen=True)
class RollbackThresholds:
    """Where one model's built-in rollback alarms trip, each for 3 minutes (RollbackProps says how a model's are
    chosen; every number is alarm_thresholds.py's). Defaults: p95 latency of a target group at or above
    ``latency_p95_ms`` 500, or ``target_5xx_percent`` 1.0 % of its requests answered 5xx."""

    latency_p95_ms: int = ROLLBACK_LATENCY_P95_MS
    """The p95 latency of a target group, in ms, at or above which the latency alarm trips, 1-120000. Default: 500."""
    target_5xx_percent: float = ERROR_RATE_PERCENT
    """The share of a target group's requests answered 5xx, in percent, at or above which the error alarm trips
    (above 0, at most 100). Default: 1.0."""

    def __post_init__(self) -> None:
        require_range(self.latency_p95_ms, 1, 120_000, "latency_p95_ms")
        require(
            0 < self.target_5xx_percent <= 100,
            "target_5xx_percent",
            f"{self.target_5xx_percent} is out of range; a percentage above 0, at most 100",
        )

    def check_above_scaling(self, scaling_latency_p95_ms: int, key: str = "latency_p95_ms") -> None:
        """A rollback p95 below the model's scaling target would roll back versions for latency the model is
        configured to run at: the service only adds tasks once p95 passes that target."""
        ROLLBACK_LATENCY.check(self.latency_p95_ms, scaling_latency_p95_ms, key)


ROLLBACK_LATENCY = GoalMultiple(
    ROLLBACK_LATENCY_FACTOR,
    "every release would roll back under load it is sized for",
    f"{ROLLBACK_LATENCY_FACTOR} x scaling.latency_p95_ms",
)


@dataclass(frozen=True)
class RollbackProps:
    """One model's rollback thresholds (``rollback`` in its cdk.json block). ``latency_p95_ms`` defaults to
    ``ROLLBACK_LATENCY_FACTOR`` x the model's own ``scaling.latency_p95_ms`` and may not be below that target;
    ``target_5xx_percent`` defaults to the environment's ``monitoring.target_5xx_percent`` (1 % in the library)."""

    latency_p95_ms: int | None = None
    """:attr:`RollbackThresholds.latency_p95_ms` for this model, at least its ``scaling.latency_p95_ms``. Default: None
    (computed: ``ROLLBACK_LATENCY_FACTOR`` (2) x the model's ``scaling.latency_p95_ms``)."""
    target_5xx_percent: float | None = None
    """:attr:`RollbackThresholds.target_5xx_percent` for this model. Default: None (the environment's
    ``monitoring.target_5xx_percent``; 1.0 in the library)."""

    def __post_init__(self) -> None:
        RollbackThresholds(**{k: v for k, v in vars(self).items() if v is not None})  # the same ranges

    def thresholds(
        self, scaling_latency_p95_ms: int, target_5xx_percent: float = RollbackThresholds.target_5xx_percent
    ) -> RollbackThresholds:
        latency = ROLLBACK_LATENCY.or_default(self.latency_p95_ms, scaling_latency_p95_ms)
        errors = self.target_5xx_percent if self.target_5xx_percent is not None else target_5xx_percent
        thresholds = RollbackThresholds(latency_p95_ms=latency, target_5xx_percent=errors)
        thresholds.check_above_scaling(scaling_latency_p95_ms)
        return thresholds
