"""Issue 46: the Neuron preset (TorchServe in the AWS Neuron DLC, an encoder compiled at publish time). Its contract,
its command against TorchServe's documented flags, its entry point's stop, what it refuses naming the key and the
fix, the ModelService check that keeps it off GPU capacity (and CUDA servers off Inferentia), and its cdk.json block.

Neither the DLC nor a Neuron device is here: the facts are cited from the DLC's and TorchServe's sources
(docs/aws-facts.md, "Neuron serving (issue 46)"), and the shell that stops TorchServe runs with a stand-in
``torchserve``. The task definition on Neuron capacity (device mappings, placement) is NeuronCapacity's, tested
with it; here the contract's container pieces are synthesized on a plain task definition."""

from __future__ import annotations

import dataclasses
import shutil
import signal
import subprocess
import time
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecs as ecs
from aws_cdk.assertions import Template

import gpu_inference_constructs
from gpu_inference_constructs import (
    CdkServerContext,
    ConfigError,
    ModelProps,
    ModelService,
    NeuronEcrImage,
    NeuronServer,
    NeuronServerProps,
    ServiceTimingProps,
)
from gpu_inference_constructs.core.instance_catalog import CATALOG, NON_CUDA_CATALOG
from gpu_inference_constructs.core.server_contract import ServerContract, command_flag
from gpu_inference_constructs.servers.neuron import NEURON_ENTRY_POINT, torchserve_command
from gpu_inference_constructs.servers.neuron_props import NEURON_DLC_TAG, TORCHSERVE_EXIT_SECONDS, neuron_stop
from gpu_inference_constructs.service.checks import check_runs_on
from stacks.model_entry import server_for, split_model_entry
from tests.infra.test_server_contract import fields_without_a_stated_default, on_cluster, stack_with_placement

ENCODER = ModelProps(name="encoder", version="1", gpus=1, cpu=2048, memory_mib=8192)
INF2 = NON_CUDA_CATALOG["inf2.xlarge"]
# Every option of ``torchserve`` 0.11.0 (pytorch/serve v0.11.0, ts/arg_parser.py): the command uses no other.
TORCHSERVE_FLAGS = frozenset(
    {
        "-v",
        "--version",
        "--start",
        "--stop",
        "--ts-config",
        "--model-store",
        "--workflow-store",
        "--models",
        "--log-config",
        "--cpp-log-config",
        "--foreground",
        "--no-config-snapshots",
        "--ncs",
        "--plugins-path",
        "--ppath",
        "--sock-type",
        "--sock-name",
        "--host",
        "--port",
        "--metrics-config",
    }
)


def neuron_contract(
    server: NeuronServer | None = None, model: ModelProps = ENCODER
) -> tuple[cdk.Stack, ServerContract]:
    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="123456789012", region="us-east-1"))
    context = CdkServerContext(
        stack, model, ServiceTimingProps(), "prod", "us-east-1", "s3://b/models/encoder/1/", INF2
    )
    return stack, (server or NeuronServer()).contract(context)


@pytest.fixture(scope="module")
def contract() -> ServerContract:
    return neuron_contract()[1]


@pytest.fixture(scope="module")
def server_container() -> dict:
    """The contract's container pieces on a plain task definition: what ECS receives of them."""
    stack, made = neuron_contract()
    task = ecs.Ec2TaskDefinition(stack, "Task")
    task.add_container(
        "server",
        image=made.image,
        entry_point=list(made.entry_point or ()),
        command=list(made.command),
        environment=dict(made.environment),
        user=made.user,
        memory_limit_mib=1024,
        readonly_root_filesystem=made.read_only_root_filesystem,
    )
    (definition,) = Template.from_stack(stack).find_resources("AWS::ECS::TaskDefinition").values()
    (container,) = definition["Properties"]["ContainerDefinitions"]
    return container


