"""End to end, here: each synthesized task definition starts the real server the way ECS would, and the
load balancer's view of it holds (health check, path rules, container health check, Spot drain).

Read from the synthesized JSON, not from our Python objects. The only things added to the container's
environment point it at a local S3 (moto) and stand in for the task's scratch volume and role credentials.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import pytest

from tests.conftest import ROOT
from tests.e2e.contract import (
    ModelContract,
    disagreements_with_dockerfile,
    load_contracts,
    read_dockerfile,
    resolve,
    unread_variables,
)

ENVIRONMENTS = ["dev", "staging", "prod"]
API_KEY = "e2e-test-key"
BUCKET_REF = "ModelStoreModelsB220DB3A"
PYTHON = {"python", "python3"}


def contracts_for(synthesized, environment: str) -> list[ModelContract]:
    """The services that run our bundled server (the image built from inference_image/); vLLM has its own test."""
    return [c for c in load_contracts(synthesized.inference_template(environment), environment) if c.runs_bundled_image]


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(scope="module")
def fake_aws(monkeypatch_module, s3_endpoint):
    for name, value in aws_test_environment(s3_endpoint).items():
        monkeypatch_module.setenv(name, value)
    return s3_endpoint


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def aws_test_environment(endpoint: str) -> dict[str, str]:
    """Stand-ins for the task role's credentials and the VPC's S3 endpoint."""
    return {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def hold_port(port: int):
    """An exclusive lock, across every test process on this machine, on serving at ``port`` (release: close it).
    The task's port is fixed, so concurrent runs from other checkouts would otherwise reach each other's servers."""
    lock = open(Path(tempfile.gettempdir()) / f"gpu-inference-e2e-port-{port}.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    wait_until_port_is_free(port)
    return lock


def wait_until_port_is_free(port: int, timeout: float = 300) -> None:
    """The server must bind the task's own port; on a shared machine another test's server may hold it for a while,
    and requests would then reach that server instead of ours."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("0.0.0.0", port))
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"port {port} stayed in use for {timeout} s: another process serves on it"
                    ) from None
        time.sleep(1)


def all_contracts(synthesized):
    return [(env, contract) for env in ENVIRONMENTS for contract in contracts_for(synthesized, env)]


# Variables that say where a task runs, not what its server does: against the one local S3 (moto answers every
# region), task definitions that differ in nothing else start the same server, so one start serves them all, and each
# environment's listener rules and target groups are checked against it. Any other difference starts its own server.
PLACEMENT_VARIABLES = frozenset({"DEPLOYMENT_ENV", "AWS_REGION", "AWS_DEFAULT_REGION"})


def server_identity(contract: ModelContract) -> str:
    """What the process the task starts depends on: its image's tag, command, environment (less
    PLACEMENT_VARIABLES), secrets, user, scratch mount, port, probes and timeouts."""
    image_tag = json.dumps(contract.image).rsplit(":", 1)[-1]
    environment = {name: value for name, value in contract.environment.items() if name not in PLACEMENT_VARIABLES}
    # One exception: where DOCS is unset, the server serves its docs when DEPLOYMENT_ENV is local (its default).
    environment.setdefault("DOCS", str(contract.environment.get("DEPLOYMENT_ENV", "local") == "local").lower())
    return json.dumps(
        [
            image_tag,
            contract.command,
            environment,
            contract.secret_names,
            contract.user,
            contract.mount_paths,
            contract.container_port,
            contract.health_check_command,
            contract.health_check_path,
            contract.health_check_port,
            contract.success_codes,
            contract.grace_period,
            contract.stop_timeout,
        ],
        sort_keys=True,
    )


def same_servers(contracts: list[ModelContract]) -> list[list[ModelContract]]:
    """``contracts`` grouped by server_identity, in their order."""
    groups: dict[str, list[ModelContract]] = {}
    for contract in contracts:
        groups.setdefault(server_identity(contract), []).append(contract)
    return list(groups.values())


