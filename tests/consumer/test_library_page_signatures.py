"""Issue 53: ``GpuCapacity(props=)`` was required while NeuronCapacity's defaulted to its props. The page's table of
constructs writes ``key=Props()`` (or a literal) where the key has that default and ``key=Props`` (the type) where it
is required: each written default is the code's, and GpuCapacity needs no props."""

from __future__ import annotations

import ast
import inspect
import re

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

import gpu_inference_constructs as library
from gpu_inference_constructs import GpuCapacity, GpuCapacityProps
from tests.conftest import ROOT

ROW = re.compile(r"^\| `(\w+)\(([^`]*)\)` \|", re.M)
ARGUMENT = re.compile(r",\s*(?![^()]*\))")
EMPTY_CALL = re.compile(r"^(\w+)\(\)$")


def written_defaults_the_code_lacks(page: str) -> list[tuple[str, str, str]]:
    """(construct, keyword, as written) for each default the table writes that the constructor does not have."""
    wrong = []
    for row in ROW.finditer(page):
        parameters = inspect.signature(getattr(library, row.group(1)).__init__).parameters
        for argument in ARGUMENT.split(row.group(2)):
            keyword, _, written = (part.strip() for part in argument.partition("="))
            if (
                not written or written.isidentifier() or written == "..."
            ):  # positional, a required keyword's type, elided
                continue
            default = parameters[keyword].default
            empty = EMPTY_CALL.match(written)
            if default is inspect.Parameter.empty:
                wrong.append((row.group(1), keyword, written))
            elif empty is None and default != ast.literal_eval(written):
                wrong.append((row.group(1), keyword, written))
    return wrong


def test_each_default_the_table_writes_is_the_constructors():
    assert written_defaults_the_code_lacks((ROOT / "constructs" / "README.md").read_text()) == []


def test_the_check_finds_a_default_the_code_lacks():
    row = "| `ModelService(model=ModelProps(), environment_name, logs=ServiceLogs, timing=None)` | x | y |\n"
    assert written_defaults_the_code_lacks(row) == [("ModelService", "model", "ModelProps()")]


def test_gpu_capacity_without_props_is_the_default_fleet():
    app = cdk.App()
    stack = cdk.Stack(app, "Team", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0a1b2c3d4e5f67890",
        availability_zones=["eu-west-1a"],
        private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1"],
    )
    gpus = GpuCapacity(stack, "Gpus", vpc=vpc)
    defaults = GpuCapacityProps()
    assert [t.name for t in gpus.instance_types] == list(defaults.instance_types)
    Template.from_stack(stack).has_resource_properties(
        "AWS::AutoScaling::AutoScalingGroup",
        {"MinSize": str(defaults.min_capacity), "MaxSize": str(defaults.max_capacity)},
    )
