"""One model as an ECS service on the GPU capacity provider, behind the shared load balancer."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Optional

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from . import metric_names
from .acknowledgements import acknowledge, acknowledge_when_resolved, default_policy, nag_rendering
from .deployment import DeploymentProps, RollbackAlarmNames, RollbackAlarms, RollbackThresholds, sum_over, worst_of
from .errors import require, require_range
from .instance_catalog import GpuInstanceType
from .load_balancer import InferenceLoadBalancer
from .log_retention import retention_days
from .model_store import ModelStore
from .schedules import check_model_task_range
from .service_scaling import ModelScalingProps

MODEL_NAME = re.compile(r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$")
MODEL_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
TASKS = ("text-classification", "text-embedding")
SPOT_NOTICE_SECONDS = 120
# A rolling deployment starts the new tasks before it stops the old: up to twice the tasks, one GPU each.
ROLLING_MAX_HEALTHY_PERCENT = 200
CONTAINER_PORT = 8080
CONTAINER_USER = "10001:10001"
SCRATCH_PATH = "/scratch"
HEALTH_CHECK_COMMAND = ("CMD", "python", "-m", "inference_server.healthcheck")
SERVER_COMMAND = ("python", "-m", "inference_server")
READINESS_PATH = "/ready"
# The container's command must start the server that listens on CONTAINER_PORT and answers READINESS_PATH.


def service_log_group_name(environment_name: str, model_name: str) -> str:
    """A model service's log group: named, so the environment's dashboard can price its ingestion without a reference."""
    return f"/gpu-inference/{environment_name}/{model_name}"


@dataclass(frozen=True)
class ModelProps:
    """One model and how its service runs. Memory and CPU are the container's reservation per task (one GPU each)."""

    name: str
    version: str
    task: str = "text-embedding"
    cpu: int = 3072
    memory_mib: int = 12288
    min_tasks: int = 1
    max_tasks: int = 4
    max_batch_size: int = 32
    max_batch_wait_ms: int = 2
    max_queue_size: int = 256
    max_sequence_length: int = 256
    request_timeout_seconds: int = 10
    expected_load_seconds: int = 180
    result_cache_size: int = 0
    compile: bool = False
    environment: dict[str, str] = field(default_factory=dict)
    scaling: ModelScalingProps = field(default_factory=ModelScalingProps)
    deployment: DeploymentProps = field(default_factory=DeploymentProps)

    def __post_init__(self) -> None:
        require(
            bool(MODEL_NAME.match(self.name)),
            "name",
            f"{self.name!r} is not URL-safe; use 2-40 lowercase letters, digits and '-', starting with a letter (it becomes the path /{self.name}/)",
        )
        require(bool(MODEL_VERSION.match(self.version)), "version", f"{self.version!r}: use letters, digits, '.', '_' or '-' (it becomes an S3 prefix)")
        require(self.task in TASKS, "task", f"{self.task!r} is not supported; use one of: {', '.join(TASKS)}")
        require(256 <= self.cpu, "cpu", f"{self.cpu} CPU units is too small; at least 256 (1024 = one vCPU)")
        require(512 <= self.memory_mib, "memory_mib", f"{self.memory_mib} MiB is too small; at least 512")
        require_range(self.max_tasks, 1, 100, "max_tasks")
        require(self.min_tasks <= self.max_tasks, "min_tasks", f"{self.min_tasks} must be between 1 and max_tasks ({self.max_tasks})")
        check_model_task_range(self.min_tasks, self.max_tasks)
        require_range(self.max_batch_size, 1, 512, "max_batch_size")
        require_range(self.max_batch_wait_ms, 0, 100, "max_batch_wait_ms", hint=" (a few ms is right)")
        require_range(self.max_queue_size, 1, 100_000, "max_queue_size")
        require_range(self.max_sequence_length, 8, 8192, "max_sequence_length")
        require_range(self.request_timeout_seconds, 1, 60, "request_timeout_seconds", hint=" (below the ALB idle timeout)")
        require_range(self.expected_load_seconds, 10, 3000, "expected_load_seconds")
        require(0 <= self.result_cache_size <= 1_000_000, "result_cache_size", f"{self.result_cache_size} is out of range; allowed 0 (off) to 1000000")
        reserved = sorted(set(self.environment) & set(server_environment_keys()))
        require(not reserved, "environment", f"{reserved} are set from the model's own keys; set those keys instead")

    def check_fits(self, instance_type: GpuInstanceType) -> None:
        require(
            self.memory_mib <= instance_type.task_memory_limit_mib,
            "memory_mib",
            f"{self.memory_mib} MiB does not fit on {instance_type.name} ({instance_type.memory_gib} GiB; at most "
            f"{instance_type.task_memory_limit_mib} MiB leaves room for the OS and ECS agent)",
        )
        require(
            self.cpu <= instance_type.task_cpu_limit_units - 512,
            "cpu",
            f"{self.cpu} CPU units does not fit on {instance_type.name} ({instance_type.vcpus} vCPU = "
            f"{instance_type.task_cpu_limit_units} units; keep 512 for the agent and daemons)",
        )

    @property
    def health_check_grace_seconds(self) -> int:
        """Download, verify, load and warm up take ``expected_load_seconds``; allow half again plus a minute."""
        return math.ceil(self.expected_load_seconds * 1.5) + 60


