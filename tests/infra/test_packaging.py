"""The library installs and imports as another team would use it."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

ROOT = Path(__file__).resolve().parents[2]


def test_import_constructs_is_the_real_library_not_our_folder():
    import constructs

    location = Path(constructs.__file__).resolve()
    assert "site-packages" in location.parts, location
    assert hasattr(constructs, "Construct")
    assert not list((ROOT / "constructs").glob("*.py")), "a loose .py in constructs/ merges into the real package"


def test_library_is_installed_under_its_own_name():
    spec = importlib.util.find_spec("gpu_inference_constructs")
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).resolve().is_relative_to(ROOT / "constructs" / "gpu_inference_constructs")


def test_another_team_builds_a_stack_from_the_public_import_path():
    from gpu_inference_constructs import InferenceNetwork, NetworkProps

    app = cdk.App()
    stack = cdk.Stack(app, "TheirStack", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    network = InferenceNetwork(stack, "Net", props=NetworkProps(availability_zones=("eu-west-1a", "eu-west-1b")))
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::EC2::VPC", 1)
    assert network.vpc is not None and network.endpoint_security_group is not None


IMAGE = ROOT / "inference_image"


def build_context_files() -> dict[str, bytes]:
    """What the Dockerfile copies: the files the bundled server's image is built from."""
    names = ("Dockerfile", ".dockerignore", "requirements.lock", "requirements-adapter-sync.lock", "pyproject.toml")
    files = [IMAGE / name for name in names]
    files += [
        p
        for p in (IMAGE / "inference_server").rglob("*")
        if p.suffix in (".py", ".typed") and "__pycache__" not in p.parts
    ]
    return {str(p.relative_to(IMAGE)): p.read_bytes() for p in files}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # setuptools builds in constructs/build/ and keeps what an earlier build put there: a file since deleted would
    # still ship. That folder is only a build cache (ignored by git), so each build starts without it.
    shutil.rmtree(ROOT / "constructs" / "build", ignore_errors=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(ROOT / "constructs"),
        ],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("gpu_inference_constructs-*.whl")
    return built


def test_the_wheel_carries_the_bundled_servers_build_context(wheel):
    """Before, the image could only be built from this repository's checkout (from_asset("inference_image"))."""
    with zipfile.ZipFile(wheel) as archive:
        shipped = {
            name.removeprefix("gpu_inference_constructs/server_image/"): archive.read(name)
            for name in archive.namelist()
            if name.startswith("gpu_inference_constructs/server_image/")
        }
    expected = build_context_files()
    assert len(expected) > 30 and shipped == expected


def test_a_team_with_only_the_wheel_synthesizes_the_bundled_server_image(wheel, tmp_path):
    """Installed from the wheel alone (not this checkout), run from another directory: bundled_server_image()
    (BundledServer's default) stages the image's build context for `cdk deploy`."""
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        timeout=300,
    )
    script = (
        "import json, pathlib, aws_cdk as cdk, gpu_inference_constructs as g\n"
        "from aws_cdk import aws_ecs as ecs\n"
        "app = cdk.App(outdir='out')\n"
        "stack = cdk.Stack(app, 'Team')\n"
        "ecs.Ec2TaskDefinition(stack, 'Task').add_container('server', image=g.bundled_server_image(), "
        "memory_limit_mib=512)\n"
        "app.synth()\n"
        "print(json.dumps({'library': g.__file__, 'staged': "
        "sorted(str(p.relative_to(next(pathlib.Path('out').glob('asset.*')))) for p in "
        "next(pathlib.Path('out').glob('asset.*')).rglob('*') if p.is_file())}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site), "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(found["library"]).is_relative_to(site)
    assert {"Dockerfile", "requirements.lock", "inference_server/__main__.py"} <= set(found["staged"])


def test_aws_cdk_libs_cloud_assembly_schema_module_is_the_one_installed():
    """aws-cdk.cloud-assembly-schema (a dependency of aws-cdk-lib) installs a module at the same path as
    aws-cdk-lib's own aws_cdk.cloud_assembly_schema; installed after it, it replaces it, and every read of a
    synth annotation fails ("Unknown interface: aws-cdk-lib.cloud_assembly_schema.MetadataEntry")."""
    import base64
    import hashlib
    from importlib import metadata

    path = "aws_cdk/cloud_assembly_schema/__init__.py"
    (entry,) = [f for f in metadata.distribution("aws-cdk-lib").files or [] if str(f) == path]
    assert entry.hash is not None
    installed = base64.urlsafe_b64encode(hashlib.sha256(Path(entry.locate()).read_bytes()).digest()).rstrip(b"=")
    assert installed.decode() == entry.hash.value, "reinstall aws-cdk-lib after its dependencies (make setup)"
