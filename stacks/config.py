"""Turn ``cdk.json`` context into one validated, typed config object per environment.

This is the only place that reads context. Every error names the environment and the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from gpu_inference_constructs import (
    BundledServer,
    BundledServerProps,
    ConfigError,
    ConfiguredLoad,
    DeploymentProps,
    GpuCapacityProps,
    GpuInstanceType,
    ListenerPriorities,
    LoadBalancerProps,
    ModelCacheProps,
    ModelProps,
    ModelStoreProps,
    MonitoringProps,
    NetworkProps,
    NeuronCapacityProps,
    NeuronServer,
    PoolProps,
    PoolServer,
    Problem,
    ResultCacheProps,
    RollbackThresholds,
    ScalingProps,
    ServiceTimingProps,
    TelemetryProps,
    VllmProps,
    VllmServer,
    from_dict,
    is_neuron_type,
    require,
    require_range,
    retention_days,
    service_deployment,
    tasks_for_deployment_at_peak,
    validate_service,
)

from .model_entry import ServerProps, longest_request_key, pool_of_entry, server_for, split_model_entry

CONTEXT_KEY = "environments"
ENVIRONMENT_NAME = re.compile(r"^[a-z][a-z0-9-]{1,20}$")
ACCOUNT = re.compile(r"^\d{12}$")
REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$")


GROUP_NAME = re.compile(r"^[a-z][a-z0-9-]{0,19}$")
# Load balancers one environment may spread its models over (each holds 100 rules and target groups by default).
MAX_LOAD_BALANCERS = 20
# models[] keys of the app's own: where a model is routed.
PLACEMENT_KEYS = frozenset({"load_balancer", "listener_priority"})
# EnvironmentConfig's fields whose cdk.json key has another name: ``service`` holds the ServiceTimingProps that the
# library calls ``timing`` (ModelService(timing=...)).
CDK_JSON_KEYS = {"timing": "service"}


@dataclass(frozen=True)
class ModelServerConfig:
    """How the app serves one ``models[]`` entry: its server's props (``BundledServerProps`` from the entry's own
    keys, or its ``vllm`` or ``neuron`` block), which of the environment's load balancers carries it, and at which
    listener rule priority. With ``pool`` (the entry's ``pool`` block) the entry is a model pool: one service for every
    model of its registry, on the bundled server's ``props``."""

    props: ServerProps = field(default_factory=BundledServerProps)
    load_balancer: int = 1
    listener_priority: int | None = None  # default: derived from the model's name
    pool: PoolProps | None = None  # default: a model, not a pool

    def __post_init__(self) -> None:
        require_range(
            self.load_balancer,
            1,
            MAX_LOAD_BALANCERS,
            "load_balancer",
            hint=" (which of the environment's load balancers serves it)",
        )

    @property
    def server(self) -> BundledServer | VllmServer | NeuronServer | PoolServer:
        return self.pool_server or server_for(self.props)

    @property
    def pool_server(self) -> PoolServer | None:
        """The pool's server where the entry is a pool, else None."""
        if self.pool is None:
            return None
        assert isinstance(self.props, BundledServerProps)  # model_entry refuses a pool block beside another server's
        return PoolServer(props=self.props, pool=self.pool)

    @property
    def bundled(self) -> BundledServerProps | None:
        return self.props if isinstance(self.props, BundledServerProps) else None

    @property
    def vllm(self) -> VllmProps | None:
        return self.props if isinstance(self.props, VllmProps) else None


@dataclass(frozen=True)
class CapacityGroupConfig:
    """GPU capacity of another shape (such as 4-GPU 12xlarge instances for tensor-parallel LLMs), or Inferentia2
    capacity (a group whose instance_types are inf2 types: NeuronCapacityProps), as another capacity provider of the
    environment's cluster, and the models that run on it."""

    capacity: GpuCapacityProps | NeuronCapacityProps
    models: tuple[str, ...]


@dataclass(frozen=True)
class EnvironmentConfig:
    account: str
    region: str
    network: NetworkProps
    load_balancer: LoadBalancerProps
    models: tuple[ModelProps, ...]
    # Parallel to models (the same order): how each is served. Empty: every model on the bundled server's defaults.
    servers: tuple[ModelServerConfig, ...] = ()
    capacity: GpuCapacityProps = field(default_factory=GpuCapacityProps)
    capacity_groups: dict[str, CapacityGroupConfig] = field(default_factory=dict)
    model_store: ModelStoreProps = field(default_factory=ModelStoreProps)
    timing: ServiceTimingProps = field(default_factory=ServiceTimingProps)  # cdk.json: "service" (CDK_JSON_KEYS)
    scaling: ScalingProps = field(default_factory=ScalingProps)
    monitoring: MonitoringProps = field(default_factory=MonitoringProps)
    deployment: DeploymentProps = field(default_factory=DeploymentProps)
    log_retention_days: int = 90
    telemetry: TelemetryProps = field(default_factory=TelemetryProps)  # trace sampling; FireLens or awslogs
    alarm_emails: tuple[str, ...] = ()
    cache: ResultCacheProps | None = None  # a shared result cache (ElastiCache Serverless for Valkey)
    name: str = ""
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require(bool(ACCOUNT.match(self.account)), "account", f"{self.account!r} is not a 12-digit AWS account id")
        require(
            bool(REGION.match(self.region)), "region", f"{self.region!r} is not an AWS region name such as 'us-east-1'"
        )
        retention_days(self.log_retention_days, "log_retention_days")
        checks = (
            ("network", lambda: self.network.zones_for(self.region)),
            ("capacity", lambda: self.capacity.resolve_instance_types()),
            ("load_balancer", lambda: self.load_balancer.check_certificate_region(self.region)),
            ("telemetry", self._check_firehose_endpoint),
        )
        for section, check in checks:
            try:
                check()
            except ConfigError as error:
                raise error.within(section) from None
        self._check_models()
        self._check_cache()
        for index, prewarm in enumerate(self.scaling.capacity_prewarm):
            require(
                prewarm.min_capacity <= self.capacity.max_capacity,
                f"scaling.capacity_prewarm[{index}].min_capacity",
                f"{prewarm.min_capacity} is greater than capacity.max_capacity {self.capacity.max_capacity}",
            )

    def _check_firehose_endpoint(self) -> None:
        """A log archive to Firehose from a VPC without NAT needs Firehose's interface endpoint."""
        firelens = self.telemetry.firelens
        if firelens is not None and firelens.archive is not None and firelens.archive.firehose_stream_arn is not None:
            require(
                "kinesis-firehose" in self.network.interface_endpoints,
                "firelens.archive.firehose_stream_arn",
                'the private subnets reach Firehose only through its endpoint: add "kinesis-firehose" to '
                "network.interface_endpoints",
            )

    def _check_accelerator(
        self,
        index: int,
        model: ModelProps,
        server: BundledServer | VllmServer | NeuronServer | PoolServer,
        group: str,
        smallest: GpuInstanceType,
    ) -> None:
        """A model's server runs on its capacity's accelerator: a ``neuron`` block on a group of inf2 types (a
        NeuronCapacity), any other server on GPU types."""
        if server.accelerator == smallest.accelerator:
            return
        place = f"capacity_groups.{group} ({smallest.name})" if group else f"capacity ({smallest.name})"
        if server.accelerator == "neuron":
            raise ConfigError(
                f"models[{index}].neuron",
                f"{model.name!r} is compiled for Inferentia2 but runs on {place}: "
                "list it in a capacity group of inf2 types (capacity_groups.<name>.capacity.instance_types "
                '["inf2.xlarge"] and .models), which builds a NeuronCapacity',
            )
        raise ConfigError(
            f"capacity_groups.{group}.models" if group else f"models[{index}]",
            f"{model.name!r} has a CUDA server ({type(server).__name__}) but runs on {place}: give it a "
            "neuron block (NeuronServer), or place it on GPU capacity",
        )

    def _check_models(self) -> None:
        require(bool(self.models), "models", "list at least one model to serve")
        require(
            len(self.servers) in (0, len(self.models)), "servers", "give one per model, in the models' order, or none"
        )
        placement = self.model_placement()
        smallest = {group: self.group_capacity(group).smallest_instance_type() for group in {"", *self.capacity_groups}}
        seen: set[str] = set()
        names = [model.name for model in self.models]
        priorities: dict[int, ListenerPriorities] = {}  # load balancer -> its listener's rule priorities
        for index, model in enumerate(self.models):
            require(
                model.name not in seen,
                f"models[{index}].name",
                f"{model.name!r} is listed twice; model names must be unique",
            )
            seen.add(model.name)
            served = self.server_config(model)
            priorities.setdefault(served.load_balancer, ListenerPriorities()).claim(
                model.name,
                served.listener_priority,
                f"models[{index}].listener_priority",
                fix_keys=lambda other, index=index: (
                    f"models[{names.index(other)}].listener_priority or models[{index}].listener_priority"
                ),
            )
            group = placement.get(model.name, "")
            self._check_accelerator(index, model, self.server_config(model).server, group, smallest[group])
        problems: dict[str, Problem] = {}
        joined: dict[str, list[ModelProps]] = {}  # capacity group -> the models counted on it so far
        for index, model in enumerate(self.models):
            group = placement.get(model.name, "")
            found = self.model_problems(index, model, group, joined.setdefault(group, []))
            for problem in found:
                if problem.key.endswith("capacity.max_capacity"):  # reported once, as the group's last model finds it
                    problems[problem.key] = problem
                elif problem.key.startswith(tuple(ENVIRONMENT_PREFIXES.values())):  # one key: the first model's
                    problems.setdefault(problem.key, problem)
                else:
                    problems[f"{index} {problem.key}"] = problem
            if all(problem.key.endswith("capacity.max_capacity") for problem in found):
                joined[group].append(model)  # a model refused for itself is not counted again for the next
        if problems:
            raise ConfigError.of(list(problems.values()))
        self._check_load_balancers()

    def model_problems(self, index: int, model: ModelProps, group: str, beside: list[ModelProps]) -> list[Problem]:
        """Every problem the constructs would refuse ``models[index]`` for (the library's validate_service), on
        capacity group ``group`` ("": ``capacity``) after the models ``beside`` it, at its cdk.json keys:
        ``models[<index>]``, its server's keys inside the entry (``models[<index>].vllm...``), ``service`` for
        ModelService's ``timing``, the group's ``capacity``."""
        found = validate_service(
            model,
            server=self.server_of(model),
            capacity=self.group_capacity(group),
            beside=beside,
            timing=self.timing,
            telemetry=self.telemetry,
            schedules=self.scaling.schedules,
        )
        return [cdk_json_problem(problem, index, model.name, group) for problem in found]

    def server_config(self, model: ModelProps) -> ModelServerConfig:
        """How ``model`` (one of ``models``) is served."""
        return self.servers[self.models.index(model)] if self.servers else ModelServerConfig()

    def server_of(self, model: ModelProps) -> BundledServer | VllmServer | NeuronServer | PoolServer:
        return self.server_config(model).server

    def uses_cache(self, model: ModelProps) -> bool:
        """Whether the model uses the environment's shared result cache (the bundled server's, when there is one)."""
        served = self.server_config(model)
        bundled = served.bundled
        return self.cache is not None and bundled is not None and bundled.shared_cache.enabled is not False

    def _check_load_balancers(self) -> None:
        """Each load balancer's models fit its quotas; numbers run 1..N with none empty; per load balancer, the WAF
        rate limit and the idle timeout follow its own models, and the servers' keep-alive outlasts that timeout."""
        groups = self.load_balancer_groups()
        missing = sorted(set(range(1, max(groups) + 1)) - set(groups))
        require(
            not missing,
            "models",
            f"no model is on load balancer {', '.join(map(str, missing))}: number the load balancers "
            f"1 to {max(groups)} without gaps (an empty load balancer only costs money)",
        )
        for number, models in groups.items():
            placed: list[ModelProps] = []
            for model in models:
                placed.append(model)
                try:
                    self.load_balancer.quotas.check(
                        **quota_use(placed), key=f"models[{self.models.index(model)}].load_balancer"
                    )
                except ConfigError as error:
                    raise ConfigError(
                        error.key,
                        f"on load balancer {number}, {error.detail}; to serve {model.name!r} from another, "
                        f"set {error.key}: {self._load_balancer_with_room(groups, model)} "
                        "(no other model moves)",
                    ) from None
            try:
                self.load_balancer.waf_rate_limit(self.configured_load_for(models))
            except ConfigError as error:
                raise error.within("load_balancer") from None
            idle_timeout = self.idle_timeout_seconds_for(models)
            try:
                self.timing.keep_alive_above(idle_timeout)
            except ConfigError as error:
                raise error.within("service") from None

    def _load_balancer_with_room(self, groups: dict[int, tuple[ModelProps, ...]], model: ModelProps) -> int:
        """The lowest-numbered other load balancer that would hold ``model`` too (a new one after the last if none)."""
        for number, models in groups.items():
            if number == self.server_config(model).load_balancer:
                continue
            candidate = [*models, model]
            try:
                self.load_balancer.quotas.check(**quota_use(candidate))
            except ConfigError:
                continue
            return number
        return max(groups) + 1

    def load_balancer_groups(self) -> dict[int, tuple[ModelProps, ...]]:
        """Load balancer number -> the models it serves (``models[].load_balancer``), in config order."""
        groups: dict[int, list[ModelProps]] = {}
        for model in self.models:
            groups.setdefault(self.server_config(model).load_balancer, []).append(model)
        return {number: tuple(groups[number]) for number in sorted(groups)}

    def idle_timeout_seconds_for(self, models: tuple[ModelProps, ...]) -> int:
        """The idle timeout of the load balancer in front of ``models``: from the longest request among them."""
        if not models:
            return self.load_balancer.idle_timeout_for(None)
        longest = max(models, key=lambda m: self.server_of(m).longest_request_seconds)
        index = self.models.index(longest)
        key = f"models[{index}].{longest_request_key(self.server_config(longest).props)}"
        try:
            return self.load_balancer.idle_timeout_for(
                self.server_of(longest).longest_request_seconds, model=longest.name
            )
        except ConfigError as error:
            if self.load_balancer.idle_timeout_seconds is None:  # no timeout the ALB allows carries the request
                raise ConfigError(key, error.detail) from None
            raise error.within("load_balancer") from None

    def _check_cache(self) -> None:
        for index, model in enumerate(self.models):
            bundled = self.server_config(model).bundled
            if self.cache is None and bundled is not None and bundled.shared_cache != ModelCacheProps():
                raise ConfigError(
                    f"models[{index}].shared_cache",
                    "the environment has no cache; add a `cache` block or remove this one",
                )

    @property
    def configured_load(self) -> ConfiguredLoad:
        return self.configured_load_for(self.models)

    @staticmethod
    def configured_load_for(models: tuple[ModelProps, ...]) -> ConfiguredLoad:
        """What ``models`` (those behind one load balancer) are configured to serve."""
        busiest = max(models, key=lambda m: m.scaling.requests_per_target_per_minute * m.max_tasks)
        return ConfiguredLoad(
            one_task=max(m.scaling.requests_per_target_per_minute for m in models),
            one_model_at_peak=busiest.scaling.requests_per_target_per_minute * busiest.max_tasks,
            busiest_model=busiest.name,
        )

    def model_placement(self) -> dict[str, str]:
        """Model name -> the capacity group it runs on; models in no group run on ``capacity``."""
        names = {model.name for model in self.models}
        placement: dict[str, str] = {}
        for group, config in self.capacity_groups.items():
            key = f"capacity_groups.{group}"
            require(
                bool(GROUP_NAME.match(group)),
                key,
                "group names are 1-20 lowercase letters, digits or '-', starting with a letter",
            )
            try:
                config.capacity.resolve_instance_types()
            except ConfigError as error:
                raise error.within(f"{key}.capacity") from None
            require(
                bool(config.models),
                f"{key}.models",
                "list the models that run on this capacity (a group without models only costs money)",
            )
            for index, name in enumerate(config.models):
                require(
                    name in names,
                    f"{key}.models[{index}]",
                    f"{name!r} is not a model of this environment; models: {', '.join(sorted(names))}",
                )
                require(
                    name not in placement,
                    f"{key}.models[{index}]",
                    f"{name!r} is already placed on capacity_groups.{placement.get(name)}",
                )
                placement[name] = group
        return placement

    def group_capacity(self, group: str) -> GpuCapacityProps | NeuronCapacityProps:
        return self.capacity_groups[group].capacity if group else self.capacity

    def rollback_thresholds_for(self, model: ModelProps) -> RollbackThresholds:
        """Per model: its ``rollback`` block, else its own latency goal (scaling.latency_p95_ms) and the environment's
        5xx threshold. An LLM with a 20 s goal never shares an encoder's 500 ms."""
        return model.rollback_thresholds(self.monitoring.target_5xx_percent)

    @property
    def stage_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("-"))


