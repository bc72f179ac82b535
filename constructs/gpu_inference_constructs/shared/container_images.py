"""Container images as aws_cdk makes them: an ECR repository's pinned tag (``EcrImage``, a mirror of a public image), a
public registry's image, and an image ``cdk deploy`` builds from a directory. The presets ask for them through their
``ServerContext``; the task's own sidecars (collector, log router) take them from here."""

from __future__ import annotations

from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from ..core.server_contract import EcrImage


def ecr_image(scope: Construct, image: EcrImage, construct_id: str) -> ecs.ContainerImage:
    """``image`` from its repository, imported under ``scope`` as ``construct_id``: by name in the deploying account
    and region, or by the ARN of the full URI's account and region."""
    registry = image.registry
    if registry is None:
        repository = ecr.Repository.from_repository_name(scope, construct_id, image.name)
    else:
        account, region = registry
        partition = "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"
        repository = ecr.Repository.from_repository_arn(
            scope, construct_id, f"arn:{partition}:ecr:{region}:{account}:repository/{image.name}"
        )
    return ecs.ContainerImage.from_ecr_repository(repository, image.tag)


def registry_image(reference: str) -> ecs.ContainerImage:
    """A public registry's image, ``repository:tag``."""
    return ecs.ContainerImage.from_registry(reference)


def asset_image(directory: str, display_name: str, target: str | None = None) -> ecs.ContainerImage:
    """The image ``cdk deploy`` builds for linux/amd64 from the build context ``directory`` (its Dockerfile's stage
    ``target``, else the last; synth needs no Docker)."""
    return ecs.ContainerImage.from_asset(
        directory, platform=ecr_assets.Platform.LINUX_AMD64, display_name=display_name, target=target
    )
