"""The stack layout: one shared stack per environment and one stack per model that builds on it."""

import json

import pytest

from tests.infra.conftest import ENVIRONMENTS


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_each_model_has_its_own_stack_beside_the_network_and_shared_stacks(synthesized, environment):
    config = synthesized.stages[environment].config
    assert sorted(synthesized.stack_ids(environment)) == sorted(
        ["Network", "Inference", *(f"Model-{m.name}" for m in config.models)]
    )


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_a_model_stack_holds_that_model_only_and_keeps_its_single_stack_logical_ids(synthesized, environment):
    """Logical IDs start with the construct IDs the single-stack layout had (Model-<name>, Scaling-<name>,
    Monitoring/<name>-...), so a move between stacks maps each resource one to one."""
    config = synthesized.stages[environment].config
    for model in config.models:
        resources = synthesized.template(environment, f"Model-{model.name}")["Resources"]
        name = model.name.replace("-", "")
        prefixes = (f"Model{name}", f"Scaling{name}", f"Monitoring{name}")
        assert [k for k in resources if not k.startswith(prefixes) and k != "CDKMetadata"] == []
        types = {r["Type"] for r in resources.values()}
        assert {
            "AWS::ECS::Service",
            "AWS::ElasticLoadBalancingV2::TargetGroup",
            "AWS::ElasticLoadBalancingV2::ListenerRule",
        } <= types


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_the_shared_stack_holds_no_model_and_refers_to_no_model_stack(synthesized, environment):
    """Model stacks depend on the shared stack, never the other way: a model is added or removed without touching it
    (the dashboard finds models by search)."""
    config = synthesized.stages[environment].config
    shared = synthesized.template(environment, "Inference")
    text = json.dumps(shared)
    for model in config.models:
        assert not any(model.name in key for key in shared["Resources"]), model.name
    model_stacks = {synthesized.stack_names[(environment, f"Model-{m.name}")] for m in config.models}
    assert not any(f'"StackName": "{name}"' in text for name in model_stacks)
    for stack in synthesized.stages[environment].model_stacks.values():
        assert synthesized.stages[environment].shared in stack.dependencies
