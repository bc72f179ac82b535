"""The Dockerfile's adapter-sync stage copies only some of the server's modules and installs only its own lock: the
sidecar must import from exactly those files with nothing else importable (no torch, no FastAPI), as the stage's own
build check does, but here without Docker. The twin: a stage that forgets a module fails, naming it."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test starts an interpreter

IMAGE = Path(__file__).resolve().parents[3] / "inference_image"
LOCK = IMAGE / "requirements-adapter-sync.lock"

# Run in a child interpreter: only the standard library, the lock's modules and the copied package import.
IMPORT_CHECK = """
import importlib.abc, sys
allowed, root = set(sys.argv[1].split(",")), sys.argv[2]
class OnlyTheImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in allowed or top == "inference_server":
            return None
        raise ImportError(f"{name} is not in the adapter-sync image")
sys.meta_path.insert(0, OnlyTheImage())
import inference_server.adapters.__main__ as sidecar
assert sidecar.__file__.startswith(root), sidecar.__file__
"""


def stage_copies(dockerfile: Path) -> list[tuple[list[str], str]]:
    """The adapter-sync stage's COPY instructions of the server package: (sources, destination)."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    stage = next(
        s for s in re.split(r"^FROM ", text, flags=re.MULTILINE) if s.split("\n", 1)[0].endswith(" AS adapter-sync")
    )
    copies = []
    for line in stage.splitlines():
        parts = line.split()
        if parts[:1] == ["COPY"] and parts[1].startswith("inference_server"):
            copies.append((parts[1:-1], parts[-1]))
    return copies


def lay_out(copies: list[tuple[list[str], str]], root: Path) -> None:
    """The files as the stage copies them (WORKDIR /app stands at root)."""
    for sources, destination in copies:
        target = root / destination.removeprefix("./")
        for source in sources:
            if (IMAGE / source).is_dir():
                shutil.copytree(IMAGE / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(IMAGE / source, target)


def lock_modules() -> set[str]:
    """The top-level modules of the distributions the stage's lock installs."""
    names = {
        re.split(r"[=\s]", line)[0].lower() for line in LOCK.read_text().splitlines() if re.match(r"[a-z0-9]", line)
    }
    return {
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if any(d.lower().replace("_", "-") in names for d in dists)
    }


def import_check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK, ",".join(sorted(lock_modules())), str(root)],
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_sidecar_imports_from_the_stages_files_and_lock_alone(tmp_path):
    assert {"boto3", "botocore", "orjson"} <= lock_modules() and "torch" not in lock_modules()
    lay_out(stage_copies(IMAGE / "Dockerfile"), tmp_path)
    result = import_check(tmp_path)
    assert result.returncode == 0, result.stderr


def test_a_stage_that_forgets_a_module_fails_naming_it(tmp_path):
    copies = [
        ([s for s in sources if not s.endswith("piece_fetch.py")], d)
        for sources, d in stage_copies(IMAGE / "Dockerfile")
    ]
    lay_out(copies, tmp_path)
    result = import_check(tmp_path)
    assert result.returncode != 0 and "piece_fetch" in result.stderr
