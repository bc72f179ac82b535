"""Tests build their scenarios from tests/scenario_environments.json (tests/scenarios.py, conftest's
scenario_context()), never from cdk.json or the reference lock `cdk synth` writes from it: a team that edits its
environments breaks only the tests of the app as configured, tests/app."""

from __future__ import annotations

import re
from pathlib import Path

from stacks.config import load_environments
from tests.scenarios import scenario_environments

TESTS = Path(__file__).resolve().parent
SELF = Path(__file__).resolve().relative_to(TESTS).as_posix()
# Where cdk.json's own context and the reference lock may be read: their definition, and the app's tests.
APP_TESTS = {"conftest.py", "app/test_checks.py", "app/test_reference_lock.py"}
# Readers that do not depend on what cdk.json holds, each with why.
ALLOWED = {"infra/test_many_models.py": "compares the lock's bytes before and after a generated environment's synth"}
QUOTE = r"""["']"""
READS_CDK_JSON = re.compile(
    "|".join(
        [
            r"\bcdk_context\b",  # any use of it, an aliased import included
            rf"\bROOT\s*/\s*({QUOTE}(cdk\.json|references\.lock\.json){QUOTE}|LOCK_FILE\b)",  # the repository's files
            # cdk.json's environments out of a loaded cdk.json, read, not assigned (many_models writes its own)
            rf"\[\s*{QUOTE}context{QUOTE}\s*\]\s*(\[\s*{QUOTE}environments{QUOTE}\s*\](?!\s*=[^=])|\.get\(\s*{QUOTE}environments{QUOTE})",
        ]
    )
)


def readers(root: Path) -> set[str]:
    return {
        relative
        for path in root.rglob("*.py")
        if (relative := path.relative_to(root).as_posix()) != SELF and READS_CDK_JSON.search(path.read_text())
    }


def test_only_the_app_tests_read_cdk_json_or_the_reference_lock():
    assert readers(TESTS) == APP_TESTS | set(ALLOWED)


PLANTED = {
    "test_planted.py": 'data = copy.deepcopy(cdk_context()["environments"]["prod"])\n',
    "test_flags.py": "app = cdk.App(context=cdk_context())\n",
    "test_alias.py": "from tests.conftest import cdk_context as ctx\n",
    "test_other.py": 'data = json.loads(text)["context"][ "environments"]\n',
    "test_quotes.py": "data = json.loads(text)['context']['environments']\n",
    "test_get.py": 'data = json.loads(text)["context"].get("environments")\n',
    "test_root.py": 'context = json.loads((ROOT / "cdk.json").read_text())\n',
    "test_lock.py": "lock = json.loads((ROOT / LOCK_FILE).read_text())\n",
    "test_lock_name.py": "lock = json.loads((ROOT / 'references.lock.json').read_text())\n",
    "sub/test_scenarios.py": "app = cdk.App(context=cdk_context())\n",  # the same name as this file, elsewhere
}
NOT_READERS = {
    "test_writes.py": 'context["context"]["environments"] = {"many": generated}\n',
    "test_scenario.py": "app = cdk.App(context=scenario_context())\n",
    "test_own.py": 'path = tmp_path / "cdk.json"\n',
}


def test_every_way_of_reading_cdk_json_is_found(tmp_path):
    for name, text in {**PLANTED, **NOT_READERS}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert readers(tmp_path) == set(PLANTED)


def test_the_scenario_environments_are_valid_environments():
    assert [config.name for config in load_environments({"environments": scenario_environments()})] == [
        "dev",
        "staging",
        "prod",
    ]
