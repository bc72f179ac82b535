"""An environment of 100 models synthesizes within every CloudFormation and load balancer limit, and a change
to one model touches only that model's stack."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest

from stacks.config import load_environment
from stacks.stage import InferenceStage
from tests.conftest import cdk_context
from tests.infra.many_models import many_model_environment

MODELS = 100
# CloudFormation quotas: resources, outputs and parameters per stack; template body uploaded through S3.
MAX_RESOURCES, MAX_OUTPUTS, MAX_PARAMETERS, MAX_TEMPLATE_BYTES = 500, 200, 200, 1_000_000


def synthesize(environments: dict, outdir) -> dict:
    """{stack id: template} of one stage per environment, in a plain cdk.App with cdk.json's flags."""
    context = {k: v for k, v in cdk_context().items() if k != "environments"}
    app = cdk.App(context=context, outdir=str(outdir))
    stages = [InferenceStage(app, load_environment(name, data)) for name, data in environments.items()]
    app.synth()
    return {
        (stage.config.name, stack.hierarchical_id.split("/")[-1]): stack.template
        for stage in stages for stack in stage.synth().stacks
    }


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> dict:
    return synthesize({"many": many_model_environment(MODELS)}, tmp_path_factory.mktemp("many"))


def test_one_hundred_models_synthesize_into_a_stack_each(many):
    assert sorted(stack for _, stack in many) == sorted(["Network", "Inference", *(f"Model-model-{i:03d}" for i in range(MODELS))])


@pytest.fixture(scope="module")
def three(tmp_path_factory) -> dict:
    return synthesize({"many": many_model_environment(3)}, tmp_path_factory.mktemp("three"))


LIMITS = {
    "resources": (lambda t: len(t["Resources"]), MAX_RESOURCES),
    "outputs": (lambda t: len(t.get("Outputs", {})), MAX_OUTPUTS),
    "parameters": (lambda t: len(t.get("Parameters", {})), MAX_PARAMETERS),
    "bytes": (lambda t: len(json.dumps(t)), MAX_TEMPLATE_BYTES),
}


@pytest.mark.parametrize("limit", LIMITS)
def test_every_stack_stays_within_cloudformation_limits(many, limit):
    measure, allowed = LIMITS[limit]
    worst = max(many.items(), key=lambda item: measure(item[1]))
    assert measure(worst[1]) <= allowed, f"{worst[0]}: {measure(worst[1])} {limit}, CloudFormation allows {allowed}"


@pytest.mark.parametrize("limit", LIMITS)
def test_the_shared_stack_does_not_grow_towards_a_limit_with_the_models(many, three, limit):
    """Otherwise the limit has only moved: 100 models leave the shared stack's resources, outputs and parameters as
    they are with 3 (its dashboard names each model, so its size grows a little)."""
    measure, allowed = LIMITS[limit]
    if limit == "bytes":
        assert measure(many[("many", "Inference")]) <= allowed / 10
    else:
        assert measure(many[("many", "Inference")]) == measure(three[("many", "Inference")])


def test_the_load_balancer_holds_a_rule_and_a_target_group_per_model(many):
    rules = [r for t in many.values() for r in t["Resources"].values() if r["Type"] == "AWS::ElasticLoadBalancingV2::ListenerRule"]
    groups = [r for t in many.values() for r in t["Resources"].values() if r["Type"] == "AWS::ElasticLoadBalancingV2::TargetGroup"]
    assert len(rules) == len(groups) == MODELS
    assert len({r["Properties"]["Priority"] for r in rules}) == MODELS
    (balancer_group,) = [r for r in many[("many", "Inference")]["Resources"].values()
                         if r["Type"] == "AWS::EC2::SecurityGroup" and r["Properties"]["GroupDescription"].startswith("Inference load balancer")]
    assert len(balancer_group["Properties"]["SecurityGroupEgress"]) == 1, "a security group holds 60 rules by default"


def test_a_new_version_of_one_model_changes_that_models_stack_only(three, tmp_path):
    changed = many_model_environment(3)
    changed["models"][1]["version"] = "2027-01-15"
    after = synthesize({"many": changed}, tmp_path)
    assert sorted(stack for key in three if three[key] != after[key] for stack in [key[1]]) == ["Model-model-001"]