class QuotaUse(TypedDict):
    """Keyword arguments for ``LoadBalancerQuotas.check``."""

    rules: int
    target_groups: int
    targets: int


def quota_use(models: list[ModelProps]) -> QuotaUse:
    """What ``models`` take of one load balancer's quotas: a rule each, one target group each (two with canary, linear
    or blue/green), and their targets at peak while one of them deploys."""
    return {
        "rules": len(models),
        "target_groups": sum(2 if m.deployment.shifts_traffic else 1 for m in models),
        "targets": tasks_for_deployment_at_peak([service_deployment(m) for m in models]),
    }


# The entry's keys whose problem is the task's size on its instance: where the model runs says where to look.
TASK_SIZE_KEYS = frozenset({"gpus", "cpu", "memory_mib"})
# Keys of validate_service's problems outside the model's entry (ModelService's timing is cdk.json's service).
ENVIRONMENT_PREFIXES = {"timing.": "service.", "telemetry.": "telemetry.", "scaling.schedules": "scaling.schedules"}


def cdk_json_problem(problem: Problem, index: int, model_name: str, group: str) -> Problem:
    """``problem`` of ``models[index]`` (named ``model_name``, on capacity group ``group``, "" for ``capacity``) at
    its cdk.json key: ``models[<name>]`` becomes ``models[<index>]``, a server's own key (``vllm.max_model_len``)
    nests in the entry, ``timing`` is ``service``, ``capacity`` the group's. The detail is the library's, with where
    the model runs added to a task that does not fit."""
    key, detail = problem.key, problem.detail
    if key == "capacity.max_capacity":
        return Problem(f"capacity_groups.{group}.{key}" if group else key, detail)
    for prefix, cdk_json in ENVIRONMENT_PREFIXES.items():
        if key.startswith(prefix):
            return Problem(cdk_json + key.removeprefix(prefix), detail)
    key = key.removeprefix(f"models[{model_name}]").removeprefix(".")
    if key in TASK_SIZE_KEYS:
        detail += (
            f" (it runs on capacity_groups.{group})"
            if group
            else " (it runs on capacity; place it in a capacity group of a larger shape)"
        )
    return Problem(f"models[{index}].{key}" if key else f"models[{index}]", detail)