def container_environment(contract: ModelContract, bucket: str, scratch: Path, endpoint: str) -> dict[str, str]:
    # A model with the environment's shared result cache (staging) meets an unreachable one here: no Valkey listens
    # on 127.0.0.1:1, and a cache that does not answer must never fail a request.
    cache = {
        f"{logical}.Endpoint.{attribute}": stand_in
        for logical in result_caches(contract)
        for attribute, stand_in in (("Address", "127.0.0.1"), ("Port", "1"))
    }
    environment = {name: resolve(value, {BUCKET_REF: bucket, **cache}) for name, value in contract.environment.items()}
    # The task mounts a scratch volume at its mount path; here a temporary directory stands in for it.
    (mount,) = contract.mount_paths
    environment = {
        name: value.replace(mount, str(scratch), 1) if value.startswith(mount) else value
        for name, value in environment.items()
    }
    # The secret as the shared stack generates it: a JSON object of key names to keys.
    secrets = {name: json.dumps({"default": API_KEY}) for name in contract.secret_names}
    # PYTHONPATH: the image's server is this checkout's, not whichever copy the virtualenv has installed.
    return {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(ROOT / "inference_image"),
        **environment,
        **secrets,
        **aws_test_environment(endpoint),
    }


def result_caches(contract: ModelContract) -> set[str]:
    """The logical IDs of the ElastiCache caches the task definition's environment reads (GetAtt)."""
    return {value["Fn::GetAtt"][0] for value in _intrinsics(contract.environment.values()) if "Fn::GetAtt" in value}


def _intrinsics(values) -> list[dict]:
    found = []
    for value in values:
        if isinstance(value, dict):
            found.append(value)
            for inner in value.values():
                found.extend(_intrinsics(inner if isinstance(inner, list) else [inner]))
        elif isinstance(value, list):
            found.extend(_intrinsics(value))
    return found


def as_local_command(command: list[str]) -> list[str]:
    assert command and command[0] in PYTHON, f"the container command {command} does not start with python"
    return [sys.executable, *command[1:]]


def http(
    method: str, url: str, body: dict | None = None, headers: dict | None = None, timeout: float = 10
) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"content-type": "application/json", **(headers or {})}
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def publish_model(contract: ModelContract, uri: str, work: Path, environment: dict[str, str]) -> None:
    from inference_server.testing import build_tiny_bert

    model_dir = build_tiny_bert(work / "model", task=str(contract.environment["MODEL_TASK"]))
    result = subprocess.run(
        [sys.executable, "-m", "inference_server.publish", str(model_dir), uri],
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"the publishing command failed for {uri}:\n{result.stdout}\n{result.stderr}"


def wait_until_ready(process: subprocess.Popen, url: str, success: str, deadline_s: float, log: Path) -> float:
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        if process.poll() is not None:
            pytest.fail(f"the server exited with {process.returncode} before it was ready:\n{log.read_text()[-4000:]}")
        try:
            status, _ = http("GET", url, timeout=2)
            if str(status) == success:
                return time.monotonic() - started
            if status == 404:
                pytest.fail(f"the target group health-checks {url}, a path the server does not serve (404)")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.25)
    pytest.fail(
        f"{url} did not answer {success} within the health-check grace period "
        f"({deadline_s} s):\n{log.read_text()[-4000:]}"
    )


def server_variables() -> set[str]:
    """What the server reads: its Settings, and a pool's PoolSettings (the variable each field names)."""
    from inference_server.pool.pool_settings import PoolSettings
    from inference_server.settings import Settings

    return {field.name.upper() for field in dataclasses.fields(Settings)} | {
        field.metadata["variable"] for field in dataclasses.fields(PoolSettings)
    }


def test_every_variable_the_task_sets_is_read_by_the_server(synthesized):
    problems = [p for _, contract in all_contracts(synthesized) for p in unread_variables(contract, server_variables())]
    assert problems == []


