"""The environments that tests of the library and of the config loader build their scenarios from.

A copy of cdk.json's dev, staging and prod as they were on 2026-12-05, their zones by ID since issue 40
(`tests/scenario_environments.json`), owned by
the tests: the session's synthesized app (tests/conftest.py, scenario_context) and every scenario start from it, so
a team that edits its own environments in cdk.json breaks only tests/app, the tests of the app as configured.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path

SCENARIOS = Path(__file__).resolve().parent / "scenario_environments.json"


@cache
def _environments() -> dict:
    return json.loads(SCENARIOS.read_text())


def scenario_environments() -> dict:
    """Every scenario environment, by name (a copy each call: a test may change it)."""
    return copy.deepcopy(_environments())


def scenario_environment(name: str) -> dict:
    """One scenario environment's cdk.json entry (a copy each call)."""
    return copy.deepcopy(_environments()[name])


def write_scenario_cdk_json(directory: Path, environments: dict | None = None) -> Path:
    """A cdk.json in ``directory`` holding ``environments`` (default: every scenario environment), for the commands
    that read one (the sizing advisor, the timeline)."""
    path = directory / "cdk.json"
    path.write_text(
        json.dumps({"context": {"environments": scenario_environments() if environments is None else environments}})
    )
    return path
