"""make test's three runs (Makefile, docs/testing.md): the timing and background runs collect only the files the
Makefile lists, a marked test anywhere else fails the collection instead of never running, the background run sits
at the idle CPU priority and sets no deadline, make test fails when any run fails, and stopping it ends every run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import LANE_MARKERS, ROOT, mark_text

# Files each run must hold: the bench smoke run asserts ratios; pyright and the 200 models take a core for a minute.
KNOWN = {
    "timing": {"tests/bench/test_bench_smoke.py", "tests/server/front/test_admission_live.py"},
    "background": {"tests/test_lint.py", "tests/infra/test_many_models.py"},
}


def make_variable(name: str) -> str:
    return subprocess.run(
        ["make", "--no-print-directory", "-s", "-f", "Makefile", "-f", "-", "print-variable"],
        input=f"print-variable:\n\t@echo $({name})\n",
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def collect(path) -> subprocess.CompletedProcess:
    """`pytest --collect-only` of one file with this suite's conftest and settings."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ROOT / "pytest.ini"),
            "-p",
            "tests.conftest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            str(path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("marker", LANE_MARKERS)
def test_the_makefile_lists_every_test_file_that_holds_the_marker_text(marker):
    """Every file pytest collects tests from (its default test_*.py and *_test.py) that holds the text."""
    listed = make_variable(f"{marker.upper()}_FILES").split()
    holders = {
        path.relative_to(ROOT).as_posix()
        for pattern in ("test_*.py", "*_test.py")
        for path in (ROOT / "tests").rglob(pattern)
        if mark_text(marker) in path.read_text()
    }
    assert sorted(listed) == sorted(holders)
    assert KNOWN[marker] <= holders


@pytest.mark.parametrize("marker", LANE_MARKERS)
def test_a_marked_test_its_run_would_not_collect_fails_the_collection(tmp_path, marker):
    (tmp_path / "markers.py").write_text(f"import pytest\n\n{marker} = {mark_text(marker)}\n")  # a team's shared marker
    hidden_test = f"from markers import {marker}\n\n\n@{marker}\ndef test_hidden():\n    pass\n"
    (tmp_path / "test_hidden.py").write_text(hidden_test)
    (tmp_path / "test_marked.py").write_text(f"import pytest\n\n\n@{mark_text(marker)}\ndef test_marked():\n    pass\n")
    hidden = collect(tmp_path / "test_hidden.py")
    assert hidden.returncode != 0
    assert (
        f"test_hidden.py marks tests `{marker}` without the text {mark_text(marker)!r}" in hidden.stdout + hidden.stderr
    )
    marked = collect(tmp_path / "test_marked.py")
    assert marked.returncode == 0, marked.stdout + marked.stderr


