"""Every environment passes cdk-nag (AwsSolutions) and cfn-lint, and matches its snapshot."""

import json
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from cdk_nag import AwsSolutionsChecks
from syrupy.extensions.json import JSONSnapshotExtension

from tests.conftest import ROOT, normalise_hashes

from tests.infra.conftest import ENVIRONMENTS


ACKNOWLEDGED = cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY


def acknowledgements_on(construct) -> dict:
    found = {}
    for entry in construct.node.metadata:
        if entry.type == ACKNOWLEDGED:
            found.update(entry.data)
    return found


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_cdk_nag_finds_nothing_unacknowledged(synthesized, environment):
    """Synth already fails on an unacknowledged finding; this also proves each acknowledgement is narrow:
    it sits on the very resource of the finding, names its exact rule and gives a real reason."""
    stage = synthesized.stages[environment]
    report = AwsSolutionsChecks().validate_scope(stage)
    unacknowledged = []
    for violation in report.violations:
        for resource in violation.violating_resources:
            construct = stage
            for part in resource.construct_path.split("/")[1:]:
                construct = construct.node.find_child(part)
            reason = acknowledgements_on(construct).get(f"AwsSolutions::{violation.rule_name}", "")
            if len(reason) < 60:
                unacknowledged.append(f"{violation.rule_name} at {resource.construct_path}: {violation.description}")
    assert unacknowledged == []


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_every_acknowledgement_answers_a_real_finding(synthesized, environment):
    """An acknowledgement that no longer matches a finding hides nothing but misleads a reviewer."""
    stage = synthesized.stages[environment]
    findings = {
        (resource.construct_path, f"AwsSolutions::{violation.rule_name}")
        for violation in AwsSolutionsChecks().validate_scope(stage).violations
        for resource in violation.violating_resources
    }
    stale = [
        (construct.node.path, rule)
        for construct in stage.node.find_all()
        for rule in acknowledgements_on(construct)
        if rule.startswith("AwsSolutions::") and (construct.node.path, rule) not in findings
    ]
    assert stale == []


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


CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"


@pytest.fixture(scope="module")
def checkov_report(synthesized) -> dict:
    """`checkov -d cdk.out --framework cloudformation` over every synthesized template (its own virtualenv)."""
    assert CHECKOV.exists(), f"{CHECKOV} is missing: run `make setup-dev`"
    result = subprocess.run(
        [str(CHECKOV), "-d", str(synthesized.outdir), "--framework", "cloudformation", "--output", "json", "--compact"],
        capture_output=True, text=True,
    )
    report = json.loads(result.stdout)
    assert not isinstance(report, list), "one report, for CloudFormation only"
    assert report["summary"]["resource_count"] > 100 and report["summary"]["parsing_errors"] == 0, report["summary"]
    return report


def test_checkov_finds_nothing_unexplained(checkov_report):
    failed = [f"{f['check_id']} {f['resource']} ({f['file_path']}): {f['check_name']}" for f in checkov_report["results"]["failed_checks"]]
    assert failed == []


def test_every_checkov_skip_is_narrow_and_says_why(checkov_report, synthesized):
    """Each skip names one check on one resource, with a reason a reviewer would accept, and answers a real finding
    (checkov reports a skip only where the check applies to the resource)."""
    skipped = checkov_report["results"]["skipped_checks"]
    assert skipped, "the known accepted findings (dev's HTTP listener, the log bucket, CDK's custom resource) are skips"
    for check in skipped:
        assert len(check["check_result"]["suppress_comment"]) >= 60, check["check_id"]
    declared = {
        (path.name, logical_id, skip["id"])
        for path in synthesized.template_paths()
        for logical_id, resource in json.loads(path.read_text())["Resources"].items()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    }
    applied = {(Path(c["file_path"]).name, c["resource"].split(".", 1)[1], c["check_id"]) for c in skipped}
    assert declared == applied, f"skips that answer no finding: {sorted(declared - applied)}"


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_snapshot(synthesized, snapshot_json, environment):
    templates = {stack: template for (env, stack), template in synthesized.templates.items() if env == environment}
    assert normalise_hashes(templates) == snapshot_json
