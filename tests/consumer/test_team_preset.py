"""A team's own server preset, written as a team would in a plain cdk.App() with imported parts: a class that
subclasses ServerDefinition, builds its contract and declares what it knows. By declaring them it gets the Target
Optimizer's cap check, the shared cache's client check and the accelerator check, with no change to the library; the
library asks the object (no server class is named anywhere in it: the grep test below; nor is a built-in capacity,
model source or route class asked about: ModelService binds its choices and asks the bound objects)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

import gpu_inference_constructs
from gpu_inference_constructs import (
    ClusterCapacity,
    ListenerRoute,
    LivenessCheck,
    ModelBucket,
    ModelFromS3,
    ModelProps,
    ModelService,
    ServerContext,
    ServerContract,
    ServerDefinition,
    ServiceAccess,
    ServiceLogs,
    StopTiming,
    TargetOptimizerProps,
)
from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.core.server_contract import Accelerator
from tests.infra.team_parts import imported_team_parts

KEY_ARN = "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-3333-4444-555555555555"
MIRROR = "123456789012.dkr.ecr.eu-west-1.amazonaws.com"
AGENT = f"{MIRROR}/target-control-agent:1.0.0"


@dataclasses.dataclass(frozen=True)
class RankerServer(ServerDefinition):
    """The team's ranker server: runs at most ``max_batch`` requests at once; an Inferentia build when asked."""

    max_batch: int = 8
    accelerator: Accelerator = "cuda"  # the team's field, read as the declaration

    name = "ranker-server"
    sheds_load_itself = False

    def concurrency_limit(self) -> tuple[str, int]:
        return "max_batch", self.max_batch

    def contract(self, context: ServerContext) -> ServerContract:
        return ServerContract(
            name=self.name,
            image=ecs.ContainerImage.from_registry(f"{MIRROR}/ranker:1.4.2"),
            command=("ranker", "--port", "8080"),
            port=8080,
            readiness_path="/ready",
            liveness=LivenessCheck(("CMD", "ranker-health")),
            user="1000:1000",
            model_source=ModelFromS3.server_downloads(),
            stop=StopTiming(drain_seconds=20, exit_seconds=5),
            accelerator=self.accelerator,
        )


def team_app(server: ServerDefinition, instance_type: str = "g5.xlarge", max_concurrency: int | None = None):
    app = cdk.App()
    stack = cdk.Stack(app, "Team", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    team = imported_team_parts(stack)
    optimizer = (
        None if max_concurrency is None else TargetOptimizerProps(agent_image=AGENT, max_concurrency=max_concurrency)
    )
    model = ModelProps(name="ranker", version="1", cpu=1024, memory_mib=3072, target_optimizer=optimizer)
    service = ModelService(
        stack,
        "Ranker",
        model=model,
        server=server,
        environment="team",
        logs=ServiceLogs(kms.Key.from_key_arn(stack, "Key", KEY_ARN)),
        capacity=ClusterCapacity(team.cluster, "team-gpu", instance_type),
        model_source=ModelBucket(s3.Bucket.from_bucket_name(stack, "Models", "team-models")),
        route=ListenerRoute(team.listener, 7),
        access=ServiceAccess(allow_unauthenticated=True),
    )
    return app, service


def test_a_teams_preset_is_served_and_its_concurrency_limit_caps_the_target_optimizer():
    _, service = team_app(RankerServer(), max_concurrency=8)
    assert service.contract.name == "ranker-server"
    with pytest.raises(
        ConfigError, match=r"models\[ranker\]\.target_optimizer\.max_concurrency.*max_batch \(8\).*at most 8"
    ):
        team_app(RankerServer(), max_concurrency=9)


def test_a_teams_preset_declares_its_accelerator_and_reads_no_cache():
    with pytest.raises(ConfigError, match=r"models\[ranker\]\.server.*ranker-server.*neuron"):
        team_app(RankerServer(accelerator="neuron"))
    _, service = team_app(RankerServer())
    with pytest.raises(ConfigError, match=r"server.*no client of the shared result cache"):
        service.use_cache(object())  # type: ignore[arg-type]  # refused before the cache is read


def test_a_class_that_only_looks_like_a_preset_is_refused_naming_the_base_class():
    class Duck:
        def contract(self, context):
            return RankerServer().contract(context)

    with pytest.raises(ConfigError, match=r"server.*got Duck.*subclasses ServerDefinition"):
        team_app(Duck())  # type: ignore[arg-type]


LIBRARY = Path(gpu_inference_constructs.__file__).parent
PRESETS = {"BundledServer", "VllmServer", "SglangServer", "TritonServer", "TgiServer", "NeuronServer", "LlmPreset"}


def server_class_questions(path: Path) -> list[str]:
    """Where a module asks which server class an object is: isinstance/issubclass on a preset class, getattr on a
    ``server``, or a string naming a preset class (a table keyed by class name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
        ):
            named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} if len(node.args) > 1 else set()
            if named & PRESETS:
                found.append(f"{path.name}:{node.lineno} {node.func.id} on {sorted(named & PRESETS)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            target = node.args[0] if node.args else None
            if isinstance(target, ast.Name) and target.id == "server":
                found.append(f"{path.name}:{node.lineno} {node.func.id}(server, ...)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in PRESETS:
            found.append(f"{path.name}:{node.lineno} the string {node.value!r}")
    return found


# The built-in choices of ModelService's capacity, model_source and route: the service binds each (choices.py) and
# asks the bound object, never which class it was given.
CHOICES = {
    "CapacityGroup",
    "ClusterCapacity",
    "GpuCapacity",
    "InferenceLoadBalancer",
    "ListenerRoute",
    "LoadBalancerRoute",
    "ModelBucket",
    "ModelStore",
    "NeuronCapacity",
}
# (module, class) where a type check is a construct checking its own argument, not a choice being told apart. Only
# shrinks.
OWN_ARGUMENT_CHECKS = {
    ("load_balancer_route.py", "InferenceLoadBalancer"),  # LoadBalancerRoute's load_balancer is one
    ("monitoring.py", "InferenceLoadBalancer"),  # InferenceMonitoring: the ALB-wide 5xx alarm only on the library's
}


def choice_class_questions(path: Path) -> list[str]:
    """Where a module asks which built-in capacity, model source or route class an object is: isinstance/issubclass
    on one (the ladders the choices were resolved by)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) > 1
        ):
            named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} & CHOICES
            named -= {cls for module, cls in OWN_ARGUMENT_CHECKS if module == path.name}
            if named:
                found.append(f"{path.name}:{node.lineno} {node.func.id} on {sorted(named)}")
    return found


