"""`make lint` runs ruff (check and format) and pyright with the repository's pyproject.toml over the whole tree, and
`make test` holds the whole tree to them (test_the_repository_is_ruff_clean, test_the_repository_is_ruff_formatted,
test_the_repository_is_pyright_clean). The other tests are the twins: the same CLIs, the same configuration, on planted
defects they must report."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pyproject.toml"


def _tool(name: str, *where: str) -> str:
    found = shutil.which(name) or next((str(ROOT / w) for w in where if (ROOT / w).exists()), None)
    assert found, f"{name} is not installed: run `make setup-dev`"
    return found


def ruff(*paths: Path) -> tuple[int, set[str]]:
    done = subprocess.run(
        [
            _tool("ruff", ".venv/bin/ruff"),
            "check",
            "--config",
            str(CONFIG),
            "--no-cache",
            "--output-format",
            "json",
            *map(str, paths),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return done.returncode, {finding["code"] for finding in json.loads(done.stdout)}


def ruff_format_check(*paths: Path) -> tuple[int, str]:
    done = subprocess.run(
        [_tool("ruff", ".venv/bin/ruff"), "format", "--check", "--config", str(CONFIG), "--no-cache", *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return done.returncode, done.stdout


def pyright(project: Path) -> tuple[int, list[str]]:
    """Pyright with ``project``'s settings over its include."""
    done = subprocess.run(
        [_tool("pyright", "node_modules/.bin/pyright"), "--outputjson", "--project", str(project)],
        capture_output=True,
        text=True,
        cwd=project,
    )
    report = json.loads(done.stdout)
    assert report["summary"]["filesAnalyzed"] >= 1, report["summary"]
    return done.returncode, [d["rule"] for d in report["generalDiagnostics"] if d["severity"] == "error"]


def test_the_repository_is_ruff_clean():
    code, found = ruff(ROOT)
    assert (code, found) == (0, set()), (
        f"ruff finds {sorted(found)}: run `.venv/bin/ruff check --fix .`, then fix the rest"
    )


def test_the_repository_is_ruff_formatted():
    code, report = ruff_format_check(ROOT)
    assert code == 0, f"{report}\nrun `.venv/bin/ruff format .`"


def test_ruff_format_reports_a_planted_hand_wrapped_call(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("def f(a, b):\n    return g(a,\n             b)\n")
    code, report = ruff_format_check(planted)
    assert code == 1 and "planted.py" in report, report
    planted.write_text("def f(a, b):\n    return g(a, b)\n")
    assert ruff_format_check(planted)[0] == 0


# About 50 s of a core: make test runs it in its background run, make test-fast leaves it to make lint.
@pytest.mark.slow
@pytest.mark.background
def test_the_repository_is_pyright_clean():
    code, rules = pyright(ROOT)
    assert (code, rules) == (0, []), (
        f"pyright finds {len(rules)} errors ({', '.join(sorted(set(rules)))}): run `node_modules/.bin/pyright`"
    )


def comment_line(columns: int) -> str:
    """A comment of words ``columns`` wide (E501 leaves a line of one long word alone)."""
    line = ("# " + "word " * columns)[:columns]
    assert len(line) == columns and not line.endswith(" ")
    return line + "\n"


def test_ruff_reports_each_selected_family_on_planted_defects(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import sys\n"  # F401, and I001 below: os after sys
        "import os\n"
        "from typing import Optional\n\n\n"
        "def f(x: Optional[int], items=[]) -> None:\n"  # UP045, B006
        "    print(undefined_name)\n"  # F821
        "    l = 1\n"  # E741
        "    return os.sep, l\n" + comment_line(121)  # E501: one column past the limit
    )
    code, found = ruff(planted)
    assert code == 1 and {"F401", "F821", "I001", "UP045", "B006", "E741", "E501"} <= found, found


def test_ruff_passes_a_clean_file(tmp_path):
    clean = tmp_path / "clean.py"
    clean.write_text("import os\n\n\ndef f(x: int | None) -> str:\n    return os.sep * (x or 1)\n" + comment_line(120))
    assert ruff(clean) == (0, set())


def test_pyright_with_the_repositorys_settings_reports_a_planted_type_error(tmp_path):
    settings = CONFIG.read_text().split("[tool.pyright]", 1)[1]
    mode = next(line for line in settings.splitlines() if line.startswith("typeCheckingMode"))
    (tmp_path / "pyproject.toml").write_text(f'[tool.pyright]\n{mode}\npythonVersion = "3.11"\n')
    (tmp_path / "planted.py").write_text("def f(x: int) -> str:\n    return x\n\n\nf('a')\n")
    code, rules = pyright(tmp_path)
    assert code == 1 and rules.count("reportArgumentType") == 1 and "reportReturnType" in rules, rules
    (tmp_path / "planted.py").write_text("def f(x: int) -> str:\n    return str(x)\n\n\nf(1)\n")
    assert pyright(tmp_path) == (0, [])
