"""Every advisor entry point is a pure-Python calculation: it runs without loading aws_cdk, jsii or constructs, so
no Node process starts and no Node end-of-life banner reaches the terminal. The twin plants an aws_cdk import and
the same check reports it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scenarios import write_scenario_cdk_json

ROOT = Path(__file__).resolve().parents[2]
CDK_PACKAGES = ("aws_cdk", "jsii", "constructs")
# Runs one module as `python -m` does, then writes which of CDK_PACKAGES it loaded to the file named first.
RUNNER = """
import json, runpy, sys
{plant}
loaded_file, module, *argv = sys.argv[1:]
sys.argv = [module, *argv]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as stop:
    assert stop.code in (0, None), stop.code
with open(loaded_file, "w") as out:
    json.dump(sorted({{name.split(".")[0] for name in sys.modules}} & set({packages!r})), out)
"""
MODELS = [
    {
        "name": "minilm",
        "params": 22_000_000,
        "dtype": "fp16",
        "kind": "encoder",
        "layers": 6,
        "hidden_size": 384,
        "heads": 12,
        "intermediate_size": 1536,
        "requests_per_second": 50,
        "p95_ms": 100,
    }
]


def cdk_loaded_by(module: str, argv: list[str], tmp_path: Path, plant: str = "") -> list[str]:
    """What running ``python -m module argv`` loaded that it should not: the CDK packages it imported, and a Node
    banner on stderr (jsii prints one when it starts Node 20)."""
    loaded_file = tmp_path / "loaded.json"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("JSII_SILENCE")}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER.format(plant=plant, packages=CDK_PACKAGES), str(loaded_file), module, *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(loaded_file.read_text())
    if "!!" in done.stderr or "end-of-life" in done.stderr:
        found.append("a Node banner on stderr")
    return found


def entry_points(tmp_path: Path) -> dict[str, tuple[str, list[str]]]:
    models = tmp_path / "models.json"
    models.write_text(json.dumps(MODELS))
    template = tmp_path / "template.json"
    template.write_text(json.dumps({"Resources": {}}))
    cdk_json = str(write_scenario_cdk_json(tmp_path))
    return {
        "advisor": (
            "gpu_inference_constructs.sizing",
            [
                "--params",
                "1e8",
                "--dtype",
                "fp16",
                "--kind",
                "encoder",
                "--layers",
                "12",
                "--hidden-size",
                "768",
                "--heads",
                "12",
                "--requests-per-second",
                "100",
                "--environment",
                "dev",
                "--cdk-json",
                cdk_json,
                "--json",
            ],
        ),
        "pack": ("gpu_inference_constructs.sizing", ["pack", str(models), "--json"]),
        "timeline": ("gpu_inference_constructs.sizing.timeline", ["--environment", "dev", "--cdk-json", cdk_json]),
        "scale_out": ("gpu_inference_constructs.sizing.scale_out", [str(template)]),
    }


@pytest.mark.parametrize("name", ["advisor", "pack", "timeline", "scale_out"])
def test_the_advisor_runs_without_aws_cdk_jsii_or_constructs(name, tmp_path):
    module, argv = entry_points(tmp_path)[name]
    assert cdk_loaded_by(module, argv, tmp_path) == []


def test_the_check_reports_a_planted_aws_cdk_import(tmp_path):
    module, argv = entry_points(tmp_path)["pack"]
    found = cdk_loaded_by(module, argv, tmp_path, plant="import aws_cdk")
    assert {"aws_cdk", "jsii", "constructs"} <= set(found)
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False).stdout
    if node.startswith("v20."):  # jsii's end-of-life banner is Node 20's
        assert "a Node banner on stderr" in found


def test_the_package_exports_load_on_first_use():
    """Importing the package loads no CDK module; the first exported construct does, as `from ... import X` did."""
    code = (
        "import sys, gpu_inference_constructs as p; before = 'aws_cdk' in sys.modules; p.GpuCapacity; "
        "from gpu_inference_constructs import ModelService; print(before, 'aws_cdk' in sys.modules, "
        "p.GpuCapacity.__module__, ModelService.__module__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.split() == [
        "False",
        "True",
        "gpu_inference_constructs.capacity.gpu_capacity",
        "gpu_inference_constructs.service.model_service",
    ]


def test_every_export_has_a_module_to_load_from():
    import gpu_inference_constructs as package

    assert set(package._MODULE_OF) == set(package.__all__)
    assert set(package.__all__) <= set(dir(package))
