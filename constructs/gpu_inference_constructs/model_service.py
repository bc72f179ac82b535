"""One model as an ECS service on the GPU capacity provider, behind the shared load balancer."""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence

import aws_cdk as cdk
import jsii
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct, IValidation

from . import metric_names
from .acknowledgements import acknowledge, acknowledge_when_resolved, default_child, default_policy, nag_rendering
from .bundled_server import BundledServer
from .cdk_interfaces import as_role, service_principal
from .deployment import (
    RollbackAlarmNames,
    RollbackAlarms,
    RollbackThresholds,
    sum_over,
    worst_of,
)
from .errors import ConfigError, require
from .gpu_capacity import GpuCapacity
from .gpu_share import write_share
from .instance_catalog import GpuInstanceType, lookup, warn_if_unlisted
from .load_balancer import (
    ALB_DEFAULT_IDLE_TIMEOUT_SECONDS,
    IDLE_TIMEOUT_MARGIN_SECONDS,
    MAX_RULE_PRIORITY,
    InferenceLoadBalancer,
    check_rule_priority,
    model_path_patterns,
)
from .log_retention import retention_days
from .model_fetch import fetch_script
from .model_props import ROLLING_MAX_HEALTHY_PERCENT, ModelProps
from .model_store import (
    MODELS_PREFIX,
    ModelStore,
    compile_cache_prefix,
    grant_read_prefix,
    model_read_prefix,
    model_uri,
)
from .result_cache import ModelCacheProps, ResultCache
from .revision_health import NeverHealthyAlarm
from .server_contract import (
    DEFAULT_COLLECTOR_IMAGE,
    DEFAULT_FETCHER_IMAGE,
    FETCHER_CPU,
    FETCHER_MEMORY_MIB,
    SCRATCH_PATH,
    ServerContext,
    ServerContract,
    ServerDefinition,
    collector_config,
)
from .service_timing import ServiceTimingProps
from .spot_draining import minimum_healthy_percent, tasks_on_one_instance
from .subnet_selection import private_subnets
from .target_group_metrics import TargetGroupMetrics, load_balancer_name_from_listener_arn
from .target_group_metrics import load_balancer_full_name as full_name_of
from .target_health import TARGET_HEALTH_CHECK

# ECS caps a container health check's startPeriod at 300 s (ECS API HealthCheck).
MAX_HEALTH_CHECK_START_PERIOD = 300
# Task-definition metadata: container name -> {'user' | 'readonly_root_filesystem': why it is root / writable}.
CONTAINER_ACKNOWLEDGEMENTS = "gpu-inference:container-acknowledgements"
DEFAULT_NAME_PREFIX = "gpu-inference"
# The server is the task definition's first container: the init containers and sidecars are added after it.
SERVER_CONTAINER_INDEX = 0
NAME_PREFIX = re.compile(r"^[a-z][a-z0-9-]{1,31}$")


def service_log_group_name(environment_name: str, model_name: str, name_prefix: str = DEFAULT_NAME_PREFIX) -> str:
    """A model service's log group: named, so the environment's dashboard can price its ingestion without a reference."""
    return f"/{name_prefix}/{environment_name}/{model_name}"


def check_name_prefix(name_prefix: str) -> None:
    require(bool(NAME_PREFIX.match(name_prefix)), "name_prefix",
            f"{name_prefix!r}: use 2-32 lowercase letters, digits and '-', starting with a letter (it starts log-group, "
            "alarm and dashboard names; give each team or app its own so two stacks in one account do not collide)")


_LISTENER_PRIORITIES: weakref.WeakKeyDictionary[object, dict[str, dict[int, str]]] = weakref.WeakKeyDictionary()
_MODEL_NAMES: weakref.WeakKeyDictionary[object, dict[tuple[str, str, str], str]] = weakref.WeakKeyDictionary()


def check_model_name_free(scope: Construct, name_prefix: str, environment_name: str, model_name: str) -> None:
    """One model of a name per app, environment and name prefix: a second would take the same path ``/<name>/`` and
    the same log group (``/<prefix>/<environment>/<name>``), so it is refused as a name taken, before anything else
    (a listener-priority clash) could be reported instead."""
    holder = _MODEL_NAMES.get(scope.node.root, {}).get((name_prefix, environment_name, model_name))
    require(holder is None, "model.name",
            f"{model_name!r} is already the name of the model at {holder} in environment {environment_name!r}: its path "
            f"/{model_name}/ and log group {service_log_group_name(environment_name, model_name, name_prefix)} are taken; "
            "give this model another name (or another environment_name or name_prefix for another team's app)")


def claim_model_name(scope: Construct, name_prefix: str, environment_name: str, model_name: str) -> None:
    """Record a model that was built whole (one refused half-way claims nothing)."""
    _MODEL_NAMES.setdefault(scope.node.root, {})[(name_prefix, environment_name, model_name)] = scope.node.path


def claim_listener_priority(scope: Construct, listener: elbv2.IApplicationListener, priority: int, model_name: str) -> None:
    """Two rules of one listener cannot share a priority (CloudFormation fails the second at deploy): refuse it at
    synth for every model of this app on the same listener, the same ARN imported in several stacks included."""
    arn = listener.listener_arn
    key = arn if not cdk.Token.is_unresolved(arn) else listener.node.path
    claimed = _LISTENER_PRIORITIES.setdefault(scope.node.root, {}).setdefault(key, {})
    holder = claimed.get(priority)
    require(holder is None, "listener_priority",
            f"{priority} is already {holder!r}'s on this listener: each rule on a listener needs its own priority; give "
            f"models[{model_name}] another (1-{MAX_RULE_PRIORITY})")
    claimed[priority] = model_name


