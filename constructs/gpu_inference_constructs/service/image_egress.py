"""Whether a task's images can be pulled: on ECS on EC2 the instance pulls them, through its primary network interface
(ECS developer guide, managed-instances-awsvpc-mode: "Image downloads ... through the primary ENI"; the task's own
ENI carries the containers' traffic), so what counts is the capacity's instances' subnets. An image outside the
region's ECR (ECR Public, Docker Hub, another region's ECR) needs a route out from them: a NAT gateway or another
route (a transit gateway, an instance). A route to an internet gateway is not one: the library's instances get no
public IP (gpu_instances.py, ``associate_public_ip_address=False``). The region's ECR is reached through the
``ecr.api``, ``ecr.dkr`` and S3 endpoints (InferenceNetwork has them). What the app built is known; an imported
subnet's routes, and the instances of a capacity provider of the team's own, are not."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from ..core.errors import ConfigError

PUBLIC_IMAGE_WARNING_ID = "gpu-inference:public-image-egress-unknown"
ECR_HOST_REGION = re.compile(r"\.dkr\.ecr(?:-fips)?\.([a-z]{2}(?:-[a-z]+)+-[0-9])\.")
ANY_IPV4 = "0.0.0.0/0"
# Container name -> the key that takes its image's mirror in your ECR.
MIRROR_KEYS: dict[str, str] = {
    "server": "the server's image (the preset's image=, e.g. NeuronServerProps(image=NeuronEcrImage(repository="
    "<your mirror>)), or ServerContract.image)",
    "scratch-owner": "the preset's fetcher_image (ModelFromS3.fetcher_image; DEFAULT_FETCHER_IMAGE's mirror)",
    "model-fetch": "the preset's fetcher_image (ModelFromS3.fetcher_image; DEFAULT_FETCHER_IMAGE's mirror)",
    "metrics-collector": "TelemetryProps.collector_image (an LLM preset's own collector_image for the ADOT collector, "
    "e.g. VllmProps.collector_image)",
    "log-router": "FireLensProps.image",
    "target-control-agent": "TargetOptimizerProps.agent_image",
}
Egress = Literal["out", "none", "unknown"]


@dataclass(frozen=True)
class OutsideImage:
    """A container whose image is pulled from outside the region's ECR."""

    container: str
    image: str

    @property
    def mirror_key(self) -> str:
        return MIRROR_KEYS.get(self.container, f"the image of container {self.container!r}")


def outside_images(task_definition: ecs.TaskDefinition) -> list[OutsideImage]:
    """The task's containers whose image is not in the stack's region's ECR (an image asset or an ECR repository is)."""
    stack = cdk.Stack.of(task_definition)
    found = []
    for child in task_definition.node.children:
        if not isinstance(child, ecs.ContainerDefinition):
            continue
        image = stack.resolve(child.image_name)
        text = image if isinstance(image, str) else json.dumps(image)
        regions = ECR_HOST_REGION.findall(text)
        any_region = cdk.Token.is_unresolved(stack.region)  # an environment-agnostic stack: any ECR is taken as its own
        in_region_ecr = (not isinstance(image, str) and not regions) or (
            bool(regions) and all(any_region or region == stack.region for region in regions)
        )
        if not in_region_ecr:
            found.append(
                OutsideImage(child.container_name, text if isinstance(image, str) else "an ECR image of another region")
            )
    return found


def subnet_egress(vpc: ec2.IVpc, subnets: ec2.SubnetSelection) -> dict[str, Egress]:
    """Each selected subnet (by construct path or ID) -> whether it has a route out that an awsvpc task can use: the
    app's own subnets by their routes, an imported VPC's isolated subnets none, other imported subnets unknown."""
    selected = vpc.select_subnets(
        subnet_type=subnets.subnet_type,
        subnet_group_name=subnets.subnet_group_name,
        subnets=subnets.subnets,
        availability_zones=subnets.availability_zones,
        one_per_az=subnets.one_per_az,
        subnet_filters=subnets.subnet_filters,
    )
    root = vpc.node.root
    routes = [c for c in root.node.find_all() if isinstance(c, ec2.CfnRoute) and c.destination_cidr_block == ANY_IPV4]
    internet_gateways = {c.ref for c in root.node.find_all() if isinstance(c, ec2.CfnInternetGateway)}
    isolated = {subnet.subnet_id for subnet in vpc.isolated_subnets}
    egress: dict[str, Egress] = {}
    for subnet in selected.subnets:
        if isinstance(subnet, ec2.Subnet):
            table = subnet.route_table.route_table_id
            out = any(route.route_table_id == table and route.gateway_id not in internet_gateways for route in routes)
            egress[subnet.node.path] = "out" if out else "none"
        elif subnet.subnet_id in isolated:
            egress[subnet.subnet_id] = "none"
        else:
            egress[subnet.subnet_id] = "unknown"
    return egress


def check_images_reachable(
    scope: Construct,
    model_name: str,
    task_definition: ecs.TaskDefinition,
    vpc: ec2.IVpc,
    instance_subnets: ec2.SubnetSelection | None,
) -> None:
    """A ConfigError naming each outside image's mirror key where some of the instances' subnets have no route out; a
    warning where their routes cannot be known (imported subnets; ``instance_subnets`` None: a capacity provider of the
    team's own, whose instances synth cannot see)."""
    outside = outside_images(task_definition)
    if not outside:
        return
    by_key: dict[str, list[OutsideImage]] = {}
    for image in outside:
        by_key.setdefault(image.mirror_key, []).append(image)
    listed = "; ".join(
        f"{' and '.join(image.container for image in images)} pull(s) {images[0].image}: set {key} to your ECR mirror"
        for key, images in by_key.items()
    )
    egress = subnet_egress(vpc, instance_subnets) if instance_subnets is not None else {}
    closed = sorted(name for name, state in egress.items() if state == "none")
    if closed:
        raise ConfigError(
            ", ".join(key.split(" (")[0] for key in by_key),
            f"models[{model_name}]'s instances pull its images (ECS on EC2 pulls through the instance's network "
            f"interface) in subnets with no route to the internet ({', '.join(closed)}: no NAT gateway; the instances "
            f"get no public IP), so they cannot pull images from outside your ECR: {listed}. Or give the capacity "
            "subnets with a NAT gateway (NetworkProps(nat_gateways=1), GpuCapacity(subnets=...))",
        )
    unknown = sorted(name for name, state in egress.items() if state == "unknown")
    if unknown or instance_subnets is None:
        where = (
            f"imported subnets ({', '.join(unknown)}) whose routes synth cannot see"
            if unknown
            else "the instances of your own capacity provider, whose subnets synth cannot see"
        )
        cdk.Annotations.of(scope).add_warning_v2(
            PUBLIC_IMAGE_WARNING_ID,
            f"models[{model_name}]'s images are pulled by {where}, and some are outside your ECR: {listed}; or make "
            "sure those subnets route to a NAT gateway.",
        )
