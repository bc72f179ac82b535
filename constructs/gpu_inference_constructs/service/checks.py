"""What a ModelService checks before it builds anything, as functions of their inputs: each raises a ConfigError
naming the key and the fix, or returns the warnings (``(id, message)``) the construct adds. The claims (model
names where they collide, listener priorities) remember, per app, what earlier services took."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Protocol

import aws_cdk as cdk
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from constructs import Construct

from ..core.errors import ConfigError, require
from ..core.instance_catalog import GpuInstanceType
from ..core.model_props import ModelProps
from ..core.server_contract import ServerContract
from ..core.service_timing import ServiceTimingProps
from ..core.stop_timing import StopTiming
from ..core.task_size import SidecarReservation
from ..routing.load_balancer import IDLE_TIMEOUT_MARGIN_SECONDS, MAX_RULE_PRIORITY
from ..shared.environment import DEFAULT_NAME_PREFIX as DEFAULT_NAME_PREFIX
from ..shared.environment import check_name_prefix as check_name_prefix

# ECS caps a container health check's startPeriod at 300 s (ECS API HealthCheck).
MAX_HEALTH_CHECK_START_PERIOD = 300

SynthWarning = tuple[str, str]


class CheckedServer(Protocol):
    """What the checks read of a server before its contract is built: a preset (BundledServer, VllmServer, ...) or a
    ServerContract."""

    @property
    def name(self) -> str: ...

    @property
    def accelerator(self) -> str: ...  # "cuda" or "neuron" (ServerDefinition.accelerator)

    @property
    def stop(self) -> StopTiming: ...

    @property
    def sidecar_reservation(self) -> SidecarReservation: ...

    def check(self, model: ModelProps) -> None: ...


def service_log_group_name(environment_name: str, model_name: str, name_prefix: str = DEFAULT_NAME_PREFIX) -> str:
    """A model service's log group: named, so the environment's dashboard can price its ingestion without a
    reference."""
    return f"/{name_prefix}/{environment_name}/{model_name}"


def alarm_name_prefix(environment_name: str, name_prefix: str = DEFAULT_NAME_PREFIX) -> str:
    """What each of a model's alarm names starts with: ``<prefix>-<environment>-`` (then ``<model>-<alarm>``)."""
    return f"{name_prefix}-{environment_name}-"


@dataclass(frozen=True)
class _NameClaim:
    """Where a built model's names are taken: its log group and alarm names in an account and region, its path on a
    listener."""

    account: str
    region: str
    name_prefix: str
    environment_name: str
    model_name: str
    listener: str
    holder: str


_LISTENER_PRIORITIES: weakref.WeakKeyDictionary[object, dict[str, dict[int, str]]] = weakref.WeakKeyDictionary()
_MODEL_NAMES: weakref.WeakKeyDictionary[object, list[_NameClaim]] = weakref.WeakKeyDictionary()


def listener_key(listener: elbv2.IApplicationListener) -> str:
    """One listener however often it is imported: its ARN, else (made in this app) its construct path."""
    arn = listener.listener_arn
    return arn if not cdk.Token.is_unresolved(arn) else listener.node.path


def _same_place(ours: str, theirs: str) -> bool:
    """One account (or region), or possibly one: an environment-agnostic stack may be deployed into any."""
    return ours == theirs or cdk.Token.is_unresolved(ours) or cdk.Token.is_unresolved(theirs)


def _place(account: str, region: str) -> str:
    if cdk.Token.is_unresolved(account) or cdk.Token.is_unresolved(region):
        return "the account and region it is deployed to (an environment-agnostic stack)"
    return f"account {account}, region {region}"


def _name_claim(
    scope: Construct, name_prefix: str, environment_name: str, model_name: str, listener: str
) -> _NameClaim:
    stack = cdk.Stack.of(scope)
    return _NameClaim(stack.account, stack.region, name_prefix, environment_name, model_name, listener, scope.node.path)


