"""bundled_server_image(handler_package=..., handler=...): the bundled server's image with a team's handler package in
it. What synth refuses (naming the argument and the fix), the build context it assembles (the server's own, the
package, the Dockerfile that is the server's plus the team's layers), hadolint on that Dockerfile with a planted twin,
and MODEL_HANDLER in the task definition. The page's worked example: tests/consumer/test_team_handler.py."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from gpu_inference_constructs import (
    BundledServer,
    ConfigError,
    GpuCapacity,
    GpuCapacityProps,
    InferenceLoadBalancer,
    LoadBalancerProps,
    ModelBucket,
    ModelProps,
    ModelService,
    ServiceLogs,
    bundled_server_image,
)
from gpu_inference_constructs.servers.bundled import BUNDLED_USER, SERVER_IMAGE_DIRECTORY
from gpu_inference_constructs.servers.handler_image import SERVER_USER, SERVER_WORKDIR, BundledServerImage
from tests.infra.test_packaging import build_context_files
from tests.infra.test_service import hadolint

HANDLER = "ranker_pkg.handlers:Ranker"
PYPROJECT = (
    '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n\n'
    '[project]\nname = "ranker-pkg"\nversion = "1.0.0"\n'
)
LOCK = "numpy==2.1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n"


@pytest.fixture
def package(tmp_path) -> Path:
    """A flat-layout package: pyproject.toml beside ranker_pkg/, plus what a working copy has and an image must not."""
    root = tmp_path / "ranker"
    (root / "ranker_pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "ranker_pkg" / "__init__.py").write_text("")
    (root / "ranker_pkg" / "handlers.py").write_text("class Ranker: ...\n")
    for junk in (
        ".venv/bin/python",
        ".git/HEAD",
        "ranker_pkg/__pycache__/handlers.cpython-311.pyc",
        "tests/test_ranker.py",
        "ranker_pkg/test_handlers.py",
        "cdk.out/manifest.json",
        "dist/ranker_pkg-1.0.0.whl",
    ):
        (root / junk).parent.mkdir(parents=True, exist_ok=True)
        (root / junk).write_text("not for the image")
    return root


def refused(**kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        bundled_server_image(**kwargs)
    return caught.value


def test_without_arguments_it_is_the_bundled_image_as_before():
    image = bundled_server_image()
    assert not isinstance(image, BundledServerImage) and isinstance(image, ecs.ContainerImage)
    assert BundledServer().handler is None


def test_the_build_context_is_the_servers_the_package_and_the_servers_dockerfile_plus_the_teams_layers(
    package, tmp_path
):
    lock = tmp_path / "handler-requirements.lock"
    lock.write_text(LOCK)
    image = bundled_server_image(handler_package=package, handler=HANDLER, requirements=lock)
    assert isinstance(image, BundledServerImage) and image.handler == HANDLER
    context = image.directory
    found = {str(p.relative_to(context)): p.read_bytes() for p in context.rglob("*") if p.is_file()}
    server = {name: data for name, data in build_context_files().items() if name not in (".dockerignore", "Dockerfile")}
    assert {name: found[name] for name in server} == server, "every file of the server's own build context, unchanged"
    team = {name for name in found if name.startswith("handler_package/")}
    assert team == {
        "handler_package/pyproject.toml",
        "handler_package/ranker_pkg/__init__.py",
        "handler_package/ranker_pkg/handlers.py",
    }, "environments, caches, builds and tests left out"
    assert found["handler-requirements.lock"] == LOCK.encode()
    assert set(found) == set(server) | team | {"Dockerfile", "handler-requirements.lock"}
    bundled = (SERVER_IMAGE_DIRECTORY / "Dockerfile").read_text()
    dockerfile = found["Dockerfile"].decode()
    assert dockerfile.startswith(bundled.rstrip("\n") + "\n"), "the bundled server's Dockerfile, unchanged, first"
    added = dockerfile[len(bundled.rstrip("\n")) :].splitlines()
    instructions = [line.split()[0] for line in added if line and not line.startswith(("#", " "))]
    assert instructions == ["USER", "WORKDIR", "COPY", "RUN", "COPY", "RUN", "USER", "WORKDIR", "ENV"]
    assert "RUN python -m pip install --only-binary :all: --require-hashes -r handler-requirements.lock" in added
    assert (
        f"    && python -P -c \"from inference_server.handlers import handler_class; handler_class('{HANDLER}')\" \\"
        in added
    )
    assert added[-3:] == ["USER 10001:10001", "WORKDIR /scratch", f"ENV MODEL_HANDLER={HANDLER}"]
    assert not (package / "Dockerfile").exists(), "the team's directory is only read"


def test_the_generated_dockerfile_passes_hadolint(package, tmp_path):
    lock = tmp_path / "handler-requirements.lock"
    lock.write_text(LOCK)
    for requirements in (None, lock):
        image = bundled_server_image(handler_package=package, handler=HANDLER, requirements=requirements)
        assert isinstance(image, BundledServerImage)
        assert hadolint(image.directory / "Dockerfile") == (0, [])


def test_hadolint_finds_the_planted_twin_that_leaves_the_image_running_as_root(package, tmp_path):
    """The same generated Dockerfile, its last USER root (DL3002) and by name (DL3066): the call above can fail."""
    image = bundled_server_image(handler_package=package, handler=HANDLER)
    assert isinstance(image, BundledServerImage)
    planted = tmp_path / "Dockerfile"
    planted.write_text(
        (image.directory / "Dockerfile")
        .read_text()
        .replace("USER 10001:10001\nWORKDIR /scratch\nENV", "USER root\nWORKDIR /scratch\nENV")
    )
    returncode, findings = hadolint(planted)
    assert returncode == 1 and {"DL3002", "DL3066"} <= {f["code"] for f in findings}


def task_environment(
    image: ecs.ContainerImage, environment: dict[str, str] | None = None, context: dict | None = None
) -> tuple[dict, dict]:
    """(the server container's environment, the stack's docker image assets) of a model served with ``image``."""
    app = cdk.App(context=context)
    stack = cdk.Stack(app, "Ranking", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0a1b2c3d4e5f67890",
        vpc_cidr_block="10.20.0.0/16",
        availability_zones=["eu-west-1a", "eu-west-1b"],
        private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"],
    )
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "ranking-models-123456789012")
    logs_key = kms.Key.from_key_arn(
        stack, "LogsKey", "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-4333-8444-555555555555"
    )
    gpus = GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps(instance_types=("g5.xlarge",)))
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=bucket,
        props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    service = ModelService(
        stack,
        "Ranker",
        model=ModelProps(name="ranker", version="1", environment=environment or {}),
        server=BundledServer(image=image),
        capacity=gpus,
        model_source=ModelBucket(bucket),
        route=alb,
        logs=ServiceLogs(logs_key),
        environment="prod",
    )
    # Where ModelService finds a task's image assets (GpuCapacity.prepull: the warm pool pulls them): as before.
    assert isinstance(service.container.node.try_find_child("AssetImage"), ecr_assets.DockerImageAsset)
    assembly = app.synth()
    template = assembly.get_stack_by_name(stack.stack_name).template
    (task,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    (server,) = [c for c in task["Properties"]["ContainerDefinitions"] if c["Name"] == "server"]
    assets = json.loads((Path(assembly.directory) / f"{stack.artifact_id}.assets.json").read_text())["dockerImages"]
    return {e["Name"]: e["Value"] for e in server["Environment"]} | {"Image": json.dumps(server["Image"])}, {
        key: Path(assembly.directory) / asset["source"]["directory"] for key, asset in assets.items()
    }


def test_the_task_runs_the_teams_handler_from_the_image_asset_of_the_team_context(package, monkeypatch):
    monkeypatch.chdir(package.parent)  # a relative path, as the page writes it: from where the app runs
    environment, assets = task_environment(bundled_server_image(handler_package="./ranker", handler=HANDLER))
    assert environment["MODEL_HANDLER"] == HANDLER
    (digest,) = assets
    assert f":{digest}" in environment["Image"], (
        "the server container runs the image asset built from the team's context"
    )
    staged = assets[digest]
    assert (staged / "handler_package" / "ranker_pkg" / "handlers.py").is_file()
    assert (staged / "Dockerfile").read_text().endswith(f"ENV MODEL_HANDLER={HANDLER}\n")
    plain, plain_assets = task_environment(bundled_server_image())
    assert "MODEL_HANDLER" not in plain and set(plain_assets) != set(assets)


def test_the_image_asset_is_the_same_on_every_synth_and_follows_the_handler(package):
    first = task_environment(bundled_server_image(handler_package=package, handler=HANDLER))[1]
    again = task_environment(bundled_server_image(handler_package=package, handler=HANDLER))[1]
    other = task_environment(bundled_server_image(handler_package=package, handler="ranker_pkg.handlers:Other"))[1]
    assert set(first) == set(again) and set(first) != set(other)


def test_a_model_that_sets_model_handler_too_is_refused(package):
    server = BundledServer(image=bundled_server_image(handler_package=package, handler=HANDLER))
    with pytest.raises(
        ConfigError, match=r"^environment: \['MODEL_HANDLER'\] .*'ranker_pkg\.handlers:Ranker'.*remove environment"
    ):
        server.check(ModelProps(name="ranker", version="1", environment={"MODEL_HANDLER": "other:Handler"}))
    # With the plain image a team names its own handler as before: nothing refused.
    BundledServer().check(ModelProps(name="ranker", version="1", environment={"MODEL_HANDLER": "other:Handler"}))


@pytest.mark.parametrize(
    "handler",
    [
        "ranker_pkg.handlers.Ranker",
        "ranker_pkg.handlers:",
        ":Ranker",
        "ranker-pkg:Ranker",
        "ranker_pkg.handlers:Outer.Ranker",
        "ranker_pkg handlers:Ranker",
        "a:b:C",
    ],
)
def test_a_handler_that_is_not_module_colon_class_is_refused(package, handler):
    error = refused(handler_package=package, handler=handler)
    assert (
        error.key == "handler"
        and "is not module:Class" in error.detail
        and "ranking_handler.handlers:RankingHandler" in error.detail
    )


def test_a_handler_in_a_module_named_inference_server_is_refused(package):
    error = refused(handler_package=package, handler="inference_server.mine:Ranker")
    assert error.key == "handler" and "would replace the server itself" in error.detail


def test_a_package_without_pyproject_or_setup_py_is_refused_naming_the_fix(package):
    (package / "pyproject.toml").unlink()
    error = refused(handler_package=package, handler=HANDLER)
    assert error.key == "handler_package" and "neither pyproject.toml nor setup.py" in error.detail
    assert "add a pyproject.toml" in error.detail
    (package / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    assert isinstance(bundled_server_image(handler_package=package, handler=HANDLER), BundledServerImage)


def test_a_package_that_does_not_hold_the_handlers_module_is_refused(package):
    error = refused(handler_package=package, handler="ranking.handlers:Ranker")
    assert error.key == "handler_package" and "module 'ranking'" in error.detail
    (package / "src").mkdir()
    (package / "ranker_pkg").rename(package / "src" / "ranker_pkg")
    assert isinstance(bundled_server_image(handler_package=package, handler=HANDLER), BundledServerImage), "src layout"


def test_a_missing_directory_is_refused(tmp_path):
    error = refused(handler_package=tmp_path / "nowhere", handler=HANDLER)
    assert error.key == "handler_package" and "is not a directory" in error.detail


@pytest.mark.parametrize(
    ("arguments", "key"),
    [
        ({"handler": HANDLER}, "handler_package"),
        ({"handler_package": "PACKAGE"}, "handler"),
        ({"requirements": "LOCK"}, "handler_package"),
    ],
)
def test_one_argument_without_the_other_is_refused(package, tmp_path, arguments, key):
    lock = tmp_path / "lock"
    lock.write_text(LOCK)
    given = {name: {"PACKAGE": package, "LOCK": lock}.get(value, value) for name, value in arguments.items()}
    error = refused(**given)
    assert error.key == key and error.detail.startswith("is missing")


def test_a_lock_without_hashes_is_refused(package, tmp_path):
    lock = tmp_path / "requirements.txt"
    lock.write_text("# written by hand\n--index-url https://pypi.org/simple\n" + LOCK + "requests==2.32.3\n")
    error = refused(handler_package=package, handler=HANDLER, requirements=lock)
    assert error.key == "requirements" and "'requests==2.32.3' has no --hash" in error.detail
    assert "--generate-hashes" in error.detail
    error = refused(handler_package=package, handler=HANDLER, requirements=tmp_path / "missing.lock")
    assert error.key == "requirements" and "is not a file" in error.detail


def test_the_added_layers_hand_the_image_back_to_the_servers_user_and_directory():
    """handler_image cannot import bundled_server (it imports handler_image): the two names of the user stay equal, and
    the bundled Dockerfile's last USER and WORKDIR are the ones the added layers restore."""
    dockerfile = (SERVER_IMAGE_DIRECTORY / "Dockerfile").read_text().splitlines()
    users = [line.split()[1] for line in dockerfile if line.startswith("USER ")]
    workdirs = [line.split()[1] for line in dockerfile if line.startswith("WORKDIR ")]
    assert SERVER_USER == BUNDLED_USER == users[-1] and SERVER_WORKDIR == workdirs[-1]


def test_synth_without_asset_staging_is_refused(package):
    """`cdk synth --no-staging` would leave the asset pointing at the temporary build context, gone at exit."""
    with pytest.raises(ConfigError, match=r"^handler_package: .*--no-staging.*staging on"):
        task_environment(
            bundled_server_image(handler_package=package, handler=HANDLER),
            context={"aws:cdk:disable-asset-staging": True},
        )


def test_an_image_given_to_a_container_directly_is_refused_without_staging_too(package):
    app = cdk.App(context={"aws:cdk:disable-asset-staging": True})
    task = ecs.Ec2TaskDefinition(cdk.Stack(app, "Team"), "Task")
    with pytest.raises(RuntimeError, match=r"handler_package: .*asset staging is off"):  # raised inside jsii's bind
        task.add_container(
            "server", image=bundled_server_image(handler_package=package, handler=HANDLER), memory_limit_mib=512
        )
