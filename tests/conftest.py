"""Shared fixtures: the app synthesized once per test session with the tests' own environments
(tests/scenario_environments.json) and cdk.json's feature flags, and the app as cdk.json configures it (tests/app)."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# CDK's built-in CloudFormation validation (on in `cdk synth`, as users run it) loads for about 2.6 s in every
# process that synthesizes and then reads every template again (about 7 of the 19 s of a 50-model app). The suite
# runs it where it proves something (validated_app below): on the app it synthesizes once per session (tests/app checks
# its report), on every README and library-page example, and on a planted defect; every other synthesis, in this
# process or a `cdk synth` it starts, goes without.
# Set before aws_cdk is imported: the Node.js process that synthesizes reads it from the environment it starts with.
os.environ.setdefault("CDK_VALIDATION", "false")
VALIDATION_REPORT = "validation-report.json"


# The files that take a minute or more of one worker (pytest --durations on 2 cores), first: make test's parallel run
# hands out files in collection order, and one of these started last leaves the other worker idle until it ends.
LONGEST_FIRST = (
    "tests/e2e/test_task_definition_runs_the_server.py",
    "tests/app/test_checks.py",  # cfn-lint and checkov
    "tests/server/supervisor/test_workers.py",
    "tests/server/tools/test_image.py",
)


# make test's timing and background runs collect only the test files that contain their marker's text (Makefile:
# TIMING_FILES, BACKGROUND_FILES), not all 1,600 tests to select a few (8 s of collection); a marked test in a file
# without the text would never run, so collecting one fails the session (tests_hidden_from_their_run).
LANE_MARKERS = ("timing", "background")


def mark_text(marker: str) -> str:
    return f"pytest.mark.{marker}"


def tests_hidden_from_their_run(items) -> list[str]:
    """``marker: file`` for each file of ``items`` with a test marked one of LANE_MARKERS that lacks its text."""
    marked = {(Path(item.path), marker) for item in items for marker in LANE_MARKERS if item.get_closest_marker(marker)}
    return sorted(
        f"{os.path.relpath(path, ROOT)} marks tests `{marker}` without the text {mark_text(marker)!r}"
        for path, marker in marked
        if mark_text(marker) not in path.read_text()
    )


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects the marked tests from the parallel run
def pytest_collection_modifyitems(items):
    hidden = tests_hidden_from_their_run(items)
    if hidden:
        raise pytest.UsageError(
            f"{'; '.join(hidden)}, so make test's run for it never collects them: write the "
            f"marker as @pytest.mark.<name> or in pytestmark"
        )
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(os.path.relpath(item.path, ROOT), len(rank)))


def documentation_files(root: Path = ROOT) -> list[Path]:
    """The project's markdown pages: the READMEs and docs/."""
    names = ["README.md", "constructs/README.md", "bench/README.md", "inference_image/README.md"]
    return [root / name for name in names] + sorted((root / "docs").glob("*.md"))


def cdk_context() -> dict:
    """The context `cdk synth` sees: cdk.json's, feature flags included (cdk.App() in a test does not read it).
    Only the tests of the app as configured (tests/app) read it; every other test takes scenario_context()."""
    return json.loads((ROOT / "cdk.json").read_text())["context"]


def scenario_context() -> dict:
    """cdk.json's context with the tests' own environments in place of cdk.json's: a team that edits its
    environments breaks only tests/app. The feature flags stay cdk.json's, as `cdk synth` sees them."""
    from tests.scenarios import scenario_environments

    return {**cdk_context(), "environments": scenario_environments()}


@dataclass
class Synthesized:
    app: object
    stages: dict  # environment name -> InferenceStage
    outdir: Path
    templates: dict  # (environment, stack id) -> template dict
    stack_names: dict  # (environment, stack id) -> CloudFormation stack name

    def template(self, environment: str, stack: str) -> dict:
        return self.templates[(environment, stack)]

    def stack_ids(self, environment: str) -> list[str]:
        return [stack for env, stack in self.templates if env == environment]

    def inference_template(self, environment: str) -> dict:
        """The shared stack and every model stack as one template (see merge_templates)."""
        return merge_templates(
            {
                self.stack_names[(environment, s)]: self.template(environment, s)
                for s in self.stack_ids(environment)
                if s != "Network"
            }
        )

    def template_paths(self) -> list[Path]:
        return sorted(self.outdir.glob("assembly-*/*.template.json"))


@functools.cache
def _cloudformation_validation():
    """One CloudFormationValidatePlugin a process, as CDK keeps one for its default: each instance loads its engine
    again, about 3 s and 200 MB of the Node.js process's heap (fifteen filled a worker's 4 GB, and it stalled)."""
    import aws_cdk as cdk

    return cdk.CloudFormationValidatePlugin()


def validated_app(**props):
    """A cdk.App that runs CDK's CloudFormation validation (CloudFormationValidatePlugin) whatever CDK_VALIDATION
    says; its findings are in ``outdir``/validation-report.json (cloudformation_validation_findings)."""
    import aws_cdk as cdk

    app = cdk.App(**props)
    cdk.Validations.of(app).add_plugins(_cloudformation_validation())
    return app


