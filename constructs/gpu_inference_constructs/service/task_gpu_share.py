"""A model's GPU share written into its task definition (the share itself, without aws_cdk: gpu_share.py)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ecs as ecs

from ..core.gpu_share import GpuShare
from ..shared.acknowledgements import default_child

# What aws-cdk-lib 2.275's CloudFormation validation raises on a share: "'Value' is a required property" and
# "Additional properties are not allowed ('SharingStrategy' was unexpected)". cfn-lint 1.58 knows SharingStrategy and
# checks its shape (tests/infra/test_gpu_sharing.py), so the acknowledged rules stay checked on these resources.
STALE_FINDINGS = ("CloudFormation-Validate::F3003", "CloudFormation-Validate::F3002")


def write_share(task_definition: ecs.TaskDefinition, container_index: int, share: GpuShare) -> None:
    """The one escape hatch for GPU sharing: aws-cdk-lib 2.275's L1 predates ``SharingStrategy`` (it arrived in
    2.276.0), so the container's ResourceRequirements are written as the CloudFormation reference documents them
    (AWS::ECS::TaskDefinition ResourceRequirement, SharingStrategy, NvidiaMpsAllocation). Remove it when the pin moves:
    ``ecs.ContainerDefinition``'s own GPU sharing option then writes the same JSON."""
    resource = default_child(task_definition)
    resource.add_property_override(
        f"ContainerDefinitions.{container_index}.ResourceRequirements", [share.resource_requirement()]
    )
    # The CloudFormation reference (AWS::ECS::TaskDefinition ResourceRequirement) makes Value and SharingStrategy
    # alternatives; aws-cdk-lib 2.275's validation schema predates it. Acknowledged on this task definition only.
    cdk.Validations.of(resource).acknowledge(
        *(
            cdk.Acknowledgment(
                id=finding,
                reason="ResourceRequirements carry SharingStrategy.NvidiaMps instead of Value, as the CloudFormation "
                "reference for AWS::ECS::TaskDefinition ResourceRequirement and SharingStrategy documents (GPU "
                "sharing, ECS agent 1.107.0); aws-cdk-lib 2.275's validation schema predates it, "
                "and cfn-lint 1.58 checks the shape",
            )
            for finding in STALE_FINDINGS
        )
    )
