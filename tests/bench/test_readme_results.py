"""The latest benchmark figures are in README.md's "Benchmarks" and in bench/README.md: the same block in both."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- bench-results:.*?-->\n(.*?)<!-- /bench-results -->", re.S)


def test_both_readmes_carry_the_same_latest_results():
    blocks = [BLOCK.findall((ROOT / name).read_text()) for name in ("README.md", "bench/README.md")]
    assert [len(b) for b in blocks] == [1, 1]
    assert blocks[0] == blocks[1]
    assert "| 64 clients |" in blocks[0][0] and "| target (issue 14) |" in blocks[0][0]  # both tables
