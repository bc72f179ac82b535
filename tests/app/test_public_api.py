"""The app is the library's first consumer (issue 56): stacks/ and app.py import the library's names from its root,
each a name of ``gpu_inference_constructs.__all__``. What the app still takes from a module path is listed here and
may only shrink: the cdk.json form's checks that re-run the constructs' own (the config loader's), and CDK helpers
the stacks share with the library; a public validation entry is what replaces the first group."""

from __future__ import annotations

import ast
from pathlib import Path

import gpu_inference_constructs
from tests.conftest import ROOT

STILL_PRIVATE = {
    "capacity.gpu_packing.check_one_kind",
    "capacity.gpu_packing.check_shared_group_holds_deployment_at_peak",
    "capacity.gpu_packing.shared_service",
    "core.deployment_capacity.check_group_holds_deployment_at_peak",
    "core.deployment_capacity.tasks_for_deployment_at_peak",
    "core.errors.require",
    "core.errors.require_range",
    "core.instance_catalog.is_neuron_type",
    "core.model_props.service_deployment",
    "core.schedules.check_schedule_task_ranges",
    "routing.load_balancer.check_rule_priority",
    "routing.load_balancer.claim_priority",
    "servers.model_entry.ServerProps",
    "servers.model_entry.longest_request_key",
    "servers.model_entry.pool_of_entry",
    "servers.model_entry.server_for",
    "servers.model_entry.split_model_entry",
    "shared.log_retention.retention_days",
    "shared.acknowledgements.default_child",
    "shared.cdk_interfaces.as_key",
    "shared.cdk_interfaces.as_topic",
    "shared.cdk_interfaces.service_principal",
    "service.task.NO_TRACES_WARNING",
}


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
    assert deep == STILL_PRIVATE, (
        "new private imports" if deep - STILL_PRIVATE else "fewer: shrink STILL_PRIVATE",
        sorted(deep ^ STILL_PRIVATE),
    )


def test_the_walk_finds_a_planted_private_import(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from gpu_inference_constructs import ModelService\n"
        "from gpu_inference_constructs.service.model_service import ModelService as M\n"
    )
    assert library_imports(planted) == ({"ModelService"}, {"service.model_service.ModelService"})
