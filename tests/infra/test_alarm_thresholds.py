"""Issue 56: one home for where alarms trip (core/alarm_thresholds.py), the paging alarms' and the rollback alarms'.
No alarm in the library or the app states its own periods, and no props class restates a 5xx default: a second
definition would drift from the first (the rollback's 5xx default and the environment's were two 1.0s). The docs'
tables say what the home says."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import gpu_inference_constructs
from gpu_inference_constructs.core import alarm_thresholds as home
from gpu_inference_constructs.core.deployment_props import RollbackThresholds
from gpu_inference_constructs.core.monitoring_props import MonitoringProps
from gpu_inference_constructs.core.scaling_props import ModelScalingProps
from tests.conftest import ROOT

LIBRARY = Path(gpu_inference_constructs.__file__).parent
HOME = LIBRARY / "core" / "alarm_thresholds.py"
# Calls that make an alarm, and their keywords that say how long a breach lasts.
ALARM_CALLS = {"ServerAlarm", "Alarm", "_alarm", "create_alarm"}
DURATION_KEYWORDS = {"periods", "evaluation_periods", "datapoints_to_alarm"}
# Props fields whose default is an alarm threshold the home defines: any 5xx share; a latency in a thresholds class
# (ModelScalingProps.latency_p95_ms is the model's goal, not a threshold).
RATE_FIELD = re.compile(r"_5xx_percent$")
LATENCY_FIELD, THRESHOLDS_CLASS = re.compile(r"^latency_p9[59]_ms$"), re.compile(r"(Thresholds|Alarm\w*Props)$")


def called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def second_definitions(paths: list[Path]) -> list[str]:
    """Each alarm call that states its periods as a number, and each props field whose threshold default is a number,
    outside the home: ``<file>:<line> <what>``."""
    found = []
    for path in paths:
        if path == HOME:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and called_name(node) in ALARM_CALLS:
                found += [
                    f"{path.name}:{node.lineno} {keyword.arg}={keyword.value.value}"
                    for keyword in node.keywords
                    if keyword.arg in DURATION_KEYWORDS
                    and isinstance(keyword.value, ast.Constant)
                    and isinstance(keyword.value.value, int)
                ]
            elif isinstance(node, ast.ClassDef):
                found += [
                    f"{path.name}:{field.lineno} {node.name}.{field.target.id} = {field.value.value}"
                    for field in node.body
                    if isinstance(field, ast.AnnAssign)
                    and isinstance(field.target, ast.Name)
                    and (
                        RATE_FIELD.search(field.target.id)
                        or (LATENCY_FIELD.match(field.target.id) and THRESHOLDS_CLASS.search(node.name))
                    )
                    and isinstance(field.value, ast.Constant)
                    and isinstance(field.value.value, (int, float))
                ]
    return sorted(found)


def test_no_alarm_states_its_own_periods_and_no_props_restate_a_threshold():
    paths = sorted(LIBRARY.rglob("*.py")) + sorted((ROOT / "stacks").glob("*.py"))
    assert second_definitions([p for p in paths if "server_image" not in p.parts]) == []


def test_the_scan_finds_planted_second_definitions(tmp_path):
    planted = tmp_path / "alarms.py"
    planted.write_text(
        "from dataclasses import dataclass\n"
        "ServerAlarm('Queue', 'QueueDepth', 'Maximum', threshold=200, periods=3, description='')\n"
        "alarm = cloudwatch.Alarm(scope, 'A', metric=m, threshold=1, evaluation_periods=5, datapoints_to_alarm=5)\n"
        "group._alarm('B', m, 1, 'b', periods=PAGING_MINUTES)\n"
        "@dataclass\nclass Props:\n    target_5xx_percent: float = 1.0\n    latency_p95_ms: int | None = None\n"
        "@dataclass\nclass RollbackThresholds:\n    latency_p95_ms: int = 500\n"
        "@dataclass\nclass ScalingProps:\n    latency_p95_ms: int = 250\n"
    )
    assert second_definitions([planted]) == [
        "alarms.py:11 RollbackThresholds.latency_p95_ms = 500",
        "alarms.py:2 periods=3",
        "alarms.py:3 datapoints_to_alarm=5",
        "alarms.py:3 evaluation_periods=5",
        "alarms.py:7 Props.target_5xx_percent = 1.0",
    ]


def test_the_props_defaults_are_the_homes():
    assert MonitoringProps().target_5xx_percent == MonitoringProps().elb_5xx_percent == home.ERROR_RATE_PERCENT
    assert RollbackThresholds().target_5xx_percent == home.ERROR_RATE_PERCENT
    assert RollbackThresholds().latency_p95_ms == home.ROLLBACK_LATENCY_FACTOR * ModelScalingProps().latency_p95_ms


def alarm_rows() -> dict[str, str]:
    """docs/scaling-and-alarms.md's alarm table: the alarm's name (without ``<model>-``) -> its row."""
    page = (ROOT / "docs" / "scaling-and-alarms.md").read_text()
    return {match[1]: match[0] for match in re.finditer(r"^\| `(?:<model>-)?(\w+)` \|.*$", page, re.M)}


def test_the_docs_alarm_table_says_what_the_home_says():
    rows = alarm_rows()
    minutes, rate = home.PAGING_MINUTES, f"{home.ERROR_RATE_PERCENT:g} %"
    for name in ("LatencyP95", "LatencyP99"):
        assert f"{minutes} × 1 min" in rows[name], name
    assert f"{home.PAGING_P95_FACTOR} × the model's `scaling.latency_p95_ms`" in rows["LatencyP95"]
    assert f"{home.PAGING_P99_FACTOR} × that p95" in rows["LatencyP99"]
    for name in ("Target5xxRate", "Elb5xxRate"):
        assert f"{minutes} min" in rows[name] and rate in rows[name], name
    for name in ("QueueDepth", "GpuMemory"):
        assert f"max, {minutes} min" in rows[name], name
    assert f"per min, {home.SHED_MINUTES} min" in rows["RejectedRequests"]


def test_the_docs_rollback_paragraph_says_what_the_home_says():
    page = re.sub(r"\s+", " ", (ROOT / "docs" / "deploying.md").read_text())
    assert f"a bake time under the alarms' {home.ROLLBACK_MINUTES} minutes" in page
    assert f"{home.ROLLBACK_LATENCY_P95_MS} ms for the encoders" in page
    assert home.ROLLBACK_LATENCY_FACTOR == 2 and "p95 at twice its `scaling.latency_p95_ms`" in page
