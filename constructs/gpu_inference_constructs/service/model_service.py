"""One model as an ECS service on GPU capacity, behind a load balancer's listener, from its server contract."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from ..capacity.gpu_packing import mps_prerequisites_warning
from ..capacity.instance_regions import warn_if_unlisted
from ..capacity.service_capacity import BoundCapacity, ServiceCapacity
from ..core.errors import ConfigError, raise_problems, require
from ..core.gpu_share import MPS_PLACEMENT_EXPRESSION
from ..core.legacy_keywords import accepts_legacy_keywords
from ..core.model_props import ROLLING_MAX_HEALTHY_PERCENT, ModelProps
from ..core.server_contract import ServerDefinition
from ..core.service_timing import ServiceTimingProps
from ..networking.subnet_selection import private_subnets
from ..rollout.deployment import RollbackAlarmNames, RollbackThresholds, service_options
from ..rollout.service_rollback import acknowledge_traffic_shifting, add_rollback_alarms
from ..routing.load_balancer import ALB_DEFAULT_IDLE_TIMEOUT_SECONDS
from ..routing.service_route import BoundRoute, ServiceRoute
from ..servers.bundled import BundledServer
from ..shared.acknowledgements import default_child
from ..shared.cdk_interfaces import as_role
from ..shared.environment import InferenceEnvironment
from ..store.model_bucket import ModelSource
from ..store.model_store import model_uri
from ..store.result_cache import ModelCacheProps, ResultCache, cache_of
from .adapter_queries import AdapterQueries
from .checks import (  # DEFAULT_NAME_PREFIX, check_name_prefix, service_log_group_name: re-exported for monitoring.py
    DEFAULT_NAME_PREFIX,
    SynthWarning,
    check_api_keys_variable,
    check_contract,
    check_model_name_free,
    check_name_prefix,
    check_runs_on,
    check_shared_memory,
    claim_listener_priority,
    claim_model_name,
    cluster_capacity_warning,
    health_check_start_period,
    idle_timeout_warnings,
    listener_key,
    service_log_group_name,
    task_timing,
    unauthenticated_warnings,
)
from .choices import bucket_of, placement_of, route_of
from .image_egress import check_images_reachable
from .props import ServiceAccess, ServiceLogs, service_identity
from .routing import ServiceTargets, task_security_group
from .server_context import CdkServerContext
from .service_inputs import CacheAttached, require_prop_types, service_log_group
from .service_metrics import ServiceMetrics
from .spot_draining import deployment_minimum_percent, tasks_on_one_instance
from .stack_limits import watch_stack_resources
from .target_optimizer import check_target_optimizer
from .task import ServiceTask
from .validation import validate_service

__all__ = [
    "DEFAULT_NAME_PREFIX",
    "ModelService",
    "check_name_prefix",
    "service_log_group_name",
]


class ModelService(Construct, ServiceMetrics):
    """One model as an ECS service on GPU capacity, behind an ALB listener, from its server contract.

    Three choices, each an open type whose ``bind`` says what the service needs (choices.py); a class of your own
    that subclasses one works as the library's do (``ServiceCapacity``, ``ModelSource``, ``ServiceRoute``):

    - ``capacity``, where the tasks run: a GpuCapacity, a NeuronCapacity (Inferentia2: the task maps the instance's
      ``/dev/neuron*`` devices, asks for no GPU, and runs one per instance), or ``ClusterCapacity(cluster,
      capacity_provider_name, instance_type)`` for a capacity provider of your own (``instance_type``: the smallest
      type it launches, CUDA or Neuron; the task must fit it).
    - ``model_source``, where the model's files are (``<prefix>/<name>/<version>/``): a ModelStore, or
      ``ModelBucket(bucket, prefix="models")`` for a bucket of your own.
    - ``route``, how requests arrive: an InferenceLoadBalancer (its listener; the rule's priority derived from the
      model's name), ``LoadBalancerRoute(load_balancer, priority)`` for a priority of your own on it, or
      ``ListenerRoute(listener, priority, load_balancer=None)`` for a listener of your own (see ListenerRoute).

    ``server`` (default BundledServer(): this library's server with BundledServerProps' defaults) is what runs: a
    preset such as VllmServer, TritonServer or TgiServer, or a ServerContract for any other server. ``environment``
    (InferenceEnvironment: the environment's name, name prefix, alarm topic, logs key and log retention, given once;
    or, as before, the environment's name with ``logs=ServiceLogs(key, retention_days, name_prefix)``; 0.2's
    ``environment_name=`` is renamed ``environment=``: it warns until 0.4), ``logs`` (ServiceLogs: the log route
    and trace sampling of the log group ``/<prefix>/<environment>/<model>``) and ``access`` (ServiceAccess: API keys,
    allow_unauthenticated, the tasks' subnets; default ServiceAccess()) are documented on their props. ``timing``
    defaults to ServiceTimingProps().

    How a new version goes out follows ``model.deployment`` (rolling, canary, linear, blue/green);
    ``rollback_thresholds`` (default ``model.rollback_thresholds()``: ``model.rollback``, else twice the model's
    scaling p95 target and 1 % 5xx) set the alarms that roll a deployment back.

    Attributes:

    - ``model``, ``environment`` (the InferenceEnvironment, or None), ``environment_name``, ``name_prefix``,
      ``contract`` (the server's ServerContract), ``url_path`` (``/<model>/``), ``instance_type`` (the smallest the
      tasks may land on), ``capacity_group`` (the GpuCapacity or NeuronCapacity the tasks run on: the bound
      capacity's ``group``; None on a ClusterCapacity).
    - The task (service_task.py): ``task_role``, ``task_definition``, ``container`` (the server), ``scratch_owner``
      and ``model_fetcher`` (the init containers, or None), ``metrics_collector`` (or None), ``adapter_sync`` (the
      LoRA adapters' sidecar of a server with ``lora``, or None), ``log_group``, ``adapter_queries`` (the saved
      Logs Insights queries of requests and latency per adapter, where the server logs each request's adapter; or
      None),
      ``log_stream_prefix`` (``<model>/<version>``).
    - The service: ``service``, ``security_group``, ``minimum_healthy_percent`` (spot_draining.py: never 0; below
      100 only where the capacity ``has_spot`` and the model's tasks can span instances),
      ``deregistration_delay_seconds`` and ``stop_timeout_seconds`` (``timing``'s, or the contract's own),
      ``result_cache`` (the ResultCache of ``use_cache`` or ``ResultCache.attach``, or None).
    - The route (service_routing.py): ``target_group``, ``target_groups`` (with the alternate one that canary,
      linear and blue/green deployments shift traffic to), ``target_group_metrics`` (TargetGroupMetrics of each),
      ``load_balancer_full_name``, ``listener_rule``.
    - Rollback (service_rollback.py): ``rollback_alarms``, ``never_healthy_alarm`` (NeverHealthyAlarm for canary,
      linear and blue/green; else None), ``revision_health_hook`` (RevisionHealthHook, the POST_SCALE_UP lifecycle
      hook that fails such a deployment before traffic moves; else None).

    ``acknowledge_container`` records why a container runs as root or writes its root filesystem.
    ``add_rollback_alarm`` adds an alarm that rolls back a deployment in progress; ``use_cache`` connects a
    ResultCache; ``allow_draining_down_to`` follows a schedule's lower floor; ``metric_*`` give its metrics.
    """

    @accepts_legacy_keywords("ModelService")
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model: ModelProps,
        capacity: ServiceCapacity,
        model_source: ModelSource,
        route: ServiceRoute,
        environment: InferenceEnvironment | str | None = None,
        logs: ServiceLogs | None = None,
        server: ServerDefinition | None = None,
        access: ServiceAccess | None = None,
        timing: ServiceTimingProps | None = None,
        rollback_thresholds: RollbackThresholds | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        logs = self._take_identity(environment, logs)
        environment_name = self.environment_name
        require_prop_types(model=model, access=access, timing=timing, rollback_thresholds=rollback_thresholds)
        access = access or ServiceAccess()
        chosen_route = route_of(route, self)
        self._listener_key = listener_key(chosen_route.listener)
        check_model_name_free(self, self.name_prefix, environment_name, model.name, self._listener_key)
        if rollback_thresholds is None:
            rollback_thresholds = model.rollback_thresholds()  # ModelProps checked its rollback block
        else:
            rollback_thresholds.check_above_scaling(model.scaling.latency_p95_ms, "rollback_thresholds.latency_p95_ms")
        self.model = model
        self.url_path = f"/{model.name}/"
        placement = self._place(capacity)
        source = bucket_of(model_source, self)
        if chosen_route.priority is not None:
            claim_listener_priority(self, chosen_route.listener, chosen_route.priority, model.name)
        server = server or BundledServer()
        require(
            isinstance(server, ServerDefinition),
            "server",
            f"got {type(server).__name__}: pass a server definition (BundledServer, VllmServer, SglangServer, "
            "TritonServer, TgiServer, NeuronServer, a class of your own that subclasses ServerDefinition) or a "
            "ServerContract",
        )
        # The server's use of a shared result cache (BundledServerProps.shared_cache): True needs use_cache by synth.
        self._cache_props = server.cache_client()
        self.node.add_validation(CacheAttached(self))
        watch_stack_resources(self)
        subnets = access.subnets or private_subnets(placement.cluster.vpc, f"ModelService {model.name!r} (its tasks)")
        uri = model_uri(source.bucket, source.prefix, model.name, model.version)
        self._telemetry = logs.telemetry
        start_period = self._contract_and_checks(
            server, placement, chosen_route, timing or ServiceTimingProps(), access, uri, type(capacity).__name__
        )
        self.log_group = service_log_group(self, logs, environment_name, model.name)
        self._task = ServiceTask(
            self,
            model=model,
            contract=self.contract,
            source=source,
            uri=uri,
            region=cdk.Stack.of(self).region,
            environment_name=environment_name,
            log_group=self.log_group,
            stop_timeout_seconds=self.stop_timeout_seconds,
            health_check_start_period=start_period,
            api_keys_secret=access.api_keys_secret,
            telemetry=logs.telemetry,
            archive_bucket=logs.archive_bucket,
            instance_type=self.instance_type,
        )
        self.task_role, self.task_definition, self.container = (
            self._task.task_role,
            self._task.task_definition,
            self._task.container,
        )
        self.scratch_owner, self.model_fetcher = self._task.scratch_owner, self._task.model_fetcher
        self.metrics_collector, self.adapter_sync = self._task.metrics_collector, self._task.adapter_sync
        self.adapter_queries = (
            AdapterQueries(
                self,
                "AdapterQueries",
                log_group=self.log_group,
                model_name=model.name,
                environment_name=environment_name,
                name_prefix=self.name_prefix,
            )
            if self.contract.adapter_sync is not None and self.contract.adapter_sync.request_log is not None
            else None
        )
        self._serve(placement, chosen_route, subnets, rollback_thresholds)
        check_images_reachable(
            self,
            model.name,
            self.task_definition,
            placement.cluster.vpc,
            placement.instance_subnets,
        )
        claim_model_name(self, self.name_prefix, environment_name, model.name, self._listener_key)

    def _place(self, capacity: ServiceCapacity) -> BoundCapacity:
        """``capacity`` bound to this service (``instance_type``, ``capacity_group``); on capacity the library does
        not manage, the warnings of what its instances must offer."""
        placement = placement_of(capacity, self)
        self.instance_type = placement.instance_type
        self.capacity_group = placement.group
        if placement.group is None:
            warn_if_unlisted(self, self.instance_type, cdk.Stack.of(self).region, "capacity.instance_type")
            names = placement.capacity_provider_names
            cdk.Annotations.of(self).add_warning_v2(
                *cluster_capacity_warning(type(capacity).__name__, names, self.instance_type, self.model)
            )
        return placement

    def _take_identity(self, environment: InferenceEnvironment | str | None, logs: ServiceLogs | None) -> ServiceLogs:
        """The environment's name and the model's complete logs (:func:`~.props.service_identity`), kept as the
        attributes ``environment``, ``environment_name`` and ``name_prefix``."""
        self.environment_name, logs = service_identity(environment, logs)
        assert logs.key is not None and logs.retention_days is not None and logs.name_prefix is not None  # completed
        self.environment = environment if isinstance(environment, InferenceEnvironment) else None
        self.name_prefix: str = logs.name_prefix
        self._logs_key, self._log_retention_days = logs.key, logs.retention_days
        return logs

    def _contract_and_checks(
        self,
        server: ServerDefinition,
        placement: BoundCapacity,
        route: BoundRoute,
        timing: ServiceTimingProps,
        access: ServiceAccess,
        uri: str,
        capacity_name: str,
    ) -> int:
        """The server's contract for this model (``contract``), checked against the load balancer, the instance
        and the access it is given; the task timing it gets; the model joins a GpuCapacity's packing. Returns the
        server's health-check start period."""
        model = self.model
        # Where the route knows its idle timeout (an InferenceLoadBalancer's), that; else the ALB's default is assumed.
        known = route.idle_timeout_seconds is not None
        idle_timeout = (
            ALB_DEFAULT_IDLE_TIMEOUT_SECONDS if route.idle_timeout_seconds is None else route.idle_timeout_seconds
        )
        try:
            timing = timing.keep_alive_above(idle_timeout)
        except ConfigError as error:
            raise error.within("timing") from None
        region = cdk.Stack.of(self).region
        check_runs_on(server.name, server.accelerator, self.instance_type, f"models[{model.name}].server")
        self._note_support(server)
        contract = server.contract(
            CdkServerContext(
                self,
                model,
                timing,
                self.environment_name,
                region,
                uri,
                self.instance_type,
                self._telemetry.trace_sampling_ratio,
            )
        )
        check_contract(server, contract, model)
        check_target_optimizer(self, server, model, contract)
        self.contract = contract
        self._warn(idle_timeout_warnings(contract, idle_timeout, model.name, known=known))
        try:
            check_shared_memory(model, contract)
        except ConfigError as error:
            raise error.within(f"models[{model.name}]") from None
        raise_problems(
            validate_service(
                model,
                server=contract,
                capacity=self.instance_type,  # the group's own check runs as the model joins it (add_model)
                fleet_types=placement.fleet,
                timing=timing,
                telemetry=self._telemetry,
            )
        )
        if model.gpu_share is not None and placement.group is None:
            self._warn(
                [
                    (
                        f"gpu-inference:mps-prerequisites:{model.name}",
                        mps_prerequisites_warning(model.name, f"its capacity provider is your own ({capacity_name})"),
                    )
                ]
            )
        if placement.group is not None:
            try:
                placement.group.add_model(model)
            except ConfigError as error:
                raise ConfigError(f"capacity ({error.key})", f"{error.detail} (adding models[{model.name}])") from None
        self.deregistration_delay_seconds, self.stop_timeout_seconds = task_timing(contract, timing, model.name)
        if access.api_keys_secret is not None:
            check_api_keys_variable(contract)
        elif not access.allow_unauthenticated:
            self._warn(unauthenticated_warnings(contract, model.name, route.open_to_the_internet))
        return health_check_start_period(model, contract)

    def _serve(
        self,
        placement: BoundCapacity,
        route: BoundRoute,
        subnets: ec2.SubnetSelection,
        rollback_thresholds: RollbackThresholds,
    ) -> None:
        """The service on its capacity, behind its route, with the alarms that roll its deployments back."""
        model, contract, deployment = self.model, self.contract, self.model.deployment
        self.security_group = task_security_group(
            self,
            vpc=placement.cluster.vpc,
            model_name=model.name,
            port=contract.port,
            route=route,
            target_optimizer=model.target_optimizer,
            health_check_port=contract.health_check_port,
        )
        self._rollback_alarm_names = RollbackAlarmNames()
        self._has_spot = placement.has_spot
        self.minimum_healthy_percent = self._draining_percent(model.min_tasks)
        self.service = ecs.Ec2Service(
            self,
            "Service",
            cluster=placement.cluster,
            task_definition=self.task_definition,
            capacity_provider_strategies=list(placement.capacity_provider_strategies),
            security_groups=[self.security_group],
            vpc_subnets=subnets,
            min_healthy_percent=self.minimum_healthy_percent,
            max_healthy_percent=ROLLING_MAX_HEALTHY_PERCENT,
            deployment_alarms=self._rollback_alarm_names.config(),
            **service_options(deployment),
            health_check_grace_period=cdk.Duration.seconds(model.health_check_grace_seconds),
            # A share runs only where the agent advertises MPS (gpu_share.MPS_CAPABILITY); elsewhere ECS would start it
            # on a GPU without the MPS server and its limits unenforced.
            placement_constraints=[ecs.PlacementConstraint.member_of(MPS_PLACEMENT_EXPRESSION)]
            if model.gpu_share
            else None,
            placement_strategies=[
                ecs.PlacementStrategy.spread_across(ecs.BuiltInAttributes.AVAILABILITY_ZONE),
                ecs.PlacementStrategy.spread_across_instances(),
            ],
            propagate_tags=ecs.PropagatedTagSource.SERVICE,
            enable_ecs_managed_tags=True,
        )
        # Created after, and deleted before, the cluster's capacity-provider association; otherwise CloudFormation
        # may do either in the wrong order ("The specified capacity provider is in use", aws/aws-cdk#15366).
        # The association is a child of the cluster, created at synth: depending on the cluster covers it. Across
        # stacks this becomes a dependency on the stack that holds the cluster.
        self.service.node.add_dependency(placement.cluster)
        for dependency in placement.depends_on:  # an imported cluster's association
            self.service.node.add_dependency(dependency)
        targets = ServiceTargets(
            self,
            model_name=model.name,
            contract=contract,
            route=route,
            vpc=placement.cluster.vpc,
            deregistration_delay_seconds=self.deregistration_delay_seconds,
            shifts_traffic=deployment.shifts_traffic,
            target_optimizer=model.target_optimizer,
        )
        self.target_groups, self.target_group, self.listener_rule = (
            targets.target_groups,
            targets.target_group,
            targets.listener_rule,
        )
        self.load_balancer_full_name, self.target_group_metrics = (
            targets.load_balancer_full_name,
            targets.target_group_metrics,
        )
        targets.attach(self.service, self.container)
        self.rollback_alarms, self.never_healthy_alarm, self.revision_health_hook = add_rollback_alarms(
            self,
            names=self._rollback_alarm_names,
            model=model,
            thresholds=rollback_thresholds,
            target_groups=self.target_group_metrics,
            service=self.service,
            cluster=placement.cluster,
            never_healthy_prefix=f"{self.name_prefix}-{self.environment_name}-{model.name}-never-healthy",
            container_insights_on=placement.group is not None,
            logs_key=self._logs_key,
            log_retention_days=self._log_retention_days,
        )
        self._task.acknowledge_findings()
        if deployment.shifts_traffic:
            acknowledge_traffic_shifting(self.service, deployment)
        if placement.group is not None:
            placement.group.prepull_task(self, self.task_definition)

    def _note_support(self, server: ServerDefinition) -> None:
        """An experimental preset gets a synth note, a deprecated one a warning, each naming why."""
        where = f"models[{self.model.name}].server"
        if server.support == "experimental":
            cdk.Annotations.of(self).add_info(
                f"{where}: the {server.name} preset is experimental: {server.support_note}"
            )
        elif server.support == "deprecated":
            warning_id = server.deprecation_warning_id()
            cdk.Annotations.of(self).add_warning_v2(
                warning_id,
                f"{where}: the {server.name} preset is deprecated: {server.support_note}. It keeps working; "
                f"plan the move, and until then acknowledge it: cdk.Annotations.of(<this ModelService>)"
                f".acknowledge_warning('{warning_id}')",
            )

    def _warn(self, warnings: list[SynthWarning]) -> None:
        for warning_id, message in warnings:
            cdk.Annotations.of(self).add_warning_v2(warning_id, message)

    def _draining_percent(self, smallest_desired: int) -> int:
        model = self.model
        per_instance = tasks_on_one_instance(self.instance_type.gpus, model.gpus, model.max_tasks)
        return deployment_minimum_percent(smallest_desired, model.max_tasks, per_instance, has_spot=self._has_spot)

    def allow_draining_down_to(self, smallest_desired: int) -> None:
        """Lower ``minimum_healthy_percent`` for a service whose desired count may go down to ``smallest_desired``
        (a schedule's lower floor), so a Spot notice still lets ECS stop a doomed task at once (spot_draining.py)."""
        require(smallest_desired >= 1, "smallest_desired", f"{smallest_desired}: a desired count of at least 1")
        percent = self._draining_percent(smallest_desired)
        if percent < self.minimum_healthy_percent:
            self.minimum_healthy_percent = percent
            default_child(self.service, ecs.CfnService).add_property_override(
                "DeploymentConfiguration.MinimumHealthyPercent", percent
            )

    def use_cache(self, cache: ResultCache, props: ModelCacheProps | None = None) -> None:
        """Connect this model's tasks to ``cache``, in one step: the server's cache settings (``props``, default the
        bundled server's ``shared_cache``), elasticache:Connect and the client security group (ResultCache.attach)."""
        require(
            self._cache_props is not None,
            "server",
            f"the {self.contract.name} server has no client of the shared result cache: only the bundled server "
            "(BundledServer) reads it; remove use_cache for this model",
        )
        assert self._cache_props is not None  # required above
        require(
            self._cache_props.enabled is not False,
            f"models[{self.model.name}].shared_cache.enabled",
            "is false: remove use_cache for this model, or enable its shared_cache",
        )
        cache.attach(
            container=self.container,
            task_role=as_role(self.task_role),
            service=self.service,
            props=props or self._cache_props,
        )

    @property
    def result_cache(self) -> ResultCache | None:
        """The ResultCache this model's service is a client of (``use_cache``, or ``ResultCache.attach`` with its
        ``service``), or None."""
        return cache_of(self.service)

    def add_rollback_alarm(self, alarm: cloudwatch.IAlarm) -> None:
        """ECS rolls a deployment in progress back (every strategy) while ``alarm`` is in ALARM."""
        self._rollback_alarm_names.add(alarm.alarm_name)

    def acknowledge_container(self, container_name: str, what: str, reason: str) -> None:
        """Record, in the task definition's metadata (``CONTAINER_ACKNOWLEDGEMENTS``), why ``container_name`` is not
        non-root (``what`` "user") or has a writable root filesystem ("readonly_root_filesystem")."""
        self._task.acknowledgements.add(container_name, what, reason)

    @property
    def log_stream_prefix(self) -> str:
        """``<model>/<version>``: every container's log stream is ``<model>/<version>/<container>/<task id>``, so the
        two versions that serve side by side during a deployment stay apart, whatever the server logs."""
        return self._task.log_stream_prefix
