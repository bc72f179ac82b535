"""The latest benchmark figures live in bench/README.md only: one block there with both tables, none in README.md
(the top-level README points to bench/README.md instead of carrying a copy that can drift)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- bench-results:.*?-->\n(.*?)<!-- /bench-results -->", re.S)


def test_the_latest_results_are_in_bench_readme_only():
    (block,) = BLOCK.findall((ROOT / "bench" / "README.md").read_text())
    assert "| 64 clients |" in block and "| target (issue " in block  # both tables
    readme = (ROOT / "README.md").read_text()
    assert BLOCK.findall(readme) == [] and "| target (issue " not in readme
    assert "](bench/README.md)" in readme
