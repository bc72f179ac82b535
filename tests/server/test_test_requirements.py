"""The clients the protocol tests use are pinned in requirements-dev.txt and imported directly: a missing one fails
the run instead of silently skipping whole modules."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_test_skips_itself_on_a_missing_import():
    skipping = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("*.py")
        if path != Path(__file__).resolve() and "importorskip" in path.read_text()
    ]
    assert skipping == []


def test_the_protocol_clients_are_pinned_for_the_tests():
    pins = dict(
        re.findall(
            r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)$", (ROOT / "requirements-dev.txt").read_text(), re.MULTILINE
        )
    )
    assert {"openai", "tritonclient"} <= pins.keys()
