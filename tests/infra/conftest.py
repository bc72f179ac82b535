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
