"""The ``ServerContext`` a ``ModelService`` hands its server preset: the model and environment, and the images and synth
warnings the preset asks for, made with aws_cdk under the service."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ecs as ecs

from ..core.server_contract import EcrImage, ServerContext
from ..shared import container_images


@dataclass(frozen=True)
class CdkServerContext(ServerContext):
    """A ``ServerContext`` whose images and warnings are made under ``scope`` (the model's ``ModelService``). Build one
    to test a preset of your own outside a ``ModelService``: ``CdkServerContext(stack, model, ServiceTimingProps(),
    "prod", "us-east-1", "s3://bucket/models/name/1/")``."""

    def warn(self, warning_id: str, message: str) -> None:
        cdk.Annotations.of(self.scope).add_warning_v2(warning_id, message)

    def ecr_image(self, image: EcrImage, construct_id: str) -> ecs.ContainerImage:
        return container_images.ecr_image(self.scope, image, construct_id)

    def registry_image(self, reference: str) -> ecs.ContainerImage:
        return container_images.registry_image(reference)

    def asset_image(self, directory: str, display_name: str, target: str | None = None) -> ecs.ContainerImage:
        return container_images.asset_image(directory, display_name, target)