def test_dockerfile_and_task_definition_agree(synthesized):
    dockerfile = read_dockerfile(ROOT / "inference_image" / "Dockerfile")
    problems = [
        p for _, contract in all_contracts(synthesized) for p in disagreements_with_dockerfile(contract, dockerfile)
    ]
    assert problems == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda c: c.environment.update(MODEL_CACHE_DIRECTORY=c.environment.pop("MODEL_CACHE_DIR")),
            r"sets \['MODEL_CACHE_DIRECTORY'\], which the server never reads",
        ),
        (
            lambda c: setattr(c, "secret_names", ["API_KEY"]),
            r"injects secrets \['API_KEY'\], which the server never reads",
        ),
        (lambda c: setattr(c, "container_port", 8081), r"task definition port 8081 is not EXPOSEd by the Dockerfile"),
        (lambda c: c.environment.update(PORT="9000"), r"task definition PORT=9000 and Dockerfile PORT=8080 must agree"),
        (
            lambda c: setattr(c, "health_check_port", 8000),
            r"target group health-checks port 8000 but the container listens on 8080",
        ),
        (
            lambda c: setattr(c, "command", ["python", "-m", "server"]),
            r"task definition command .* differs from the Dockerfile's CMD",
        ),
        (
            lambda c: setattr(c, "health_check_command", ["CMD-SHELL", "curl -f localhost:8080/health"]),
            r"task definition health check .* differs from the Dockerfile's HEALTHCHECK",
        ),
        (
            lambda c: setattr(c, "user", "root"),
            r"task definition runs as root but the Dockerfile's USER is 10001:10001",
        ),
    ],
    ids=[
        "renamed-variable",
        "renamed-secret",
        "container-port",
        "port-variable",
        "health-check-port",
        "command",
        "health-check",
        "user",
    ],
)
def test_a_broken_contract_names_the_side_that_disagrees(synthesized, change, expected):
    import re

    contract = dataclasses.replace(contracts_for(synthesized, "dev")[0])
    contract.environment = dict(contract.environment)
    change(contract)
    problems = unread_variables(contract, server_variables()) + disagreements_with_dockerfile(
        contract, read_dockerfile(ROOT / "inference_image" / "Dockerfile")
    )
    assert any(re.search(expected, problem) for problem in problems), problems


def test_equal_task_definitions_share_a_start_and_any_other_difference_gets_its_own(synthesized):
    minilm = [c for env in ENVIRONMENTS for c in contracts_for(synthesized, env) if c.model_name == "minilm"]
    # dev's runs on a GPU share with one vCPU (one HTTP worker), staging's reads the shared cache: three servers.
    assert [[c.environment_name for c in group] for group in same_servers(minilm)] == [["dev"], ["staging"], ["prod"]]
    # prod's in another region and environment: only where it runs differs, so it shares prod's start.
    prod = minilm[2]
    elsewhere = dataclasses.replace(
        prod,
        environment_name="elsewhere",
        environment={
            **prod.environment,
            **{name: f"{prod.environment[name]}-elsewhere" for name in PLACEMENT_VARIABLES if name in prod.environment},
        },
    )
    assert len(same_servers([prod, elsewhere])) == 1
    dev, prod = elsewhere, dataclasses.replace(prod, environment=dict(prod.environment))
    prod.environment["MAX_BATCH_SIZE"] = "32"
    assert len(same_servers([dev, prod])) == 2
    assert len(same_servers([dev, dataclasses.replace(prod, environment=dev.environment, stop_timeout=30)])) == 2
    undocumented = {name: value for name, value in dev.environment.items() if name != "DOCS"}
    local = dataclasses.replace(dev, environment={**undocumented, "DEPLOYMENT_ENV": "local"})
    assert len(same_servers([dataclasses.replace(dev, environment=undocumented), local])) == 2  # local serves docs