def cloudformation_validation_findings(outdir: Path) -> list[str]:
    """'<rule> <construct path>: <description>' for each finding of CDK's CloudFormation validation in ``outdir``'s
    report, and its failure or crash (a plugin that ran and found nothing has no entry; with no plugin's entry at all
    there is no report)."""
    import aws_cdk as cdk

    report = outdir / VALIDATION_REPORT
    if not report.exists():
        return []
    found = []
    for plugin in json.loads(report.read_text())["pluginReports"]:
        if plugin["pluginName"] != cdk.CloudFormationValidatePlugin.PLUGIN_NAME:
            continue
        found += [
            f"{v['ruleName']} {c['constructPath']}: {v['description']}"
            for v in plugin["violations"]
            for c in v["violatingConstructs"]
        ]
        if (plugin.get("metadata") or {}).get("error"):
            found.append(f"the plugin failed: {plugin['metadata']['error']}")
        elif plugin.get("conclusion") == "failure" and not plugin["violations"]:
            found.append("the plugin concluded failure without a finding")
    return found


def synthesize(context: dict, outdir: Path) -> Synthesized:
    """Every environment of ``context`` as `cdk synth` builds it, CDK's CloudFormation validation included, into
    ``outdir``."""
    from stacks.config import load_environments
    from stacks.stage import InferenceStage

    app = validated_app(context=context, outdir=str(outdir))
    stages = {config.name: InferenceStage(app, config) for config in load_environments(context)}
    app.synth()
    templates, stack_names = {}, {}
    for name, stage in stages.items():
        assembly = stage.synth()
        for stack in assembly.stacks:
            stack_id = stack.hierarchical_id.split("/")[-1]
            templates[(name, stack_id)] = stack.template
            stack_names[(name, stack_id)] = stack.stack_name
    return Synthesized(app, stages, outdir, templates, stack_names)


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory) -> Synthesized:
    """The app with the tests' own environments (scenario_context), once per session."""
    return synthesize(scenario_context(), tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def app_synthesized(request, tmp_path_factory) -> Synthesized:
    """The app as cdk.json configures it: the session's synthesis while cdk.json's environments are the tests' own
    (this repository's), else cdk.json's synthesized on its own."""
    context = cdk_context()
    if context == scenario_context():
        return request.getfixturevalue("synthesized")
    return synthesize(context, tmp_path_factory.mktemp("app-cdk.out"))


def metric_stats(properties):
    """(namespace, name, statistic) of every metric an alarm reads (one per target group for ALB target metrics)."""
    if "MetricName" in properties:
        return [
            (
                properties["Namespace"],
                properties["MetricName"],
                properties.get("ExtendedStatistic") or properties["Statistic"],
            )
        ]
    return [
        (m["MetricStat"]["Metric"]["Namespace"], m["MetricStat"]["Metric"]["MetricName"], m["MetricStat"]["Stat"])
        for m in properties["Metrics"]
        if "MetricStat" in m
    ]


def single_metric(properties):
    """(namespace, name, statistic, dimensions, period) of an alarm's one metric, in either template form."""
    if "MetricName" in properties:
        statistic = properties.get("ExtendedStatistic") or properties["Statistic"]
        return (
            properties["Namespace"],
            properties["MetricName"],
            statistic,
            properties.get("Dimensions", []),
            properties["Period"],
        )
    (metric,) = [m for m in properties["Metrics"] if "MetricStat" in m]
    stat = metric["MetricStat"]
    return (
        stat["Metric"]["Namespace"],
        stat["Metric"]["MetricName"],
        stat["Stat"],
        stat["Metric"].get("Dimensions", []),
        stat["Period"],
    )


def merge_templates(templates: dict) -> dict:
    """Several stacks' templates (by stack name) as one, each cross-stack reference between them resolved to what it
    points at.

    The model stacks keep the logical IDs they had in the single-stack layout, so a promise about "the
    environment" is checked once over the union; a reference to a stack outside ``templates`` stays as it is.
    """
    outputs = {
        (stack_name, name): output["Value"]
        for stack_name, template in templates.items()
        for name, output in template.get("Outputs", {}).items()
    }

    def resolve(value):
        if isinstance(value, dict):
            if list(value) == ["Fn::GetStackOutput"]:
                reference = value["Fn::GetStackOutput"]
                key = (reference["StackName"], reference["OutputName"])
                return resolve(outputs[key]) if key in outputs else value
            return {k: resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [resolve(v) for v in value]
        return value

    merged = {"Resources": {}, "Outputs": {}, "Parameters": {}}
    for template in templates.values():
        for section in merged:
            for key, value in template.get(section, {}).items():
                if key == "CDKMetadata" or key.startswith("PublishOutput"):
                    continue
                assert key not in merged[section] or section == "Parameters", f"{section} {key} is in two stacks"
                merged[section][key] = resolve(value)
    return merged