@dataclass(frozen=True)
class ServiceTimingProps:
    """How a task leaves: ALB deregistration, then SIGTERM, drain, and SIGKILL at the stop timeout.

    On a Spot interruption all of it must fit in the two-minute notice.
    """

    deregistration_delay_seconds: int = 20
    stop_timeout_seconds: int = 90
    drain_timeout_seconds: int = 70
    keep_alive_seconds: int = 75

    def __post_init__(self) -> None:
        total = self.deregistration_delay_seconds + self.stop_timeout_seconds
        require(
            total <= SPOT_NOTICE_SECONDS,
            "stop_timeout_seconds",
            f"deregistration_delay_seconds ({self.deregistration_delay_seconds}) + stop_timeout_seconds ({self.stop_timeout_seconds}) "
            f"= {total} s exceeds the {SPOT_NOTICE_SECONDS} s Spot interruption notice",
        )
        require_range(self.deregistration_delay_seconds, 0, 3600, "deregistration_delay_seconds")
        require(
            5 <= self.drain_timeout_seconds <= self.stop_timeout_seconds - 10,
            "drain_timeout_seconds",
            f"{self.drain_timeout_seconds} must be at least 5 and at least 10 s below stop_timeout_seconds ({self.stop_timeout_seconds}) so the server exits before SIGKILL",
        )

    def check_keep_alive(self, idle_timeout_seconds: int) -> None:
        require(
            self.keep_alive_seconds > idle_timeout_seconds,
            "keep_alive_seconds",
            f"{self.keep_alive_seconds} must exceed the load balancer's idle timeout ({idle_timeout_seconds} s), or the ALB reuses closed connections and answers 502",
        )


def server_environment_keys() -> tuple[str, ...]:
    return (
        "PORT", "MODEL_NAME", "MODEL_VERSION", "MODEL_URI", "MODEL_TASK", "MODEL_CACHE_DIR", "DEPLOYMENT_ENV",
        "MAX_BATCH_SIZE", "MAX_BATCH_WAIT_MS", "MAX_QUEUE_SIZE", "MAX_SEQUENCE_LENGTH", "REQUEST_TIMEOUT_S",
        "DRAIN_TIMEOUT_S", "KEEP_ALIVE_S", "RESULT_CACHE_SIZE", "COMPILE", "REQUIRE_MANIFEST", "API_KEYS",
        "AWS_DEFAULT_REGION", "HOME", "TMPDIR",
    )


