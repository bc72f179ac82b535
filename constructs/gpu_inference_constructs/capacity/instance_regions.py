"""Whether the catalog lists an instance type in the stack's region: a CDK warning where it does not (the catalog's
data, without aws_cdk: instance_catalog.py)."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

from ..core.instance_catalog import REGION_SOURCES, REGIONS_BY_FAMILY, GpuInstanceType


def region_warning(instance_type: GpuInstanceType, region: str, key: str) -> str | None:
    """A warning when the catalog does not list ``instance_type``'s family in ``region``, else None.

    AWS adds types to regions every month: a table in a library cannot refuse one, so this is a warning (a CDK
    annotation; ``cdk synth --strict`` makes it an error) that says where the table comes from."""
    regions = REGIONS_BY_FAMILY[instance_type.family]
    if cdk.Token.is_unresolved(region) or region in regions:
        return None
    source = REGION_SOURCES[instance_type.family]
    return (
        f"{key}: the catalog does not list {instance_type.name!r} in region {region!r} (gpu_inference_constructs."
        f"instance_catalog.REGIONS_BY_FAMILY, from {source.source}, {source.as_of}; {instance_type.family} listed in: "
        f"{', '.join(sorted(regions))}). Check the type is offered there (aws ec2 describe-instance-type-offerings "
        f"--region {region} --filters Name=instance-type,Values={instance_type.name}); if it is, this warning is only "
        "the table being behind"
    )


def warn_if_unlisted(scope: Construct, instance_type: GpuInstanceType, region: str, key: str) -> None:
    """:func:`region_warning` as a CDK annotation warning on ``scope``."""
    warning = region_warning(instance_type, region, key)
    if warning is not None:
        cdk.Annotations.of(scope).add_warning_v2(f"gpu-inference:region-unlisted:{instance_type.name}", warning)
