"""The locks `make` installs from (requirements*.lock, written by `make lock`) hold every pin of the requirements
they come from, each with its hashes: a pin edited in a requirements*.txt without `make lock` fails here, not on
a fresh machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCKS = {"requirements.txt": "requirements.lock", "requirements-dev.txt": "requirements-dev.lock",
         "requirements-checkov.txt": "requirements-checkov.lock"}
UNLOCKED = {"torch"}  # installed beside the lock: its CPU build is a local file (Makefile, TORCH)
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)(?:\[[^\]]*\])?==([^\s;\\]+)", re.MULTILINE)


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(requirements: Path) -> dict[str, str]:
    """The pins of a requirements file and of the files it includes with -r."""
    found: dict[str, str] = {}
    for line in requirements.read_text().splitlines():
        if line.startswith("-r "):
            found |= pins(requirements.parent / line.split(maxsplit=1)[1])
    found |= {normalized(name): version for name, version in PIN.findall(requirements.read_text())}
    return found


def locked(lock: Path) -> dict[str, tuple[str, int]]:
    """Each locked package: its version and how many hashes it carries."""
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock.read_text())
    found = {}
    for entry in entries:
        match = PIN.match(entry)
        if match:
            found[normalized(match.group(1))] = (match.group(2), entry.count("--hash=sha256:"))
    return found


def lock_problems(requirements: Path, lock: Path) -> list[str]:
    have = locked(lock)
    problems = [f"{name}=={version} is pinned in {requirements.name} but the lock has "
                f"{have[name][0] if name in have else 'nothing'}: run `make lock`"
                for name, version in pins(requirements).items() if name not in UNLOCKED and have.get(name, ("",))[0] != version]
    problems += [f"{name} has no hash in {lock.name}" for name, (_, hashes) in have.items() if hashes == 0]
    problems += [f"{name} is in {lock.name}: it is installed beside the lock" for name in UNLOCKED & have.keys()]
    return problems


@pytest.mark.parametrize("requirements, lock", LOCKS.items())
def test_each_lock_holds_every_pin_of_its_requirements_with_hashes(requirements, lock):
    wanted = pins(ROOT / requirements).keys() - UNLOCKED
    assert wanted and len(locked(ROOT / lock)) >= len(wanted)
    assert lock_problems(ROOT / requirements, ROOT / lock) == []


def test_a_pin_changed_without_make_lock_is_found(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text((ROOT / "requirements.txt").read_text().replace("cdk-nag==", "cdk-nag==9.") + "torch==2.13.0\n")
    lock = tmp_path / "requirements.lock"
    lock.write_text((ROOT / "requirements.lock").read_text().replace("    --hash=sha256:", "    # ", 2))
    problems = lock_problems(requirements, lock)
    assert any(p.startswith("cdk-nag==9.") and "run `make lock`" in p for p in problems), problems
    assert any("has no hash" in p for p in problems), problems
    assert not any("torch" in p for p in problems)
