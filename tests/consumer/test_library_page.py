"""constructs/README.md's three team examples, executed exactly as written: a bare cdk.App(), cdk-nag registered,
app.synth() (which raises on any unacknowledged finding), CDK's CloudFormation validation on (run_example). The page's
"More examples" are test_readme_examples.py's. Over every example of both pages: each task can pull every image it
names (issue 53: the canary and 4-GPU vLLM examples ran public images in a network without NAT)."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest

from tests.conftest import ROOT
from tests.consumer.test_readme_examples import NAMES, ran, run_example

EXAMPLE = re.compile(r"```python\n(# Example: (.+?)\n.*?)```", re.S)


def examples() -> dict[str, str]:
    """The team examples: every block of the page but those test_readme_examples.py runs."""
    found = EXAMPLE.findall((ROOT / "constructs" / "README.md").read_text())
    return {title: source for source, title in found if title not in NAMES.values()}


def test_the_page_has_the_three_team_examples():
    titles = list(examples())
    assert len(titles) == 3 and any("Triton" in t for t in titles) and any("vLLM" in t for t in titles)
    assert any("existing ECS cluster" in t for t in titles)


_TEAM_RUNS: dict[str, dict] = {}


def team_run(title: str) -> dict:
    """One team example, synthesized once for this module."""
    if title not in _TEAM_RUNS:
        _TEAM_RUNS[title] = run_example(examples()[title], None, "constructs/README.md")
    return _TEAM_RUNS[title]


@pytest.mark.parametrize("title", list(examples()))
def test_each_example_synthesizes_cdk_nag_and_validation_clean_in_a_bare_app(title):
    ran = team_run(title)
    assert not ran["app"].node.try_get_context("@aws-cdk/core:newStyleStackSynthesis")
    assert any(r["Type"] == "AWS::ECS::Service" for r in ran["template"]["Resources"].values())
    assert ran["validation_findings"] == []


EGRESS_UNKNOWN = "gpu-inference:public-image-egress-unknown"


def pulled_images(template: dict) -> list[str]:
    """Every container image of the template's task definitions, as JSON text."""
    return [
        json.dumps(container["Image"])
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::ECS::TaskDefinition"
        for container in resource["Properties"]["ContainerDefinitions"]
    ]


def unpullable(namespace: dict) -> list[str]:
    """The images an example's tasks could not pull: one outside the stack's region's ECR (ECR Public, Docker Hub),
    unless synth warned that the (imported) subnets' routes are the team's to check."""
    stack: cdk.Stack = namespace["stack"]
    warned = any(
        EGRESS_UNKNOWN in str(entry.data)
        for c in stack.node.find_all()
        for entry in c.node.metadata
        if entry.type == "aws:cdk:warning"
    )
    in_region_ecr = f".dkr.ecr.{stack.region}."
    outside = [
        image
        for image in pulled_images(namespace["template"])
        if in_region_ecr not in image and "cdk-hnb659fds-container-assets" not in image
    ]
    return [] if warned else outside


@pytest.mark.parametrize("example", [*NAMES, *examples()])
def test_every_example_on_both_pages_would_pull_every_image(example):
    namespace = ran(example)[1] if example in NAMES else team_run(example)
    assert pulled_images(namespace["template"])
    assert unpullable(namespace) == []


def test_the_pull_check_finds_a_public_image_in_a_network_without_nat():
    """The twin: the canary example as it was before issue 53 (the collector from ECR Public, no NAT)."""
    source = ran("canary")[1]
    template = json.loads(json.dumps(source["template"]))
    (task,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    for container in task["Properties"]["ContainerDefinitions"]:
        if container["Name"] == "metrics-collector":
            container["Image"] = "public.ecr.aws/cloudwatch-agent/cloudwatch-agent:1.300059.0b1207"
    assert unpullable({**source, "template": template}) == [
        '"public.ecr.aws/cloudwatch-agent/cloudwatch-agent:1.300059.0b1207"'
    ]
