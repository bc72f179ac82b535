"""The latest benchmark figures live in bench/README.md only: one block there with its tables, and no row of them
copied into README.md or docs/ (a copy drifts: the pages link to bench/README.md instead)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT, documentation_files

BLOCK = re.compile(r"<!-- bench-results:.*?-->\n(.*?)<!-- /bench-results -->", re.S)
PAGES = [page for page in documentation_files() if page != ROOT / "bench" / "README.md"]
# The header rows of the block's two tables: the runs, and the targets with their figures.
HEADERS = ("| MiniLM, same text |", "| target (issue 23) | figure | met |")


def table_rows(text: str) -> set[str]:
    """The data rows of the markdown tables in ``text`` (not their header separators)."""
    return {
        line.strip()
        for line in text.splitlines()
        if line.strip().startswith("|") and not re.fullmatch(r"[|\s:-]+", line.strip())
    }


def copied_rows(block: str, pages: list[Path], root: Path = ROOT) -> dict[str, list[str]]:
    rows = table_rows(block)
    copied = {str(page.relative_to(root)): sorted(rows & table_rows(page.read_text())) for page in pages}
    return {page: found for page, found in copied.items() if found}


def test_the_latest_results_are_in_bench_readme_only():
    (block,) = BLOCK.findall((ROOT / "bench" / "README.md").read_text())
    assert all(any(row.startswith(header) for row in table_rows(block)) for header in HEADERS), HEADERS
    assert len(table_rows(block)) >= 10
    assert all(BLOCK.findall(page.read_text()) == [] for page in PAGES)
    assert copied_rows(block, PAGES) == {}
    assert "](bench/README.md)" in (ROOT / "README.md").read_text()


def test_a_copied_row_is_found(tmp_path):
    (block,) = BLOCK.findall((ROOT / "bench" / "README.md").read_text())
    row = sorted(table_rows(block))[0]
    page = tmp_path / "page.md"
    page.write_text(f"Figures:\n\n| a | b |\n|---|---|\n{row}\n")
    assert copied_rows(block, [page], root=tmp_path) == {"page.md": [row]}