def test_no_module_of_the_library_asks_which_capacity_source_or_route_class_it_holds():
    modules = [path for path in sorted(LIBRARY.rglob("*.py")) if path.name != "__init__.py"]
    assert len(modules) > 50 and [q for path in modules for q in choice_class_questions(path)] == []


def test_the_grep_finds_a_planted_choice_ladder(tmp_path):
    """The twin: the ladders choices.py and the service held before issue 56's open choices."""
    planted = tmp_path / "choices.py"
    planted.write_text(
        "def placement_of(capacity):\n    if isinstance(capacity, (GpuCapacity, NeuronCapacity)):\n        pass\n"
        "    if isinstance(capacity, ClusterCapacity):\n        pass\n"
        "def route_of(route):\n"
        "    return isinstance(route, InferenceLoadBalancer) or issubclass(route, ListenerRoute)\n"
    )
    assert len(choice_class_questions(planted)) == 4


def test_no_module_of_the_library_asks_which_server_class_it_holds():
    """Packages' __init__ files name the classes they export; every other module asks the object."""
    modules = [path for path in sorted(LIBRARY.rglob("*.py")) if path.name != "__init__.py"]
    assert len(modules) > 50 and [q for path in modules for q in server_class_questions(path)] == []


def test_the_grep_finds_a_planted_question(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        'OWN = {"VllmServer": "max_num_seqs"}\n'
        'def f(server):\n    return isinstance(server, BundledServer) or getattr(server, "props")\n'
    )
    assert len(server_class_questions(planted)) == 3


def test_each_preset_states_its_support_level():
    from gpu_inference_constructs import BundledServer, NeuronServer, SglangServer, TgiServer, TritonServer, VllmServer

    levels = {
        cls.__name__: cls.support
        for cls in (BundledServer, VllmServer, TritonServer, SglangServer, NeuronServer, TgiServer)
    }
    assert levels == {
        "BundledServer": "supported",
        "VllmServer": "supported",
        "TritonServer": "supported",
        "SglangServer": "experimental",
        "NeuronServer": "experimental",
        "TgiServer": "deprecated",
    }
    assert all(cls.support_note for cls in (SglangServer, NeuronServer, TgiServer))
    assert "limited maintenance" in NeuronServer.support_note  # TorchServe's upstream status, said at synth
