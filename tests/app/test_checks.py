"""The app as cdk.json configures it: every environment passes cdk-nag (AwsSolutions), CDK's CloudFormation
validation, cfn-lint and checkov with nothing unexplained, synthesizes without a warning and matches its snapshot. A
team that edits its environments updates these snapshots (make update-snapshots) and keeps these checks green; no
other test reads its environments."""

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
import aws_cdk.cx_api as cx_api
import pytest
from cdk_nag import AwsSolutionsChecks

from tests.conftest import ROOT, cdk_context, cloudformation_validation_findings, validated_app
from tests.readable_templates import ReadableSnapshot, render_stacks

ACKNOWLEDGED = cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
ENVIRONMENTS = list(cdk_context()["environments"])


def acknowledgements_on(construct) -> dict:
    found = {}
    for entry in construct.node.metadata:
        if entry.type == ACKNOWLEDGED:
            found.update(entry.data)
    return found


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_cdk_nag_finds_nothing_unacknowledged(app_synthesized, environment):
    """Synth already fails on an unacknowledged finding; this also proves each acknowledgement is narrow:
    it sits on the very resource of the finding, names its exact rule and gives a real reason."""
    stage = app_synthesized.stages[environment]
    report = AwsSolutionsChecks().validate_scope(stage)
    unacknowledged = []
    for violation in report.violations:
        for resource in violation.violating_resources:
            assert resource.construct_path is not None, violation.rule_name
            construct = stage
            for part in resource.construct_path.split("/")[1:]:
                construct = construct.node.find_child(part)
            reason = acknowledgements_on(construct).get(f"AwsSolutions::{violation.rule_name}", "")
            if len(reason) < 60:
                unacknowledged.append(f"{violation.rule_name} at {resource.construct_path}: {violation.description}")
    assert unacknowledged == []


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_every_acknowledgement_answers_a_real_finding(app_synthesized, environment):
    """An acknowledgement that no longer matches a finding hides nothing but misleads a reviewer."""
    stage = app_synthesized.stages[environment]
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


CFN_LINT = ROOT / ".venv" / "bin" / "cfn-lint"
CFN_LINT_RULES = Path(__file__).parent / "cfn_lint_rules"
READ_RULE = "I9901"  # tests/app/cfn_lint_rules/template_read.py: one line per template read
# What cfn-lint rejected in every model stack before (aws-cloudformation/cfn-lint#4495, #4519): a cross-stack
# reference inside Fn::Split, a position CloudFormation was never shown to accept.
PLANTED_INTRINSIC = {
    "Resources": {
        "Alarm": {
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "ComparisonOperator": "GreaterThanThreshold",
                "EvaluationPeriods": 1,
                "Threshold": 1,
                "Namespace": "AWS/ApplicationELB",
                "MetricName": "RequestCount",
                "Period": 60,
                "Statistic": "Sum",
                "Dimensions": [
                    {
                        "Name": "LoadBalancer",
                        "Value": {
                            "Fn::Join": [
                                "/",
                                [
                                    {
                                        "Fn::Select": [
                                            1,
                                            {
                                                "Fn::Split": [
                                                    "/",
                                                    {
                                                        "Fn::GetStackOutput": {
                                                            "StackName": "Shared",
                                                            "Region": "us-east-1",
                                                            "OutputName": "ListenerArn",
                                                        }
                                                    },
                                                ]
                                            },
                                        ]
                                    }
                                ],
                            ]
                        },
                    }
                ],
            },
        }
    }
}


@dataclass
class LintRun:
    returncode: int
    findings: list  # (template path, rule id, message)
    stderr: str
    planted: str


