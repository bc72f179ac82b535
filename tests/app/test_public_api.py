"""The app is the library's first consumer (issue 56): stacks/ and app.py import the library's names from its root,
each a name of ``gpu_inference_constructs.__all__``. The cdk.json form is the app's (stacks/model_entry.py,
stacks/config.py) and checks a configuration through the library's public ``validate_service``, not the constructs'
private checks. Nothing is taken from a module path (STILL_PRIVATE, which was 23 names at 0.3.0, is empty: the app
casts CDK's classes to their interfaces itself with typing.cast, and the warning id it acknowledges is public)."""

from __future__ import annotations

import ast
from pathlib import Path

import gpu_inference_constructs
from tests.conftest import ROOT

STILL_PRIVATE: dict[str, str] = {}


def library_imports(path: Path) -> tuple[set[str], set[str]]:
    """(names taken from the library's root, ``module.name`` taken from a module path) in ``path``."""
    root, deep = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gpu_inference_constructs":
            module = node.module.removeprefix("gpu_inference_constructs").lstrip(".")
            if module:
                deep |= {f"{module}.{alias.name}" for alias in node.names}
            else:
                root |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            deep |= {alias.name for alias in node.names if alias.name.startswith("gpu_inference_constructs.")}
    return root, deep


def app_files(root: Path = ROOT) -> list[Path]:
    return [*sorted((root / "stacks").glob("*.py")), root / "app.py"]


def test_the_app_takes_the_librarys_names_from_its_root():
    root, deep = set(), set()
    for path in app_files():
        names, paths = library_imports(path)
        root |= names
        deep |= paths
    assert root - set(gpu_inference_constructs.__all__) == set()  # every root name is public
    assert deep == set(STILL_PRIVATE), (
        "new private imports" if deep - set(STILL_PRIVATE) else "fewer: shrink STILL_PRIVATE",
        sorted(deep ^ set(STILL_PRIVATE)),
    )


def test_the_config_loader_takes_nothing_from_a_module_path():
    """stacks/config.py and stacks/model_entry.py, the cdk.json form, check through validate_service alone."""
    for name in ("config.py", "model_entry.py"):
        assert library_imports(ROOT / "stacks" / name)[1] == set(), name


def test_the_walk_finds_a_planted_private_import(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from gpu_inference_constructs import ModelService\n"
        "from gpu_inference_constructs.service.model_service import ModelService as M\n"
    )
    assert library_imports(planted) == ({"ModelService"}, {"service.model_service.ModelService"})
