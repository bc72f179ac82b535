"""Cross-stack references (`Fn::GetStackOutput`, weak references) sit only where CloudFormation accepts them."""

import json

import pytest

# Confirmed by live create-stack (aws-cloudformation/cfn-lint#4495, #4519; docs/aws-facts.md, "Cross-stack references
# and replacement", for what Fn::GetStackOutput is):
# directly in a resource property or an output, or inside these functions. Not Fn::Split, Conditions, Fn::ImportValue.
CONFIRMED_FUNCTIONS = {"Fn::Join", "Fn::If", "Fn::Select", "Fn::Sub", "Fn::Base64"}


def unconfirmed_references(template: dict) -> list[str]:
    """Where a ``Fn::GetStackOutput`` sits outside a confirmed position: ``<path> (inside <functions>)``."""
    found = []

    def walk(value, path: list[str], functions: list[str]) -> None:
        if isinstance(value, dict):
            if "Fn::GetStackOutput" in value:
                where = "/".join(path)
                in_place = (len(path) >= 3 and path[0] == "Resources" and path[2] == "Properties") or (
                    len(path) >= 3 and path[0] == "Outputs" and path[2] == "Value"
                )
                wrong = [f for f in functions if f not in CONFIRMED_FUNCTIONS]
                if wrong or not in_place:
                    found.append(f"{where} (inside {', '.join(functions) or 'no function'})")
                return
            for key, item in value.items():
                walk(item, [*path, key], [*functions, key] if key.startswith("Fn::") or key == "Ref" else functions)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, [*path, str(index)], functions)

    walk(template, [], [])
    return found


def test_no_cross_stack_reference_sits_where_cloudformation_was_not_shown_to_accept_it(synthesized):
    paths = synthesized.template_paths()
    assert len(paths) >= 12
    references = sum(json.dumps(json.loads(p.read_text())).count("Fn::GetStackOutput") for p in paths)
    assert references > 100  # the model stacks do read the shared stack's outputs
    found = {p.name: unconfirmed_references(json.loads(p.read_text())) for p in paths}
    assert {name: where for name, where in found.items() if where} == {}


@pytest.mark.parametrize(
    "value, where",
    [
        (
            {"Fn::Select": [1, {"Fn::Split": ["/", {"Fn::GetStackOutput": {"StackName": "S", "OutputName": "O"}}]}]},
            "Resources/A/Properties/P/Fn::Select/1/Fn::Split/1 (inside Fn::Select, Fn::Split)",
        ),
        (
            {"Fn::ImportValue": {"Fn::GetStackOutput": {"StackName": "S", "OutputName": "O"}}},
            "Resources/A/Properties/P/Fn::ImportValue (inside Fn::ImportValue)",
        ),
    ],
)
def test_the_walk_finds_a_planted_reference_inside_split_or_import_value(value, where):
    template = {"Resources": {"A": {"Type": "AWS::SNS::Topic", "Properties": {"P": value}}}}
    assert unconfirmed_references(template) == [where]


def test_the_walk_accepts_the_confirmed_positions():
    reference = {"Fn::GetStackOutput": {"StackName": "S", "OutputName": "O"}}
    template = {
        "Resources": {
            "A": {"Type": "AWS::SNS::Topic", "Properties": {"P": reference, "Q": {"Fn::Join": ["/", [reference]]}}}
        },
        "Outputs": {"O": {"Value": {"Fn::Sub": ["${x}", {"x": reference}]}}},
    }
    assert unconfirmed_references(template) == []
    assert unconfirmed_references({"Conditions": {"C": {"Fn::Equals": [reference, "x"]}}}) == [
        "Conditions/C/Fn::Equals/0 (inside Fn::Equals)"
    ]
