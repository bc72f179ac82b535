"""Why a container of a task runs as root or writes its root filesystem, in its task definition's metadata
(:class:`ContainerAcknowledgements`), for the checks that read it."""

from __future__ import annotations

from aws_cdk import aws_ecs as ecs

from ..core.errors import require
from ..shared.acknowledgements import default_child

# Task-definition metadata: container name -> {'user' | 'readonly_root_filesystem': why it is root / writable}.
CONTAINER_ACKNOWLEDGEMENTS = "gpu-inference:container-acknowledgements"


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