@pytest.mark.parametrize("model_name", ["minilm", "sentiment"])
def test_each_environments_task_definition_starts_a_server_that_its_load_balancer_can_use(
    synthesized, model_name, fake_aws, tmp_path
):
    contracts = [c for env in ENVIRONMENTS for c in contracts_for(synthesized, env) if c.model_name == model_name]
    assert [c.environment_name for c in contracts] == ENVIRONMENTS, f"{model_name} is not served in every environment"
    for index, group in enumerate(same_servers(contracts)):
        assert_serves_through_each_load_balancer(synthesized, group, fake_aws, tmp_path / str(index))


def assert_serves_through_each_load_balancer(
    synthesized, contracts: list[ModelContract], endpoint: str, work: Path
) -> None:
    """The first contract's task started as ECS would (ready within the grace period, the container health check,
    a drain on SIGTERM), and each contract's listener rules and target groups checked against it."""
    first = contracts[0]
    bucket = f"e2e-{first.environment_name}-{first.model_name}"
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=bucket)
    environment = container_environment(first, bucket, work / "scratch", endpoint)
    publish_model(first, environment["MODEL_URI"], work, environment)

    log = work / "server.log"
    port_lock = hold_port(first.container_port)
    with log.open("w") as output:
        process = subprocess.Popen(
            as_local_command(first.command), env=environment, stdout=output, stderr=subprocess.STDOUT
        )
    try:
        base = f"http://127.0.0.1:{first.health_check_port}"
        took = wait_until_ready(process, base + first.health_check_path, first.success_codes, first.grace_period, log)
        assert took < first.grace_period

        health = subprocess.run(as_local_command(first.health_check_command[1:]), env=environment, timeout=10)
        assert health.returncode == 0, "the container health check command failed against a ready server"
        for contract in contracts:
            assert_routes(synthesized, base, contract, environment)
        assert_drains_on_sigterm(process, base, first, log)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        port_lock.close()


def assert_routes(synthesized, base: str, contract: ModelContract, environment: dict[str, str]) -> None:
    """One environment's listener rules and target groups against the running server."""
    where = f"{contract.environment_name}'s {contract.model_name}"
    prefix = f"/{contract.model_name}"
    assert all(p.startswith(f"{prefix}/") for p in contract.path_patterns), (
        f"{where}: listener rules {contract.path_patterns} do not route to {prefix}/"
    )
    # Canary, linear and blue/green register the same tasks in a second target group: the load balancer must
    # find them ready and route the model's paths there too.
    config = synthesized.stages[contract.environment_name].config
    (model,) = [m for m in config.models if m.name == contract.model_name]
    assert len(contract.target_groups) == (2 if model.deployment.shifts_traffic else 1), where
    for group in contract.target_groups:
        assert group.path_patterns == contract.path_patterns, (
            f"{where}: {group.logical_id} is routed {group.path_patterns}"
        )
        status, _ = http("GET", f"http://127.0.0.1:{group.health_check_port}{group.health_check_path}", None, {})
        assert str(status) in group.success_codes.split(","), f"{where}: {group.logical_id}'s health check got {status}"
    status, body = http(
        "POST", f"{base}{prefix}/predict", {"text": "the service was quick and friendly"}, {"x-api-key": API_KEY}
    )
    assert status == 200, f"{where}: POST {prefix}/predict answered {status}: {body}"
    assert (body["model"], body["version"]) == (contract.model_name, contract.environment["MODEL_VERSION"]), where
    assert body["prediction"]
    assert_only_keyed_routes_are_forwarded(base, contract, environment)


