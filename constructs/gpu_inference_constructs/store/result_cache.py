"""The shared result cache of an environment: ElastiCache Serverless for Valkey in the private subnets.

TLS in transit (always on for Serverless), encryption at rest with a customer managed key, IAM authentication
(a user whose authentication mode is IAM; the default user is switched off), and a security group that admits
only its clients: the tasks that carry the cache's one client security group. Each attached model's tasks get that
group, the endpoint and its user through the server's environment (SHARED_CACHE_*) and ``elasticache:Connect`` on
the cache and the user in its task role: there is no password to hand out or rotate. The cache's group holds one
ingress rule and the alarms a fixed number of metrics, however many models use it. Alarms (evictions, memory against
the usage limit, read latency, throttled commands, the servers' own failed calls) reach the topic;
``metric_cost_per_hour`` feeds the dashboard.
"""

from __future__ import annotations

import re

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..core import metric_names as m
from ..core.alarm_thresholds import PAGING_MINUTES
from ..core.errors import require
from ..core.result_cache_props import ModelCacheProps as ModelCacheProps
from ..core.result_cache_props import ResultCacheProps
from ..shared.cdk_interfaces import sns_action
from ..shared.environment import InferenceEnvironment, require_identity

CACHE_PORTS = ec2.Port.tcp_range(6379, 6380)  # the endpoint and the reader endpoint
# What the servers' client runs (GET, MGET, SET, the connection and slot-map commands), on their keys only.
ACCESS_STRING = "on ~ic:* -@all +@connection +get +mget +set +cluster|slots +cluster|shards +command"
NAME = re.compile(r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$")
# A value a Metrics Insights query can hold between single quotes as it is (the app's environment names all are).
QUERY_VALUE = re.compile(r"^[A-Za-z0-9_.-]{1,255}$")


class ResultCache(Construct):
    """Attributes: ``cache`` (the CfnServerlessCache), ``cache_name``, ``endpoint_address``, ``endpoint_port``,
    ``inference_environment`` (the InferenceEnvironment it was given, or None; ``environment()`` is the tasks'
    variables), ``security_group`` (the cache's: it admits ``client_security_group`` on the cache ports, one rule),
    ``client_security_group`` (every client's: egress to the cache ports only; ``attach`` adds it to a service's
    tasks, or pass it in your own tasks' security groups), ``key``, ``user_id``, ``alarms``. ``attach`` gives a model's
    tasks access.

    ``environment``: the environment's topic (the cache's alarms) and name (the default cache name,
    ``<environment>-results``, and the failed-call alarm's query), given once; without one, ``topic`` and ``name`` are
    required (0.3's form). ``name``: the ElastiCache cache name, 2-40 lowercase letters, digits or '-'. ``key``
    encrypts the cache at rest; default None: a key of its own, rotated yearly."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        name: str | None = None,
        topic: sns.ITopic | None = None,
        props: ResultCacheProps = ResultCacheProps(),
        key: kms.IKey | None = None,
        environment: InferenceEnvironment | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        name, topic = _identity(environment, name, topic)
        self.inference_environment = environment
        self.props = props
        self.cache_name = name
        self.key = key or kms.Key(
            self, "Key", description=f"Encrypts the {name} result cache at rest", enable_key_rotation=True
        )
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description=f"{name} result cache: only attached model tasks",
        )
        # One group every client shares: the cache's group admits it once, so its rules do not grow with the models
        # (a security group holds 60 inbound rules by default). Clients carry it beside their own group.
        self.client_security_group = ec2.SecurityGroup(
            self,
            "ClientSecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description=f"{name} result cache clients: the model tasks that use it; out to the cache only",
        )
        self.client_security_group.connections.allow_to(
            self.security_group, CACHE_PORTS, "result cache clients to the cache"
        )
        # aws-cdk-lib 2.275 drops its inline "no traffic" egress placeholder when a rule to another group is added,
        # although that rule is a separate resource; a group created with no inline egress rule gets EC2's default
        # allow-all egress (CloudFormation AWS::EC2::SecurityGroup). Put it back: clients reach the cache only.
        self.client_security_group.add_egress_rule(
            ec2.Peer.ipv4("255.255.255.255/32"), ec2.Port.icmp_type_and_code(252, 86), "Disallow all traffic"
        )
        self.user_id = f"{name}-tasks"
        tasks_user = elasticache.CfnUser(
            self,
            "TasksUser",
            engine="valkey",
            user_id=self.user_id,
            user_name=self.user_id,  # IAM users: name and id must be the same
            access_string=ACCESS_STRING,
            authentication_mode={"Type": "iam"},
        )
        default_user = elasticache.CfnUser(
            self,
            "DefaultUser",
            engine="valkey",
            user_id=f"{name}-default",
            user_name="default",
            access_string="off -@all",
            authentication_mode={"Type": "no-password-required"},
        )
        group = elasticache.CfnUserGroup(
            self,
            "UserGroup",
            engine="valkey",
            user_group_id=f"{name}-users",
            user_ids=[tasks_user.ref, default_user.ref],
        )  # Ref: the user id
        self.tasks_user_arn = tasks_user.attr_arn
        subnet_ids = vpc.select_subnets(**_selection(subnets)).subnet_ids
        self.cache = elasticache.CfnServerlessCache(
            self,
            "Cache",
            serverless_cache_name=name,
            engine="valkey",
            major_engine_version=props.major_engine_version,
            description="Shared model results (GPU inference)",
            kms_key_id=self.key.key_id,
            security_group_ids=[self.security_group.security_group_id],
            subnet_ids=subnet_ids,
            user_group_id=group.ref,
            snapshot_retention_limit=props.snapshot_retention_days or None,
            cache_usage_limits=elasticache.CfnServerlessCache.CacheUsageLimitsProperty(
                data_storage=elasticache.CfnServerlessCache.DataStorageProperty(
                    maximum=props.max_data_storage_gb, unit="GB"
                ),
                ecpu_per_second=elasticache.CfnServerlessCache.ECPUPerSecondProperty(maximum=props.max_ecpu_per_second),
            ),
        )
        self.endpoint_address = self.cache.attr_endpoint_address
        self.endpoint_port = self.cache.attr_endpoint_port
        self.cache_arn = self.cache.attr_arn
        self.alarms = self._alarms(topic)

    # -- access ---------------------------------------------------------------------------------------------

    def attach(
        self,
        *,
        container: ecs.ContainerDefinition,
        task_role: iam.IRole,
        service: ecs.BaseService,
        props: ModelCacheProps = ModelCacheProps(),
    ) -> None:
        """Give one model's tasks the cache: the server's SHARED_CACHE_* environment, elasticache:Connect on the
        cache and its user, and the network path: ``client_security_group`` added to ``service``'s tasks (awsvpc
        network mode). Nothing is added to the cache's side, so any number of services may attach."""
        require(
            service.task_definition.network_mode == ecs.NetworkMode.AWS_VPC,
            "service",
            f"{service.node.path} does not use the awsvpc network mode, so its tasks cannot carry the cache's client "
            "security group: use NetworkMode.AWS_VPC (ModelService does), or give your tasks "
            "ResultCache.client_security_group yourself and attach only the environment and role",
        )
        for name, value in self.environment(props).items():
            container.add_environment(name, value)
        task_role.add_to_principal_policy(
            iam.PolicyStatement(actions=["elasticache:Connect"], resources=[self.cache_arn, self.tasks_user_arn])
        )
        self.add_client(service)

    def add_client(self, service: ecs.BaseService) -> None:
        """Add ``client_security_group`` to ``service``'s tasks, beside the groups it was made with. ECS renders a
        service's groups once, when it is made, so its network configuration is overridden with all of them. The group
        stays out of ``service.connections``: whatever is allowed to the service (its load balancer) is not allowed to
        every cache client."""
        cache = cache_of(service)
        if cache is self:
            return
        require(
            cache is None,
            "service",
            f"{service.node.path} is already a client of another ResultCache: a service's "
            "tasks can carry one cache's client security group through attach",
        )
        _CacheClient(service, f"ResultCacheClient{self.node.addr}", self)
        cfn = service.node.default_child
        assert isinstance(cfn, ecs.CfnService)
        groups = [group.security_group_id for group in service.connections.security_groups]
        cfn.add_property_override(
            "NetworkConfiguration.AwsvpcConfiguration.SecurityGroups",
            [*groups, self.client_security_group.security_group_id],
        )

    def environment(self, props: ModelCacheProps) -> dict[str, str]:
        return {
            "SHARED_CACHE_ENDPOINT": cdk.Fn.join(":", [self.endpoint_address, self.endpoint_port]),
            "SHARED_CACHE_TLS": "true",
            "SHARED_CACHE_CLUSTER": "true",
            "SHARED_CACHE_IAM_USER": self.user_id,
            "SHARED_CACHE_NAME": self.cache_name,
            "SHARED_CACHE_TTL_S": str(props.ttl_seconds),
            "SHARED_CACHE_MAX_VALUE_BYTES": str(props.max_value_bytes),
        }

    # -- metrics, alarms, cost --------------------------------------------------------------------------------

    def metric(
        self, name: str, statistic: str = "Maximum", period: cdk.Duration = cdk.Duration.minutes(1)
    ) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace="AWS/ElastiCache",
            metric_name=name,
            dimensions_map={"clusterId": self.cache_name},
            statistic=statistic,
            period=period,
        )

    def metric_cost_per_hour(self) -> cloudwatch.MathExpression:
        """USD an hour: data stored (at least the metered minimum) plus the ECPUs consumed."""
        p = self.props
        hour = cdk.Duration.hours(1)
        return cloudwatch.MathExpression(
            expression=f"MAX([bytes / 1000000000, {p.minimum_metered_gb}]) * {p.storage_usd_per_gb_hour}"
            f" + ecpu / 1000000 * {p.usd_per_million_ecpu}",
            using_metrics={
                "bytes": self.metric("BytesUsedForCache", "Average", hour),
                "ecpu": self.metric("ElastiCacheProcessingUnits", "Sum", hour),
            },
            label=f"{self.cache_name} result cache USD/hour",
            period=hour,
        )

    def _alarms(self, topic: sns.ITopic) -> list[cloudwatch.Alarm]:
        p = self.props
        limit_bytes = p.max_data_storage_gb * 1e9
        specs = [
            (
                "Evictions",
                self.metric("Evictions", "Sum", cdk.Duration.minutes(5)),
                1,
                1,
                "The cache evicts results before their TTL: raise cache.max_data_storage_gb or lower the models' TTLs",
            ),
            (
                "Memory",
                self.metric("BytesUsedForCache", "Maximum", cdk.Duration.minutes(5)),
                limit_bytes * p.memory_alarm_percent / 100,
                3,
                f"The cache holds over {p.memory_alarm_percent} % of its {p.max_data_storage_gb} GB limit",
            ),
            (
                "ReadLatency",
                self.metric("SuccessfulReadRequestLatency", "p99"),
                p.read_latency_alarm_us,
                5,
                "Cache reads are slow (p99 in µs): the servers time out and fall back to the GPUs",
            ),
            (
                "Throttled",
                self.metric("ThrottledCmds", "Sum"),
                1,
                3,
                "The cache throttles commands: raise cache.max_ecpu_per_second",
            ),
        ]
        alarms = []
        for name, metric, threshold, periods, description in specs:
            alarm = metric.create_alarm(
                self,
                f"{name}Alarm",
                threshold=threshold,
                evaluation_periods=periods,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=description,
            )
            alarm.add_alarm_action(sns_action(topic))
            alarm.add_ok_action(sns_action(topic))
            alarms.append(alarm)
        return alarms

    def add_connection_failure_alarm(
        self, scope: Construct, environment_name: str | None = None, topic: sns.ITopic | None = None
    ) -> cloudwatch.Alarm:
        """The servers' own failed cache calls (timeouts, refused or failed connections), every model of the
        environment together, as one CloudWatch Metrics Insights query: it counts as one metric however many models
        report (a metric-math alarm takes at most 10), and a model added later is counted without a change here.
        Metrics Insights alarms read the last 3 hours only and need a period: 1 minute, 3 in a row.
        ``environment_name`` and ``topic``: the cache's ``environment``'s, or given here where it has none."""
        environment = self.inference_environment
        if environment is not None:
            InferenceEnvironment.refuse_beside("ResultCache", environment_name=environment_name, topic=topic)
            environment_name, topic = environment.name, environment.topic
        require_identity("ResultCache", {"environment_name=": environment_name, "topic=": topic})
        assert environment_name is not None and topic is not None  # required above
        require(
            bool(QUERY_VALUE.match(environment_name)),
            "environment_name",
            f"{environment_name!r} cannot be quoted in a Metrics Insights query: use letters, digits, '-', '_', '.'",
        )
        period = cdk.Duration.minutes(1)
        total = cloudwatch.MathExpression(
            expression=self.connection_failure_query(environment_name), label="failed cache calls", period=period
        )
        alarm = total.create_alarm(
            scope,
            "ResultCacheConnectionFailuresAlarm",
            threshold=self.props.errors_alarm_per_minute,
            evaluation_periods=PAGING_MINUTES,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            # No model reports an error while none is attached or every call succeeds.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description="The model servers cannot reach the result cache (their circuit "
            "opens and every request runs on the GPUs)",
        )
        alarm.add_alarm_action(sns_action(topic))
        alarm.add_ok_action(sns_action(topic))
        return alarm

    @staticmethod
    def connection_failure_query(environment_name: str) -> str:
        """The Metrics Insights query of the environment's failed cache calls: the servers' SharedCacheErrors under
        their exact dimension set (Environment, ModelName), summed over every model."""
        return (
            f'SELECT SUM({m.SHARED_CACHE_ERRORS}) FROM SCHEMA("{m.NAMESPACE}", {m.DIMENSION_ENVIRONMENT}, '
            f"{m.DIMENSION_MODEL}) WHERE {m.DIMENSION_ENVIRONMENT} = '{environment_name}'"
        )


