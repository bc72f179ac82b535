"""The snapshots' rendering hides no change a reviewer must see: in a stack written in full, in a stack written as
a diff against another model's, and in a value's type."""

from __future__ import annotations

import copy
import re

from tests.readable_templates import render_stacks


def model_stack(name: str, threshold: int = 5, require_manifest: str | bool = "true") -> dict:
    compact = name.replace("-", "")
    return {
        "Resources": {
            f"Model{compact}Alarm0A1B2C3D": {
                "Type": "AWS::CloudWatch::Alarm",
                "Properties": {
                    "AlarmDescription": f"{name}: 5xx",
                    "Threshold": threshold,
                    "Dimensions": [
                        {
                            "Name": "TargetGroup",
                            "Value": {"Fn::GetAtt": [f"Model{compact}TargetGroup9F8E7D6C", "TargetGroupFullName"]},
                        }
                    ],
                },
            },
            f"Model{compact}TaskDefinition11223344": {
                "Type": "AWS::ECS::TaskDefinition",
                "Properties": {
                    "ContainerDefinitions": [
                        {
                            "Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/server:" + "a" * 64,
                            "PortMappings": [{"ContainerPort": 8080}],
                            "Environment": [
                                {"Name": "MODEL_S3", "Value": f"s3://models/{name}/"},
                                {"Name": "REQUIRE_MANIFEST", "Value": require_manifest},
                            ],
                        }
                    ]
                },
            },
            f"Model{compact}TargetGroup9F8E7D6C": {
                "Type": "AWS::ElasticLoadBalancingV2::TargetGroup",
                "Properties": {"Port": 8080},
                "Metadata": {"aws:cdk:path": f"Dev/Model-{name}/TargetGroup/Resource"},
            },
        }
    }


def environment() -> dict:
    return {
        "Network": {
            "Resources": {"Vpc8378EB38": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}}}
        },
        "Model-first": model_stack("first"),
        "Model-second-one": model_stack("second-one"),
    }


def test_a_second_model_like_the_first_is_written_as_no_difference():
    text = render_stacks(environment())
    assert "# Model-second-one: Model-first's lines, with its own model for <model>, except\n" in text
    assert text.rstrip().endswith("except"), text
    assert "Threshold: 5" in text and "aws:cdk:path" not in text and "<hash>" in text


def test_a_change_in_a_stack_written_in_full_shows():
    changed = environment()
    changed["Network"]["Resources"]["Vpc8378EB38"]["Properties"]["CidrBlock"] = "10.1.0.0/16"
    assert '"CidrBlock": "10.1.0.0/16"' in render_stacks(changed)


def test_a_change_in_a_stack_written_as_a_diff_shows():
    changed = environment()
    changed["Model-second-one"] = model_stack("second-one", threshold=50)
    assert added_lines(changed) == ["      Threshold: 50"]


def added_lines(stacks: dict) -> list[str]:
    """The lines the second model's stack adds to the first's."""
    diff = render_stacks(stacks).split("except\n", 1)[1].splitlines()
    return [line[1:] for line in diff if line.startswith("+")]


def test_another_models_name_in_a_stack_written_as_a_diff_shows():
    changed = environment()
    wrong = copy.deepcopy(changed["Model-second-one"])
    wrong["Resources"]["Modelsecondone" + "TaskDefinition11223344"]["Properties"]["ContainerDefinitions"][0][
        "Environment"
    ][0]["Value"] = "s3://models/first/"
    changed["Model-second-one"] = wrong
    (added,) = added_lines(changed)
    assert "s3://models/first/" in added


def test_a_string_and_the_value_it_spells_read_differently():
    changed = environment()
    changed["Model-first"] = model_stack("first", require_manifest=True)
    assert re.search(r'REQUIRE_MANIFEST"?: "true"', render_stacks(environment()))
    assert re.search(r'REQUIRE_MANIFEST"?: true', render_stacks(changed))
