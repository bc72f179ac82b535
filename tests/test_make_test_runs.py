"""make test's three runs (Makefile, docs/testing.md): the timing and background runs collect only the files the
Makefile lists, a marked test anywhere else fails the collection instead of never running, the background run sits
at the idle CPU priority, and make test fails when any run fails."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import LANE_MARKERS, ROOT, mark_text

# Files each run must hold: the bench smoke run asserts ratios; pyright and the 200 models take a core for a minute.
KNOWN = {"timing": {"tests/bench/test_bench_smoke.py", "tests/server/test_admission_live.py"},
         "background": {"tests/test_lint.py", "tests/infra/test_many_models.py", "tests/server/test_image.py"}}


def make_variable(name: str) -> str:
    return subprocess.run(["make", "--no-print-directory", "-s", "-f", "Makefile", "-f", "-", "print-variable"],
                          input=f"print-variable:\n\t@echo $({name})\n", cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def collect(path) -> subprocess.CompletedProcess:
    """`pytest --collect-only` of one file with this suite's conftest and settings."""
    return subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pytest.ini"), "-p", "tests.conftest",
                           "--collect-only", "-q", "-p", "no:cacheprovider", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("marker", LANE_MARKERS)
def test_the_makefile_lists_every_test_file_that_holds_the_marker_text(marker):
    """Every file pytest collects tests from (its default test_*.py and *_test.py) that holds the text."""
    listed = make_variable(f"{marker.upper()}_FILES").split()
    holders = {path.relative_to(ROOT).as_posix() for pattern in ("test_*.py", "*_test.py")
               for path in (ROOT / "tests").rglob(pattern) if mark_text(marker) in path.read_text()}
    assert sorted(listed) == sorted(holders)
    assert KNOWN[marker] <= holders


@pytest.mark.parametrize("marker", LANE_MARKERS)
def test_a_marked_test_its_run_would_not_collect_fails_the_collection(tmp_path, marker):
    (tmp_path / "markers.py").write_text(f"import pytest\n\n{marker} = {mark_text(marker)}\n")  # a team's shared marker
    (tmp_path / "test_hidden.py").write_text(f"from markers import {marker}\n\n\n@{marker}\ndef test_hidden():\n    pass\n")
    (tmp_path / "test_marked.py").write_text(f"import pytest\n\n\n@{mark_text(marker)}\ndef test_marked():\n    pass\n")
    hidden = collect(tmp_path / "test_hidden.py")
    assert hidden.returncode != 0
    assert f"test_hidden.py marks tests `{marker}` without the text {mark_text(marker)!r}" in hidden.stdout + hidden.stderr
    marked = collect(tmp_path / "test_marked.py")
    assert marked.returncode == 0, marked.stdout + marked.stderr


def scheduling_policy(prefix: str) -> int:
    """The CPU scheduling policy of a process started behind ``prefix``."""
    command = [*prefix.split(), sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"]
    return int(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def test_the_background_run_gets_only_idle_cpu():
    assert scheduling_policy(make_variable("IDLE_PRIORITY")) == os.SCHED_IDLE
    assert scheduling_policy("nice -n 19") != os.SCHED_IDLE  # the check tells a merely lower priority apart


FAKE_PYTEST = """#!/bin/sh
echo "pytest $*"
case "$*" in *"$FAIL_RUN"*) exit 1;; esac
"""


@pytest.mark.parametrize(("failing", "expected"), [
    ("nothing fails", 0),
    ("-m not timing and not background", 1),  # the parallel run
    ("-m timing and", 1),
    ("-m background and", 1),
])
def test_make_test_runs_each_run_and_fails_when_any_fails(tmp_path, failing, expected):
    """The test recipe itself, with a stand-in pytest that fails the run named (set-up taken as done)."""
    fake = tmp_path / "pytest"
    fake.write_text(FAKE_PYTEST)
    fake.chmod(0o755)
    done = subprocess.run(["make", "--no-print-directory", "-o", "setup-dev", "test", f"PYTEST={fake}"], cwd=ROOT,
                          env={**os.environ, "FAIL_RUN": failing}, capture_output=True, text=True, timeout=60)
    assert done.returncode == (2 if expected else 0), done.stdout + done.stderr  # make's own status for a failed recipe
    ran = [line for line in done.stdout.splitlines() if line.startswith("pytest ")]
    runs = {"parallel": "-m not timing and not background", "timing": "-m timing and", "background": "-m background and"}
    expected_runs = {"parallel", "background"} | ({"timing"} if "not timing" not in failing else set())
    assert {name for name, args in runs.items() if any(args in line for line in ran)} == expected_runs, ran
    assert "background run:" in done.stdout  # its log, shown when it ends