def _identity(
    environment: InferenceEnvironment | None, name: str | None, topic: sns.ITopic | None
) -> tuple[str, sns.ITopic]:
    """The cache's name and topic: the environment's (its name makes ``<environment>-results`` unless ``name`` is
    given), or both given without one."""
    if environment is not None:
        InferenceEnvironment.refuse_beside("ResultCache", topic=topic)
        topic = environment.topic
        name = f"{environment.name}-results" if name is None else name
    require_identity("ResultCache", {"topic=": topic})
    require(
        isinstance(name, str) and bool(NAME.match(name)),
        "name",
        f"{name!r}: 2-40 lowercase letters, digits or '-', starting with a letter (pass name=, or environment= "
        "whose name makes '<environment>-results')",
    )
    assert name is not None and topic is not None  # required above
    return name, topic


def _selection(subnets: ec2.SubnetSelection) -> dict:
    return {
        k: v
        for k, v in {
            "subnet_type": subnets.subnet_type,
            "subnets": subnets.subnets,
            "subnet_group_name": subnets.subnet_group_name,
        }.items()
        if v is not None
    }


class _CacheClient(Construct):
    """Marks a service as a client of ``cache`` (its tasks carry the cache's client security group)."""

    def __init__(self, service: ecs.BaseService, construct_id: str, cache: ResultCache) -> None:
        super().__init__(service, construct_id)
        self.cache = cache


def cache_of(service: ecs.BaseService) -> ResultCache | None:
    """The ResultCache ``service`` was attached to (``attach`` or ``add_client``), or None."""
    return next((child.cache for child in service.node.children if isinstance(child, _CacheClient)), None)