class ModelService(Construct):
    """One model as an ECS service on GPU capacity, behind an ALB listener, from its server contract.

    Where it runs: ``capacity`` (a GpuCapacity), or ``cluster`` + ``capacity_provider_name`` +
    ``instance_type`` (the smallest type of your capacity, name or catalog entry: the task must fit it).
    What runs: ``server`` (default BundledServer(): this library's server with BundledServerProps' defaults; a preset
    such as VllmServer, TritonServer or TgiServer, or a ServerContract for any other server; an ``image=`` alone is
    refused, since it cannot say which server the image holds). Where its model is: ``model_store`` (a
    ModelStore), or ``model_bucket`` (any IBucket) + ``models_prefix`` (default ``"models"``): the
    model's files are under ``<models_prefix>/<name>/<version>/``. Routing: ``load_balancer`` an
    InferenceLoadBalancer (it routes to its own listener), or ``listener`` (any IApplicationListener; its connections
    reach the tasks) + ``listener_priority`` (required there; on an InferenceLoadBalancer the default is derived from
    the model's name, and two names that give one priority are refused) + ``load_balancer`` (optional: that listener's IApplicationLoadBalancer,
    imported or another stack's, whose name dimensions the target-group metrics; default: parsed from the listener's
    ARN, which CloudFormation may not accept inside ``Fn::Split`` when the ARN is another stack's output).
    ``name_prefix`` (default ``gpu-inference``) starts the log group's fixed name (``/<prefix>/<environment>/<model>``):
    give each team's app its own where two share an account. ``logs_key`` (any IKey) encrypts the log group, kept
    ``log_retention_days`` (default 90). ``timing`` defaults to ServiceTimingProps().
    ``api_keys_secret`` (a JSON object of key names to keys) goes to the contract's ``api_keys_variable``: whole,
    or only its ``api_key_field`` key (vLLM's one key). Without it, a model behind an InferenceLoadBalancer open to the
    internet is refused (behind your own listener, whose reach is not known here, it is a warning), unless
    ``allow_unauthenticated`` (default False) says that something else decides who may call it (an authenticating
    proxy or WAF rule in front, or a network only your clients reach).

    How a new version goes out follows ``model.deployment`` (rolling, canary, linear, blue/green);
    ``rollback_thresholds`` (default ``model.rollback_thresholds()``: ``model.rollback``, else twice the model's
    scaling p95 target and 1 % 5xx) set the alarms that roll a deployment back.

    Attributes: ``contract``, ``service``, ``task_definition``, ``container``, ``scratch_owner`` and
    ``model_fetcher`` (the init containers, or None), ``metrics_collector`` (or None), ``target_group``, ``target_groups`` (with the alternate one
    that canary, linear and blue/green deployments shift traffic to), ``target_group_metrics`` (TargetGroupMetrics of each), ``load_balancer_full_name``, ``listener_rule``,
    ``rollback_alarms``, ``never_healthy_alarm`` (NeverHealthyAlarm for canary, linear and blue/green; else None), ``minimum_healthy_percent`` (spot_draining.py), ``security_group``, ``log_group``, ``log_stream_prefix`` (``<model>/<version>``),
    ``deregistration_delay_seconds`` and ``stop_timeout_seconds`` (``timing``'s, or the contract's own),
    ``task_role``, ``url_path``, ``instance_type``. ``acknowledge_container`` records why a container runs as root
    or writes its root filesystem. ``add_rollback_alarm`` adds an alarm that rolls back a deployment in progress.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model: ModelProps,
        logs_key: kms.IKey,
        environment_name: str,
        timing: ServiceTimingProps | None = None,
        capacity: GpuCapacity | None = None,
        cluster: ecs.ICluster | None = None,
        capacity_provider_name: str | None = None,
        instance_type: GpuInstanceType | str | None = None,
        subnets: ec2.SubnetSelection | None = None,
        server: ServerDefinition | None = None,
        image: None = None,
        model_store: ModelStore | None = None,
        model_bucket: s3.IBucket | None = None,
        models_prefix: str = MODELS_PREFIX,
        load_balancer: InferenceLoadBalancer | elbv2.IApplicationLoadBalancer | None = None,
        listener: elbv2.IApplicationListener | None = None,
        listener_priority: int | None = None,
        log_retention_days: int = 90,
        api_keys_secret: secretsmanager.ISecret | None = None,
        allow_unauthenticated: bool = False,
        rollback_thresholds: RollbackThresholds | None = None,
        name_prefix: str = DEFAULT_NAME_PREFIX,
    ) -> None:
        super().__init__(scope, construct_id)
        check_name_prefix(name_prefix)
        check_model_name_free(self, name_prefix, environment_name, model.name)
        self.name_prefix = name_prefix
        timing = timing or ServiceTimingProps()
        if rollback_thresholds is None:
            rollback_thresholds = model.rollback_thresholds()  # ModelProps checked its rollback block
        else:
            rollback_thresholds.check_above_scaling(model.scaling.latency_p95_ms, "rollback_thresholds.latency_p95_ms")
        self.model = model
        deployment = model.deployment
        self._rollback_alarm_names = RollbackAlarmNames()
        self.environment_name = environment_name
        self.url_path = f"/{model.name}/"
        region = cdk.Stack.of(self).region
        cluster, capacity_provider_name, self.instance_type = _placement(capacity, cluster, capacity_provider_name, instance_type, region)
        self._fleet_types = tuple(capacity.instance_types) if capacity is not None else (self.instance_type,)
        if capacity is None:
            warn_if_unlisted(self, self.instance_type, region, "instance_type")
        bucket = _model_bucket(model_store, model_bucket)
        owned = load_balancer if isinstance(load_balancer, InferenceLoadBalancer) else None
        if owned is not None:
            require(listener is None, "listener", "is given with an InferenceLoadBalancer, which routes to its own listener: pass one of them")
        else:
            require(listener is not None, "listener",
                    "is missing: pass load_balancer=InferenceLoadBalancer(...), or listener= (any IApplicationListener) with "
                    "load_balancer= its IApplicationLoadBalancer (imported with ApplicationLoadBalancer.from_application_load_balancer_attributes)")
        load_balancer_of_listener = None if isinstance(load_balancer, InferenceLoadBalancer) else load_balancer
        load_balancer = owned
        if listener_priority is not None:
            check_rule_priority(listener_priority, "listener_priority")
        if listener is not None:
            if listener_priority is None:
                raise ConfigError("listener_priority",
                                  f"is missing: a rule on your own listener needs a priority unique on that listener (1-{MAX_RULE_PRIORITY})")
            claim_listener_priority(self, listener, listener_priority, model.name)
        # An image says nothing about the server in it: taken for ours, vllm/vllm-openai would run `python -m
        # inference_server`. So an image comes inside a server definition; image= alone is refused with the fix.
        require(
            image is None,
            "image",
            "is not accepted: an image alone does not say which server it holds or how to run it. Pass "
            "server=BundledServer(image=...) for the image built from inference_image/, server=VllmServer(...) for "
            "vLLM, or server=ServerContract(image=..., command=..., ...) for any other server",
        )
        server = server or BundledServer()
        # Our server's use of a shared result cache (BundledServerProps.shared_cache): True needs use_cache by synth.
        self._cache_props = server.props.shared_cache if isinstance(server, BundledServer) else None
        self.result_cache: ResultCache | None = None
        self.node.add_validation(_CacheAttached(self))
        if subnets is None:
            subnets = private_subnets(cluster.vpc, f"ModelService {model.name!r} (its tasks)")

        # Behind an InferenceLoadBalancer its idle timeout is known; behind another listener, the ALB's default is assumed.
        idle_timeout = load_balancer.idle_timeout_seconds if load_balancer is not None else ALB_DEFAULT_IDLE_TIMEOUT_SECONDS
        try:
            timing = timing.keep_alive_above(idle_timeout)
        except ConfigError as error:
            raise error.within("timing") from None
        uri = model_uri(bucket, models_prefix, model.name, model.version)
        contract = server.contract(ServerContext(self, model, timing, environment_name, region, uri, self.instance_type))
        require(isinstance(contract, ServerContract), "server", f"{type(server).__name__}.contract() must return a ServerContract")
        require(model.gpu_share is None or contract.single_cuda_process, f"models[{model.name}].gpu_share",
                f"the {contract.name} server does not say it uses the GPU from one process (ServerContract."
                "single_cuda_process): AWS advises a whole GPU for a container that runs more than one CUDA process; "
                "use whole GPUs (remove gpu_share), or set single_cuda_process=True in a contract whose server does")
        self.contract = contract
        self._check_idle_timeout(contract, idle_timeout, known=load_balancer is not None)
        self._check_fits(contract)
        if capacity is not None:
            try:
                capacity.add_model(model)
            except ConfigError as error:
                raise ConfigError(f"capacity ({error.key})", f"{error.detail} (adding models[{model.name}])") from None
        try:
            self.deregistration_delay_seconds, self.stop_timeout_seconds = contract.stop.checked_task_timing(
                timing.deregistration_delay_seconds, timing.stop_timeout_seconds, f"the {contract.name} server")
        except ConfigError as error:
            raise ConfigError(f"timing.{error.key}", f"{error.detail} (models[{model.name}])") from None
        if api_keys_secret is not None:
            require(
                contract.api_keys_variable is not None,
                "api_keys_secret",
                f"is given but the {contract.name} server contract names no api_keys_variable to receive it",
            )
        elif not allow_unauthenticated:
            self._refuse_unauthenticated(contract, load_balancer)

        self.log_group = logs.LogGroup(
            self, "Logs", log_group_name=service_log_group_name(environment_name, model.name, name_prefix),
            encryption_key=logs_key, retention=retention_days(log_retention_days, "log_retention_days"),
            # Kept when the model is removed, but not after a failed first create: with a fixed name, a group kept
            # then makes the retry (or adding the model back) fail with "already exists".
            removal_policy=cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        )
        self.task_role = iam.Role(
            self,
            "TaskRole",
            assumed_by=service_principal("ecs-tasks.amazonaws.com"),
            description=f"Model server for {model.name}: reads its own model prefix only",
        )
        self._read_prefix = model_read_prefix(models_prefix, model.name)
        grant_read_prefix(bucket, self.task_role, self._read_prefix)

        self.task_definition = ecs.Ec2TaskDefinition(
            self,
            "TaskDefinition",
            network_mode=ecs.NetworkMode.AWS_VPC,
            task_role=as_role(self.task_role),
            volumes=[
                ecs.Volume(
                    name="scratch",
                    docker_volume_configuration=ecs.DockerVolumeConfiguration(scope=ecs.Scope.TASK, driver="local"),
                )
            ],
        )
        environment = dict(contract.environment)
        if contract.model_source.server_reads_s3:
            environment.setdefault(contract.model_source.uri_variable, uri)
        self._compile_cache_prefix: str | None = None
        if contract.compile_cache_variable is not None:
            self._compile_cache_prefix = cache_prefix = compile_cache_prefix(models_prefix, model.name, model.version)
            environment[contract.compile_cache_variable] = f"s3://{bucket.bucket_name}/{cache_prefix}"
            # Read by the model's own read grant (the cache is under its prefix); written here only, and only as a
            # new object (If-None-Match: *, enforced by S3's s3:if-none-match key): no task replaces an archive the
            # next tasks load, so a compromised task cannot plant code in a cache that is already there.
            self.task_role.add_to_principal_policy(
                iam.PolicyStatement(actions=["s3:PutObject"], resources=[bucket.arn_for_objects(f"{cache_prefix}*")],
                                    conditions={"Null": {"s3:if-none-match": "false"}}))
        secrets = dict(contract.secrets)
        if api_keys_secret is not None:
            assert contract.api_keys_variable is not None  # required above when api_keys_secret is given
            secrets[contract.api_keys_variable] = ecs.Secret.from_secrets_manager(api_keys_secret, field=contract.api_key_field)
            if contract.api_key_field is not None and api_keys_secret.secret_full_arn is None:
                cdk.Annotations.of(self).add_warning_v2(
                    "gpu-inference:partial-secret-arn",
                    f"models[{model.name}] reads the key {contract.api_key_field!r} of an API-key secret imported by name: "
                    "ECS gets its partial ARN (no random suffix) with a JSON key, which Secrets Manager resolves only "
                    "when no other secret's name starts with the same name. Import it with "
                    "secretsmanager.Secret.from_secret_complete_arn (the ARN with its six-character suffix).")
        linux_parameters = ecs.LinuxParameters(
            self, "LinuxParameters", init_process_enabled=True, shared_memory_size=contract.shared_memory_mib
        )
        for path, size in contract.tmpfs_mib.items():
            linux_parameters.add_tmpfs(
                ecs.Tmpfs(container_path=path, size=size, mount_options=[ecs.TmpfsMountOption.NOSUID, ecs.TmpfsMountOption.NODEV])
            )
        liveness = contract.liveness
        start_period = min(MAX_HEALTH_CHECK_START_PERIOD, model.health_check_grace_seconds)
        require(
            liveness.passes_while_loading or liveness.start_window_seconds(start_period) >= model.expected_load_seconds,
            f"models[{model.name}].expected_load_seconds",
            f"{model.expected_load_seconds} s is longer than the {contract.name} server's liveness check allows while "
            f"loading ({start_period} s start period + {liveness.retries} x {liveness.interval_seconds} s = "
            f"{liveness.start_window_seconds(start_period)} s; ECS caps the start period at {MAX_HEALTH_CHECK_START_PERIOD} s): ECS "
            "would replace the container mid-load, in a loop. Give the server a liveness check that passes while it loads "
            "(LivenessCheck(passes_while_loading=True); the target group's readiness check gates traffic), or load faster",
        )
        self.container = self.task_definition.add_container(
            "server",
            image=contract.image,
            entry_point=list(contract.entry_point) if contract.entry_point else None,
            command=list(contract.command),
            cpu=model.cpu,
            memory_reservation_mib=model.memory_mib,
            gpu_count=None if model.gpu_share is not None else model.gpus,
            environment=environment,
            secrets=secrets or None,
            port_mappings=[ecs.PortMapping(container_port=contract.port, protocol=ecs.Protocol.TCP, name="http")],
            logging=self._log_driver(),
            readonly_root_filesystem=contract.read_only_root_filesystem,
            privileged=False,
            user=contract.user,
            stop_timeout=cdk.Duration.seconds(self.stop_timeout_seconds),
            linux_parameters=linux_parameters,
            health_check=ecs.HealthCheck(
                command=list(liveness.command),
                interval=cdk.Duration.seconds(liveness.interval_seconds),
                timeout=cdk.Duration.seconds(liveness.timeout_seconds),
                retries=liveness.retries,
                start_period=cdk.Duration.seconds(start_period),
            ),
            ulimits=[ecs.Ulimit(name=ecs.UlimitName.NOFILE, soft_limit=65536, hard_limit=65536)],
        )
        if model.gpu_share is not None:
            write_share(self.task_definition, SERVER_CONTAINER_INDEX, model.gpu_share)
        self.container.add_mount_points(ecs.MountPoint(container_path=SCRATCH_PATH, source_volume="scratch", read_only=False))
        self._container_acknowledgements: dict[str, dict[str, str]] = {}
        source = contract.model_source
        self.scratch_owner = self._add_scratch_owner(contract) if source.init_containers else None
        self.model_fetcher = self._add_model_fetcher(contract, uri, region) if source.mode == "copy_to_scratch" else None
        last_init = self.model_fetcher or self.scratch_owner
        if last_init is not None:  # the server starts once the init containers succeeded, one after the other
            self.container.add_container_dependencies(
                ecs.ContainerDependency(container=last_init, condition=ecs.ContainerDependencyCondition.SUCCESS))
        self.metrics_collector = self._add_metrics_collector(contract, region) if contract.metrics is not None else None

        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=cluster.vpc,
            description=f"{model.name} tasks: the load balancer on the container port; HTTPS out to VPC endpoints",
            allow_all_outbound=False,
        )
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to VPC endpoints and the S3 gateway")
        if load_balancer is not None:
            # Attaching the target group admits the balancer's group on the container port; it needs one egress rule.
            load_balancer.allow_to_targets_on(contract.port)
        else:
            assert listener is not None  # required above unless load_balancer is an InferenceLoadBalancer
            self.security_group.connections.allow_from(listener, ec2.Port.tcp(contract.port), "load balancer")

        self.minimum_healthy_percent = self._draining_percent(model.min_tasks)
        self.service = ecs.Ec2Service(
            self,
            "Service",
            cluster=cluster,
            task_definition=self.task_definition,
            capacity_provider_strategies=[ecs.CapacityProviderStrategy(capacity_provider=capacity_provider_name, weight=1)],
            security_groups=[self.security_group],
            vpc_subnets=subnets,
            min_healthy_percent=self.minimum_healthy_percent,
            max_healthy_percent=ROLLING_MAX_HEALTHY_PERCENT,
            deployment_alarms=self._rollback_alarm_names.config(),
            **deployment.service_options(),
            health_check_grace_period=cdk.Duration.seconds(model.health_check_grace_seconds),
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
        self.service.node.add_dependency(cluster)
        if capacity is not None and capacity.capacity_provider_association is not None:
            self.service.node.add_dependency(capacity.capacity_provider_association)  # an imported cluster's association

        # Both target groups health-check readiness and drain alike: either may be production after a deployment.
        target_group_ids = ("TargetGroup", "AlternateTargetGroup") if deployment.shifts_traffic else ("TargetGroup",)
        self.target_groups = [self._target_group(target_group_id, cluster.vpc) for target_group_id in target_group_ids]
        self.target_group = self.target_groups[0]
        if load_balancer is not None:
            self.listener_rule = load_balancer.add_model_route(model.name, *self.target_groups, scope=self,
                                                               paths=contract.public_paths, priority=listener_priority,
                                                               prediction_routes=contract.prediction_routes)
        else:
            # Both required above unless load_balancer is an InferenceLoadBalancer.
            assert listener is not None and listener_priority is not None
            self.listener_rule = elbv2.ApplicationListenerRule(
                self,
                "Route",
                listener=listener,
                priority=listener_priority,
                conditions=[elbv2.ListenerCondition.path_patterns(model_path_patterns(model.name, contract.public_paths))],
                action=_forward(self.target_groups),
            )
        if contract.serves_at_root:
            default_child(self.listener_rule, elbv2.CfnListenerRule).transforms = [
                elbv2.CfnListenerRule.TransformProperty(
                    type="url-rewrite",
                    url_rewrite_config=elbv2.CfnListenerRule.RewriteConfigObjectProperty(
                        rewrites=[elbv2.CfnListenerRule.RewriteConfigProperty(regex=f"^/{model.name}/(.*)$", replace="/$1")]
                    ),
                )
            ]
        if load_balancer is not None:
            load_balancer_full_name = load_balancer.load_balancer.load_balancer_full_name
        elif load_balancer_of_listener is not None:
            load_balancer_full_name = full_name_of(load_balancer_of_listener)
        else:
            assert listener is not None  # required above unless load_balancer is an InferenceLoadBalancer
            load_balancer_full_name = load_balancer_name_from_listener_arn(listener.listener_arn)
        self.load_balancer_full_name = load_balancer_full_name
        self.target_group_metrics = [TargetGroupMetrics(tg, load_balancer_full_name) for tg in self.target_groups]
        alternate = None
        if deployment.shifts_traffic:
            alternate = ecs.AlternateTarget(
                "AlternateTarget",
                alternate_target_group=self.target_groups[1],
                production_listener=ecs.ListenerRuleConfiguration.application_listener_rule(self.listener_rule),
            )
        self.service.load_balancer_target(
            container_name=self.container.container_name, container_port=contract.port, alternate_target=alternate
        ).attach_to_application_target_group(self.target_group)
        self.rollback_alarms = RollbackAlarms(
            self, "RollbackAlarms", model_name=model.name, target_groups=self.target_group_metrics,
            thresholds=rollback_thresholds, enabled=deployment.rollback_alarms,
        )
        for alarm in self.rollback_alarms.alarms.values():
            self.add_rollback_alarm(alarm)
        self.never_healthy_alarm = None
        if deployment.shifts_traffic:
            never_healthy_name = f"{name_prefix}-{environment_name}-{model.name}-never-healthy"
            self.never_healthy_alarm = NeverHealthyAlarm(
                self, "NeverHealthy", model_name=model.name, cluster_name=cluster.cluster_name, alarm_name=never_healthy_name,
                service_name=self.service.service_name, target_groups=self.target_group_metrics,
                health_check_grace_seconds=model.health_check_grace_seconds)
            self._rollback_alarm_names.add(never_healthy_name)  # by its name: the alarm itself refers to the service
            if capacity is None:
                cdk.Annotations.of(self).add_warning_v2(
                    "gpu-inference:container-insights",
                    f"models[{model.name}] rolls a {deployment.strategy} deployment back when its new tasks never become "
                    "healthy by Container Insights' DeploymentCount and DesiredTaskCount: turn Container Insights on for "
                    "your cluster (containerInsightsV2 enabled or enhanced), or that rollback alarm never fires.")
        for name in deployment.alarm_names:
            self._rollback_alarm_names.add(name)
        self._acknowledge_findings(bucket)
        if deployment.shifts_traffic:
            self._acknowledge_traffic_shifting()
        if capacity is not None and capacity.warm_pool is not None:
            self._prepull_on(capacity)
        claim_model_name(self, name_prefix, environment_name, model.name)

    def _refuse_unauthenticated(self, contract: ServerContract, load_balancer: InferenceLoadBalancer | None) -> None:
        """No key and nothing that says who may call: an error where the load balancer is known to be open to the
        internet, a warning where it is not known (your own listener)."""
        fix = ("pass api_keys_secret= (a Secrets Manager secret holding a JSON object of key names to keys)"
               if contract.api_keys_variable is not None else
               f"the {contract.name} server takes no API key: put an authenticating proxy in front of it")
        fix += (", or allow_unauthenticated=True where something else decides who may call it (a WAF or proxy that "
                "authenticates, or a network only your clients reach)")
        if load_balancer is not None:
            require(not load_balancer.props.open_to_the_internet, "api_keys_secret",
                    f"is missing and the load balancer is internet-facing and open to the internet: anyone could call "
                    f"models[{self.model.name}] and use its GPUs; {fix}; or narrow ingress_cidrs, or make the load "
                    "balancer internal")
            return
        cdk.Annotations.of(self).add_warning_v2(
            "gpu-inference:unauthenticated",
            f"models[{self.model.name}] takes requests without an API key: if your listener's load balancer is "
            f"reachable from the internet, anyone can call it; {fix}.",
        )

    def _check_idle_timeout(self, contract: ServerContract, idle_timeout: int, *, known: bool) -> None:
        """The load balancer carries the server's longest request (a non-streamed response sends nothing until it is
        done, and the ALB answers 504 after its idle timeout), and the server keeps connections alive for longer
        than the load balancer (or the ALB reuses one the server closed: 502). Behind an InferenceLoadBalancer a
        mismatch is an error; behind another listener, whose idle timeout is not known here, a warning."""
        def refuse(key: str, detail: str, fix: str) -> None:
            if known:
                raise ConfigError(key, f"{detail} (models[{self.model.name}]); {fix}")
            cdk.Annotations.of(self).add_warning_v2(f"gpu-inference:{key}", f"{detail}, if your load balancer keeps the ALB's default "
                                                    f"idle timeout ({idle_timeout} s): {fix}")

        longest = contract.stop.longest_request_seconds
        if longest is not None and longest + IDLE_TIMEOUT_MARGIN_SECONDS > idle_timeout:
            refuse("server.stop.longest_request_seconds",
                   f"the {contract.name} server's longest request ({longest} s) + {IDLE_TIMEOUT_MARGIN_SECONDS} s outlasts the "
                   f"load balancer's idle timeout ({idle_timeout} s): the client would get an ELB 504",
                   "pass longest_request_seconds (at least this model's) to its InferenceLoadBalancer, or raise "
                   "load_balancer.idle_timeout_seconds" if known else
                   f"set its idle timeout to at least {longest + IDLE_TIMEOUT_MARGIN_SECONDS} s")
        if contract.keep_alive_seconds is None:
            cdk.Annotations.of(self).add_warning_v2(
                "gpu-inference:keep-alive-unknown",
                f"The {contract.name} server contract does not say its HTTP keep-alive: if it is not above the load "
                f"balancer's idle timeout ({idle_timeout} s), the ALB answers intermittent 502s. Set "
                f"ServerContract.keep_alive_seconds (at least {idle_timeout + 1}) to what the server's own setting is.",
            )
        elif contract.keep_alive_seconds <= idle_timeout:
            refuse("server.keep_alive_seconds",
                   f"the {contract.name} server keeps idle connections {contract.keep_alive_seconds} s, not longer than the "
                   f"load balancer's idle timeout ({idle_timeout} s): the ALB would reuse connections the server closed (502s)",
                   f"set the server's keep-alive above {idle_timeout} s")

    def _target_group(self, construct_id: str, vpc: ec2.IVpc) -> elbv2.ApplicationTargetGroup:
        return elbv2.ApplicationTargetGroup(
            self,
            construct_id,
            vpc=vpc,
            port=self.contract.port,
            protocol=elbv2.ApplicationProtocol.HTTP,
            target_type=elbv2.TargetType.IP,
            deregistration_delay=cdk.Duration.seconds(self.deregistration_delay_seconds),
            load_balancing_algorithm_type=elbv2.TargetGroupLoadBalancingAlgorithmType.LEAST_OUTSTANDING_REQUESTS,
            health_check=elbv2.HealthCheck(
                path=self.contract.readiness_path,
                port=str(self.contract.port),
                healthy_http_codes="200",
                interval=cdk.Duration.seconds(TARGET_HEALTH_CHECK.interval_seconds),
                timeout=cdk.Duration.seconds(TARGET_HEALTH_CHECK.timeout_seconds),
                healthy_threshold_count=TARGET_HEALTH_CHECK.healthy_threshold,
                unhealthy_threshold_count=TARGET_HEALTH_CHECK.unhealthy_threshold,
            ),
        )

    def _draining_percent(self, smallest_desired: int) -> int:
        return minimum_healthy_percent(smallest_desired, tasks_on_one_instance(self.instance_type.gpus, self.model.gpus, smallest_desired))

    def allow_draining_down_to(self, smallest_desired: int) -> None:
        """Lower ``minimum_healthy_percent`` for a service whose desired count may go down to ``smallest_desired``
        (a schedule's lower floor), so a Spot notice still lets ECS stop a doomed task at once (spot_draining.py)."""
        require(smallest_desired >= 1, "smallest_desired", f"{smallest_desired}: a desired count of at least 1")
        percent = self._draining_percent(smallest_desired)
        if percent < self.minimum_healthy_percent:
            self.minimum_healthy_percent = percent
            default_child(self.service, ecs.CfnService).add_property_override(
                "DeploymentConfiguration.MinimumHealthyPercent", percent)

    def use_cache(self, cache: ResultCache, props: ModelCacheProps | None = None) -> None:
        """Connect this model's tasks to ``cache``, in one step: the server's cache settings (``props``, default the
        bundled server's ``shared_cache``), elasticache:Connect and the client security group (ResultCache.attach)."""
        require(self._cache_props is not None, "server",
                f"the {self.contract.name} server has no client of the shared result cache: only the bundled server "
                "(BundledServer) reads it; remove use_cache for this model")
        assert self._cache_props is not None  # required above
        require(self._cache_props.enabled is not False, f"models[{self.model.name}].shared_cache.enabled",
                "is false: remove use_cache for this model, or enable its shared_cache")
        cache.attach(container=self.container, task_role=as_role(self.task_role), service=self.service,
                     props=props or self._cache_props)
        self.result_cache = cache

    def add_rollback_alarm(self, alarm: cloudwatch.IAlarm) -> None:
        """ECS rolls a deployment in progress back (every strategy) while ``alarm`` is in ALARM."""
        self._rollback_alarm_names.add(alarm.alarm_name)

    @property
    def log_stream_prefix(self) -> str:
        """``<model>/<version>``: every container's log stream is ``<model>/<version>/<container>/<task id>``, so the
        two versions that serve side by side during a deployment stay apart, whatever the server logs."""
        return f"{self.model.name}/{self.model.version}"

    def _log_driver(self) -> ecs.LogDriver:
        return ecs.LogDrivers.aws_logs(
            stream_prefix=self.log_stream_prefix,
            log_group=self.log_group,
            mode=ecs.AwsLogDriverMode.NON_BLOCKING,
            max_buffer_size=cdk.Size.mebibytes(25),
        )

    def _check_fits(self, contract: ServerContract) -> None:
        if contract.shared_memory_mib is not None:
            require(
                contract.shared_memory_mib < self.model.memory_mib,
                "shared_memory_mib",
                f"{contract.shared_memory_mib} MiB of /dev/shm must be below the server's memory_mib ({self.model.memory_mib})",
            )
        try:
            self.model.check_fits(self.instance_type, contract.sidecar_reservation, self._fleet_types)
        except ConfigError as error:
            raise ConfigError(f"models[{self.model.name}].{error.key}", error.detail) from None

    def _fetcher_image(self, contract: ServerContract) -> ecs.ContainerImage:
        return contract.model_source.fetcher_image or ecs.ContainerImage.from_registry(DEFAULT_FETCHER_IMAGE)

    def _add_scratch_owner(self, contract: ServerContract) -> ecs.ContainerDefinition:
        """The init container ``scratch-owner`` (root, CHOWN only): creates scratch's folders and hands the volume,
        which Docker creates root-owned, to the server's user; it reads nothing. The server starts after it
        succeeded."""
        source = contract.model_source
        owner = self.task_definition.add_container(
            "scratch-owner",
            image=self._fetcher_image(contract),
            essential=False,
            entry_point=["/bin/sh", "-c"],
            command=[f'set -eu; mkdir -p "$MODEL_DIR" {SCRATCH_PATH}/home {SCRATCH_PATH}/cache {SCRATCH_PATH}/tmp; '
                     f'chown -R "$SERVER_USER" {SCRATCH_PATH}'],
            cpu=FETCHER_CPU,
            memory_reservation_mib=FETCHER_MEMORY_MIB,
            environment={"MODEL_DIR": source.local_path, "SERVER_USER": contract.user},
            logging=self._log_driver(),
            readonly_root_filesystem=True,
            privileged=False,
            user="0",
            linux_parameters=_capabilities(self, "ScratchOwnerLinuxParameters", keep=[ecs.Capability.CHOWN]),
        )
        self.acknowledge_container(
            "scratch-owner", "user",
            "Root with every capability dropped but CHOWN: Docker creates the task's scratch volume owned by root, and "
            "only root may hand it to the server's user. It runs mkdir and chown, reads no input and exits; the model "
            "fetch and the server run as that user.",
        )
        owner.add_mount_points(ecs.MountPoint(container_path=SCRATCH_PATH, source_volume="scratch", read_only=False))
        return owner

    def _add_model_fetcher(self, contract: ServerContract, uri: str, region: str) -> ecs.ContainerDefinition:
        """The init container ``model-fetch``, after ``scratch-owner``, as the server's user: copy the model's S3
        prefix to scratch, check the files against the SHA256SUMS that publish wrote beside the manifest, side by side
        (model_fetch.py; a prefix without a manifest is copied unverified, and says so), exit 0."""
        source = contract.model_source
        owner = self.scratch_owner
        assert owner is not None  # every copy_to_scratch source has one
        fetcher = self.task_definition.add_container(
            "model-fetch",
            image=self._fetcher_image(contract),
            essential=False,
            entry_point=["/bin/sh", "-c"],
            command=[fetch_script()],
            cpu=FETCHER_CPU,
            memory_reservation_mib=FETCHER_MEMORY_MIB,
            environment={
                "MODEL_URI": uri,
                "MODEL_DIR": source.local_path,
                "AWS_DEFAULT_REGION": region,
                "HOME": f"{SCRATCH_PATH}/tmp",
                "TMPDIR": f"{SCRATCH_PATH}/tmp",
            },
            logging=self._log_driver(),
            readonly_root_filesystem=True,
            privileged=False,
            user=contract.user,
            linux_parameters=_capabilities(self, "FetcherLinuxParameters", keep=[]),
        )
        fetcher.add_mount_points(ecs.MountPoint(container_path=SCRATCH_PATH, source_volume="scratch", read_only=False))
        fetcher.add_container_dependencies(ecs.ContainerDependency(container=owner, condition=ecs.ContainerDependencyCondition.SUCCESS))
        return fetcher

    def acknowledge_container(self, container_name: str, what: str, reason: str) -> None:
        """Record, in the task definition's metadata (``CONTAINER_ACKNOWLEDGEMENTS``), why ``container_name`` is not
        non-root (``what`` "user") or has a writable root filesystem ("readonly_root_filesystem")."""
        require(what in ("user", "readonly_root_filesystem"), "what", f"{what!r}: 'user' or 'readonly_root_filesystem'")
        require(len(reason) >= 60, "reason", "say why, in a sentence a reviewer would accept")
        self._container_acknowledgements.setdefault(container_name, {})[what] = reason
        default_child(self.task_definition).add_metadata(CONTAINER_ACKNOWLEDGEMENTS, self._container_acknowledgements)

    def _add_metrics_collector(self, contract: ServerContract, region: str) -> ecs.ContainerDefinition:
        """The CloudWatch agent as a sidecar: scrapes the server's Prometheus metrics over the task's loopback."""
        metrics = contract.metrics
        assert metrics is not None  # called only for a contract with metrics
        collector = self.task_definition.add_container(
            "metrics-collector",
            image=metrics.collector_image or ecs.ContainerImage.from_registry(DEFAULT_COLLECTOR_IMAGE),
            essential=False,
            enable_restart_policy=True,
            cpu=metrics.collector_cpu,
            memory_reservation_mib=metrics.collector_memory_mib,
            environment=collector_config(
                contract,
                environment_name=self.environment_name,
                model_name=self.model.name,
                region=region,
                log_group_name=self.log_group.log_group_name,
            ),
            logging=self._log_driver(),
            privileged=False,
            # The agent writes its translated configuration under /opt/aws: a writable root, no capabilities.
            readonly_root_filesystem=False,
            linux_parameters=_capabilities(self, "CollectorLinuxParameters", keep=[]),
        )
        for what in ("user", "readonly_root_filesystem"):
            self.acknowledge_container(
                "metrics-collector", what,
                "The CloudWatch agent image runs as its default user, root, and its entrypoint writes the translated "
                "configuration and state under /opt/aws/amazon-cloudwatch-agent; every capability is dropped, it is "
                "not essential, reads only the task's loopback and writes only this model's log group.",
            )
        self.task_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[self.log_group.log_group_arn],
            )
        )
        return collector

    def metric_server(self, name: str, statistic: str, period: cdk.Duration = cdk.Duration.minutes(1)) -> cloudwatch.Metric:
        """A metric the server emits in EMF (see metric_names), for this model in this environment."""
        return cloudwatch.Metric(
            namespace=metric_names.NAMESPACE,
            metric_name=name,
            dimensions_map={metric_names.DIMENSION_ENVIRONMENT: self.environment_name, metric_names.DIMENSION_MODEL: self.model.name},
            statistic=statistic,
            period=period,
            label=f"{self.model.name} {name} {statistic}",
        )

    def metric_requests(self, period: cdk.Duration = cdk.Duration.minutes(1)) -> cloudwatch.IMetric:
        return sum_over([tg.request_count(period=period) for tg in self.target_group_metrics], f"{self.model.name} requests")

    def metric_target_response_time(self, statistic: str, period: cdk.Duration = cdk.Duration.minutes(1)) -> cloudwatch.IMetric:
        """ALB TargetResponseTime in seconds (``p50``, ``p95``, ``p99``, ...)."""
        return worst_of([tg.target_response_time(statistic=statistic, period=period) for tg in self.target_group_metrics], f"{self.model.name} {statistic}")

    def metric_target_5xx(self, period: cdk.Duration = cdk.Duration.minutes(1)) -> cloudwatch.IMetric:
        return sum_over([tg.http_code_target(elbv2.HttpCodeTarget.TARGET_5XX_COUNT, period=period, statistic="Sum") for tg in self.target_group_metrics],
                        f"{self.model.name} target 5xx")

    def metric_unhealthy_hosts(self, period: cdk.Duration = cdk.Duration.minutes(1)) -> cloudwatch.IMetric:
        return sum_over([tg.unhealthy_host_count(period=period, statistic="Maximum") for tg in self.target_group_metrics], f"{self.model.name} unhealthy targets")

    def metric_tasks(self, name: str, period: cdk.Duration = cdk.Duration.minutes(1)) -> cloudwatch.Metric:
        """Container Insights task counts: ``RunningTaskCount``, ``DesiredTaskCount`` or ``PendingTaskCount``."""
        return cloudwatch.Metric(
            namespace="ECS/ContainerInsights",
            metric_name=name,
            dimensions_map={"ClusterName": self.service.cluster.cluster_name, "ServiceName": self.service.service_name},
            statistic="Average",
            period=period,
            label=f"{self.model.name} {name}",
        )

    def _prepull_on(self, capacity: GpuCapacity) -> None:
        """Each image asset of this task (the bundled server's) is pulled by ``capacity``'s warm pool while an instance
        warms, with pull granted to the instances on its repository (GpuCapacity.prepull). Images from elsewhere (a
        mirror in ECR, say) are the team's to add with ``capacity.prepull(uri, repository)``."""
        for container in self.task_definition.node.children:
            asset = container.node.try_find_child("AssetImage") if isinstance(container, ecs.ContainerDefinition) else None
            if isinstance(asset, ecr_assets.DockerImageAsset):
                capacity.prepull(asset.image_uri, asset.repository)

    def _acknowledge_findings(self, bucket: s3.IBucket) -> None:
        acknowledge(
            default_child(self.task_definition),
            "AwsSolutions-ECS2",
            "Only non-secret settings (model name, version, S3 URI, batch and timeout limits) are plain environment; "
            "API keys come from Secrets Manager. Asserted by tests/infra/test_service.py::test_secrets_are_injected_not_in_environment.",
        )
        execution_policy = default_policy(self.task_definition.obtain_execution_role())
        acknowledge(
            execution_policy,
            "AwsSolutions-IAM5[Resource::*]",
            "Added by aws-cdk-lib for the ECS execution role: ecr:GetAuthorizationToken has no resource-level permissions. "
            "Image pulls, log writes and secret reads are scoped to their ARNs.",
        )
        read_prefix = f"{self._read_prefix}*"
        acknowledge_when_resolved(
            default_policy(self.task_role),
            lambda: f"AwsSolutions-IAM5[Resource::{nag_rendering(self, bucket.arn_for_objects(read_prefix))}]",
            "The task reads every object under its own model's prefix (versions are folders under it); "
            "nothing else in the bucket. Asserted by tests/infra/test_service.py::test_task_role_reads_only_its_model_prefix.",
        )
        if self._compile_cache_prefix is not None:
            cache_objects = bucket.arn_for_objects(f"{self._compile_cache_prefix}*")
            acknowledge_when_resolved(
                default_policy(self.task_role),
                lambda: f"AwsSolutions-IAM5[Resource::{nag_rendering(self, cache_objects)}]",
                "The server creates its compile cache, one archive per torch version, GPU kind and compile settings, under its own model "
                "version's .compile-cache/ folder, never replacing one (s3:if-none-match); it writes nowhere else. Asserted by "
                "tests/consumer/test_compile_cache.py::test_the_task_may_read_its_cache_and_only_create_one_and_write_nothing_else.",
            )


    def _acknowledge_traffic_shifting(self) -> None:
        if not self.model.deployment.uses_circuit_breaker:
            cdk.Annotations.of(self.service).acknowledge_warning(
                "@aws-cdk/aws-ecs:shouldUseCircuitBreaker",
                "AWS documents the circuit breaker for rolling and blue/green deployments only; this service's rollback "
                "alarms, the never-healthy one among them, stop a canary or linear deployment "
                "(tests/infra/test_never_healthy_rollback.py).",
            )
        acknowledge(
            default_child(self.service.node.find_child("AlternateTargetRole")),
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonECSInfrastructureRolePolicyForLoadBalancers]",
            "The role ECS assumes to shift the listener rule's weights and register tasks: the AWS managed policy "
            "is the one the ECS developer guide prescribes for blue/green, linear and canary deployments.",
        )