def check_model_name_free(
    scope: Construct, name_prefix: str, environment_name: str, model_name: str, listener: str
) -> None:
    """A model's names are refused where they collide, before anything else (a listener-priority clash) could be
    reported instead: its log group (``/<prefix>/<environment>/<name>``) and alarm names in one account and region,
    and its path ``/<name>/`` on one listener (``listener``: :func:`listener_key`). The same Stage in two accounts or
    regions takes nothing twice."""
    ours = _name_claim(scope, name_prefix, environment_name, model_name, listener)
    for claim in _MODEL_NAMES.get(scope.node.root, []):
        if claim.model_name != model_name:
            continue
        same_names = (claim.name_prefix, claim.environment_name) == (name_prefix, environment_name)
        require(
            not (same_names and _same_place(ours.account, claim.account) and _same_place(ours.region, claim.region)),
            "model.name",
            f"{model_name!r} is already the name of the model at {claim.holder} in environment {environment_name!r} "
            f"in {_place(ours.account, ours.region)}: its log group "
            f"{service_log_group_name(environment_name, model_name, name_prefix)} and its alarms "
            f"({alarm_name_prefix(environment_name, name_prefix)}{model_name}-...) are taken there; give this model "
            "another name, or another environment_name or logs.name_prefix (another team's app)",
        )
        require(
            claim.listener != listener,
            "model.name",
            f"{model_name!r} is already the name of the model at {claim.holder} on this listener: its path "
            f"/{model_name}/ is taken there; give this model another name, or route it through another listener",
        )


def claim_model_name(scope: Construct, name_prefix: str, environment_name: str, model_name: str, listener: str) -> None:
    """Record a model that was built whole (one refused half-way claims nothing)."""
    _MODEL_NAMES.setdefault(scope.node.root, []).append(
        _name_claim(scope, name_prefix, environment_name, model_name, listener)
    )


def claim_listener_priority(
    scope: Construct, listener: elbv2.IApplicationListener, priority: int, model_name: str
) -> None:
    """Two rules of one listener cannot share a priority (CloudFormation fails the second at deploy): refuse it at
    synth for every model of this app on the same listener, the same ARN imported in several stacks included."""
    claimed = _LISTENER_PRIORITIES.setdefault(scope.node.root, {}).setdefault(listener_key(listener), {})
    holder = claimed.get(priority)
    require(
        holder is None,
        "route.priority",
        f"{priority} is already {holder!r}'s on this listener: each rule on a listener needs its own priority; give "
        f"models[{model_name}] another (1-{MAX_RULE_PRIORITY})",
    )
    claimed[priority] = model_name


def check_contract(server: object, contract: object, model: ModelProps) -> None:
    """The server gave a contract, and one that may run on ``model``'s GPU share."""
    require(
        isinstance(contract, ServerContract),
        "server",
        f"{type(server).__name__}.contract() must return a ServerContract",
    )
    assert isinstance(contract, ServerContract)
    require(
        model.gpu_share is None or contract.single_cuda_process,
        f"models[{model.name}].gpu_share",
        f"the {contract.name} server does not say it uses the GPU from one process (ServerContract."
        "single_cuda_process): AWS advises a whole GPU for a container that runs more than one CUDA process; "
        "use whole GPUs (remove gpu_share), or set single_cuda_process=True in a contract whose server does",
    )


def check_runs_on(server: str, accelerator: str, instance_type: GpuInstanceType, key: str) -> None:
    """``server``, built for ``accelerator`` (``cuda`` or ``neuron``), runs on ``instance_type``'s accelerator, or a
    ConfigError at ``key`` naming the fix (a preset declares its accelerator, so this holds before its contract is
    built; a team's own contract says it in ``ServerContract.accelerator``)."""
    capacity = instance_type.accelerator
    if accelerator == capacity:
        return
    fix = (
        "place it on Neuron capacity (NeuronCapacity, an inf2 instance type)"
        if accelerator == "neuron"
        else "place it on GPU capacity, or serve it with a Neuron server (NeuronServer, or a ServerContract with "
        "accelerator='neuron' for your own Neuron container with the model compiled for Neuron)"
    )
    raise ConfigError(
        key,
        f"the {server} server runs on {accelerator} but its capacity's instance type "
        f"{instance_type.name} is {capacity}: {fix}",
    )