def load_environments(context: Mapping[str, Any], only: str | None = None) -> list[EnvironmentConfig]:
    """All environments in ``context[CONTEXT_KEY]`` (or just ``only``), validated."""
    environments = context.get(CONTEXT_KEY)
    if not isinstance(environments, dict) or not environments:
        raise ConfigError(CONTEXT_KEY, 'cdk.json context must hold an object of environments, e.g. {"dev": {...}}')
    if only is not None and only not in environments:
        raise ConfigError(CONTEXT_KEY, f"unknown environment {only!r}; defined: {', '.join(environments)}")
    names = [only] if only is not None else list(environments)
    return [load_environment(name, environments[name]) for name in names]


def load_environment(name: str, data: Any) -> EnvironmentConfig:
    if not ENVIRONMENT_NAME.match(name):
        raise ConfigError(
            f"environment {name!r}", "names are 2-21 lowercase letters, digits or '-', starting with a letter"
        )
    if isinstance(data, dict) and "name" in data:
        raise ConfigError(
            f"environment {name!r}: name", "unknown key; the environment's name is its key in 'environments'"
        )
    for field_name, key in CDK_JSON_KEYS.items():
        if isinstance(data, dict) and field_name in data:
            raise ConfigError(f"environment {name!r}: {field_name}", f"unknown key; cdk.json names it {key!r}")
    try:
        return from_dict(
            EnvironmentConfig,
            with_field_names(with_servers(with_capacity_groups({**with_model_deployments(data), "name": name}))),
        )
    except ConfigError as error:
        key, detail = as_cdk_json(error)
        problems = [Problem(*as_cdk_json(ConfigError(problem.key, problem.detail))) for problem in error.problems]
        raise ConfigError(f"environment {name!r}: {key}", detail, problems) from None


