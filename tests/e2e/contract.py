"""The contract between a synthesized task definition and the image, read from the template JSON."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class TargetGroupContract:
    """One target group the service registers tasks in (canary, linear and blue/green have two) and its routes."""

    logical_id: str
    health_check_path: str
    health_check_port: int
    success_codes: str
    path_patterns: list[str]


@dataclass
class ModelContract:
    """What AWS would do with one model service, as the synthesized template says it."""

    environment_name: str
    model_name: str
    image: object  # the template's Image value
    command: list[str]
    environment: dict[str, object]  # values may be CloudFormation intrinsics
    secret_names: list[str]
    container_port: int
    user: str
    mount_paths: list[str]
    health_check_command: list[str]
    stop_timeout: int
    grace_period: int
    health_check_path: str
    health_check_port: int
    success_codes: str
    path_patterns: list[str] = field(default_factory=list)
    target_groups: list[TargetGroupContract] = field(default_factory=list)
    containers: dict[str, dict] = field(default_factory=dict)  # every container of the task, by name
    url_rewrites: list[dict] = field(default_factory=list)  # the listener rule's url-rewrite transforms

    @property
    def runs_bundled_image(self) -> bool:
        """The task runs the image built from inference_image/ (a CDK container asset), not another server."""
        return "container-assets" in json.dumps(self.image)


def load_contracts(template: dict | Path, environment_name: str) -> list[ModelContract]:
    """Each model service's contract, from a template (or its file) that holds the services, their target groups and
    rules."""
    document: dict = json.loads(template.read_text()) if isinstance(template, Path) else template
    resources = document["Resources"]

    def of_type(kind: str) -> dict:
        return {k: r for k, r in resources.items() if r["Type"] == kind}

    contracts = []
    for service in of_type("AWS::ECS::Service").values():
        properties = service["Properties"]
        task = resources[properties["TaskDefinition"]["Ref"]]["Properties"]
        containers = {c["Name"]: c for c in task["ContainerDefinitions"]}
        container = containers["server"]
        (binding,) = properties["LoadBalancers"]
        target_group_id = binding["TargetGroupArn"]["Ref"]
        target_group = resources[target_group_id]["Properties"]
        alternate = binding.get("AdvancedConfiguration", {}).get("AlternateTargetGroupArn")
        target_groups = [
            target_group_contract(
                logical_id, resources[logical_id]["Properties"], of_type("AWS::ElasticLoadBalancingV2::ListenerRule")
            )
            for logical_id in [target_group_id] + ([alternate["Ref"]] if alternate else [])
        ]
        patterns = target_groups[0].path_patterns
        rewrites = [
            rewrite
            for rule in of_type("AWS::ElasticLoadBalancingV2::ListenerRule").values()
            if any({"Ref": target_group_id} in forwarded_to(action) for action in rule["Properties"]["Actions"])
            for transform in rule["Properties"].get("Transforms", [])
            if transform["Type"] == "url-rewrite"
            for rewrite in transform["UrlRewriteConfig"]["Rewrites"]
        ]
        environment = {item["Name"]: item["Value"] for item in container.get("Environment", [])}
        assert binding["ContainerPort"] in [p["ContainerPort"] for p in container["PortMappings"]], (
            f"{environment_name}: the service registers port {binding['ContainerPort']} with the target group, "
            f"but the container maps {container['PortMappings']}"
        )
        contracts.append(
            ModelContract(
                environment_name=environment_name,
                model_name=_log_stream_prefix(container["LogConfiguration"]["Options"]).split("/")[0],
                image=container["Image"],
                command=container["Command"],
                environment=environment,
                secret_names=[secret["Name"] for secret in container.get("Secrets", [])],
                container_port=binding["ContainerPort"],
                user=container.get("User", "root"),
                mount_paths=[mount["ContainerPath"] for mount in container.get("MountPoints", [])],
                health_check_command=container["HealthCheck"]["Command"],
                stop_timeout=container["StopTimeout"],
                grace_period=properties["HealthCheckGracePeriodSeconds"],
                health_check_path=target_group["HealthCheckPath"],
                health_check_port=int(target_group.get("HealthCheckPort", target_group["Port"])),
                success_codes=target_group["Matcher"]["HttpCode"],
                path_patterns=patterns,
                target_groups=target_groups,
                containers=containers,
                url_rewrites=rewrites,
            )
        )
    return contracts


def forwarded_to(action: dict) -> list[dict]:
    """The target groups a listener rule action forwards to, plain or weighted."""
    if "TargetGroupArn" in action:
        return [action["TargetGroupArn"]]
    return [group["TargetGroupArn"] for group in action.get("ForwardConfig", {}).get("TargetGroups", [])]


def target_group_contract(logical_id: str, properties: dict, rules: dict) -> TargetGroupContract:
    patterns = [
        value
        for rule in rules.values()
        if any({"Ref": logical_id} in forwarded_to(action) for action in rule["Properties"]["Actions"])
        for condition in rule["Properties"]["Conditions"]
        for value in condition["PathPatternConfig"]["Values"]
    ]
    return TargetGroupContract(
        logical_id=logical_id,
        health_check_path=properties["HealthCheckPath"],
        health_check_port=int(properties.get("HealthCheckPort", properties["Port"])),
        success_codes=properties["Matcher"]["HttpCode"],
        path_patterns=patterns,
    )


def resolve(value: object, known: dict[str, str]) -> str:
    """A plain string for an environment value: a Ref (the model bucket's) or a `Logical.Attribute` GetAtt in
    ``known`` becomes the stand-in the test provides."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(resolve(part, known) for part in parts)
    if isinstance(value, dict) and "Ref" in value and value["Ref"] in known:
        return known[value["Ref"]]
    if isinstance(value, dict) and "Fn::GetAtt" in value and ".".join(value["Fn::GetAtt"]) in known:
        return known[".".join(value["Fn::GetAtt"])]
    raise AssertionError(f"the task definition's environment holds {value!r}, which the test cannot resolve")


@dataclass
class DockerfileContract:
    command: list[str]
    exposed_ports: list[int]
    health_check_command: list[str]
    user: str
    environment: dict[str, str]


def read_dockerfile(path: Path) -> DockerfileContract:
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    final_stage = text.split("\nFROM ")[-1]
    lines = [line.strip() for line in final_stage.splitlines() if line.strip() and not line.strip().startswith("#")]

    def instruction(name: str) -> list[str]:
        return [line[len(name) :].strip() for line in lines if line.upper().startswith(name + " ")]

    (cmd,) = instruction("CMD")
    (healthcheck,) = instruction("HEALTHCHECK")
    (user,) = instruction("USER")
    environment = {}
    for env in instruction("ENV"):
        for name, value in re.findall(r"(\w+)=(\S+)", env):
            environment[name] = value
    return DockerfileContract(
        command=json.loads(cmd),
        exposed_ports=[int(port) for expose in instruction("EXPOSE") for port in expose.split()],
        health_check_command=json.loads(healthcheck.split(" CMD ", 1)[1]) if " CMD " in f" {healthcheck}" else [],
        user=user,
        environment=environment,
    )


# Variables the container sets for libraries, the AWS SDK and the OpenTelemetry SDK rather than for the server's own
# settings.
LIBRARY_VARIABLES = frozenset(
    {
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "HOME",
        "TMPDIR",
        "OTEL_SERVICE_NAME",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_TRACES_SAMPLER",
        "OTEL_TRACES_SAMPLER_ARG",
    }
)


def _log_stream_prefix(options: dict) -> str:
    """``<model>/<version>``: awslogs' stream prefix, or FireLens's cloudwatch_logs output's."""
    return options.get("awslogs-stream-prefix") or options["log_stream_prefix"]


def unread_variables(contract: ModelContract, read_by_server: set[str]) -> list[str]:
    """Problems: variables or secrets the task sets that the server never reads."""
    where = f"{contract.environment_name}/{contract.model_name}"
    problems = []
    unread = sorted(set(contract.environment) - read_by_server - LIBRARY_VARIABLES)
    if unread:
        problems.append(
            f"{where}: the task definition sets {unread}, which the server never reads (inference_server/settings.py)"
        )
    unread_secrets = sorted(set(contract.secret_names) - read_by_server)
    if unread_secrets:
        problems.append(f"{where}: the task definition injects secrets {unread_secrets}, which the server never reads")
    return problems


def disagreements_with_dockerfile(contract: ModelContract, dockerfile: DockerfileContract) -> list[str]:
    """Problems: where the task definition and the Dockerfile describe different containers."""
    where = f"{contract.environment_name}/{contract.model_name}"
    problems = []

    def check(ok: bool, message: str) -> None:
        if not ok:
            problems.append(f"{where}: {message}")

    check(
        contract.command == dockerfile.command,
        f"task definition command {contract.command} differs from the Dockerfile's CMD {dockerfile.command}",
    )
    check(
        contract.container_port in dockerfile.exposed_ports,
        f"task definition port {contract.container_port} is not EXPOSEd by the Dockerfile ({dockerfile.exposed_ports})",
    )
    check(
        str(contract.container_port) == contract.environment.get("PORT") == dockerfile.environment.get("PORT"),
        f"container port {contract.container_port}, task definition PORT={contract.environment.get('PORT')} and "
        f"Dockerfile PORT={dockerfile.environment.get('PORT')} must agree",
    )
    check(
        contract.health_check_port == contract.container_port,
        f"target group health-checks port {contract.health_check_port} but the container listens on "
        f"{contract.container_port}",
    )
    check(
        contract.health_check_command[1:] == dockerfile.health_check_command,
        f"task definition health check {contract.health_check_command} differs from the Dockerfile's HEALTHCHECK "
        f"{dockerfile.health_check_command}",
    )
    check(
        contract.user == dockerfile.user,
        f"task definition runs as {contract.user} but the Dockerfile's USER is {dockerfile.user}",
    )
    mounts_cache = any(
        dockerfile.environment.get("MODEL_CACHE_DIR", "").startswith(mount + "/") for mount in contract.mount_paths
    )
    check(
        mounts_cache, f"the Dockerfile's MODEL_CACHE_DIR is outside the task's writable mounts {contract.mount_paths}"
    )
    return problems