def idle_timeout_warnings(
    contract: ServerContract, idle_timeout: int, model_name: str, *, known: bool
) -> list[SynthWarning]:
    """The load balancer carries the server's longest request (a non-streamed response sends nothing until it is
    done, and the ALB answers 504 after its idle timeout), and the server keeps connections alive for longer
    than the load balancer (or the ALB reuses one the server closed: 502). Behind an InferenceLoadBalancer
    (``known``) a mismatch is an error; behind another listener, whose idle timeout is not known here, a warning."""
    warnings: list[SynthWarning] = []

    def refuse(key: str, detail: str, fix: str) -> None:
        if known:
            raise ConfigError(key, f"{detail} (models[{model_name}]); {fix}")
        warnings.append(
            (
                f"gpu-inference:{key}",
                f"{detail}, if your load balancer keeps the ALB's default idle timeout ({idle_timeout} s): {fix}",
            )
        )

    longest = contract.stop.longest_request_seconds
    if longest is not None and longest + IDLE_TIMEOUT_MARGIN_SECONDS > idle_timeout:
        refuse(
            "server.stop.longest_request_seconds",
            f"the {contract.name} server's longest request ({longest} s) + {IDLE_TIMEOUT_MARGIN_SECONDS} s outlasts "
            f"the load balancer's idle timeout ({idle_timeout} s): the client would get an ELB 504",
            "pass longest_request_seconds (at least this model's) to its InferenceLoadBalancer, or raise "
            "load_balancer.idle_timeout_seconds"
            if known
            else f"set its idle timeout to at least {longest + IDLE_TIMEOUT_MARGIN_SECONDS} s",
        )
    if contract.keep_alive_seconds is None:
        warnings.append(
            (
                "gpu-inference:keep-alive-unknown",
                f"The {contract.name} server contract does not say its HTTP keep-alive: if it is not above the load "
                f"balancer's idle timeout ({idle_timeout} s), the ALB answers intermittent 502s. Set "
                f"ServerContract.keep_alive_seconds (at least {idle_timeout + 1}) to what the server's own setting is.",
            )
        )
    elif contract.keep_alive_seconds <= idle_timeout:
        refuse(
            "server.keep_alive_seconds",
            f"the {contract.name} server keeps idle connections {contract.keep_alive_seconds} s, not longer than the "
            f"load balancer's idle timeout ({idle_timeout} s): "
            "the ALB would reuse connections the server closed (502s)",
            f"set the server's keep-alive above {idle_timeout} s",
        )
    return warnings


def check_shared_memory(model: ModelProps, contract: ServerContract) -> None:
    """The server's /dev/shm fits its memory."""
    if contract.shared_memory_mib is not None:
        require(
            contract.shared_memory_mib < model.memory_mib,
            "shared_memory_mib",
            f"{contract.shared_memory_mib} MiB of /dev/shm must be below the server's memory_mib ({model.memory_mib})",
        )


def check_fits(
    model: ModelProps,
    server: CheckedServer,
    instance_type: GpuInstanceType,
    fleet_types: tuple[GpuInstanceType, ...],
    log_router: tuple[int, int] = (0, 0),
) -> None:
    """The task (server, sidecars and a FireLens ``log_router``'s (CPU units, MiB)) fits the smallest instance."""
    try:
        sidecars = server.sidecar_reservation.plus("FireLens log router", *log_router)
        model.check_fits(instance_type, sidecars, fleet_types)
    except ConfigError as error:
        raise ConfigError(f"models[{model.name}].{error.key}", error.detail) from None


def task_timing(server: CheckedServer, timing: ServiceTimingProps, model_name: str) -> tuple[int, int]:
    """(deregistration delay, stopTimeout) in seconds: ``timing``'s, or the server's own, checked against each
    other."""
    try:
        return server.stop.checked_task_timing(
            timing.deregistration_delay_seconds, timing.stop_timeout_seconds, f"the {server.name} server"
        )
    except ConfigError as error:
        raise ConfigError(f"timing.{error.key}", f"{error.detail} (models[{model_name}])") from None


def check_api_keys_variable(contract: ServerContract) -> None:
    require(
        contract.api_keys_variable is not None,
        "access.api_keys_secret",
        f"is given but the {contract.name} server contract names no api_keys_variable to receive it",
    )


def unauthenticated_warnings(
    contract: ServerContract, model_name: str, open_to_the_internet: bool | None
) -> list[SynthWarning]:
    """No key and nothing that says who may call: an error where the load balancer is known to be open to the
    internet, a warning where it is not known (``open_to_the_internet`` None: your own listener)."""
    fix = (
        "pass access=ServiceAccess(api_keys_secret=...) "
        "(a Secrets Manager secret holding a JSON object of key names to keys)"
        if contract.api_keys_variable is not None
        else f"the {contract.name} server takes no API key: put an authenticating proxy in front of it"
    )
    fix += (
        ", or access=ServiceAccess(allow_unauthenticated=True) where something else decides who may call it (a WAF or "
        "proxy that authenticates, or a network only your clients reach)"
    )
    if open_to_the_internet is not None:
        require(
            not open_to_the_internet,
            "access.api_keys_secret",
            f"is missing and the load balancer is internet-facing and open to the internet: anyone could call "
            f"models[{model_name}] and use its GPUs; {fix}; or narrow ingress_cidrs, or make the load "
            "balancer internal",
        )
        return []
    return [
        (
            "gpu-inference:unauthenticated",
            f"models[{model_name}] takes requests without an API key: if your listener's load balancer is "
            f"reachable from the internet, anyone can call it; {fix}.",
        )
    ]


