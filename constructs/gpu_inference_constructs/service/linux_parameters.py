"""A task container's Linux parameters: an init process, and every capability dropped but those it keeps."""

from __future__ import annotations

from aws_cdk import aws_ecs as ecs
from constructs import Construct


def capabilities(scope: Construct, construct_id: str, keep: list[ecs.Capability]) -> ecs.LinuxParameters:
    parameters = ecs.LinuxParameters(scope, construct_id, init_process_enabled=True)
    parameters.drop_capabilities(ecs.Capability.ALL)
    if keep:
        parameters.add_capabilities(*keep)
    return parameters
