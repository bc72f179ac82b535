"""Tests build their scenarios from tests/scenario_environments.json (tests/scenarios.py, conftest's
scenario_context()), never from cdk.json's environments: a team that edits its environments breaks only the tests of
the app as configured, tests/app."""

from __future__ import annotations

import re
from pathlib import Path

from stacks.config import load_environments
from tests.scenarios import scenario_environments

TESTS = Path(__file__).resolve().parent
# Where cdk.json's own context may be read: its definition, and the app's tests.
APP_TESTS = {"conftest.py", "app/test_checks.py"}
# A read of cdk.json's context or environments, not an assignment (tests/infra/many_models.py writes its generated
# environment into a cdk.json of its own).
READS_CDK_JSON = re.compile(r'\bcdk_context\(\)|(\[\s*"context"\s*\])\s*\[\s*"environments"\s*\](?!\s*=[^=])')


def readers(root: Path) -> set[str]:
    return {path.relative_to(root).as_posix() for path in root.rglob("*.py")
            if path.name != Path(__file__).name and READS_CDK_JSON.search(path.read_text())}


def test_only_the_app_tests_read_cdk_jsons_context():
    assert readers(TESTS) == APP_TESTS


def test_a_test_that_reads_cdk_jsons_context_is_found(tmp_path):
    (tmp_path / "test_planted.py").write_text('data = copy.deepcopy(cdk_context()["environments"]["prod"])\n')
    (tmp_path / "test_flags.py").write_text("app = cdk.App(context=cdk_context())\n")
    (tmp_path / "test_other.py").write_text('data = json.loads(text)["context"][ "environments"]\n')
    (tmp_path / "test_writes.py").write_text('context["context"]["environments"] = {"many": generated}\n')
    (tmp_path / "test_scenario.py").write_text("app = cdk.App(context=scenario_context())\n")
    assert readers(tmp_path) == {"test_planted.py", "test_flags.py", "test_other.py"}


def test_the_scenario_environments_are_valid_environments():
    assert [config.name for config in load_environments({"environments": scenario_environments()})] == ["dev", "staging", "prod"]
