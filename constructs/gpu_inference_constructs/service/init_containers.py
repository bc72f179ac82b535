"""A task's init containers, which own and fill its scratch volume before the server starts: ``scratch-owner``
(:func:`add_scratch_owner`) and ``model-fetch`` (:func:`add_model_fetcher`)."""

from __future__ import annotations

from aws_cdk import aws_ecs as ecs
from constructs import Construct

from ..core.adapter_sync import ADAPTER_DIRECTORY, ADAPTER_VOLUME, REQUEST_LOG_DIRECTORY, REQUEST_LOG_MODULE
from ..core.server_contract import DEFAULT_FETCHER_IMAGE, FETCHER_CPU, FETCHER_MEMORY_MIB, SCRATCH_PATH, ServerContract
from ..store.model_fetch import fetch_script
from .container_acknowledgements import ContainerAcknowledgements
from .linux_parameters import capabilities


def fetcher_image(contract: ServerContract) -> ecs.ContainerImage:
    """The contract's fetcher image, else the public AWS CLI's (DEFAULT_FETCHER_IMAGE)."""
    return contract.model_source.fetcher_image or ecs.ContainerImage.from_registry(DEFAULT_FETCHER_IMAGE)


def add_scratch_owner(
    scope: Construct,
    task_definition: ecs.TaskDefinition,
    contract: ServerContract,
    logging: ecs.LogDriver,
    acknowledgements: ContainerAcknowledgements,
) -> ecs.ContainerDefinition:
    """The init container ``scratch-owner`` (root, CHOWN only): creates scratch's folders and hands the volume,
    which Docker creates root-owned, to the server's user; it reads nothing. The server starts after it
    succeeded."""
    # A server with LoRA adapters: the adapters' volume too, which its sidecar (the server's user) fills.
    adapters = f" {ADAPTER_DIRECTORY}" if contract.adapter_sync is not None else ""
    request_log = contract.adapter_sync.request_log if contract.adapter_sync is not None else None
    # The server's request-log middleware, written before the chown (root keeps no DAC_OVERRIDE to write into the
    # server user's folders), from the environment: the shell writes it byte for byte.
    write_request_log = (
        f'mkdir -p {REQUEST_LOG_DIRECTORY}; printf "%s" "$REQUEST_LOG_SOURCE" > '
        f"{REQUEST_LOG_DIRECTORY}/{REQUEST_LOG_MODULE}.py; "
        if request_log is not None
        else ""
    )
    owner = task_definition.add_container(
        "scratch-owner",
        image=fetcher_image(contract),
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
        logging=logging,
        readonly_root_filesystem=True,
        privileged=False,
        user="0",
        linux_parameters=capabilities(scope, "ScratchOwnerLinuxParameters", keep=[ecs.Capability.CHOWN]),
    )
    acknowledgements.add(
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


def add_model_fetcher(
    scope: Construct,
    task_definition: ecs.TaskDefinition,
    contract: ServerContract,
    owner: ecs.ContainerDefinition | None,
    uri: str,
    region: str,
    logging: ecs.LogDriver,
) -> ecs.ContainerDefinition:
    """The init container ``model-fetch``, after ``scratch-owner``, as the server's user: copy the model's S3
    prefix to scratch, check the files against the SHA256SUMS that publish wrote beside the manifest, side by side
    (model_fetch.py; a prefix without a manifest is copied unverified, and says so), exit 0."""
    assert owner is not None  # every copy_to_scratch source has one
    fetcher = task_definition.add_container(
        "model-fetch",
        image=fetcher_image(contract),
        essential=False,
        entry_point=["/bin/sh", "-c"],
        command=[fetch_script()],
        cpu=FETCHER_CPU,
        memory_reservation_mib=FETCHER_MEMORY_MIB,
        environment={
            "MODEL_URI": uri,
            "MODEL_DIR": contract.model_source.local_path,
            "AWS_DEFAULT_REGION": region,
            "HOME": f"{SCRATCH_PATH}/tmp",
            "TMPDIR": f"{SCRATCH_PATH}/tmp",
        },
        logging=logging,
        readonly_root_filesystem=True,
        privileged=False,
        user=contract.user,
        linux_parameters=capabilities(scope, "FetcherLinuxParameters", keep=[]),
    )
    fetcher.add_mount_points(ecs.MountPoint(container_path=SCRATCH_PATH, source_volume="scratch", read_only=False))
    fetcher.add_container_dependencies(
        ecs.ContainerDependency(container=owner, condition=ecs.ContainerDependencyCondition.SUCCESS)
    )
    return fetcher
