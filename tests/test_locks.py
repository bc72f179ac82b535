"""The locks `make` installs from (requirements*.lock, written by `make lock`) hold every pin of the requirements
they come from, each with its hashes: a pin edited in a requirements*.txt without `make lock` fails here, not on
a fresh machine. The server's image installs its lock (inference_image/requirements.lock) the same way, on top of
its base image's torch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCKS = {
    "requirements.txt": "requirements.lock",
    "requirements-dev.txt": "requirements-dev.lock",
    "requirements-checkov.txt": "requirements-checkov.lock",
    "inference_image/requirements.txt": "inference_image/requirements.lock",
    "inference_image/requirements-adapter-sync.txt": "inference_image/requirements-adapter-sync.lock",
}
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


def version_problems(wanted: dict[str, str], source: str, lock: Path) -> list[str]:
    """Each of ``wanted``'s pins (from ``source``) that ``lock`` holds at another version, or not at all."""
    have = locked(lock)
    return [
        f"{name}=={version} is pinned in {source} but {lock.name} has {have[name][0] if name in have else 'nothing'}: "
        "run `make lock`"
        for name, version in wanted.items()
        if have.get(name, ("",))[0] != version
    ]


def lock_problems(requirements: Path, lock: Path) -> list[str]:
    have = locked(lock)
    wanted = {name: version for name, version in pins(requirements).items() if name not in UNLOCKED}
    problems = version_problems(wanted, requirements.name, lock)
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
    requirements.write_text(
        (ROOT / "requirements.txt").read_text().replace("cdk-nag==", "cdk-nag==9.") + "torch==2.13.0\n"
    )
    lock = tmp_path / "requirements.lock"
    lock.write_text((ROOT / "requirements.lock").read_text().replace("    --hash=sha256:", "    # ", 2))
    problems = lock_problems(requirements, lock)
    assert any(p.startswith("cdk-nag==9.") and "run `make lock`" in p for p in problems), problems
    assert any("has no hash" in p for p in problems), problems
    assert not any("torch" in p for p in problems)


# Never in the image's lock: torch, its CUDA wheels and triton are the base image's. PyPI's torch brings CUDA wheels of
# another CUDA version than the base's, which pip would install into the image beside the base's (Makefile,
# `make lock`).
BASE_PROVIDED = re.compile(r"^(torch|triton|cuda-[a-z-]+|nvidia-(?!ml-py$)[a-z0-9-]+)$")


def image_lock_problems(lock: Path) -> list[str]:
    return [
        f"{name} is in {lock.name}: the base image provides it (with torch)"
        for name in locked(lock)
        if BASE_PROVIDED.match(name)
    ]


# Each stage of the image's Dockerfile and the lock it installs.
STAGE_LOCKS = {"server": "requirements.lock", "adapter-sync": "requirements-adapter-sync.lock"}


def dockerfile_problems(dockerfile: Path) -> list[str]:
    """Each stage's pip install: from its lock, in hash-checking mode, wheels only."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    problems = []
    for stage in re.split(r"^FROM ", text, flags=re.MULTILINE)[1:]:
        name = stage.split("\n", 1)[0].rsplit(" AS ", 1)[-1].strip()
        lock = STAGE_LOCKS.get(name)
        if lock is None:
            problems.append(f"{dockerfile.name}: stage {name!r} is not one of {sorted(STAGE_LOCKS)}")
            continue
        lines = stage.splitlines()
        installs = [line for line in lines if line.startswith("RUN ") and re.search(r"pip install .*-r ", line)]
        problems += [] if installs else [f"{dockerfile.name}: stage {name} installs no requirements file"]
        for line in installs:
            problems += [
                f"{dockerfile.name}: {line!r} lacks {flag}"
                for flag in (f"-r {lock}", "--require-hashes", "--only-binary :all:")
                if flag not in line
            ]
        if not re.search(rf"^COPY {re.escape(lock)} ", stage, re.MULTILINE):
            problems.append(f"{dockerfile.name}: stage {name} does not COPY {lock}")
    return problems


def test_the_image_lock_leaves_the_base_images_torch_and_its_cuda_wheels_out():
    lock = ROOT / "inference_image" / "requirements.lock"
    assert {"numpy", "pillow", "nvidia-ml-py"} <= locked(lock).keys()  # the server's own, though the base may have them
    assert image_lock_problems(lock) == []


def test_the_image_installs_its_lock_with_hashes_and_ships_it_in_its_build_context():
    image = ROOT / "inference_image"
    assert dockerfile_problems(image / "Dockerfile") == []
    assert "!requirements.lock" in (image / ".dockerignore").read_text().splitlines()
    assert '"server_image/requirements.lock"' in (ROOT / "constructs" / "pyproject.toml").read_text()  # in the wheel


def test_a_changed_image_pin_a_missing_hash_or_a_base_package_in_the_image_lock_is_found(tmp_path):
    image = ROOT / "inference_image"
    requirements = tmp_path / "requirements.txt"
    requirements.write_text((image / "requirements.txt").read_text().replace("pillow==", "pillow==9."))
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        (image / "requirements.lock").read_text().replace("    --hash=sha256:", "    # ", 2)
        + "nvidia-cublas-cu12==12.6.4.1 \\\n    --hash=sha256:"
        + "0" * 64
        + "\n    # via torch\n"
    )
    problems = lock_problems(requirements, lock)
    assert any(p.startswith("pillow==9.") and "run `make lock`" in p for p in problems), problems
    assert any("has no hash" in p for p in problems), problems
    assert image_lock_problems(lock) == [
        f"nvidia-cublas-cu12 is in {lock.name}: the base image provides it (with torch)"
    ]


@pytest.mark.parametrize(
    "planted, missing",
    [
        (("requirements.lock ./", "requirements.txt ./"), "does not COPY requirements.lock"),
        (("-r requirements.lock", "-r requirements.txt"), "lacks -r requirements.lock"),
        (("--require-hashes ", ""), "lacks --require-hashes"),
        (("--only-binary :all: ", ""), "lacks --only-binary :all:"),
        (("--require-hashes -r requirements.lock", "fastapi==0.163.2"), "installs no requirements file"),
    ],
)
def test_a_dockerfile_that_installs_without_the_lock_or_its_hashes_is_found(tmp_path, planted, missing):
    dockerfile = tmp_path / "Dockerfile"
    text = (ROOT / "inference_image" / "Dockerfile").read_text()
    assert planted[0] in text
    dockerfile.write_text(text.replace(planted[0], planted[1]))
    problems = dockerfile_problems(dockerfile)
    assert problems and all(missing in p for p in problems), problems  # one per stage the plant reaches


def app_lock_problems(app_lock: Path, dev_lock: Path) -> list[str]:
    """`make setup-dev` installs only the dev lock and stands for the app's set-up too (Makefile: DEV_PACKAGES)."""
    return version_problems({name: version for name, (version, _) in locked(app_lock).items()}, app_lock.name, dev_lock)


def test_the_dev_lock_holds_the_app_lock_at_the_same_versions(tmp_path):
    assert app_lock_problems(ROOT / "requirements.lock", ROOT / "requirements-dev.lock") == []
    dev_lock = tmp_path / "requirements-dev.lock"
    dev_lock.write_text((ROOT / "requirements-dev.lock").read_text().replace("\ncdk-nag==", "\ncdk-nag==9.", 1))
    (problem,) = app_lock_problems(ROOT / "requirements.lock", dev_lock)
    assert problem.startswith("cdk-nag==") and "requirements-dev.lock has 9." in problem
