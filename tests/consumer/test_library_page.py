"""constructs/README.md's three team examples, executed exactly as written: a bare cdk.App(), cdk-nag registered,
app.synth() (which raises on any unacknowledged finding), CDK's CloudFormation validation on (run_example). The page's
"More examples" are test_readme_examples.py's."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT
from tests.consumer.test_readme_examples import NAMES, run_example

EXAMPLE = re.compile(r"```python\n(# Example: (.+?)\n.*?)```", re.S)


def examples() -> dict[str, str]:
    """The team examples: every block of the page but those test_readme_examples.py runs."""
    found = EXAMPLE.findall((ROOT / "constructs" / "README.md").read_text())
    return {title: source for source, title in found if title not in NAMES.values()}


def test_the_page_has_the_three_team_examples():
    titles = list(examples())
    assert len(titles) == 3 and any("Triton" in t for t in titles) and any("vLLM" in t for t in titles)
    assert any("existing ECS cluster" in t for t in titles)


@pytest.mark.parametrize("title", list(examples()))
def test_each_example_synthesizes_cdk_nag_and_validation_clean_in_a_bare_app(title):
    ran = run_example(examples()[title], None, "constructs/README.md")
    assert not ran["app"].node.try_get_context("@aws-cdk/core:newStyleStackSynthesis")
    assert any(r["Type"] == "AWS::ECS::Service" for r in ran["template"]["Resources"].values())
    assert ran["validation_findings"] == []