@jsii.implements(IValidation)
class _CacheAttached:
    """A model whose server was told to use the shared cache (``shared_cache.enabled`` True) and that no
    ResultCache was connected to by synth: its tasks would never learn of any cache."""

    def __init__(self, service: ModelService) -> None:
        self._service = service

    def validate(self) -> list[str]:
        service = self._service
        props = service._cache_props
        if props is None or props.enabled is not True or service.result_cache is not None:
            return []
        return [f"models[{service.model.name}].shared_cache.enabled is true but no ResultCache is connected: add a "
                "ResultCache to the app and call ModelService.use_cache(cache) for this model, or set enabled to "
                "false"]


def _placement(
    capacity: GpuCapacity | None,
    cluster: ecs.ICluster | None,
    capacity_provider_name: str | None,
    instance_type: GpuInstanceType | str | None,
    region: str,
) -> tuple[ecs.ICluster, str, GpuInstanceType]:
    if capacity is not None:
        require(
            cluster is None and capacity_provider_name is None and instance_type is None,
            "capacity",
            "is given together with cluster, capacity_provider_name or instance_type; pass either capacity or those three",
        )
        return capacity.cluster, capacity.capacity_provider.capacity_provider_name, capacity.smallest_instance_type
    missing = [name for name, value in (("cluster", cluster), ("capacity_provider_name", capacity_provider_name), ("instance_type", instance_type)) if value is None]
    if missing:
        raise ConfigError(
            missing[0],
            f"is missing: pass capacity (a GpuCapacity), or cluster, capacity_provider_name and instance_type "
            f"(the smallest GPU instance type your capacity provider launches, for the fit check); missing: {', '.join(missing)}",
        )
    # None of them is missing (checked above).
    assert cluster is not None and capacity_provider_name is not None and instance_type is not None
    if isinstance(instance_type, str):
        instance_type = lookup(instance_type, "instance_type")
    return cluster, capacity_provider_name, instance_type


