"""Issue 53: the changelog said ``TelemetryProps(trace_sampling_ratio=0.05)`` where the code and the page default to
0.01. Every ``Name(keyword=value)`` with a literal value in the Unreleased and 0.3.0 sections, of an exported name that
has that keyword, says the keyword's default."""

from __future__ import annotations

import ast
import inspect
import re

import gpu_inference_constructs as library
from tests.conftest import ROOT

CHANGELOG = ROOT / "constructs" / "CHANGELOG.md"
CALL = re.compile(r"`(\w+)\(([^`]*)\)`")
KEYWORD = re.compile(r"(\w+)=([^,()]+)")


def unreleased(changelog: str) -> str:
    return changelog.split("## Unreleased", 1)[1].split("\n## 0.2.0", 1)[0]  # Unreleased and 0.3.0


def wrong_defaults(section: str) -> list[tuple[str, str, object, object]]:
    """(name, keyword, written, default) for each literal keyword value that is not the keyword's default."""
    wrong = []
    for call in CALL.finditer(section):
        target = getattr(library, call.group(1), None)
        if target is None:
            continue
        parameters = inspect.signature(target).parameters
        for keyword in KEYWORD.finditer(call.group(2)):
            try:
                written = ast.literal_eval(keyword.group(2).strip())
            except (ValueError, SyntaxError):
                continue
            parameter = parameters.get(keyword.group(1))
            if written is Ellipsis or parameter is None or parameter.default is inspect.Parameter.empty:
                continue
            if written != parameter.default:
                wrong.append((call.group(1), keyword.group(1), written, parameter.default))
    return wrong


def test_the_changelog_states_each_default_as_the_code_has_it():
    assert wrong_defaults(unreleased(CHANGELOG.read_text())) == []


def test_the_check_finds_a_default_the_code_does_not_have():
    """The twin: the entry as it read before issue 53."""
    assert wrong_defaults("New: `TelemetryProps(trace_sampling_ratio=0.05, firelens=None)`") == [
        ("TelemetryProps", "trace_sampling_ratio", 0.05, 0.01)
    ]
