"""When the first scale-out decision falls after a load step, read from a synthesized template.

Every scale-out path of a service is simulated as AWS runs it: an alarm (its period, evaluation periods and
datapoints to alarm) on a metric that starts to breach some seconds after the step (when its publisher first
reports it), evaluated at the end of each period once the datapoint has arrived, and the step policy it invokes
(its adjustment and cooldown). Target tracking policies have no alarm in the template: Application Auto Scaling
creates it (modelled as 60 s periods, 3 of 3: an estimate, see TARGET_TRACKING). A 3 x load step saturates every
task, so each signal is past its threshold from its first sample after the step, at its largest step adjustment.
The step lands at every phase of the period boundaries (second by second): the report gives the best and the
worst case. ``python -m gpu_inference_constructs.sizing.scale_out TEMPLATE.json ...`` prints the report.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import metric_names

# Seconds from the step until a publisher's first sample that shows it, and until CloudWatch has the datapoint.
# Each figure: (seconds, where it comes from).
PUBLISH_DELAY = {
    "server-signal": (5.0, "measured here: SIGNAL_INTERVAL_S, the model process's QueueDepth document every 5 s"),
    "server": (10.0, "measured here: METRICS_INTERVAL_S, every server document every 10 s"),
    "alb": (60.0, "AWS-documented: ELB publishes its metrics in 60-second intervals (ALB CloudWatch metrics)"),
    "ecs": (60.0, "AWS-documented: ECS service CPU is a 1-minute metric unless high resolution is configured"),
}
INGEST_DELAY = (10.0, "estimated: CloudWatch Logs EMF extraction and metric availability (no documented bound)")
TARGET_TRACKING = {
    "period_s": 60,
    "evaluation_periods": 3,
    "datapoints_to_alarm": 3,
    "source": "estimated: the scale-out alarm Application Auto Scaling creates for target tracking "
    "(seen as 3 datapoints of 60 s; not documented as a contract)",
}


@dataclass(frozen=True)
class ScaleOutPath:
    name: str  # the policy's logical ID
    kind: str  # "step" or "target-tracking"
    period_s: int
    evaluation_periods: int
    datapoints_to_alarm: int
    publisher: str  # a PUBLISH_DELAY key
    adjustment: str  # what the first decision adds
    cooldown_s: int
    statistic: str  # Maximum: a period with one breaching sample breaches; others need the whole period

    def decision_s(self, phase_s: float) -> float:
        """Seconds from the step to the alarm (and so the policy), period boundaries at phase_s + k * period."""
        onset = PUBLISH_DELAY[self.publisher][0]
        ingest = INGEST_DELAY[0]
        partial_counts = self.statistic == "Maximum"
        start = phase_s - self.period_s * math.ceil(phase_s / self.period_s)  # the boundary at or before 0
        breaching: list[bool] = []
        while True:
            end = start + self.period_s
            breaching.append(end > onset if partial_counts else start >= onset)
            window = breaching[-self.evaluation_periods :]
            if end >= 0 and sum(window) >= self.datapoints_to_alarm:
                return end + ingest
            start = end

    def range_s(self) -> tuple[float, float]:
        cases = [self.decision_s(phase) for phase in range(self.period_s)]
        return min(cases), max(cases)


def _resolve(template: dict, value: Any) -> str | None:
    return value.get("Ref") if isinstance(value, dict) else None


def _publisher(namespace: str | None, metric: str | None, period_s: int) -> str:
    if namespace == metric_names.NAMESPACE:
        return "server-signal" if metric == metric_names.QUEUE_DEPTH and period_s < 60 else "server"
    if namespace == "AWS/ApplicationELB":
        return "alb"
    return "ecs"


def _alarm_metric(alarm: dict) -> tuple[int, str | None, str | None, str]:
    """(period, namespace, metric name, statistic): the slowest metric of a math alarm."""
    if "Period" in alarm:
        return (
            int(alarm["Period"]),
            alarm.get("Namespace"),
            alarm.get("MetricName"),
            alarm.get("Statistic") or alarm.get("ExtendedStatistic") or "Average",
        )
    stats = [q["MetricStat"] for q in alarm.get("Metrics", []) if "MetricStat" in q]
    slowest = max(stats, key=lambda stat: (stat["Period"], stat["Metric"].get("Namespace") != metric_names.NAMESPACE))
    return (
        int(slowest["Period"]),
        slowest["Metric"].get("Namespace"),
        slowest["Metric"].get("MetricName"),
        "Math" if len(stats) > 1 else slowest["Stat"],
    )


def scale_out_paths(template: dict) -> list[ScaleOutPath]:
    resources = template.get("Resources", {})
    paths = []
    for alarm in resources.values():
        if alarm["Type"] != "AWS::CloudWatch::Alarm":
            continue
        props = alarm["Properties"]
        for action in props.get("AlarmActions", []):
            policy_id = _resolve(template, action)
            policy = resources.get(policy_id or "", {})
            step = policy.get("Properties", {}).get("StepScalingPolicyConfiguration")
            if policy_id is None or policy.get("Type") != "AWS::ApplicationAutoScaling::ScalingPolicy" or not step:
                continue
            adjustments = [a["ScalingAdjustment"] for a in step["StepAdjustments"]]
            if max(adjustments) <= 0:
                continue  # a scale-in policy
            period, namespace, metric, statistic = _alarm_metric(props)
            paths.append(
                ScaleOutPath(
                    policy_id,
                    "step",
                    period,
                    int(props["EvaluationPeriods"]),
                    int(props.get("DatapointsToAlarm", props["EvaluationPeriods"])),
                    _publisher(namespace, metric, period),
                    f"+{max(adjustments)} tasks",
                    int(step.get("Cooldown", 300)),
                    statistic,
                )
            )
    for policy_id, policy in resources.items():
        config = policy.get("Properties", {}).get("TargetTrackingScalingPolicyConfiguration")
        if policy["Type"] != "AWS::ApplicationAutoScaling::ScalingPolicy" or not config:
            continue
        predefined = config.get("PredefinedMetricSpecification", {}).get("PredefinedMetricType", "")
        namespace = (
            "AWS/ApplicationELB" if predefined.startswith("ALB") or "RequestCount" in json.dumps(config) else None
        )
        paths.append(
            ScaleOutPath(
                policy_id,
                "target-tracking",
                TARGET_TRACKING["period_s"],
                TARGET_TRACKING["evaluation_periods"],
                TARGET_TRACKING["datapoints_to_alarm"],
                _publisher(namespace, None, 60),
                "desired x (metric / target): 3 x the tasks",
                int(config.get("ScaleOutCooldown", 300)),
                "Sum",
            )
        )
    return paths


@dataclass(frozen=True)
class Decision:
    path: ScaleOutPath
    best_s: float
    worst_s: float


def first_decisions(template: dict) -> list[Decision]:
    """Every scale-out path, fastest worst case first."""
    decisions = [Decision(path, *path.range_s()) for path in scale_out_paths(template)]
    return sorted(decisions, key=lambda d: (d.worst_s, d.best_s))


def report(name: str, template: dict) -> str:
    decisions = first_decisions(template)
    lines = [
        f"{name}: a 3 x load step; first scale-out decision (seconds after the step, best-worst over the phase "
        f"of the period boundaries)"
    ]
    for d in decisions:
        p = d.path
        lines.append(
            f"  {d.best_s:5.0f}-{d.worst_s:<5.0f} {p.name} ({p.kind}: {p.period_s} s x {p.datapoints_to_alarm} "
            f"of {p.evaluation_periods}, {p.statistic}, published by {p.publisher}) {p.adjustment}, "
            f"cooldown {p.cooldown_s} s"
        )
    if decisions:
        lines.append(f"  first decision: {decisions[0].worst_s:.0f} s at worst ({decisions[0].path.name})")
    lines.append(
        "  delays: "
        + "; ".join(f"{key} {value[0]:g} s ({value[1]})" for key, value in PUBLISH_DELAY.items())
        + f"; ingestion {INGEST_DELAY[0]:g} s ({INGEST_DELAY[1]}); target tracking: {TARGET_TRACKING['source']}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    paths = argv if argv is not None else sys.argv[1:]
    if not paths:
        print("usage: python -m gpu_inference_constructs.sizing.scale_out TEMPLATE.json ...", file=sys.stderr)
        return 2
    for path in paths:
        print(report(Path(path).name, json.loads(Path(path).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
