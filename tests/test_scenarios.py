"""Tests build their scenarios from tests/scenario_environments.json (tests/scenarios.py), never from cdk.json's
environments: a team that edits its environments breaks only the tests of the app as configured, listed here."""

from __future__ import annotations

import re
from pathlib import Path

from stacks.config import load_environments
from tests.scenarios import scenario_environments

TESTS = Path(__file__).resolve().parent
# The session's capacity groups, and the app under aws-cdk-lib's default flags (conftest.py's synthesized app reads
# cdk.json's whole context, as `cdk synth` does).
APP_TESTS = {"infra/conftest.py", "infra/test_feature_flags.py"}
# A read, not an assignment (tests/infra/many_models.py writes its generated environment into a cdk.json of its own).
READS_ENVIRONMENTS = re.compile(r'(cdk_context\(\)|\[\s*"context"\s*\])\s*\[\s*"environments"\s*\](?!\s*=[^=])')


def readers(root: Path) -> set[str]:
    return {path.relative_to(root).as_posix() for path in root.rglob("*.py")
            if path.name != Path(__file__).name and READS_ENVIRONMENTS.search(path.read_text())}


def test_only_the_app_tests_read_cdk_jsons_environments():
    assert readers(TESTS) == APP_TESTS


def test_a_test_that_reads_cdk_jsons_environments_is_found(tmp_path):
    (tmp_path / "test_planted.py").write_text('data = copy.deepcopy(cdk_context()["environments"]["prod"])\n')
    (tmp_path / "test_other.py").write_text('data = json.loads(text)["context"][ "environments"]\n')
    (tmp_path / "test_writes.py").write_text('context["context"]["environments"] = {"many": generated}\n')
    assert readers(tmp_path) == {"test_planted.py", "test_other.py"}


def test_the_scenario_environments_are_valid_environments():
    assert [config.name for config in load_environments({"environments": scenario_environments()})] == ["dev", "staging", "prod"]
