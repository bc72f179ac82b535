"""The library installs and imports as another team would use it."""

import importlib.util
from pathlib import Path

import aws_cdk as cdk
from aws_cdk.assertions import Template

ROOT = Path(__file__).resolve().parents[2]


def test_import_constructs_is_the_real_library_not_our_folder():
    import constructs

    location = Path(constructs.__file__).resolve()
    assert "site-packages" in location.parts, location
    assert hasattr(constructs, "Construct")
    assert not list((ROOT / "constructs").glob("*.py")), "a loose .py in constructs/ merges into the real package"


def test_library_is_installed_under_its_own_name():
    spec = importlib.util.find_spec("gpu_inference_constructs")
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).resolve().is_relative_to(ROOT / "constructs" / "gpu_inference_constructs")


def test_another_team_builds_a_stack_from_the_public_import_path():
    from gpu_inference_constructs import InferenceNetwork, NetworkProps

    app = cdk.App()
    stack = cdk.Stack(app, "TheirStack", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    network = InferenceNetwork(stack, "Net", props=NetworkProps(availability_zones=("eu-west-1a", "eu-west-1b")))
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::EC2::VPC", 1)
    assert network.vpc is not None and network.endpoint_security_group is not None