def test_the_contract_serves_the_published_layout_with_torchserve_on_neuron(contract, server_container):
    assert contract.accelerator == "neuron"
    assert server_container["Image"] == f"public.ecr.aws/neuron/pytorch-inference-neuronx:{NEURON_DLC_TAG}"
    assert server_container["EntryPoint"][:2] == ["/bin/sh", "-c"]
    assert server_container["Command"] == [
        "--ts-config",
        "/scratch/model/torchserve.properties",
        "--log-config",
        "/scratch/model/log4j2.xml",
        "--model-store",
        "/scratch",
        "--models",
        "encoder=model",
        "--ncs",
    ]
    assert contract.model_source.local_path == "/scratch/model" and not contract.model_source.server_reads_s3
    assert contract.port == 8080 and contract.readiness_path == "/predictions/encoder"
    assert contract.public_paths == ("/predictions/encoder",) and contract.prediction_routes == (
        "/predictions/{model}",
    )
    assert "/ping" in contract.liveness.command[-1] and contract.liveness.passes_while_loading
    assert contract.read_only_root_filesystem and server_container["ReadonlyRootFilesystem"] is True
    assert contract.writable_paths == ("/scratch", "/tmp") and contract.user == "1000:1000"
    assert contract.metrics is None and contract.scaling_signals == ()  # ALB p95 and requests per target scale it
    assert contract.api_keys_variable == "API_KEYS" and contract.api_key_field is None  # the handler checks every key


def test_the_environment_configures_torchserve_and_gives_each_worker_one_neuroncore(contract):
    environment = contract.environment
    assert environment["NEURON_RT_NUM_CORES"] == "1"
    assert environment["TS_DEFAULT_WORKERS_PER_MODEL"] == "2"
    assert environment["TS_INFERENCE_ADDRESS"] == "http://0.0.0.0:8080"
    assert environment["TS_MANAGEMENT_ADDRESS"].startswith("http://127.0.0.1:")
    assert environment["TS_METRICS_ADDRESS"].startswith("http://127.0.0.1:")
    assert environment["TS_DEFAULT_RESPONSE_TIMEOUT"] == "10" and environment["TS_JOB_QUEUE_SIZE"] == "100"
    assert environment["MODEL_TASK"] == "text-embedding"
    assert all(environment[name].startswith(("/scratch", "/tmp")) for name in ("TEMP", "LOG_LOCATION", "HOME"))


def test_the_command_uses_only_torchserves_own_flags_and_never_its_worker_socket_port():
    """``--port`` is TorchServe's worker socket, not its HTTP port (ts/arg_parser.py): the command leaves it out, so
    the contract's cross-check, which reads --port as the listening port, has nothing to misread."""
    command = torchserve_command("encoder")
    flags = {arg for arg in command if arg.startswith("-")}
    assert flags <= TORCHSERVE_FLAGS
    assert command_flag(command, ("--port", "--host", "--sock-type")) is None


def run_entry_point(tmp_path: Path) -> tuple[int, list[str]]:
    """The entry point with a torchserve that logs its calls: --start runs until --stop ends it."""
    log = tmp_path / "calls"
    fake = tmp_path / "torchserve"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        f'if [ "$1" = --stop ]; then kill "$(cat {tmp_path}/pid)"; exit 0; fi\n'
        f"echo $$ > {tmp_path}/pid\n"
        "trap 'exit 143' TERM\n"
        "while :; do sleep 0.1; done\n"
    )
    fake.chmod(0o755)
    shell = shutil.which("sh")
    assert shell is not None
    process = subprocess.Popen(
        [shell, *NEURON_ENTRY_POINT[1:], *torchserve_command("encoder")], env={"PATH": f"{tmp_path}:/usr/bin:/bin"}
    )
    for _ in range(100):
        if (tmp_path / "pid").exists():
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=10), log.read_text().splitlines()


def test_sigterm_stops_torchserve_through_its_own_stop_and_exits_cleanly(tmp_path):
    code, calls = run_entry_point(tmp_path)
    assert code == 0
    assert calls == [f"--start --foreground {' '.join(torchserve_command('encoder'))}", "--stop --foreground"]


