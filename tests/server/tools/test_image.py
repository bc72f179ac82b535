"""The image installs what requirements.txt pins into the base image's own Python, next to its torch: resolve
those pins against exactly that Python and torch, as the image build will, so a conflicting pin fails here
instead of in a user's `cdk deploy`. (Needs the package index, like `make setup-dev`.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

IMAGE = Path(__file__).resolve().parents[3] / "inference_image"
# The base image is Ubuntu 22.04 (glibc 2.35): wheels tagged manylinux up to 2.35 install there.
PLATFORMS = ["manylinux2014_x86_64", *(f"manylinux_2_{minor}_x86_64" for minor in range(17, 36))]


def dockerfile_arg(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", (IMAGE / "Dockerfile").read_text(), re.MULTILINE)
    assert match, f"the Dockerfile has no ARG {name}"
    return match.group(1)


@dataclass(frozen=True)
class Resolution:
    returncode: int
    stdout: str
    stderr: str
    report: Path


def _resolve(
    *requirements: str, workdir: Path, file: Path = IMAGE / "requirements.txt"
) -> tuple[subprocess.Popen, Path]:
    """pip resolving ``file`` (and ``requirements``) for the base image, started: the caller waits."""
    workdir.mkdir()
    report = workdir / "report.json"
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--report",
        str(report),
        "--python-version",
        dockerfile_arg("BASE_PYTHON"),
        "--implementation",
        "cp",
        "--only-binary",
        ":all:",
        *(arg for p in PLATFORMS for arg in ("--platform", p)),
        "-r",
        str(file),
        *requirements,
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), report


def _lock_without_six(directory: Path) -> Path:
    """The twin's lock: six (python-dateutil's dependency) taken out of a copy of the image's lock."""
    lock = directory / "requirements.lock"
    text = (IMAGE / "requirements.lock").read_text()
    lock.write_text(re.sub(r"^six==.*\n(?:    .*\n)*", "", text, flags=re.MULTILINE))
    assert "six==" in text and "six==" not in lock.read_text()
    return lock


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory) -> dict[str, Resolution]:
    """The four resolutions the tests below read, run at once: each is mostly pip waiting on the package index
    (about 12 s each, one after the other)."""
    root = tmp_path_factory.mktemp("resolutions")
    torch = f"torch=={dockerfile_arg('BASE_TORCH')}"
    without_six = _lock_without_six(root)
    runs = {
        "requirements": ((torch,), IMAGE / "requirements.txt"),
        "conflict": ((torch, "torch<2"), IMAGE / "requirements.txt"),
        "lock": (("--require-hashes",), IMAGE / "requirements.lock"),
        "lock without six": (("--require-hashes",), without_six),
    }
    started: dict[str, tuple[subprocess.Popen, Path]] = {}
    try:
        for index, (name, (requirements, file)) in enumerate(runs.items()):
            started[name] = _resolve(*requirements, workdir=root / str(index), file=file)
        done = {}
        for name, (process, report) in started.items():
            stdout, stderr = process.communicate(timeout=300)
            done[name] = Resolution(process.returncode, stdout, stderr, report)
        return done
    finally:
        for process, _ in started.values():
            if process.poll() is None:
                process.kill()
                process.wait()


def test_the_base_image_tag_and_its_pinned_torch_agree():
    assert dockerfile_arg("BASE_TORCH") in dockerfile_arg("BASE_IMAGE").split(":")[1].split("-")[0]
    pins = (IMAGE / "requirements.txt").read_text()
    assert not re.search(r"^torch\b", pins, re.MULTILINE), "torch comes from the base image, never from pip"


@pytest.mark.slow
def test_the_requirements_resolve_with_the_base_images_python_and_torch(resolutions):
    done = resolutions["requirements"]
    assert done.returncode == 0, done.stderr[-3000:]
    installed = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in json.loads(done.report.read_text())["install"]
    }
    assert installed["torch"].split("+")[0] == dockerfile_arg("BASE_TORCH")  # nothing asks pip for another torch
    for line in (IMAGE / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            assert installed[name.strip().lower().replace("_", "-")] == version.strip(), name


@pytest.mark.slow
def test_a_pin_that_conflicts_with_the_base_torch_fails(resolutions):
    done = resolutions["conflict"]
    assert done.returncode != 0 and "conflict" in (done.stderr + done.stdout).lower()


@pytest.mark.slow
def test_the_lock_installs_in_hash_checking_mode_for_the_base_images_python_without_torch(resolutions):
    """The build's install (--require-hashes -r requirements.lock), ignoring what is installed: every file's hash
    matches, every dependency of every locked package is itself in the lock, and none needs the base's torch."""
    done = resolutions["lock"]
    assert done.returncode == 0, done.stderr[-3000:]
    installed = {
        re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower(): item["metadata"]["version"]
        for item in json.loads(done.report.read_text())["install"]
    }
    locked = dict(re.findall(r"^([a-z0-9-]+)==(\S+) ", (IMAGE / "requirements.lock").read_text(), re.MULTILINE))
    assert installed == locked and "torch" not in installed


@pytest.mark.slow
def test_a_lock_missing_a_dependency_fails_the_hash_checking_install(resolutions):
    """The twin: the lock without six (_lock_without_six)."""
    done = resolutions["lock without six"]
    assert done.returncode != 0 and "must have their versions pinned" in done.stderr and "six" in done.stderr


def test_the_build_imports_every_server_module_the_lazy_libraries_and_the_image_codecs():
    from inference_server.tools import import_check

    build = (IMAGE / "Dockerfile").read_text()
    assert "&& python -P -m inference_server.tools.import_check \\" in build  # in the install RUN, before rm -rf /build
    on_disk = {
        ".".join(path.relative_to(IMAGE).with_suffix("").parts).removesuffix(".__init__")
        for path in (IMAGE / "inference_server").rglob("*.py")
    }
    assert set(import_check.server_modules()) == on_disk - {"inference_server"}
    assert {
        "inference_server.handlers.image",
        "inference_server.handlers.export",
        "inference_server.front.protocols.oip",
        "inference_server.front.protocols.openai",
    } <= on_disk
    assert {"PIL.Image", "torch.export"} <= set(import_check.LAZY_IMPORTS)
    done = subprocess.run(
        [sys.executable, "-P", "-m", "inference_server.tools.import_check"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_the_import_check_fails_naming_what_did_not_import(monkeypatch, capsys):
    from inference_server.tools import import_check

    monkeypatch.setattr(import_check, "LAZY_IMPORTS", (*import_check.LAZY_IMPORTS, "no_such_library"))
    from PIL import features

    monkeypatch.setattr(features, "check", lambda codec: codec != "jpg")  # a Pillow built without libjpeg
    import tarfile

    monkeypatch.delattr(tarfile, "data_filter")  # a Python before 3.11.4: the compile cache could not unpack safely
    assert import_check.main() == 1
    errors = capsys.readouterr().err
    assert "no_such_library: ModuleNotFoundError" in errors and "Pillow has no jpg support" in errors
    assert "tarfile has no data filter" in errors
