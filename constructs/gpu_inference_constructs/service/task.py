"""A model's ECS task: its role, its task definition, the server container, the init containers that own and fill
the scratch volume (``scratch-owner``, ``model-fetch``), the collector sidecar (traces to X-Ray; the server's
Prometheus metrics), for a server with LoRA adapters the ``adapter-sync`` sidecar and, where the environment chooses
FireLens, the log router.

Built in the ModelService's own scope, with the construct IDs it always had, so every logical ID stays."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from ..core.adapter_sync import ADAPTER_DIRECTORY, ADAPTER_VOLUME, REQUEST_LOG_DIRECTORY, REQUEST_LOG_MODULE
from ..core.errors import require
from ..core.instance_catalog import GpuInstanceType
from ..core.log_archive_props import archive_key_prefix
from ..core.model_props import ModelProps
from ..core.neuron_placement import NEURON_CORE_VARIABLES, NEURON_CORES_VARIABLE, neuron_device_paths, visible_cores
from ..core.server_contract import (
    DEFAULT_COLLECTOR_IMAGE,
    DEFAULT_FETCHER_IMAGE,
    FETCHER_CPU,
    FETCHER_MEMORY_MIB,
    SCRATCH_PATH,
    ServerContract,
    collector_config,
)
from ..shared.acknowledgements import (
    acknowledge,
    acknowledge_when_resolved,
    default_child,
    default_policy,
    nag_rendering,
)
from ..shared.cdk_interfaces import as_role, service_principal
from ..shared.container_images import ecr_image
from ..store.model_bucket import BoundModelSource
from ..store.model_fetch import fetch_script
from ..store.model_store import compile_cache_prefix, grant_read_prefix, model_read_prefix
from ..task_telemetry.log_archive import archive_environment, firelens_config_with_archive, grant_archive_writes
from ..task_telemetry.otel_collector import (
    DEFAULT_OTEL_COLLECTOR_IMAGE,
    OTEL_COLLECTOR_USER,
    otel_collector_config,
    otel_traces_config,
)
from ..task_telemetry.telemetry import (
    DEFAULT_LOG_ROUTER_IMAGE,
    FIRELENS_LOG_KEY,
    TRACE_COLLECTOR_CPU,
    TRACE_COLLECTOR_MEMORY_MIB,
    XRAY_WRITE_ACTIONS,
    TelemetryProps,
    with_traces,
)
from .adapter_sidecar import add_adapter_sync
from .target_optimizer import add_target_control_agent
from .task_gpu_share import write_share

# Task-definition metadata: container name -> {'user' | 'readonly_root_filesystem': why it is root / writable}.
CONTAINER_ACKNOWLEDGEMENTS = "gpu-inference:container-acknowledgements"
# A server that sends no spans where the environment samples traces (ServerContract.no_traces_reason).
NO_TRACES_WARNING = "gpu-inference:server-sends-no-traces"
# The server is the task definition's first container: the init containers and sidecars are added after it.
SERVER_CONTAINER_INDEX = 0


class ContainerAcknowledgements:
    """Why a container of one task definition runs as root or writes its root filesystem, in the task definition's
    metadata (``CONTAINER_ACKNOWLEDGEMENTS``)."""

    def __init__(self, task_definition: ecs.TaskDefinition) -> None:
        self._task_definition = task_definition
        self._reasons: dict[str, dict[str, str]] = {}

    def add(self, container_name: str, what: str, reason: str) -> None:
        """Record why ``container_name`` is not non-root (``what`` "user") or has a writable root filesystem
        ("readonly_root_filesystem")."""
        require(what in ("user", "readonly_root_filesystem"), "what", f"{what!r}: 'user' or 'readonly_root_filesystem'")
        require(len(reason) >= 60, "reason", "say why, in a sentence a reviewer would accept")
        self._reasons.setdefault(container_name, {})[what] = reason
        default_child(self._task_definition).add_metadata(CONTAINER_ACKNOWLEDGEMENTS, self._reasons)


class ServiceTask:
    """Builds one model's task in ``scope``. Attributes: ``task_role``, ``task_definition``, ``container`` (the
    server), ``scratch_owner`` and ``model_fetcher`` (the init containers, or None), ``metrics_collector`` (the
    collector every task has), ``adapter_sync`` (the LoRA adapters' sidecar, or None), ``log_router`` (FireLens's, or
    None), ``acknowledgements`` (ContainerAcknowledgements).
    On a Neuron ``instance_type`` the server maps the instance's Neuron devices instead of asking for GPUs."""

    def __init__(
        self,
        scope: Construct,
        *,
        model: ModelProps,
        contract: ServerContract,
        source: BoundModelSource,
        uri: str,
        region: str,
        environment_name: str,
        log_group: logs.LogGroup,
        stop_timeout_seconds: int,
        health_check_start_period: int,
        api_keys_secret: secretsmanager.ISecret | None,
        telemetry: TelemetryProps | None = None,
        archive_bucket: s3.IBucket | None = None,
        instance_type: GpuInstanceType | None = None,
    ) -> None:
        self._scope = scope
        self._telemetry = telemetry or TelemetryProps()
        self._environment_name = environment_name
        self._archive_bucket = archive_bucket
        self._region = region
        self._model = model
        self._contract = contract
        self._source = source
        self._log_group = log_group
        self._neuron = instance_type if instance_type is not None and instance_type.neuron else None
        self.task_role = iam.Role(
            scope,
            "TaskRole",
            assumed_by=service_principal("ecs-tasks.amazonaws.com"),
            description=f"Model server for {model.name}: reads its own model prefix only",
        )
        self._read_prefix = model_read_prefix(source.prefix, model.name)
        grant_read_prefix(source.bucket, self.task_role, self._read_prefix)
        self.task_definition = ecs.Ec2TaskDefinition(
            scope,
            "TaskDefinition",
            network_mode=ecs.NetworkMode.AWS_VPC,
            task_role=as_role(self.task_role),
            volumes=[
                ecs.Volume(
                    name=name,
                    docker_volume_configuration=ecs.DockerVolumeConfiguration(scope=ecs.Scope.TASK, driver="local"),
                )
                for name in ("scratch", *((ADAPTER_VOLUME,) if contract.adapter_sync is not None else ()))
            ],
        )
        self.acknowledgements = ContainerAcknowledgements(self.task_definition)
        if contract.no_traces_reason is not None and self._telemetry.trace_sampling_ratio > 0:
            cdk.Annotations.of(scope).add_warning_v2(
                NO_TRACES_WARNING,
                f"telemetry.trace_sampling_ratio is {self._telemetry.trace_sampling_ratio:g} but the {contract.name} "
                f"server of models[{model.name}] sends no traces: {contract.no_traces_reason}",
            )
        self.compile_cache_prefix: str | None = None
        self.container = self._add_server(uri, stop_timeout_seconds, health_check_start_period, api_keys_secret)
        self.log_router = self._add_log_router() if self._telemetry.firelens is not None else None
        model_source = contract.model_source
        self.scratch_owner = self._add_scratch_owner() if model_source.init_containers else None
        self.model_fetcher = self._add_model_fetcher(uri, region) if model_source.mode == "copy_to_scratch" else None
        last_init = self.model_fetcher or self.scratch_owner
        if last_init is not None:  # the server starts once the init containers succeeded, one after the other
            self.container.add_container_dependencies(
                ecs.ContainerDependency(container=last_init, condition=ecs.ContainerDependencyCondition.SUCCESS)
            )
        self.metrics_collector = self._add_metrics_collector()
        self.adapter_sync = None
        if contract.adapter_sync is not None:
            assert self.scratch_owner is not None  # ServerContract requires init containers with adapter_sync
            self.adapter_sync = add_adapter_sync(
                scope,
                self.task_definition,
                contract,
                contract.adapter_sync,
                server=self.container,
                scratch_owner=self.scratch_owner,
                task_role=self.task_role,
                bucket=source.bucket,
                model_name=model.name,
                region=region,
                environment_name=environment_name,
                logging=self.log_driver(),
                api_keys_secret=api_keys_secret,
            )
        self.target_control_agent = add_target_control_agent(
            scope, self.task_definition, self.container, model, contract, self.log_driver()
        )

    @property
    def log_stream_prefix(self) -> str:
        return f"{self._model.name}/{self._model.version}"

    def log_driver(self) -> ecs.LogDriver:
        """awslogs, for every container but the server where FireLens routes its logs (``server_log_driver``)."""
        return ecs.LogDrivers.aws_logs(
            stream_prefix=self.log_stream_prefix,
            log_group=self._log_group,
            mode=ecs.AwsLogDriverMode.NON_BLOCKING,
            max_buffer_size=cdk.Size.mebibytes(25),
        )

    def _server_environment(self, uri: str) -> dict[str, str]:
        """The contract's environment, the model's S3 URI for a server that reads it, and the compile cache's place
        (read by the model's own read grant; written here only, and only as a new object: If-None-Match: *,
        enforced by S3's s3:if-none-match key, so no task replaces an archive the next tasks load)."""
        contract, model, bucket = self._contract, self._model, self._source.bucket
        environment = dict(contract.environment)
        if contract.model_source.server_reads_s3:
            environment.setdefault(contract.model_source.uri_variable, uri)
        if self._neuron is not None and not set(NEURON_CORE_VARIABLES) & set(environment):
            environment[NEURON_CORES_VARIABLE] = visible_cores(self._neuron)
        if contract.compile_cache_variable is not None:
            self.compile_cache_prefix = cache_prefix = compile_cache_prefix(
                self._source.prefix, model.name, model.version
            )
            environment[contract.compile_cache_variable] = f"s3://{bucket.bucket_name}/{cache_prefix}"
            self.task_role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["s3:PutObject"],
                    resources=[bucket.arn_for_objects(f"{cache_prefix}*")],
                    conditions={"Null": {"s3:if-none-match": "false"}},
                )
            )
        return environment

    def _server_secrets(self, api_keys_secret: secretsmanager.ISecret | None) -> dict[str, ecs.Secret]:
        contract = self._contract
        secrets = dict(contract.secrets)
        if api_keys_secret is None:
            return secrets
        assert contract.api_keys_variable is not None  # service_checks.check_api_keys_variable
        secrets[contract.api_keys_variable] = ecs.Secret.from_secrets_manager(
            api_keys_secret, field=contract.api_key_field
        )
        if contract.api_key_field is not None and api_keys_secret.secret_full_arn is None:
            cdk.Annotations.of(self._scope).add_warning_v2(
                "gpu-inference:partial-secret-arn",
                f"models[{self._model.name}] reads the key {contract.api_key_field!r} of an API-key secret imported by "
                "name: ECS gets its partial ARN (no random suffix) with a JSON key, which Secrets Manager resolves "
                "only when no other secret's name starts with the same name. Import it with "
                "secretsmanager.Secret.from_secret_complete_arn (the ARN with its six-character suffix).",
            )
        return secrets

    def _add_server(
        self, uri: str, stop_timeout_seconds: int, start_period: int, api_keys_secret: secretsmanager.ISecret | None
    ) -> ecs.ContainerDefinition:
        contract, model = self._contract, self._model
        environment = self._server_environment(uri)
        secrets = self._server_secrets(api_keys_secret)
        linux_parameters = ecs.LinuxParameters(
            self._scope, "LinuxParameters", init_process_enabled=True, shared_memory_size=contract.shared_memory_mib
        )
        if self._neuron is not None:  # ECS on EC2 maps Neuron devices only this way (neuron_placement.py)
            linux_parameters.add_devices(
                *(
                    ecs.Device(
                        host_path=path,
                        container_path=path,
                        permissions=[ecs.DevicePermission.READ, ecs.DevicePermission.WRITE],
                    )
                    for path in neuron_device_paths(self._neuron)
                )
            )
        for path, size in contract.tmpfs_mib.items():
            linux_parameters.add_tmpfs(
                ecs.Tmpfs(
                    container_path=path,
                    size=size,
                    mount_options=[ecs.TmpfsMountOption.NOSUID, ecs.TmpfsMountOption.NODEV],
                )
            )
        liveness = contract.liveness
        container = self.task_definition.add_container(
            "server",
            image=contract.image,
            entry_point=list(contract.entry_point) if contract.entry_point else None,
            command=list(contract.command),
            cpu=model.cpu,
            memory_reservation_mib=model.memory_mib,
            gpu_count=None if model.gpu_share is not None or self._neuron is not None else model.gpus,
            environment=environment,
            secrets=secrets or None,
            port_mappings=[ecs.PortMapping(container_port=contract.port, protocol=ecs.Protocol.TCP, name="http")],
            logging=self._server_log_driver(),
            readonly_root_filesystem=contract.read_only_root_filesystem,
            privileged=False,
            user=contract.user,
            stop_timeout=cdk.Duration.seconds(stop_timeout_seconds),
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
        container.add_mount_points(
            ecs.MountPoint(container_path=SCRATCH_PATH, source_volume="scratch", read_only=False)
        )
        if contract.adapter_sync is not None:  # the sidecar writes the adapters; the server only reads them
            container.add_mount_points(
                ecs.MountPoint(container_path=ADAPTER_DIRECTORY, source_volume=ADAPTER_VOLUME, read_only=True)
            )
        return container

    def _fetcher_image(self) -> ecs.ContainerImage:
        return self._contract.model_source.fetcher_image or ecs.ContainerImage.from_registry(DEFAULT_FETCHER_IMAGE)

    def _add_scratch_owner(self) -> ecs.ContainerDefinition:
        """The init container ``scratch-owner`` (root, CHOWN only): creates scratch's folders and hands the volume,
        which Docker creates root-owned, to the server's user; it reads nothing. The server starts after it
        succeeded."""
        contract = self._contract
        # A server with LoRA adapters: the adapters' volume too, which its sidecar (the server's user) fills.
        adapters = f" {ADAPTER_DIRECTORY}" if contract.adapter_sync is not None else ""
        request_log = contract.adapter_sync.request_log if contract.adapter_sync is not None else None
        # The server's request-log middleware, written before the chown (root keeps no DAC_OVERRIDE to write into
        # the server user's folders), from the environment: the shell writes it byte for byte.
        write_request_log = (
            f'mkdir -p {REQUEST_LOG_DIRECTORY}; printf "%s" "$REQUEST_LOG_SOURCE" > '
            f"{REQUEST_LOG_DIRECTORY}/{REQUEST_LOG_MODULE}.py; "
            if request_log is not None
            else ""
        )
        owner = self.task_definition.add_container(
            "scratch-owner",
            image=self._fetcher_image(),
            essential=False,
            entry_point=["/bin/sh", "-c"],
            command=[
                f'set -eu; mkdir -p "$MODEL_DIR" {SCRATCH_PATH}/home {SCRATCH_PATH}/cache {SCRATCH_PATH}/tmp; '
                f'{write_request_log}chown -R "$SERVER_USER" {SCRATCH_PATH}{adapters}'
            ],
            cpu=FETCHER_CPU,
            memory_reservation_mib=FETCHER_MEMORY_MIB,
            environment={
                "MODEL_DIR": contract.model_source.local_path,
                "SERVER_USER": contract.user,
                **({"REQUEST_LOG_SOURCE": request_log} if request_log is not None else {}),
            },
            logging=self.log_driver(),
            readonly_root_filesystem=True,
            privileged=False,
            user="0",
            linux_parameters=_capabilities(self._scope, "ScratchOwnerLinuxParameters", keep=[ecs.Capability.CHOWN]),
        )
        self.acknowledgements.add(
            "scratch-owner",
            "user",
            "Root with every capability dropped but CHOWN: Docker creates the task's scratch volume owned by root, and "
            "only root may hand it to the server's user. It runs mkdir and chown, reads no input and exits; the model "
            "fetch and the server run as that user.",
        )
        owner.add_mount_points(ecs.MountPoint(container_path=SCRATCH_PATH, source_volume="scratch", read_only=False))
        if adapters:
            owner.add_mount_points(
                ecs.MountPoint(container_path=ADAPTER_DIRECTORY, source_volume=ADAPTER_VOLUME, read_only=False)
            )
        return owner

    def _add_model_fetcher(self, uri: str, region: str) -> ecs.ContainerDefinition:
        """The init container ``model-fetch``, after ``scratch-owner``, as the server's user: copy the model's S3
        prefix to scratch, check the files against the SHA256SUMS that publish wrote beside the manifest, side by side
        (model_fetch.py; a prefix without a manifest is copied unverified, and says so), exit 0."""
        owner = self.scratch_owner
        assert owner is not None  # every copy_to_scratch source has one
        fetcher = self.task_definition.add_container(
            "model-fetch",
            image=self._fetcher_image(),
            essential=False,
            entry_point=["/bin/sh", "-c"],
            command=[fetch_script()],
            cpu=FETCHER_CPU,
            memory_reservation_mib=FETCHER_MEMORY_MIB,
            environment={
                "MODEL_URI": uri,
                "MODEL_DIR": self._contract.model_source.local_path,
                "AWS_DEFAULT_REGION": region,
                "HOME": f"{SCRATCH_PATH}/tmp",
                "TMPDIR": f"{SCRATCH_PATH}/tmp",
            },
            logging=self.log_driver(),
            readonly_root_filesystem=True,
            privileged=False,
            user=self._contract.user,
            linux_parameters=_capabilities(self._scope, "FetcherLinuxParameters", keep=[]),
        )
        fetcher.add_mount_points(ecs.MountPoint(container_path=SCRATCH_PATH, source_volume="scratch", read_only=False))
        fetcher.add_container_dependencies(
            ecs.ContainerDependency(container=owner, condition=ecs.ContainerDependencyCondition.SUCCESS)
        )
        return fetcher

    def _add_metrics_collector(self) -> ecs.ContainerDefinition:
        """The collector sidecar: receives the server's spans over OTLP on the task's loopback and sends them to
        X-Ray, and scrapes the server's Prometheus metrics where the contract has some. The ADOT collector, as its
        image's non-root user on a read-only root filesystem, for traces alone and for metrics with histograms; the
        CloudWatch agent (root, writing its root: acknowledged) only for Prometheus metrics without histograms."""
        metrics = self._contract.metrics
        adot = metrics is None or bool(metrics.histograms)
        arguments = dict(
            environment_name=self._environment_name,
            model_name=self._model.name,
            region=self._region,
            log_group_name=self._log_group.log_group_name,
        )
        if metrics is None:
            environment = otel_traces_config(region=self._region)
        elif adot:
            environment = otel_collector_config(self._contract, **arguments)
        else:
            environment = with_traces(collector_config(self._contract, **arguments), self._region)
        collector = self.task_definition.add_container(
            "metrics-collector",
            image=self._collector_image(adot),
            essential=False,
            enable_restart_policy=True,
            cpu=metrics.collector_cpu if metrics else TRACE_COLLECTOR_CPU,
            memory_reservation_mib=metrics.collector_memory_mib if metrics else TRACE_COLLECTOR_MEMORY_MIB,
            environment=environment,
            logging=self.log_driver(),
            privileged=False,
            # The agent writes its translated configuration under /opt/aws; the ADOT collector writes nothing.
            readonly_root_filesystem=adot,
            user=OTEL_COLLECTOR_USER if adot else None,
            linux_parameters=_capabilities(self._scope, "CollectorLinuxParameters", keep=[]),
        )
        if not adot:
            for what in ("user", "readonly_root_filesystem"):
                self.acknowledgements.add(
                    "metrics-collector",
                    what,
                    "The CloudWatch agent image runs as its default user, root, and its entrypoint writes the "
                    "translated configuration and state under /opt/aws/amazon-cloudwatch-agent; every capability is "
                    "dropped, it is not essential, reads only the task's loopback and writes only this model's log "
                    "group and X-Ray.",
                )
        if metrics is not None:
            self._grant_log_writes()
        # X-Ray's write actions have no resource-level permissions: "*" (acknowledge_findings).
        self.task_role.add_to_principal_policy(iam.PolicyStatement(actions=list(XRAY_WRITE_ACTIONS), resources=["*"]))
        return collector

    def _collector_image(self, adot: bool) -> ecs.ContainerImage:
        """The contract's collector image, else the environment's mirror of the ADOT collector
        (``telemetry.collector_image``), else the public image of the collector the task runs. A task that runs the
        CloudWatch agent (Prometheus metrics without histograms) and names no image of its own gets the public agent,
        with a warning where the environment names a mirror (of the ADOT collector)."""
        metrics, mirror = self._contract.metrics, self._telemetry.collector_image
        if metrics is not None and metrics.collector_image is not None:
            return metrics.collector_image
        if adot:
            if mirror is not None:
                return ecr_image(self._scope, mirror, "CollectorImage")
            return ecs.ContainerImage.from_registry(DEFAULT_OTEL_COLLECTOR_IMAGE)
        if mirror is not None:
            cdk.Annotations.of(self._scope).add_warning_v2(
                "gpu-inference:cloudwatch-agent-public-image",
                f"the {self._contract.name} server's Prometheus metrics have no histogram, so its collector is the "
                f"CloudWatch agent, pulled from ECR Public ({DEFAULT_COLLECTOR_IMAGE}): telemetry.collector_image "
                "mirrors the ADOT collector; set the preset's collector_image (PrometheusMetrics.collector_image) to "
                "your ECR mirror of the CloudWatch agent",
            )
        return ecs.ContainerImage.from_registry(DEFAULT_COLLECTOR_IMAGE)

    def _server_log_driver(self) -> ecs.LogDriver:
        """The server's logs: awslogs, or through the FireLens router to the same log group (its retention and key),
        each line as the server wrote it (``log_key``: its EMF lines stay JSON objects CloudWatch extracts metrics
        from)."""
        if self._telemetry.firelens is None:
            return self.log_driver()
        return ecs.LogDrivers.firelens(
            options={
                "Name": "cloudwatch_logs",
                "region": self._region,
                "log_group_name": self._log_group.log_group_name,
                "log_stream_prefix": f"{self.log_stream_prefix}/server/",
                "auto_create_group": "false",
                "log_key": FIRELENS_LOG_KEY,
            }
        )

    def _add_log_router(self) -> ecs.ContainerDefinition:
        """FireLens's Fluent Bit (``log-router``): the server starts once it runs; its own logs go through awslogs. It
        writes only this model's log group."""
        firelens = self._telemetry.firelens
        assert firelens is not None  # called only where the environment chooses FireLens
        archive = firelens.archive
        router = self.task_definition.add_firelens_log_router(
            "log-router",
            image=(
                ecr_image(self._scope, firelens.image, "LogRouterImage")
                if firelens.image is not None
                else ecs.ContainerImage.from_registry(DEFAULT_LOG_ROUTER_IMAGE)
            ),
            firelens_config=(
                ecs.FirelensConfig(type=ecs.FirelensLogRouterType.FLUENTBIT)
                if archive is None
                else firelens_config_with_archive(
                    self._scope,
                    self.task_definition,
                    archive,
                    server_container="server",
                    environment_name=self._environment_name,
                    model_name=self._model.name,
                )
            ),
            environment=(
                archive_environment(archive, self._archive_bucket, self._region) if archive is not None else None
            ),
            essential=True,
            cpu=firelens.cpu,
            memory_reservation_mib=firelens.memory_mib,
            logging=self.log_driver(),
            privileged=False,
            readonly_root_filesystem=False,
            linux_parameters=_capabilities(self._scope, "LogRouterLinuxParameters", keep=[]),
        )
        self.acknowledgements.add(
            "log-router",
            "user",
            "FireLens requires its Fluent Bit container to run as root: it creates the unix socket the ECS agent and "
            "the Docker log driver write to in a root-owned host directory (aws/containers-roadmap#2122). Every "
            "capability is dropped and it writes only this model's log group.",
        )
        self.acknowledgements.add(
            "log-router",
            "readonly_root_filesystem",
            "AWS for Fluent Bit fails to start on a read-only root filesystem (fluent/fluent-bit#7308, "
            "aws/aws-for-fluent-bit#928): it writes its generated configuration and buffers there. It reads only the "
            "log driver's socket and sends only to this model's log group.",
        )
        self.container.add_container_dependencies(
            ecs.ContainerDependency(container=router, condition=ecs.ContainerDependencyCondition.START)
        )
        self._grant_log_writes()
        if archive is not None:
            grant_archive_writes(
                self._scope,
                self.task_role,
                archive,
                self._archive_bucket,
                self._region,
                environment_name=self._environment_name,
                model_name=self._model.name,
            )
        return router

    def _grant_log_writes(self) -> None:
        """The task role writes this model's log group: the collector's EMF metrics and FireLens's router both do."""
        self.task_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[self._log_group.log_group_arn],
            )
        )

    def acknowledge_findings(self) -> None:
        """cdk-nag's findings on the task definition, the execution role and the task role, each with its reason."""
        scope, bucket = self._scope, self._source.bucket
        acknowledge(
            default_policy(self.task_role),
            "AwsSolutions-IAM5[Resource::*]",
            "The collector sends traces with xray:PutTraceSegments and xray:PutTelemetryRecords only "
            "(AWSXrayWriteOnlyAccess less its sampling reads), which support no resource-level permissions. Asserted "
            "by tests/infra/test_telemetry.py::test_the_task_role_may_only_write_traces.",
        )
        acknowledge(
            default_child(self.task_definition),
            "AwsSolutions-ECS2",
            "Only non-secret settings (model name, version, S3 URI, batch and timeout limits) are plain environment; "
            "API keys come from Secrets Manager. Asserted by "
            "tests/infra/test_service.py::test_secrets_are_injected_not_in_environment.",
        )
        execution_policy = default_policy(self.task_definition.obtain_execution_role())
        acknowledge(
            execution_policy,
            "AwsSolutions-IAM5[Resource::*]",
            "Added by aws-cdk-lib for the ECS execution role: ecr:GetAuthorizationToken has no resource-level "
            "permissions. Image pulls, log writes and secret reads are scoped to their ARNs.",
        )
        read_prefix = f"{self._read_prefix}*"
        acknowledge_when_resolved(
            default_policy(self.task_role),
            lambda: f"AwsSolutions-IAM5[Resource::{nag_rendering(scope, bucket.arn_for_objects(read_prefix))}]",
            "The task reads every object under its own model's prefix (versions are folders under it); "
            "nothing else in the bucket. Asserted by "
            "tests/infra/test_service.py::test_task_role_reads_only_its_model_prefix.",
        )
        firelens = self._telemetry.firelens
        if (
            firelens is not None
            and firelens.archive is not None
            and firelens.archive.s3
            and self._archive_bucket is not None
        ):
            archived = self._archive_bucket.arn_for_objects(
                f"{archive_key_prefix(firelens.archive, self._environment_name, self._model.name)}*"
            )
            acknowledge_when_resolved(
                default_policy(self.task_role),
                lambda: f"AwsSolutions-IAM5[Resource::{nag_rendering(scope, archived)}]",
                "Fluent Bit's S3 output puts objects with generated names (time and a UUID) under this model's own "
                "archive prefix, nowhere else, and reads nothing. Asserted by tests/infra/test_log_archive.py.",
            )
        if self.compile_cache_prefix is not None:
            cache_objects = bucket.arn_for_objects(f"{self.compile_cache_prefix}*")
            acknowledge_when_resolved(
                default_policy(self.task_role),
                lambda: f"AwsSolutions-IAM5[Resource::{nag_rendering(scope, cache_objects)}]",
                "The server creates its compile cache, one archive per torch version, GPU kind and compile settings, "
                "under its own model version's .compile-cache/ folder, never replacing one (s3:if-none-match); it "
                "writes nowhere else. Asserted by "
                "tests/consumer/test_compile_cache.py::test_the_task_may_read_its_cache_and_only_create_one_and_write_nothing_else.",
            )


def _capabilities(scope: Construct, construct_id: str, keep: list[ecs.Capability]) -> ecs.LinuxParameters:
    parameters = ecs.LinuxParameters(scope, construct_id, init_process_enabled=True)
    parameters.drop_capabilities(ecs.Capability.ALL)
    if keep:
        parameters.add_capabilities(*keep)
    return parameters