def assert_only_keyed_routes_are_forwarded(base: str, contract: ModelContract, environment: dict[str, str]) -> None:
    """Every route of the server's own OpenAPI document (built from the task's settings: its docs are off, so the
    running server does not serve it) and outside it (docs, probes, metrics), as a client sends it: the listener
    rule forwards exactly the inference and metadata routes, and the running server answers each of those 401
    without a key or with a wrong one, and not 401 with the key; the probes answer the target group without one."""
    from inference_server.front.app import create_app
    from inference_server.settings import load_settings
    from inference_server.testing import local_service
    from tests.e2e.exposure import exposure_problems, route_table

    # The routes do not depend on the shared cache (whose IAM signing reads this process's AWS_REGION).
    settings = load_settings([], {k: v for k, v in environment.items() if not k.startswith("SHARED_CACHE_")})
    doc = create_app(local_service(settings)).openapi()
    table = route_table(doc, contract.model_name, contract.path_patterns, environment.get("DOCS") == "true")
    assert exposure_problems(table, contract.model_name) == []
    forwarded = [route for route in table if route.forwarded]
    assert len(forwarded) >= 8, forwarded
    for route in forwarded:
        body = {} if route.method == "POST" else None
        for headers in ({}, {"x-api-key": API_KEY + "x"}, {"authorization": "Bearer " + API_KEY[:-1]}):
            status, _ = http(route.method, base + route.path, body, headers)
            assert status == 401, f"{route.method} {route.path} answered {status} with {headers or 'no key'}"
        status, _ = http(route.method, base + route.path, body, {"authorization": f"Bearer {API_KEY}"})
        assert status != 401, f"{route.method} {route.path} refused the task's key"
    for path in ("/health", "/ready", "/metrics", f"/{contract.model_name}/ready"):
        status, _ = http("GET", base + path) if path != "/metrics" else (raw_status(base + path), None)
        assert status == 200, f"GET {path} answered {status} without a key"
    assert raw_status(base + f"/{contract.model_name}/docs") == 401  # no route there, and still no answer without a key


def raw_status(url: str) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def assert_drains_on_sigterm(process: subprocess.Popen, base: str, contract: ModelContract, log: Path) -> None:
    """A Spot interruption: SIGTERM under load; every accepted request completes, exit 0 within stopTimeout."""
    results: list[int] = []
    refused: list[str] = []
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                status, _ = http(
                    "POST",
                    f"{base}/{contract.model_name}/predict/batch",
                    {"texts": ["good food"] * 8},
                    {"x-api-key": API_KEY},
                    timeout=30,
                )
                results.append(status)
                if status == 503:  # draining: the load balancer has deregistered the task and sends elsewhere
                    return
            except (urllib.error.URLError, ConnectionError) as error:
                refused.append(str(error))
                return

    clients = [threading.Thread(target=client) for _ in range(4)]
    for thread in clients:
        thread.start()
    time.sleep(1.0)
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=contract.stop_timeout)
    finally:
        stop.set()
        for thread in clients:
            thread.join(timeout=30)
    elapsed = time.monotonic() - started
    assert code == 0, f"the server exited {code} after SIGTERM:\n{log.read_text()[-4000:]}"
    assert elapsed < contract.stop_timeout
    accepted = [status for status in results if status != 503]
    assert accepted and set(accepted) == {200}, f"accepted requests must all complete: {sorted(set(results))}"


