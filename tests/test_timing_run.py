"""make test's timing run collects only the files the Makefile's TIMING_FILES lists; a timing test anywhere else
fails the collection instead of never running."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, TIMING_MARK_TEXT

MARKERS = f"import pytest\n\ntiming = {TIMING_MARK_TEXT}\n"  # a team's shared marker, imported by its tests
ALIASED = "from markers import timing\n\n\n@timing\ndef test_hidden():\n    pass\n"
MARKED = f"import pytest\n\n\n@{TIMING_MARK_TEXT}\ndef test_marked():\n    pass\n"


def collect(path) -> subprocess.CompletedProcess:
    """`pytest --collect-only` of one file with this suite's conftest and settings."""
    return subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pytest.ini"), "-p", "tests.conftest",
                           "--collect-only", "-q", "-p", "no:cacheprovider", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_makefile_lists_every_test_file_that_holds_the_marker_text():
    """Every file pytest collects tests from (its default test_*.py and *_test.py) that holds the text."""
    listed = subprocess.run(["make", "--no-print-directory", "-s", "-f", "Makefile", "-f", "-", "print-timing-files"],
                            input="print-timing-files:\n\t@echo $(TIMING_FILES)\n", cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    holders = {path.relative_to(ROOT).as_posix() for pattern in ("test_*.py", "*_test.py")
               for path in (ROOT / "tests").rglob(pattern) if TIMING_MARK_TEXT in path.read_text()}
    assert sorted(listed) == sorted(holders)
    assert {"tests/bench/test_bench_smoke.py", "tests/server/test_admission_live.py"} <= holders


def test_a_timing_test_the_timing_run_would_not_collect_fails_the_collection(tmp_path):
    (tmp_path / "markers.py").write_text(MARKERS)
    (tmp_path / "test_hidden_timing.py").write_text(ALIASED)
    (tmp_path / "test_marked_timing.py").write_text(MARKED)
    hidden = collect(tmp_path / "test_hidden_timing.py")
    assert hidden.returncode != 0
    assert f"test_hidden_timing.py mark tests `timing` without the text {TIMING_MARK_TEXT!r}" in hidden.stdout + hidden.stderr
    marked = collect(tmp_path / "test_marked_timing.py")
    assert marked.returncode == 0, marked.stdout + marked.stderr