@pytest.fixture(scope="module")
def cfn_lint_run(app_synthesized, tmp_path_factory) -> LintRun:
    """One run of the `cfn-lint` console script, as a user runs it, over every template and one planted defect."""
    planted = tmp_path_factory.mktemp("planted") / "planted-intrinsic.template.json"
    planted.write_text(json.dumps(PLANTED_INTRINSIC))
    paths = [str(path) for path in app_synthesized.template_paths()] + [str(planted)]
    result = subprocess.run(
        [
            str(CFN_LINT),
            "--format",
            "parseable",
            "--append-rules",
            str(CFN_LINT_RULES),
            "--include-checks",
            READ_RULE,
            "--",
            *paths,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    findings = []
    for line in result.stdout.splitlines():
        path, _, _, _, _, rule, message = line.split(":", 6)
        findings.append((path, rule, message))
    return LintRun(result.returncode, findings, result.stderr, str(planted))


def test_cfn_lint_ran_and_read_every_template(cfn_lint_run, app_synthesized):
    """Exit code: bit 2 errors (the planted one), 4 warnings, 8 informational (the read rule); 1 would be a crash."""
    assert cfn_lint_run.returncode in (2 | 8, 2 | 4 | 8), cfn_lint_run.stderr
    read = {path: message for path, rule, message in cfn_lint_run.findings if rule == READ_RULE}
    expected = {
        str(path): f"read {len(json.loads(path.read_text())['Resources'])} resources"
        for path in app_synthesized.template_paths()
    }
    assert len(expected) >= 3 * len(ENVIRONMENTS)  # network, shared and at least one model in each environment
    assert {path: read.get(path) for path in expected} == expected
    assert sum(int(message.split()[1]) for message in expected.values()) > 100 * len(ENVIRONMENTS)


def test_cdk_cloudformation_validation_finds_nothing(app_synthesized):
    """What `cdk synth` reports from its built-in CloudFormation validation, warnings included, for every
    environment (the session synthesizes with tests.conftest.validated_app)."""
    assert cloudformation_validation_findings(app_synthesized.outdir) == []


def test_cdk_cloudformation_validation_reports_a_planted_finding(tmp_path):
    """The twin: an app built as the session's is (a stage per environment), with a security group in a VPC id of
    the wrong format."""
    from aws_cdk import aws_ec2 as ec2

    app = validated_app(outdir=str(tmp_path))
    stack = cdk.Stack(cdk.Stage(app, "Dev"), "Planted")
    ec2.CfnSecurityGroup(stack, "Group", group_description="planted", vpc_id="vpc-2")
    app.synth()
    assert cloudformation_validation_findings(tmp_path) == [
        "E1151 Dev/Planted/Group: VpcId: 'vpc-2' does not match format 'AWS::EC2::VPC.Id'"
    ]


def test_cfn_lint_finds_no_errors(cfn_lint_run):
    errors = [f for f in cfn_lint_run.findings if f[1].startswith("E") and f[0] != cfn_lint_run.planted]
    assert errors == []


def test_cfn_lint_reports_a_planted_cross_stack_reference_in_split(cfn_lint_run):
    """The twin: the same run reports the defect the model stacks had, so the test above can fail."""
    planted = [rule for path, rule, _ in cfn_lint_run.findings if path == cfn_lint_run.planted and rule.startswith("E")]
    assert planted == ["E1022"]


CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
# A finding checkov reports on any account: SSH open to the world (CKV_AWS_24).
PLANTED_FINDING = {
    "Resources": {
        "OpenSsh": {
            "Type": "AWS::EC2::SecurityGroup",
            "Properties": {
                "GroupDescription": "planted",
                "SecurityGroupIngress": [{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "CidrIp": "0.0.0.0/0"}],
            },
        }
    }
}
PLANTED_FILE = "planted-finding.template.json"


@pytest.fixture(scope="module")
def checkov_report(app_synthesized, tmp_path_factory) -> dict:
    """`checkov -d <dir> --framework cloudformation` (its own virtualenv) over a copy of every synthesized
    template and one planted finding; checkov reads one directory per report."""
    assert CHECKOV.exists(), f"{CHECKOV} is missing: run `make setup-dev`"
    directory = tmp_path_factory.mktemp("checkov")
    for path in app_synthesized.template_paths():
        shutil.copy(path, directory / path.name)
    (directory / PLANTED_FILE).write_text(json.dumps(PLANTED_FINDING))
    result = subprocess.run(
        [str(CHECKOV), "-d", str(directory), "--framework", "cloudformation", "--output", "json", "--compact"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 1, result.stderr[-3000:]  # 1: failed checks (the planted one)
    report = json.loads(result.stdout)
    assert not isinstance(report, list), "one report, for CloudFormation only"
    resources = sum(len(json.loads(path.read_text())["Resources"]) for path in app_synthesized.template_paths())
    assert report["summary"]["resource_count"] >= resources > 100 * len(ENVIRONMENTS), report["summary"]
    assert report["summary"]["parsing_errors"] == 0, report["summary"]
    read = {Path(c["file_path"]).name for c in report["results"]["passed_checks"] + report["results"]["failed_checks"]}
    assert read >= {path.name for path in app_synthesized.template_paths()} | {PLANTED_FILE}
    return report


def real_findings(report: dict) -> list:
    return [f for f in report["results"]["failed_checks"] if Path(f["file_path"]).name != PLANTED_FILE]


def test_checkov_reports_the_planted_finding(checkov_report):
    planted = {
        f["check_id"] for f in checkov_report["results"]["failed_checks"] if Path(f["file_path"]).name == PLANTED_FILE
    }
    assert "CKV_AWS_24" in planted


def test_checkov_finds_nothing_unexplained(checkov_report):
    failed = [
        f"{f['check_id']} {f['resource']} ({f['file_path']}): {f['check_name']}" for f in real_findings(checkov_report)
    ]
    assert failed == []


def test_every_checkov_skip_is_narrow_and_says_why(checkov_report, app_synthesized):
    """Each skip names one check on one resource, with a reason a reviewer would accept, and answers a real finding
    (checkov reports a skip only where the check applies to the resource)."""
    skipped = checkov_report["results"]["skipped_checks"]
    assert skipped, "the known accepted findings (dev's HTTP listener, the log bucket, CDK's custom resource) are skips"
    for check in skipped:
        assert len(check["check_result"]["suppress_comment"]) >= 60, check["check_id"]
    declared = {
        (path.name, logical_id, skip["id"])
        for path in app_synthesized.template_paths()
        for logical_id, resource in json.loads(path.read_text())["Resources"].items()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    }
    applied = {(Path(c["file_path"]).name, c["resource"].split(".", 1)[1], c["check_id"]) for c in skipped}
    assert declared == applied, f"skips that answer no finding: {sorted(declared - applied)}"


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_snapshot(app_synthesized, snapshot, environment):
    """Every stack of the environment as a reviewer reads it (tests/readable_templates.py)."""
    templates = {stack: template for (env, stack), template in app_synthesized.templates.items() if env == environment}
    assert render_stacks(templates) == snapshot(extension_class=ReadableSnapshot)


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_the_environment_synthesizes_without_a_warning(app_synthesized, environment):
    """A warning names something a construct could not check; the app's own environments give it all it needs, so
    a warning in them is a defect (a metric math expression CloudWatch's parser reads wrong was one). Read from the
    assembly the session wrote, as `cdk synth` prints them (assertions' Annotations.from_stack synthesizes the whole
    app again, every stage, for each stack it is asked about: 15 s of the suite)."""
    stage = app_synthesized.stages[environment]
    stacks = [child for child in stage.node.children if isinstance(child, cdk.Stack)]
    assert stacks
    assert warnings_in(stage.synth(), stacks) == []


def warnings_in(assembly: cx_api.CloudAssembly, stacks: list[cdk.Stack]) -> list[str]:
    return [
        f"{message.id}: {message.entry.data}"
        for stack in stacks
        for message in assembly.get_stack_artifact(stack.artifact_id).messages
        if message.level == cx_api.SynthesisMessageLevel.WARNING
    ]


def test_a_warning_in_the_assembly_is_found(tmp_path):
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Planted")
    cdk.Annotations.of(stack).add_warning_v2("planted:warning", "a planted warning")
    assert warnings_in(app.synth(), [stack]) == ["/Planted: a planted warning [ack: planted:warning]"]
