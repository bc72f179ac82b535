"""Every container of every task definition runs as a non-root user with a read-only root filesystem, or its task
definition says why not, for that container and that property only."""

from __future__ import annotations

from gpu_inference_constructs.service.task import CONTAINER_ACKNOWLEDGEMENTS
from tests.infra.conftest import ENVIRONMENTS


def is_root(user: str | None) -> bool:
    """No user runs as the image's default (root for every image we use); 0 and root are root, with any group."""
    return user is None or user.split(":")[0] in ("0", "root")


def findings(task_definition: dict) -> list[str]:
    """``<container>: <property>`` for each container that is root or writes its root, less what is acknowledged;
    an acknowledgement that answers nothing is a finding too."""
    acknowledged = task_definition.get("Metadata", {}).get(CONTAINER_ACKNOWLEDGEMENTS, {})
    found = []
    for container in task_definition["Properties"]["ContainerDefinitions"]:
        name = container["Name"]
        actual = {
            "user": is_root(container.get("User")),
            "readonly_root_filesystem": not container.get("ReadonlyRootFilesystem", False),
        }
        for what, failing in actual.items():
            reason = acknowledged.get(name, {}).get(what)
            if failing and (reason is None or len(reason) < 60):
                found.append(f"{name}: {what}")
            if not failing and reason is not None:
                found.append(f"{name}: {what} acknowledged but not needed")
    return found


def test_every_container_is_non_root_and_read_only_or_says_why(synthesized):
    task_definitions = {
        (environment, stack, logical_id): resource
        for (environment, stack), template in synthesized.templates.items()
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::ECS::TaskDefinition"
    }
    names = {c["Name"] for t in task_definitions.values() for c in t["Properties"]["ContainerDefinitions"]}
    assert {"server", "scratch-owner", "model-fetch", "metrics-collector"} <= names
    assert {key: found for key, t in task_definitions.items() if (found := findings(t))} == {}


# The only containers that may run as root or write their root filesystem: FireLens's router (FireLens requires root,
# and AWS for Fluent Bit writes its configuration and buffers at its root) and the scratch owner (root with CHOWN
# alone, on a read-only root, to hand Docker's root-owned volume to the server's user; it reads no input and exits).
ROOT_ALLOWED = {"log-router": {"user", "readonly_root_filesystem"}, "scratch-owner": {"user"}}


def root_or_writable(task_definition: dict) -> list[str]:
    """``<container>: <property>`` for each container that runs as root or writes its root and may not."""
    found = []
    for container in task_definition["Properties"]["ContainerDefinitions"]:
        name = container["Name"]
        failing = {
            "user": is_root(container.get("User")),
            "readonly_root_filesystem": not container.get("ReadonlyRootFilesystem", False),
        }
        found += [
            f"{name}: {what}" for what, fails in failing.items() if fails and what not in ROOT_ALLOWED.get(name, set())
        ]
    return found


def test_no_container_but_the_firelens_router_and_the_scratch_owner_is_root_or_writes_its_root(synthesized):
    """Least privilege over every environment's templates: the collector in every task (traces) runs as the ADOT
    collector's own user on a read-only root, as every other sidecar and the server do."""
    task_definitions = {
        (environment, logical_id): resource
        for (environment, _), template in synthesized.templates.items()
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::ECS::TaskDefinition"
    }
    collectors = [
        c
        for t in task_definitions.values()
        for c in t["Properties"]["ContainerDefinitions"]
        if c["Name"] == "metrics-collector"
    ]
    assert {environment for environment, _ in task_definitions} == set(ENVIRONMENTS) and collectors
    assert {key: found for key, t in task_definitions.items() if (found := root_or_writable(t))} == {}


def test_the_least_privilege_walk_finds_a_planted_root_collector():
    """The CloudWatch agent as its image's default user, with a writable root: the collector traces brought."""
    task_definition = {
        "Properties": {
            "ContainerDefinitions": [
                {"Name": "metrics-collector", "ReadonlyRootFilesystem": False},
                {"Name": "log-router", "ReadonlyRootFilesystem": False},
                {"Name": "scratch-owner", "User": "0", "ReadonlyRootFilesystem": True},
            ]
        }
    }
    assert root_or_writable(task_definition) == [
        "metrics-collector: user",
        "metrics-collector: readonly_root_filesystem",
    ]


def test_the_model_fetch_runs_as_the_servers_user_and_only_the_scratch_owner_is_root(env):
    config, template = env
    for task_definition in template.find_resources("AWS::ECS::TaskDefinition").values():
        containers = {c["Name"]: c for c in task_definition["Properties"]["ContainerDefinitions"]}
        if "model-fetch" not in containers:
            continue
        server, fetch, owner = containers["server"], containers["model-fetch"], containers["scratch-owner"]
        assert fetch["User"] == server["User"] and not is_root(fetch["User"])
        assert fetch["LinuxParameters"]["Capabilities"] == {"Drop": ["ALL"]}
        assert owner["LinuxParameters"]["Capabilities"] == {"Add": ["CHOWN"], "Drop": ["ALL"]}
        assert "aws " not in owner["Command"][0] and "chown" not in fetch["Command"][0]  # the root one reads no input
        assert fetch["DependsOn"] == [{"Condition": "SUCCESS", "ContainerName": "scratch-owner"}]


def test_the_walk_finds_a_planted_root_writable_sidecar_and_a_stale_acknowledgement():
    task_definition = {
        "Metadata": {CONTAINER_ACKNOWLEDGEMENTS: {"ok": {"user": "x" * 60}}},
        "Properties": {
            "ContainerDefinitions": [
                {"Name": "sidecar", "User": "0:0", "ReadonlyRootFilesystem": False},
                {"Name": "default-user", "ReadonlyRootFilesystem": True},
                {"Name": "ok", "User": "1000", "ReadonlyRootFilesystem": True},
            ]
        },
    }
    assert findings(task_definition) == [
        "sidecar: user",
        "sidecar: readonly_root_filesystem",
        "default-user: user",
        "ok: user acknowledged but not needed",
    ]