def test_the_stop_fits_the_spot_notice_and_requests_finish_in_the_deregistration_delay():
    stop = neuron_stop(10)
    assert (stop.drain_seconds, stop.exit_seconds, stop.longest_request_seconds) == (0, TORCHSERVE_EXIT_SECONDS, 10)
    timing = ServiceTimingProps()
    stop.checked_task_timing(timing.deregistration_delay_seconds, timing.stop_timeout_seconds, "neuron")


def test_modelservice_refuses_gpu_capacity_for_a_neuron_model():
    stack, parts = stack_with_placement()
    with pytest.raises(ConfigError, match=r"^models\[encoder\]\.server: .*Neuron capacity"):
        ModelService(stack, "M", model=ENCODER, server=NeuronServer(), capacity=on_cluster(stack, "g5.xlarge"), **parts)


def test_a_cuda_server_is_refused_on_inferentia(contract):
    cuda = dataclasses.replace(contract, accelerator="cuda", name="bundled")
    with pytest.raises(ConfigError, match=r"^models\[encoder\]\.server: .*GPU capacity.*NeuronServer"):
        check_runs_on(cuda.name, cuda.accelerator, INF2, "models[encoder].server")
    check_runs_on(contract.name, contract.accelerator, INF2, "models[encoder].server")
    check_runs_on(cuda.name, cuda.accelerator, CATALOG["g5.xlarge"], "models[encoder].server")


def test_an_accelerator_the_contract_does_not_know_is_refused(contract):
    with pytest.raises(ConfigError, match=r"^server\.accelerator: .*cuda, neuron"):
        dataclasses.replace(contract, accelerator="tpu")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "make, key, fix",
    [
        (lambda: NeuronEcrImage(tag="latest"), "tag", "pin an exact Neuron DLC tag"),
        (lambda: NeuronEcrImage(tag="2.1.2-neuronx-py310-sdk2.18.0-ubuntu20.04"), "tag", "mirror"),
        (lambda: NeuronEcrImage(repository="Not A Repo"), "repository", "not an image repository"),
        (lambda: NeuronServerProps(neuron_cores=0), "neuron_cores", "2 per Inferentia2 device"),
        (lambda: NeuronServerProps(request_timeout_seconds=120), "request_timeout_seconds", "deregistration delay"),
        (lambda: NeuronServerProps(port=8081), "port", "use another"),
        (lambda: NeuronServerProps(task="torch-export"), "task", "text-embedding or text-classification"),  # type: ignore[arg-type]
    ],
)
def test_values_are_refused_naming_the_key_and_the_fix(make, key, fix):
    with pytest.raises(ConfigError, match=rf"^{key}: .*{fix}"):
        make()


@pytest.mark.parametrize(
    "server, model, key, fix",
    [
        (NeuronServer(NeuronServerProps(neuron_cores=4)), ENCODER, r"neuron\.neuron_cores", "raise the model's gpus"),
        (
            NeuronServer(),
            dataclasses.replace(ENCODER, environment={"NEURON_RT_NUM_CORES": "2"}),
            "environment",
            "set those keys",
        ),
    ],
)
def test_what_the_model_gives_the_preset_is_checked(server, model, key, fix):
    with pytest.raises(ConfigError, match=rf"^{key}: .*{fix}"):
        neuron_contract(server, model)


def test_four_cores_fit_two_devices_and_a_mirror_is_pulled_from_ecr():
    model = dataclasses.replace(ENCODER, gpus=2)
    mirror = NeuronServerProps(image=NeuronEcrImage("mirror/neuron-dlc", NEURON_DLC_TAG), neuron_cores=4)
    stack, made = neuron_contract(NeuronServer(mirror), model)
    assert made.environment["TS_DEFAULT_WORKERS_PER_MODEL"] == "4"
    task = ecs.Ec2TaskDefinition(stack, "Task")
    task.add_container("server", image=made.image, memory_limit_mib=1024)
    (definition,) = Template.from_stack(stack).find_resources("AWS::ECS::TaskDefinition").values()
    image = str(definition["Properties"]["ContainerDefinitions"][0]["Image"])
    assert "mirror/neuron-dlc" in image and NEURON_DLC_TAG in image


