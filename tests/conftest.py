"""Shared fixtures: the app synthesized once per test session, with cdk.json's own context."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HASH = re.compile(r"[0-9a-f]{64}")


def cdk_context() -> dict:
    """The context `cdk synth` sees: cdk.json's, feature flags included (cdk.App() in a test does not read it)."""
    return json.loads((ROOT / "cdk.json").read_text())["context"]


@dataclass
class Synthesized:
    app: object
    stages: dict  # environment name -> InferenceStage
    outdir: Path
    templates: dict  # (environment, stack id) -> template dict

    def template(self, environment: str, stack: str) -> dict:
        return self.templates[(environment, stack)]

    def template_paths(self) -> list[Path]:
        return sorted(self.outdir.glob("assembly-*/*.template.json"))


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory) -> Synthesized:
    import aws_cdk as cdk

    from stacks.config import load_environments
    from stacks.stage import InferenceStage

    outdir = tmp_path_factory.mktemp("cdk.out")
    context = cdk_context()
    app = cdk.App(context=context, outdir=str(outdir))
    stages = {config.name: InferenceStage(app, config) for config in load_environments(context)}
    app.synth()
    templates = {}
    for name, stage in stages.items():
        assembly = stage.synth()
        for stack in assembly.stacks:
            stack_id = stack.hierarchical_id.split("/")[-1]
            templates[(name, stack_id)] = stack.template
    return Synthesized(app, stages, outdir, templates)


def normalise_hashes(value):
    """Asset hashes change with any source edit: replace them so snapshots show real changes only."""
    return json.loads(HASH.sub("<hash>", json.dumps(value)))


def metric_stats(properties):
    """(namespace, name, statistic) of every metric an alarm reads (one per target group for ALB target metrics)."""
    if "MetricName" in properties:
        return [(properties["Namespace"], properties["MetricName"], properties.get("ExtendedStatistic") or properties["Statistic"])]
    return [(m["MetricStat"]["Metric"]["Namespace"], m["MetricStat"]["Metric"]["MetricName"], m["MetricStat"]["Stat"])
            for m in properties["Metrics"] if "MetricStat" in m]


def single_metric(properties):
    """(namespace, name, statistic, dimensions, period) of an alarm's one metric, in either template form."""
    if "MetricName" in properties:
        statistic = properties.get("ExtendedStatistic") or properties["Statistic"]
        return properties["Namespace"], properties["MetricName"], statistic, properties.get("Dimensions", []), properties["Period"]
    (metric,) = [m for m in properties["Metrics"] if "MetricStat" in m]
    stat = metric["MetricStat"]
    return stat["Metric"]["Namespace"], stat["Metric"]["MetricName"], stat["Stat"], stat["Metric"].get("Dimensions", []), stat["Period"]
