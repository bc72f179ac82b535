"""A 3 x load step through each environment's synthesized scale-out alarms and policies (periods, evaluation
periods, datapoints to alarm, step adjustments, cooldowns, as the template says): when the first scale-out decision
falls. `python -m gpu_inference_constructs.sizing.scale_out cdk.out/assembly-*/*.template.json` prints the same."""

from __future__ import annotations

import copy

import pytest

from gpu_inference_constructs.sizing.scale_out import ScaleOutPath, first_decisions, report, scale_out_paths
from tests.infra.conftest import ENVIRONMENTS

PROD_FIRST_DECISION_S = 60  # issue 22


@pytest.fixture(scope="module")
def templates(synthesized):
    return {environment: synthesized.inference_template(environment) for environment in ENVIRONMENTS}


def test_every_environment_scales_out_on_the_high_resolution_queue_signal_first(templates):
    for environment, template in templates.items():
        print(report(environment, template))
        first = first_decisions(template)[0]
        assert "QueueBacklog" in first.path.name, environment
        assert (first.path.period_s, first.path.evaluation_periods, first.path.datapoints_to_alarm) == (10, 3, 3)
        assert first.path.publisher == "server-signal"


def test_prod_decides_within_60_seconds_of_a_3x_step_at_every_phase(templates):
    first = first_decisions(templates["prod"])[0]
    assert first.worst_s <= PROD_FIRST_DECISION_S, report("prod", templates["prod"])


def test_the_simulation_reads_the_alarms_and_a_one_minute_template_misses_the_target(templates):
    slow = copy.deepcopy(templates["prod"])
    for resource in slow["Resources"].values():
        props = resource.get("Properties", {})
        if resource["Type"] != "AWS::CloudWatch::Alarm":
            continue
        for query in props.get("Metrics", []):  # the alarms before issue 22: one-minute periods
            if query.get("MetricStat", {}).get("Period") == 10:
                query["MetricStat"]["Period"] = 60
    assert first_decisions(slow)[0].worst_s > PROD_FIRST_DECISION_S


def test_step_and_target_tracking_paths_are_all_found(templates):
    kinds = {(path.kind, path.publisher) for path in scale_out_paths(templates["prod"])}
    assert {("step", "server-signal"), ("step", "alb"), ("step", "server"), ("target-tracking", "alb")} <= kinds


def test_decision_timing_by_hand():
    # 10 s periods, 3 of 3, Maximum, first sample 5 s after the step, 10 s ingestion: with a boundary at the step,
    # periods [0,10) [10,20) [20,30) all breach: alarm at 30 + 10.
    path = ScaleOutPath("p", "step", 10, 3, 3, "server-signal", "+2 tasks", 60, "Maximum")
    assert path.decision_s(0) == 40
    # A boundary 3 s after the step: [-7,3) ends before the first sample, so [3,13) [13,23) [23,33): 33 + 10.
    assert path.decision_s(3) == 43
    # The worst: a boundary 5 s after the step, just when the first sample lands; the best: 6 s after.
    assert path.range_s() == (36, 45)
    average = ScaleOutPath("p", "step", 60, 2, 2, "alb", "+1", 60, "Average")
    assert average.decision_s(0) == 60 + 120 + 10  # whole periods after the first ALB sample at 60 s