def test_a_cdk_json_neuron_block_becomes_the_neuron_preset():
    entry = {
        "name": "encoder",
        "version": "1",
        "gpus": 1,
        "neuron": {"task": "text-classification", "neuron_cores": 2, "image": {"tag": NEURON_DLC_TAG}},
    }
    model, props = split_model_entry(entry, "models[0]")
    assert model == {"name": "encoder", "version": "1", "gpus": 1}
    assert props == NeuronServerProps(task="text-classification")
    assert isinstance(server_for(props), NeuronServer)


@pytest.mark.parametrize(
    "entry, key, fix",
    [
        ({"name": "e", "version": "1", "neuron": {"cores": 2}}, r"models\[0\]\.neuron\.cores", "allowed keys here"),
        (
            {"name": "e", "version": "1", "neuron": {"image": {"tag": "latest"}}},
            r"models\[0\]\.neuron\.image\.tag",
            "pin an exact",
        ),
        ({"name": "e", "version": "1", "neuron": {}, "vllm": {}}, r"models\[0\]\.neuron", "keep one block"),
        (
            {"name": "e", "version": "1", "neuron": {}, "max_batch_size": 8},
            r"models\[0\]\.max_batch_size",
            "TorchServe on Neuron",
        ),
    ],
)
def test_cdk_json_neuron_blocks_are_refused_naming_the_key(entry, key, fix):
    with pytest.raises(ConfigError, match=rf"^{key}: .*{fix}"):
        split_model_entry(entry, "models[0]")


def test_the_neuron_preset_is_exported_and_its_props_state_every_default():
    assert {"NeuronServer", "NeuronServerProps", "NeuronEcrImage"} <= set(gpu_inference_constructs.__all__)
    for cls in (NeuronServerProps, NeuronEcrImage, NeuronServer):
        assert fields_without_a_stated_default(cls) == []


def test_the_configuration_pages_neuron_example_builds_the_server_it_describes():
    """docs/configuration.md's snippet, run as written: the server it makes serves the model it names on Neuron."""
    import re

    from tests.conftest import ROOT

    page = (ROOT / "docs" / "configuration.md").read_text()
    section = page[page.index("## Encoders on Inferentia2 (Neuron)") :]
    (source,) = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102  # the page's own example
    _, made = neuron_contract(namespace["server"], namespace["model"])
    assert made.accelerator == "neuron" and made.readiness_path == "/predictions/minilm-neuron"


def test_cdk_json_refuses_a_neuron_model_on_the_environments_gpu_capacity():
    from stacks.config import load_environment
    from tests.scenarios import scenario_environment

    environment = scenario_environment("staging")
    environment["models"].append({"name": "minilm-neuron", "version": "1", "neuron": {"task": "text-embedding"}})
    with pytest.raises(ConfigError, match=r"^environment 'staging': models\[\d+\]\.neuron: .*NeuronCapacity"):
        load_environment("staging", environment)


def test_cdk_json_mirrors_reach_the_contract():
    """A cdk.json block with both mirrors (dev's): the server and fetcher images are the mirrors, so nothing is
    pulled from ECR Public (whether a public image could be pulled is the egress check's, service/image_egress.py,
    which knows the network: tests/consumer/test_team_silent_mistakes.py)."""
    entry = {
        "name": "encoder",
        "version": "1",
        "neuron": {
            "image": {"repository": "mirror/pytorch-inference-neuronx", "tag": NEURON_DLC_TAG},
            "fetcher_image": {"repository": "mirror/aws-cli", "tag": "2.32.9"},
        },
    }
    _, props = split_model_entry(entry, "models[0]")
    server = server_for(props)
    assert isinstance(server, NeuronServer)
    _, made = neuron_contract(server)
    assert made.model_source.fetcher_image is not None and made.image is not None