def scheduling_policy(prefix: str) -> int:
    """The CPU scheduling policy of a process started behind ``prefix``."""
    command = [*prefix.split(), sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"]
    return int(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def test_the_background_run_gets_only_idle_cpu():
    assert scheduling_policy(make_variable("IDLE_PRIORITY")) == os.SCHED_IDLE
    assert scheduling_policy("nice -n 19") != os.SCHED_IDLE  # the check tells a merely lower priority apart


def test_the_background_runs_tests_set_no_deadline():
    """At the idle priority a test may wait for a core as long as the other runs keep every core busy: a timeout
    there would fail a test that was only waiting."""
    for path in make_variable("BACKGROUND_FILES").split():
        assert "timeout" not in (ROOT / path).read_text(), f"{path} sets a timeout: keep it out of the background run"


# Prints its arguments, its CPU scheduling policy and the signals it ignores, then fails when its arguments hold
# $FAIL_RUN, or sleeps when they hold one of $SLEEP_RUNS (|-separated).
FAKE_PYTEST = """#!/bin/sh
echo "pytest $* ($(chrt -p $$ | sed -n 's/.*policy: //p') ignoring $(awk '/^SigIgn/ {print $2}' /proc/$$/status))"
case "$*" in *"$FAIL_RUN"*) exit 1;; esac
args="$*"; IFS='|'
for run in $SLEEP_RUNS; do case "$args" in *"$run"*) exec sleep 120;; esac; done
"""
RUNS = {"parallel": "-m not timing and not background", "timing": "-m timing and", "background": "-m background and"}


def make_test(tmp_path, *variables: str, **environment: str) -> subprocess.Popen:
    """The test recipe itself, with the stand-in pytest (set-up taken as done), as started from a terminal."""
    fake = tmp_path / "pytest"
    fake.write_text(FAKE_PYTEST)
    fake.chmod(0o755)
    command = ["make", "--no-print-directory", "-o", "setup-dev", "test", f"PYTEST={fake}", *variables]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, "FAIL_RUN": "never", "SLEEP_RUNS": "never", **environment},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def runs_started(output: str) -> dict[str, tuple[str, int]]:
    """{run: (its scheduling policy, the mask of the signals it ignores)} for each run the output shows started."""
    lines = [line for line in output.splitlines() if line.startswith("pytest ")]
    started = {
        name: line.rsplit("(", 1)[1].rstrip(")").split(" ignoring ")
        for name, args in RUNS.items()
        for line in lines
        if args in line
    }
    return {name: (policy, int(mask, 16)) for name, (policy, mask) in started.items()}


@pytest.mark.parametrize(("failing", "expected"), [("nothing", 0), *((run, 1) for run in RUNS)])
def test_make_test_runs_each_run_and_fails_when_any_fails(tmp_path, failing, expected):
    with make_test(tmp_path, FAIL_RUN=RUNS.get(failing, "never")) as done:
        output, _ = done.communicate(timeout=60)
    assert done.returncode == (2 if expected else 0), output  # make's own status for a failed recipe
    started = runs_started(output)
    assert started.keys() == {"parallel", "background"} | ({"timing"} if failing != "parallel" else set()), output
    assert started["background"][0] == "SCHED_IDLE" and started["parallel"][0] == "SCHED_OTHER", started
    # A shell starts a background command with SIGINT and SIGQUIT ignored: each run takes them as from a terminal.
    ctrl_c = 1 << (signal.SIGINT - 1) | 1 << (signal.SIGQUIT - 1)
    assert all(mask & ctrl_c == 0 for _, mask in started.values()), started
    assert "background run:" in output  # its log, shown at the end


@pytest.mark.parametrize("phase", ["parallel", "timing"])
@pytest.mark.parametrize("stopped_by", ["ctrl-c", "sigterm-to-make"])
def test_stopping_make_test_ends_every_run_at_once(tmp_path, phase, stopped_by):
    """Ctrl-C reaches make's process group; a SIGTERM to make alone reaches the recipe's shell. Either way each run
    still going gets SIGINT, as from a terminal, and ends within seconds (not at the 10 s SIGKILL that follows)."""
    # At normal priority: inside make test's own parallel run, an idle-priority stand-in could wait seconds for a core.
    done = make_test(tmp_path, "IDLE_PRIORITY=", SLEEP_RUNS=f"{RUNS[phase]}|{RUNS['background']}")
    started: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while len(started) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
            started = sleepers(done.pid)
        assert len(started) == 2, started
        signalled = time.monotonic()
        if stopped_by == "ctrl-c":
            os.killpg(done.pid, signal.SIGINT)
        else:
            done.send_signal(signal.SIGTERM)
        output, _ = done.communicate(timeout=30)
        assert time.monotonic() - signalled < 5, output
        ended_by = time.monotonic() + 5
        while any(pid_alive(pid) for pid in started) and time.monotonic() < ended_by:
            time.sleep(0.1)
        assert not any(pid_alive(pid) for pid in started), output
        assert done.returncode != 0 and ("timing" in runs_started(output)) == (phase == "timing"), output
    finally:
        for group in [done.pid, *started]:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        done.wait(10)


def sleepers(make_pid: int) -> list[int]:
    """The stand-in pytests' sleeps below make (each run has a session of its own)."""
    found = subprocess.run(["pgrep", "-f", "^sleep 120$"], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found if descends_from(int(pid), make_pid)]


def descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, IndexError, ValueError):
            return False
    return False


def pid_alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