def with_field_names(data: dict) -> dict:
    """cdk.json's keys as EnvironmentConfig's fields where their names differ (CDK_JSON_KEYS)."""
    fields = {key: field_name for field_name, key in CDK_JSON_KEYS.items()}
    return {fields.get(key, key): value for key, value in data.items()}


def as_cdk_json(error: ConfigError) -> tuple[str, str]:
    """An error's key and detail in cdk.json's names (CDK_JSON_KEYS), not EnvironmentConfig's fields."""
    key, detail = error.key, error.detail
    for field_name, cdk_json_key in CDK_JSON_KEYS.items():
        if key == field_name or key.startswith(f"{field_name}."):
            key = cdk_json_key + key[len(field_name) :]
    allowed = "unknown key; allowed keys here: "
    if detail.startswith(allowed) and "." not in key:
        names = [CDK_JSON_KEYS.get(name, name) for name in detail[len(allowed) :].split(", ")]
        detail = allowed + ", ".join(sorted(names))
    return key, detail


def with_model_deployments(data: Any) -> dict:
    """The environment's ``deployment`` becomes each model's unless the model has its own (which replaces it whole)."""
    if not isinstance(data, dict):
        return {"<not an object>": data}
    if "deployment" not in data or not isinstance(data.get("models"), list):
        return data
    models = [
        {"deployment": data["deployment"], **model} if isinstance(model, dict) else model for model in data["models"]
    ]
    return {**data, "models": models}


