"""Every module path of 0.2 (one flat folder) and every module path before the move (issue 56) still imports for
one minor version: it warns (DeprecationWarning naming the new path) and gives the very module object of the new
path, so isinstance and monkeypatching see one module."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import cast

import pytest

import gpu_inference_constructs
from gpu_inference_constructs.core.old_paths import GONE, OLD_PATHS

# The flat modules of the 0.2.0 release (constructs/gpu_inference_constructs/*.py at its commit, d19250c).
MODULES_0_2 = [
    "acknowledgements",
    "api_keys",
    "bundled_server",
    "deployment",
    "deployment_capacity",
    "errors",
    "gpu_capacity",
    "instance_catalog",
    "latency_alarms",
    "latency_goal",
    "load_balancer",
    "log_retention",
    "metric_names",
    "model_entry",
    "model_props",
    "model_service",
    "model_store",
    "monitoring",
    "network",
    "notifications",
    "presets",
    "result_cache",
    "scaling_props",
    "schedules",
    "server_contract",
    "service_scaling",
    "service_timing",
    "settings",
    "target_group_metrics",
    "vllm_server",
]
RELEASE = Path(__file__).with_name("api_0_2_0.json")


def fresh_import(path: str) -> tuple[ModuleType, list[warnings.WarningMessage]]:
    sys.modules.pop(path, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(path)
    return module, [w for w in caught if issubclass(w.category, DeprecationWarning)]


def test_every_0_2_module_has_a_new_home():
    assert sorted(set(MODULES_0_2) - set(OLD_PATHS) - set(GONE)) == []


@pytest.mark.parametrize("gone", sorted(GONE))
def test_a_module_the_app_took_over_is_refused_naming_what_replaces_it(gone):
    """cdk.json's model entry moved to the app (stacks/model_entry.py): its old paths say so instead of a bare
    ModuleNotFoundError."""
    sys.modules.pop(f"gpu_inference_constructs.{gone}", None)
    with pytest.raises(ModuleNotFoundError, match=r"is gone: .*stacks/model_entry\.py.*validate_service"):
        importlib.import_module(f"gpu_inference_constructs.{gone}")


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_an_old_module_path_warns_and_is_the_new_module(old):
    new = importlib.import_module(f"gpu_inference_constructs.{OLD_PATHS[old]}")
    module, caught = fresh_import(f"gpu_inference_constructs.{old}")
    assert module is new
    assert [str(w.message) for w in caught if f"gpu_inference_constructs.{OLD_PATHS[old]}" in str(w.message)]
    assert new.__spec__ is not None
    assert new.__spec__.name == new.__name__ == f"gpu_inference_constructs.{OLD_PATHS[old]}"


def test_from_an_old_path_import_a_name_warns_and_gives_the_same_object():
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n    from gpu_inference_constructs.model_service import ModelService\n"
        "except DeprecationWarning as e:\n    print('warned:', e)\n"
        "warnings.simplefilter('ignore')\n"
        "from gpu_inference_constructs.model_service import ModelService as Old\n"
        "from gpu_inference_constructs import ModelService\n"
        "from gpu_inference_constructs import model_service\n"
        "print(Old is ModelService, model_service.ModelService is ModelService)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert (
        "warned: gpu_inference_constructs.model_service moved to gpu_inference_constructs.service.model_service" in out
    )
    assert out.splitlines()[-1] == "True True"


def test_an_old_module_as_an_attribute_of_the_root_warns():
    gpu_inference_constructs.__dict__.pop("errors", None)  # an import of the old path earlier set the attribute
    with pytest.warns(DeprecationWarning, match=r"gpu_inference_constructs\.core\.errors"):
        module = cast(ModuleType, gpu_inference_constructs.errors)  # pyright: ignore[reportAttributeAccessIssue]
    assert module.ConfigError is gpu_inference_constructs.ConfigError


def test_monkeypatching_the_old_path_patches_the_new_module(monkeypatch):
    old, caught = fresh_import("gpu_inference_constructs.settings")
    assert caught
    monkeypatch.setattr("gpu_inference_constructs.settings.from_dict", "patched")
    assert importlib.import_module("gpu_inference_constructs.core.settings").from_dict == "patched"
    assert old.from_dict == "patched"


def test_every_0_2_name_still_imports_from_the_root():
    names = json.loads(RELEASE.read_text())
    missing = [
        name
        for name in names
        if name in gpu_inference_constructs.__all__ and getattr(gpu_inference_constructs, name, None) is None
    ]
    assert missing == []


def test_bundled_server_image_at_its_0_3_0_path_warns_and_is_the_moved_function():
    """Issue 56: it moved to servers.handler_image (it needs aws_cdk; servers.bundled loads without it); 0.2's
    ``bundled_server`` path reaches it too."""
    from gpu_inference_constructs.servers import bundled, handler_image

    with pytest.warns(DeprecationWarning, match=r"servers\.handler_image"):
        assert bundled.bundled_server_image is handler_image.bundled_server_image
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("gpu_inference_constructs.bundled_server")
        assert old.bundled_server_image is gpu_inference_constructs.bundled_server_image
    with pytest.raises(AttributeError):
        bundled.no_such_name  # noqa: B018  # pyright: ignore[reportAttributeAccessIssue]
