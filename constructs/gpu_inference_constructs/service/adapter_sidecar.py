"""The ``adapter-sync`` sidecar of a task whose server serves LoRA adapters (``ServerContract.adapter_sync``; the seam
with the sidecar's code: docs/lora-adapters.md): it reads the model's adapter registry in the model bucket, downloads
each registered adapter to the adapters' volume and loads it into the server with the server's own API key, and
answers ``/ready`` (the target groups' health check) once every registered adapter is served."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from ..core.adapter_sync import (
    ADAPTER_DIRECTORY,
    ADAPTER_SYNC_COMMAND,
    ADAPTER_SYNC_CONTAINER,
    ADAPTER_SYNC_CPU,
    ADAPTER_SYNC_MEMORY_MIB,
    ADAPTER_SYNC_STOP_SECONDS,
    ADAPTER_VOLUME,
    AdapterSync,
    adapter_prefix,
)
from ..core.server_contract import ServerContract
from ..shared.acknowledgements import acknowledge_when_resolved, default_policy, nag_rendering
from ..store.model_store import grant_read_prefix


def add_adapter_sync(
    scope: Construct,
    task_definition: ecs.TaskDefinition,
    contract: ServerContract,
    sync: AdapterSync,
    *,
    server: ecs.ContainerDefinition,
    scratch_owner: ecs.ContainerDefinition,
    task_role: iam.Role,
    bucket: s3.IBucket,
    model_name: str,
    region: str,
    environment_name: str,
    logging: ecs.LogDriver,
    api_keys_secret: secretsmanager.ISecret | None,
) -> ecs.ContainerDefinition:
    """The sidecar, as the server's user on a read-only root with every capability dropped, writing only the adapters'
    volume (which ``scratch_owner`` hands to that user first) and reading only ``adapters/<model>/`` of ``bucket``.
    Essential: a task whose adapters can no longer follow the registry stops. The server depends on it having started,
    and ECS stops containers in the reverse order of their dependencies: on a stop the server drains first, then the
    sidecar is stopped."""
    secrets = None
    if api_keys_secret is not None:  # the key the server takes (vLLM, SGLang: one key of the secret's JSON)
        secrets = {
            "ADAPTER_SERVER_API_KEY": ecs.Secret.from_secrets_manager(api_keys_secret, field=contract.api_key_field)
        }
    linux_parameters = ecs.LinuxParameters(scope, "AdapterSyncLinuxParameters", init_process_enabled=True)
    linux_parameters.drop_capabilities(ecs.Capability.ALL)
    sidecar = task_definition.add_container(
        ADAPTER_SYNC_CONTAINER,
        image=sync.image,
        command=list(ADAPTER_SYNC_COMMAND),
        essential=True,
        cpu=ADAPTER_SYNC_CPU,
        memory_reservation_mib=ADAPTER_SYNC_MEMORY_MIB,
        environment=sync.environment(
            bucket_name=bucket.bucket_name,
            model_name=model_name,
            server_port=contract.port,
            region=region,
            environment_name=environment_name,
        ),
        secrets=secrets,
        port_mappings=[ecs.PortMapping(container_port=sync.ready_port, protocol=ecs.Protocol.TCP, name="ready")],
        logging=logging,
        readonly_root_filesystem=True,
        privileged=False,
        user=contract.user,
        stop_timeout=cdk.Duration.seconds(ADAPTER_SYNC_STOP_SECONDS),
        linux_parameters=linux_parameters,
    )
    sidecar.add_mount_points(
        ecs.MountPoint(container_path=ADAPTER_DIRECTORY, source_volume=ADAPTER_VOLUME, read_only=False)
    )
    sidecar.add_container_dependencies(
        ecs.ContainerDependency(container=scratch_owner, condition=ecs.ContainerDependencyCondition.SUCCESS)
    )
    server.add_container_dependencies(
        ecs.ContainerDependency(container=sidecar, condition=ecs.ContainerDependencyCondition.START)
    )
    prefix = adapter_prefix(model_name)
    grant_read_prefix(bucket, task_role, prefix)
    adapter_objects = bucket.arn_for_objects(f"{prefix}*")
    acknowledge_when_resolved(
        default_policy(task_role),
        lambda: f"AwsSolutions-IAM5[Resource::{nag_rendering(scope, adapter_objects)}]",
        "The adapter-sync sidecar reads this model's adapter registry and every adapter version published for it "
        "(adapters/<model>/<adapter>/<version>/), nothing else in the bucket, and writes nothing there. Asserted by "
        "tests/consumer/test_team_lora_adapters.py.",
    )
    return sidecar
