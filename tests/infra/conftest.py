"""Per-environment views of the session's synthesized templates."""

import pytest
from aws_cdk.assertions import Template

ENVIRONMENTS = ["dev", "staging", "prod"]


@pytest.fixture(scope="module", params=ENVIRONMENTS)
def env(request, synthesized):
    """(config, Template of the shared and model stacks together) for each environment in turn."""
    config = synthesized.stages[request.param].config
    return config, Template.from_json(synthesized.inference_template(request.param))


@pytest.fixture(scope="module", params=ENVIRONMENTS)
def network(request, synthesized):
    """(environment name, Template of the Network stack) for each environment in turn."""
    return request.param, Template.from_json(synthesized.template(request.param, "Network"))


def _capacity_groups() -> list[tuple[str, str]]:
    from tests.scenarios import scenario_environments

    environments = scenario_environments()
    return [
        pair
        for env in ENVIRONMENTS
        for pair in [(env, ""), *((env, group) for group in environments[env].get("capacity_groups", {}))]
    ]


CAPACITY_GROUPS = _capacity_groups()


@pytest.fixture(
    scope="module", params=CAPACITY_GROUPS, ids=[f"{env}-{group or 'default'}" for env, group in CAPACITY_GROUPS]
)
def capacity_group(request, synthesized):
    """(GpuCapacityProps, Template of only that GPU capacity's resources) for each environment's capacity and capacity
    groups."""
    environment, group = request.param
    config = synthesized.stages[environment].config
    template = synthesized.inference_template(environment)
    prefix = f"GpuCapacity{group.replace('-', '')}"
    others = [f"GpuCapacity{g.replace('-', '')}" for g in config.capacity_groups if g != group]
    resources = {
        logical_id: resource
        for logical_id, resource in template["Resources"].items()
        if logical_id.startswith(prefix) and not any(logical_id.startswith(other) for other in others)
    }
    return config.group_capacity(group), Template.from_json({**template, "Resources": resources})
