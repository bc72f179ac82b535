"""Every environment passes cdk-nag (AwsSolutions) and cfn-lint, and matches its snapshot."""

import json
import subprocess
import sys

import pytest
from cdk_nag import AwsSolutionsChecks
from syrupy.extensions.json import JSONSnapshotExtension

from tests.conftest import normalise_hashes

ENVIRONMENTS = ["dev", "staging", "prod"]


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_cdk_nag_finds_nothing_unacknowledged(synthesized, environment):
    report = AwsSolutionsChecks().validate_scope(synthesized.stages[environment])
    findings = [
        f"{violation.rule_name} {[r.construct_path for r in violation.violating_resources]}: {violation.description}"
        for violation in report.violations
    ]
    assert findings == []


def test_cfn_lint_finds_no_errors(synthesized):
    paths = [str(path) for path in synthesized.template_paths()]
    assert len(paths) >= 3 * 1
    result = subprocess.run(
        [sys.executable, "-m", "cfnlint", "--format", "parseable", "--", *paths],
        capture_output=True,
        text=True,
    )
    errors = [line for line in result.stdout.splitlines() if ":E" in line]
    assert errors == [], result.stdout + result.stderr
    # Exit code bit 2 means errors, 4 warnings, 8 informational: warnings are reported, not fatal.
    assert result.returncode & 2 == 0, result.stdout + result.stderr


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_snapshot(synthesized, snapshot_json, environment):
    templates = {stack: template for (env, stack), template in synthesized.templates.items() if env == environment}
    assert normalise_hashes(templates) == snapshot_json
