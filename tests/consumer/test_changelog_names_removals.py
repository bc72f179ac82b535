"""Issue 43: a keyword a release removed failed with Python's TypeError and was missing from the changelog. Every
public name and keyword the last release (0.2.0, its API recorded in api_0_2_0.json by tests/consumer/public_api.py
from the release's commit) had and this tree lacks is named in constructs/CHANGELOG.md, beside what to write."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ROOT
from tests.consumer.public_api import public_api

RELEASE = Path(__file__).with_name("api_0_2_0.json")
CHANGELOG = ROOT / "constructs" / "CHANGELOG.md"


def removals(old: dict[str, list[str]], new: dict[str, list[str]]) -> list[tuple[str, str | None]]:
    """(name, None) for each public name that is gone, (name, keyword) for each keyword a kept name lost."""
    gone: list[tuple[str, str | None]] = [(name, None) for name in sorted(set(old) - set(new))]
    return gone + [
        (name, keyword) for name in sorted(set(old) & set(new)) for keyword in old[name] if keyword not in new[name]
    ]


def unlisted(found: list[tuple[str, str | None]], changelog: str) -> list[tuple[str, str | None]]:
    """The removals no changelog line names: the name in backticks, and with a keyword, the name and the keyword."""
    lines = changelog.splitlines()
    return [
        (name, keyword)
        for name, keyword in found
        if not any(f"`{name}" in line and (keyword is None or keyword in line) for line in lines)
    ]


def test_every_name_and_keyword_the_last_release_had_and_this_lacks_is_in_the_changelog():
    found = removals(json.loads(RELEASE.read_text()), public_api())
    assert unlisted(found, CHANGELOG.read_text()) == []


def test_the_check_finds_an_unlisted_removal():
    """The twin: a release that had ModelService(image_tag=) and a removed helper, neither in the changelog."""
    old = {**json.loads(RELEASE.read_text()), "make_everything": []}
    old["ModelService"] = [*old["ModelService"], "image_tag"]
    assert unlisted(removals(old, public_api()), CHANGELOG.read_text()) == [
        ("make_everything", None),
        ("ModelService", "image_tag"),
    ]


def test_the_recorded_release_is_an_api():
    release = json.loads(RELEASE.read_text())
    assert {"ModelService", "ModelProps", "GpuCapacity"} <= set(release) and "model" in release["ModelService"]