def _model_bucket(model_store: ModelStore | None, model_bucket: s3.IBucket | None) -> s3.IBucket:
    _one_of(model_store=model_store, model_bucket=model_bucket)
    if model_store is not None:
        return model_store.bucket
    assert model_bucket is not None  # exactly one of them is given (checked above)
    return model_bucket


def _one_of(**options: object) -> None:
    given = [name for name, value in options.items() if value is not None]
    names = " or ".join(options)
    require(len(given) == 1, names.split(" or ")[0], f"pass exactly one of {names}" + (f" (got {', '.join(given)})" if given else " (got neither)"))


def _capabilities(scope: Construct, construct_id: str, keep: list[ecs.Capability]) -> ecs.LinuxParameters:
    parameters = ecs.LinuxParameters(scope, construct_id, init_process_enabled=True)
    parameters.drop_capabilities(ecs.Capability.ALL)
    if keep:
        parameters.add_capabilities(*keep)
    return parameters


def _forward(target_groups: Sequence[elbv2.IApplicationTargetGroup]) -> elbv2.ListenerAction:
    """Forward to the one target group, or weighted 100 / 0 to both (deployments shift the weights)."""
    if len(target_groups) == 1:
        return elbv2.ListenerAction.forward(list(target_groups))
    production, alternate = target_groups
    return elbv2.ListenerAction.weighted_forward(
        [elbv2.WeightedTargetGroup(target_group=production, weight=100), elbv2.WeightedTargetGroup(target_group=alternate, weight=0)]
    )