def with_capacity_groups(data: dict) -> dict:
    """Each ``capacity_groups.<name>.capacity`` as the props of its kind: NeuronCapacityProps where its instance_types
    are Neuron (inf2) types, else GpuCapacityProps. One group launches one AMI, so it never mixes the two."""
    groups = data.get("capacity_groups")
    if not isinstance(groups, dict):
        return data  # from_dict names what is not an object
    built = {}
    for name, group in groups.items():
        if not isinstance(group, dict) or "capacity" not in group:
            built[name] = group  # from_dict names what is not an object, or the missing key
            continue
        key = f"capacity_groups.{name}.capacity"
        capacity = group["capacity"]
        types = capacity.get("instance_types") if isinstance(capacity, dict) else None
        types = types if isinstance(types, list) else []
        neuron = [isinstance(t, str) and is_neuron_type(t) for t in types] or [False]
        if any(neuron) and not all(neuron):
            index = neuron.index(not neuron[0])
            raise ConfigError(
                f"{key}.instance_types[{index}]",
                f"{types[index]!r} mixes {'CUDA' if neuron[0] else 'Neuron'} and "
                f"{'Neuron' if neuron[0] else 'CUDA'} types in one group, which launches one AMI; put the "
                "inf2 types in a capacity group of their own",
            )
        props_type = NeuronCapacityProps if neuron and all(neuron) else GpuCapacityProps
        built[name] = {**group, "capacity": from_dict(props_type, capacity, key)}
    return {**data, "capacity_groups": built}


def with_servers(data: dict) -> dict:
    """cdk.json's ``models[]`` entries split into what the library keeps apart: the server-neutral ModelProps keys
    (``models``), and how each is served (``servers``: its server's props; ``load_balancer``)."""
    if "servers" in data:
        raise ConfigError("servers", "unknown key; say how each model is served in its own models[] entry")
    if isinstance(data.get("service"), dict) and "drain_timeout_seconds" in data["service"]:
        raise ConfigError(
            "service.drain_timeout_seconds",
            "is no longer an environment key: the drain is the bundled "
            "server's own, models[].drain_seconds (default 70)",
        )
    if not isinstance(data.get("models"), list) or not all(isinstance(model, dict) for model in data["models"]):
        return data  # from_dict names what is not a list of objects
    models, servers = [], []
    for index, entry in enumerate(data["models"]):
        key = f"models[{index}]"
        model, props = split_model_entry(entry, key, app_keys=PLACEMENT_KEYS)
        placement = {name: entry[name] for name in PLACEMENT_KEYS if name in entry}
        pool = pool_of_entry(entry, key)
        servers.append(from_dict(ModelServerConfig, {"props": props, "pool": pool, **placement}, key))
        models.append(model)
    return {**data, "models": models, "servers": servers}