class ModelService(Construct):
    """Attributes: ``service``, ``task_definition``, ``container``, ``target_group``, ``target_groups`` (with the
    alternate one that canary, linear and blue/green deployments shift traffic to), ``listener_rule``,
    ``rollback_alarms``, ``security_group``, ``log_group``, ``task_role``, ``url_path``.
    ``add_rollback_alarm`` adds an alarm that rolls back a deployment in progress."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model: ModelProps,
        timing: ServiceTimingProps,
        cluster: ecs.ICluster,
        capacity_provider_name: str,
        subnets: ec2.SubnetSelection,
        image: ecs.ContainerImage,
        model_store: ModelStore,
        load_balancer: InferenceLoadBalancer,
        logs_key: kms.IKey,
        log_retention_days: int,
        environment_name: str,
        api_keys_secret: Optional[secretsmanager.ISecret] = None,
        rollback_thresholds: RollbackThresholds = RollbackThresholds(),
    ) -> None:
        super().__init__(scope, construct_id)
        self.model = model
        deployment = model.deployment
        self._rollback_alarm_names = RollbackAlarmNames()
        self.environment_name = environment_name
        self.url_path = f"/{model.name}/"
        region = cdk.Stack.of(self).region

        self.log_group = logs.LogGroup(
            self, "Logs", log_group_name=service_log_group_name(environment_name, model.name),
            encryption_key=logs_key, retention=retention_days(log_retention_days, "log_retention_days"),
        )
        self.task_role = iam.Role(
            self,
            "TaskRole",
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            description=f"Model server for {model.name}: reads its own model prefix only",
        )
        model_store.grant_read_model(self.task_role, model.name)

        self.task_definition = ecs.Ec2TaskDefinition(
            self,
            "TaskDefinition",
            network_mode=ecs.NetworkMode.AWS_VPC,
            task_role=self.task_role,
            volumes=[
                ecs.Volume(
                    name="scratch",
                    docker_volume_configuration=ecs.DockerVolumeConfiguration(scope=ecs.Scope.TASK, driver="local"),
                )
            ],
        )
        environment = {
            **model.environment,
            "PORT": str(CONTAINER_PORT),
            "MODEL_NAME": model.name,
            "MODEL_VERSION": model.version,
            "MODEL_URI": model_store.uri(model.name, model.version),
            "MODEL_TASK": model.task,
            "MODEL_CACHE_DIR": f"{SCRATCH_PATH}/model-cache",
            "REQUIRE_MANIFEST": "true",
            "DEPLOYMENT_ENV": environment_name,
            "MAX_BATCH_SIZE": str(model.max_batch_size),
            "MAX_BATCH_WAIT_MS": str(model.max_batch_wait_ms),
            "MAX_QUEUE_SIZE": str(model.max_queue_size),
            "MAX_SEQUENCE_LENGTH": str(model.max_sequence_length),
            "REQUEST_TIMEOUT_S": str(model.request_timeout_seconds),
            "DRAIN_TIMEOUT_S": str(timing.drain_timeout_seconds),
            "KEEP_ALIVE_S": str(timing.keep_alive_seconds),
            "RESULT_CACHE_SIZE": str(model.result_cache_size),
            "COMPILE": "true" if model.compile else "false",
            "AWS_DEFAULT_REGION": region,
            "HOME": f"{SCRATCH_PATH}/home",
            "TMPDIR": f"{SCRATCH_PATH}/tmp",
        }
        secrets = {"API_KEYS": ecs.Secret.from_secrets_manager(api_keys_secret)} if api_keys_secret is not None else None
        self.container = self.task_definition.add_container(
            "server",
            image=image,
            command=list(SERVER_COMMAND),
            cpu=model.cpu,
            memory_reservation_mib=model.memory_mib,
            gpu_count=1,
            environment=environment,
            secrets=secrets,
            port_mappings=[ecs.PortMapping(container_port=CONTAINER_PORT, protocol=ecs.Protocol.TCP, name="http")],
            logging=ecs.LogDrivers.aws_logs(
                stream_prefix=model.name,
                log_group=self.log_group,
                mode=ecs.AwsLogDriverMode.NON_BLOCKING,
                max_buffer_size=cdk.Size.mebibytes(25),
            ),
            readonly_root_filesystem=True,
            privileged=False,
            user=CONTAINER_USER,
            stop_timeout=cdk.Duration.seconds(timing.stop_timeout_seconds),
            linux_parameters=ecs.LinuxParameters(self, "LinuxParameters", init_process_enabled=True),
            health_check=ecs.HealthCheck(
                command=list(HEALTH_CHECK_COMMAND),
                interval=cdk.Duration.seconds(15),
                timeout=cdk.Duration.seconds(5),
                retries=3,
                start_period=cdk.Duration.seconds(min(300, model.health_check_grace_seconds)),
            ),
            ulimits=[ecs.Ulimit(name=ecs.UlimitName.NOFILE, soft_limit=65536, hard_limit=65536)],
        )
        self.container.add_mount_points(ecs.MountPoint(container_path=SCRATCH_PATH, source_volume="scratch", read_only=False))

        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=cluster.vpc,
            description=f"{model.name} tasks: the load balancer on the container port; HTTPS out to VPC endpoints",
            allow_all_outbound=False,
        )
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to VPC endpoints and the S3 gateway")
        self.security_group.connections.allow_from(load_balancer.security_group, ec2.Port.tcp(CONTAINER_PORT), "load balancer")

        self.service = ecs.Ec2Service(
            self,
            "Service",
            cluster=cluster,
            task_definition=self.task_definition,
            capacity_provider_strategies=[ecs.CapacityProviderStrategy(capacity_provider=capacity_provider_name, weight=1)],
            security_groups=[self.security_group],
            vpc_subnets=subnets,
            min_healthy_percent=100,
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

        # Both target groups health-check readiness and drain alike: either may be production after a deployment.
        target_group_ids = ("TargetGroup", "AlternateTargetGroup") if deployment.shifts_traffic else ("TargetGroup",)
        self.target_groups = [self._target_group(target_group_id, cluster.vpc, timing) for target_group_id in target_group_ids]
        self.target_group = self.target_groups[0]
        self.listener_rule = load_balancer.add_model_route(model.name, *self.target_groups, scope=self)
        alternate = None
        if deployment.shifts_traffic:
            alternate = ecs.AlternateTarget(
                "AlternateTarget",
                alternate_target_group=self.target_groups[1],
                production_listener=ecs.ListenerRuleConfiguration.application_listener_rule(self.listener_rule),
            )
        self.service.load_balancer_target(
            container_name=self.container.container_name, container_port=CONTAINER_PORT, alternate_target=alternate
        ).attach_to_application_target_group(self.target_group)
        self.rollback_alarms = RollbackAlarms(
            self, "RollbackAlarms", model_name=model.name, target_groups=self.target_groups,
            thresholds=rollback_thresholds, enabled=deployment.rollback_alarms,
        )
        for alarm in self.rollback_alarms.alarms.values():
            self.add_rollback_alarm(alarm)
        for name in deployment.alarm_names:
            self._rollback_alarm_names.add(name)
        self._acknowledge_findings(model_store)
        if deployment.shifts_traffic:
            self._acknowledge_traffic_shifting()

    def _target_group(self, construct_id: str, vpc: ec2.IVpc, timing: ServiceTimingProps) -> elbv2.ApplicationTargetGroup:
        return elbv2.ApplicationTargetGroup(
            self,
            construct_id,
            vpc=vpc,
            port=CONTAINER_PORT,
            protocol=elbv2.ApplicationProtocol.HTTP,
            target_type=elbv2.TargetType.IP,
            deregistration_delay=cdk.Duration.seconds(timing.deregistration_delay_seconds),
            load_balancing_algorithm_type=elbv2.TargetGroupLoadBalancingAlgorithmType.LEAST_OUTSTANDING_REQUESTS,
            health_check=elbv2.HealthCheck(
                path=READINESS_PATH,
                port=str(CONTAINER_PORT),
                healthy_http_codes="200",
                interval=cdk.Duration.seconds(15),
                timeout=cdk.Duration.seconds(5),
                healthy_threshold_count=2,
                unhealthy_threshold_count=4,
            ),
        )

    def add_rollback_alarm(self, alarm: cloudwatch.IAlarm) -> None:
        """ECS rolls a deployment in progress back (every strategy) while ``alarm`` is in ALARM."""
        self._rollback_alarm_names.add(alarm.alarm_name)

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
        return sum_over([tg.metrics.request_count(period=period) for tg in self.target_groups], f"{self.model.name} requests")

    def metric_target_response_time(self, statistic: str, period: cdk.Duration = cdk.Duration.minutes(1)) -> cloudwatch.IMetric:
        """ALB TargetResponseTime in seconds (``p50``, ``p95``, ``p99``, ...)."""
        return worst_of([tg.metrics.target_response_time(statistic=statistic, period=period) for tg in self.target_groups], f"{self.model.name} {statistic}")

    def metric_target_5xx(self, period: cdk.Duration = cdk.Duration.minutes(1)) -> cloudwatch.IMetric:
        return sum_over([tg.metrics.http_code_target(elbv2.HttpCodeTarget.TARGET_5XX_COUNT, period=period, statistic="Sum") for tg in self.target_groups],
                        f"{self.model.name} target 5xx")

    def metric_unhealthy_hosts(self, period: cdk.Duration = cdk.Duration.minutes(1)) -> cloudwatch.IMetric:
        return sum_over([tg.metrics.unhealthy_host_count(period=period, statistic="Maximum") for tg in self.target_groups], f"{self.model.name} unhealthy targets")

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

    def _acknowledge_findings(self, model_store: ModelStore) -> None:
        acknowledge(
            self.task_definition.node.default_child,
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
        acknowledge_when_resolved(
            default_policy(self.task_role),
            lambda: f"AwsSolutions-IAM5[Resource::{nag_rendering(self, model_store.bucket.bucket_arn)}/models/{self.model.name}/*]",
            "The task reads every object under its own model's prefix (versions are folders under it); "
            "nothing else in the bucket. Asserted by tests/infra/test_service.py::test_task_role_reads_only_its_model_prefix.",
        )

    def _acknowledge_traffic_shifting(self) -> None:
        cdk.Annotations.of(self.service).acknowledge_warning(
            "@aws-cdk/aws-ecs:shouldUseCircuitBreaker",
            "The circuit breaker works for rolling deployments only; this service's rollback alarms stop a canary, "
            "linear or blue/green deployment (tests/infra/test_rollout.py).",
        )
        acknowledge(
            self.service.node.find_child("AlternateTargetRole").node.default_child,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonECSInfrastructureRolePolicyForLoadBalancers]",
            "The role ECS assumes to shift the listener rule's weights and register tasks: the AWS managed policy "
            "is the one the ECS developer guide prescribes for blue/green, linear and canary deployments.",
        )
