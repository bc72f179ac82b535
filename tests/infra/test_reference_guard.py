"""A change that would replace a resource the model stacks read through a weak reference is refused at synth."""

import aws_cdk as cdk
import pytest
from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

from gpu_inference_constructs.shared.acknowledgements import default_child
from stacks.reference_guard import LOCK_FILE, REPLACED_BY, ReplacementRefused, check, consumed_fingerprints, guard
from tests.conftest import scenario_context


def templates_by_stack_name(synthesized, environment=None) -> dict:
    return {
        synthesized.stack_names[key]: template
        for key, template in synthesized.templates.items()
        if environment is None or key[0] == environment
    }


def test_the_replacing_properties_are_cloudformations_create_only_properties():
    for resource_type, properties in REPLACED_BY.items():
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource_type).schema
        create_only = tuple(p.removeprefix("/properties/") for p in schema.get("createOnlyProperties", []))
        assert properties == create_only, resource_type


def test_every_consumed_resource_type_is_known(synthesized):
    """A consumed resource of a type the table lacks would never be guarded."""
    types = {v["type"] for v in consumed_fingerprints(templates_by_stack_name(synthesized)).values()}
    assert types <= set(REPLACED_BY)


@pytest.fixture(scope="module")
def changed_dev(tmp_path_factory):
    """Dev synthesized again with the load balancer security group's description changed (CloudFormation replaces
    the group) and the listener's port changed (updated in place: its ARN, which the model stacks read, stays)."""
    from stacks.config import load_environments
    from stacks.stage import InferenceStage

    context = scenario_context()
    app = cdk.App(context=context, outdir=str(tmp_path_factory.mktemp("changed")))
    (config,) = load_environments(context, only="dev")
    stage = InferenceStage(app, config)
    load_balancer = stage.shared.load_balancer
    default_child(load_balancer.security_group).add_property_override(
        "GroupDescription", "Inference load balancer (renamed)"
    )
    default_child(load_balancer.listener).add_property_override("Port", 8080)
    assembly = stage.synth()
    return {stack.stack_name: stack.template for stack in assembly.stacks}


def test_replacing_a_consumed_security_group_is_refused_and_a_listener_port_change_is_not(
    synthesized, changed_dev, tmp_path
):
    lock = tmp_path / LOCK_FILE
    guard(templates_by_stack_name(synthesized, "dev"), lock)  # what is deployed
    before = lock.read_text()
    with pytest.raises(ReplacementRefused) as refused:
        guard(changed_dev, lock)
    (problem,) = str(refused.value).splitlines()
    assert problem.startswith("AWS::EC2::SecurityGroup LoadBalancerSecurityGroup")
    consumers = "Dev-Model-minilm, Dev-Model-sentiment, Dev-Model-tenants, Dev-Model-vision"  # tenants: dev's pool
    assert f"in Dev-Inference would be replaced (GroupDescription changed) under {consumers}" in problem
    assert "new construct id" in problem and "-c acceptReplacement=true" in problem
    assert lock.read_text() == before  # refused: nothing recorded
    guard(changed_dev, lock, accept=True)
    assert "(renamed)" in lock.read_text()
    guard(changed_dev, lock)  # accepted once, then synth passes


def test_a_new_logical_id_is_not_refused_since_every_consumer_then_updates(synthesized):
    """Renaming the construct renames the output the model stacks read, so their templates change with it."""
    current = consumed_fingerprints(templates_by_stack_name(synthesized, "dev"))
    key = next(k for k, v in current.items() if v["type"] == "AWS::EC2::SecurityGroup")
    moved = {**current, key: {**current[key], "resource": "Other", "replaced_by": {"GroupDescription": "x"}}}
    assert check(current, moved) == []