def health_check_start_period(model: ModelProps, contract: ServerContract) -> int:
    """The server container's health-check start period, once its liveness check is known to outlast the model's
    expected load (or to pass while loading): ECS would otherwise replace the container mid-load, in a loop."""
    liveness = contract.liveness
    start_period = min(MAX_HEALTH_CHECK_START_PERIOD, model.health_check_grace_seconds)
    require(
        liveness.passes_while_loading or liveness.start_window_seconds(start_period) >= model.expected_load_seconds,
        f"models[{model.name}].expected_load_seconds",
        f"{model.expected_load_seconds} s is longer than the {contract.name} server's liveness check allows while "
        f"loading ({start_period} s start period + {liveness.retries} x {liveness.interval_seconds} s = "
        f"{liveness.start_window_seconds(start_period)} s; ECS caps the start period at "
        f"{MAX_HEALTH_CHECK_START_PERIOD} s): ECS would replace the container mid-load, in a loop. Give the server a "
        "liveness check that passes while it loads (LivenessCheck(passes_while_loading=True); the target group's "
        "readiness check gates traffic), or load faster",
    )
    return start_period


CLUSTER_CAPACITY_AMI_WARNING_ID = "gpu-inference:cluster-capacity-ami"
# What lists the accelerators each container instance of a cluster registered (an instance without GPU support
# registers none, and ECS places no GPU task on it).
REGISTERED_GPUS = (
    "aws ecs list-container-instances --cluster {cluster} --query containerInstanceArns --output text | "
    "xargs aws ecs describe-container-instances --cluster {cluster} --query "
    "'containerInstances[].[ec2InstanceId, registeredResources[?name==`GPU`].stringSetValue]' "
    "--container-instances"
)


def cluster_capacity_warning(
    capacity: str, providers: list[str], instance_type: GpuInstanceType, model: ModelProps
) -> SynthWarning:
    """A capacity provider of the team's own (``capacity``: the class of the choice, ``providers`` its strategy's):
    synth cannot see what its instances run, and a task that needs GPUs (or Neuron devices) is never placed on an
    instance that offers none (it waits in PROVISIONING)."""
    if instance_type.neuron:
        needs = (
            "Inferentia2 instances on the ECS-optimized Neuron AMI (SSM /aws/service/ecs/optimized-ami/"
            "amazon-linux-2023/neuron/recommended/image_id), whose /dev/neuron* devices the task maps"
        )
        check = "(its name is an ECS Neuron AMI) aws ec2 describe-images --image-ids <the provider's AMI>"
    else:
        needs = (
            f"GPU instances ({instance_type.name} or larger) on the ECS-optimized GPU AMI (SSM /aws/service/ecs/"
            "optimized-ami/amazon-linux-2023/gpu/recommended/image_id) with ECS_ENABLE_GPU_SUPPORT=true, so "
            "each instance registers its GPUs"
        )
        check = "(GPU ids for every instance) " + REGISTERED_GPUS.format(cluster="<cluster>")
    stall = (
        "its never-healthy alarm rolls a deployment back whose tasks are not running within the start window"
        if model.deployment.shifts_traffic
        else "a rolling deployment's circuit breaker counts failed tasks, not tasks never placed, so CloudFormation "
        "waits: give DeploymentProps(strategy='canary', 'linear' or 'blue_green'), whose never-healthy alarm "
        "rolls back a version not running within its start window"
    )
    return (
        CLUSTER_CAPACITY_AMI_WARNING_ID,
        f"capacity: {capacity}'s provider {', '.join(repr(p) for p in providers)} is not the library's, so synth "
        "cannot see what it runs. "
        f"models[{model.name}] needs {needs}; elsewhere its tasks are never placed (ECS reports "
        f"SERVICE_TASK_PLACEMENT_FAILURE). Check: {check}. On such a provider {stall}.",
    )