def infer_image(url: str, image: bytes, headers: dict) -> tuple[int, dict]:
    """An Open Inference Protocol request with one BYTES element in the binary tensor data extension."""
    import struct

    element = struct.pack("<I", len(image)) + image
    header = json.dumps(
        {
            "inputs": [
                {"name": "image", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": len(element)}}
            ]
        }
    ).encode()
    request = urllib.request.Request(
        url,
        data=header + element,
        method="POST",
        headers={
            "content-type": "application/octet-stream",
            "inference-header-content-length": str(len(header)),
            **headers,
        },
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


NON_TEXT_TASKS = ("image-classification", "torch-export")


def build_artifact(task: str, dest: Path) -> Path:
    from inference_server.testing import build_tiny_export_model, build_tiny_image_classifier

    return (build_tiny_image_classifier if task == "image-classification" else build_tiny_export_model)(dest)


def test_a_non_text_model_is_published_and_served_through_its_listener_path(synthesized, fake_aws, tmp_path):
    """dev's non-text model, from its synthesized task definition as it is (nothing injected): its artifact
    (exported with torch.export) is published to S3 with its manifest by the publishing command, and the server the
    task starts answers the Open Inference Protocol under the path its listener rule routes."""
    import io

    import numpy as np
    from PIL import Image

    contracts = [c for c in contracts_for(synthesized, "dev") if c.environment.get("MODEL_TASK") in NON_TEXT_TASKS]
    assert [c.model_name for c in contracts] == ["vision"], "the scenario dev environment deploys one non-text model"
    (contract,) = contracts
    task = str(contract.environment["MODEL_TASK"])
    assert task == "image-classification"
    bucket = f"e2e-{contract.environment_name}-{contract.model_name}"
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=bucket)
    environment = container_environment(contract, bucket, tmp_path / "scratch", fake_aws)
    model_dir = build_artifact(task, tmp_path / "model")
    published = subprocess.run(
        [sys.executable, "-m", "inference_server.publish", str(model_dir), environment["MODEL_URI"], "--task", task],
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert published.returncode == 0, published.stderr
    manifest = boto3.client("s3", region_name="us-east-1").get_object(
        Bucket=bucket, Key=environment["MODEL_URI"].split(f"s3://{bucket}/", 1)[1].rstrip("/") + "/manifest.json"
    )
    assert json.loads(manifest["Body"].read())["task"] == task

    log = tmp_path / "server.log"
    port_lock = hold_port(contract.container_port)
    with log.open("w") as output:
        process = subprocess.Popen(
            as_local_command(contract.command), env=environment, stdout=output, stderr=subprocess.STDOUT
        )
    try:
        base = f"http://127.0.0.1:{contract.health_check_port}"
        wait_until_ready(process, base + contract.health_check_path, contract.success_codes, contract.grace_period, log)
        prefix = f"/{contract.model_name}"
        assert f"{prefix}/v2*" in contract.path_patterns, (
            f"listener rules {contract.path_patterns} do not route {prefix}/v2/..."
        )
        name = contract.model_name
        (url,) = [
            o["Value"]["Fn::Join"][1][-1]
            for k, o in synthesized.inference_template("dev")["Outputs"].items()
            if k.startswith(f"Url{name}")
        ]
        assert url == f"{prefix}/v2/models/{name}/infer", f"the stack's Url output {url} is not the route that infers"
        # A photo of 1.6 megapixels, over the server's default 1 MiB body: cdk.json's MAX_BODY_BYTES reached the task.
        pixels = np.random.default_rng(0).integers(0, 256, (1200, 1600, 3), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=95)
        max_body_bytes = contract.environment["MAX_BODY_BYTES"]
        assert isinstance(max_body_bytes, str)  # cdk.json's literal, not an intrinsic
        assert 1 << 20 < len(buffer.getvalue()) < int(max_body_bytes)
        status, body = infer_image(f"{base}{prefix}/v2/models/{name}/infer", buffer.getvalue(), {"x-api-key": API_KEY})
        assert status == 200, f"POST {prefix}/v2/models/{name}/infer answered {status}: {body}"
        labels = next(o for o in body["outputs"] if o["name"] == "labels")
        assert labels["shape"] == [1, 2] and len(labels["data"]) == 2
        status, _ = infer_image(f"{base}{prefix}/v2/models/{name}/infer", b"not an image", {"x-api-key": API_KEY})
        assert status == 400
        status, _ = infer_image(f"{base}{prefix}/v2/models/{name}/infer", b"not an image", {})
        assert status == 401  # the task's API key guards the protocol too
        assert http("GET", f"{base}{prefix}/v2/models/{name}")[0] == 401  # metadata needs the key too
        status, metadata = http("GET", f"{base}{prefix}/v2/models/{name}", None, {"x-api-key": API_KEY})
        assert status == 200 and metadata["inputs"] == [{"name": "image", "datatype": "BYTES", "shape": [-1]}]
    finally:
        process.kill()
        process.wait()
        port_lock.close()
