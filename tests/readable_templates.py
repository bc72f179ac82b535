"""Synthesized templates as a reviewer reads them in a snapshot diff.

One line per value where it fits in WIDTH characters, CloudFormation's short forms for intrinsics (`!Ref`, `!GetAtt`,
`!ImportValue`, and `!StackOutput Stack.Output` for CDK's cross-region `Fn::GetStackOutput`), lists of
`{Key|Name, Value}` (tags, dimensions, environment variables) as a mapping, and no `aws:cdk:path` metadata (the logical
id says it). Asset hashes are `<hash>`. A model stack that repeats an earlier one of its environment (the same server,
another model) is written as the lines that differ from it, with both models' names read as `<model>`, so each
environment shows one stack per server kind in full.
"""

from __future__ import annotations

import difflib
import json
import re

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

WIDTH = 118
HASH = re.compile(r"[0-9a-f]{64}")
PAIR_KEYS = ({"Key", "Value"}, {"Name", "Value"})
LOGICAL_ID_HASH = re.compile(r"(<model>[A-Za-z0-9]*?)[0-9A-F]{8}\b")


def _short(value):
    if isinstance(value, dict):
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref" and isinstance(arg, str):
                return f"!Ref {arg}"
            if key == "Fn::GetAtt" and isinstance(arg, list) and all(isinstance(a, str) for a in arg):
                return f"!GetAtt {'.'.join(arg)}"
            if key == "Fn::ImportValue" and isinstance(arg, str):
                return f"!ImportValue {arg}"
            if (
                key == "Fn::GetStackOutput"
                and isinstance(arg, dict)
                and set(arg) == {"StackName", "OutputName", "Region"}
            ):
                return f"!StackOutput {arg['StackName']}.{arg['OutputName']} ({arg['Region']})"
        return {key: _short(item) for key, item in value.items()}
    if isinstance(value, list):
        shortened = [_short(item) for item in value]
        if shortened and all(isinstance(i, dict) and set(i) in PAIR_KEYS for i in shortened):
            names = [item["Key" if "Key" in item else "Name"] for item in shortened]
            if all(isinstance(n, str) for n in names) and len(set(names)) == len(names):
                return {name: item["Value"] for name, item in zip(names, shortened, strict=True)}
        return shortened
    return value


def _reads_as_string(value: str) -> bool:
    """Whether the bare text reads back as this string (not "true", "64", "null", "[..." or an empty string)."""
    try:
        json.loads(value)
    except ValueError:
        return bool(value) and value.strip() == value and not value.startswith(("{", "[", '"')) and "\n" not in value
    return False


def _inline(value) -> str:
    if isinstance(value, str) and _reads_as_string(value):
        return value
    return json.dumps(value, separators=(", ", ": "))


def _lines(value, indent: int = 0) -> list[str]:
    pad = "  " * indent
    out = []
    items = value.items() if isinstance(value, dict) else ((None, item) for item in value)
    for key, item in items:
        head = f"{pad}{key}: " if key is not None else f"{pad}- "
        if isinstance(item, (dict, list)) and item and len(head) + len(_inline(item)) > WIDTH:
            inner = _lines(item, indent + 1)
            if key is None and isinstance(item, dict):
                out.append(head + inner[0].lstrip())
                out.extend(inner[1:])
            else:
                out.append(head.rstrip())
                out.extend(inner)
        else:
            out.append(head + _inline(item))
    return out


def _without_paths(template: dict) -> dict:
    template = json.loads(HASH.sub("<hash>", json.dumps(template)))
    for resource in template.get("Resources", {}).values():
        metadata = resource.get("Metadata")
        if metadata is not None:
            metadata.pop("aws:cdk:path", None)
            if not metadata:
                del resource["Metadata"]
    return template


def render_template(template: dict) -> list[str]:
    return _lines(_short(_without_paths(template)))


def _server_kind(template: dict) -> tuple:
    """What makes two model stacks alike: the container images and ports of their task definitions."""
    return tuple(
        sorted(
            (json.dumps(container.get("Image")), json.dumps(container.get("PortMappings")))
            for resource in template.get("Resources", {}).values()
            if resource["Type"] == "AWS::ECS::TaskDefinition"
            for container in resource["Properties"]["ContainerDefinitions"]
        )
    )


def _as_model(template: dict, name: str) -> dict:
    """The template with its model's name (as written in ids, paths and descriptions) read as <model>."""
    compact = re.sub(r"[^A-Za-z0-9]", "", name)
    pattern = re.compile(
        "|".join(re.escape(n) for n in sorted({name, compact, compact.capitalize()}, key=len, reverse=True))
    )
    # CDK's logical ids end in a hash of the construct path, which holds the model's name.
    return json.loads(LOGICAL_ID_HASH.sub(r"\1<id>", pattern.sub("<model>", json.dumps(template))))


def render_stacks(templates: dict[str, dict]) -> str:
    """Every stack of one environment ({stack id: template}); model stacks ("Model-<name>") after the first of their
    server kind as a diff against it."""
    out: list[str] = []
    first_of_kind: dict[tuple, tuple[str, list[str]]] = {}
    for stack_id in sorted(templates, key=lambda s: (s.startswith("Model-"), s)):
        template = templates[stack_id]
        kind = _server_kind(template)
        if not stack_id.startswith("Model-") or kind not in first_of_kind:
            if stack_id.startswith("Model-"):
                first_of_kind[kind] = (stack_id, render_template(_as_model(template, stack_id.removeprefix("Model-"))))
            out += [f"# {stack_id}", *render_template(template), ""]
            continue
        base_id, base = first_of_kind[kind]
        diff = difflib.unified_diff(
            base, render_template(_as_model(template, stack_id.removeprefix("Model-"))), lineterm="", n=2
        )
        out += [f"# {stack_id}: {base_id}'s lines, with its own model for <model>, except", *list(diff)[2:], ""]
    return "\n".join(out)


class ReadableSnapshot(SingleFileSnapshotExtension):
    """A syrupy snapshot of render_stacks' text, one .txt file per test."""

    _write_mode = WriteMode.TEXT
    file_extension = "txt"
