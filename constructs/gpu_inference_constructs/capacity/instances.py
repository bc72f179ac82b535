"""What each GPU instance launches with: its security group, its role, the ECS agent's settings in its user data, the
AMI and the launch template with the encrypted gp3 root volume."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from constructs import Construct

from ..core.capacity_props import CapacityGroupProps, GpuCapacityProps, root_volume_performance
from ..core.errors import ConfigError
from ..shared.acknowledgements import acknowledge, default_child
from ..shared.cdk_interfaces import as_role, service_principal
from .warm_pool import WARM_POOLS_CHECK

GPU_SUPPORT = "ECS_ENABLE_GPU_SUPPORT=true"
# Lines appended to /etc/ecs/ecs.config on every instance. CDK applies Spot draining only to
# groups with a spotPrice (aws/aws-cdk#24360), never to a mixed-instances group: set it here.
ECS_AGENT_SETTINGS: tuple[str, ...] = (
    "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true",
    GPU_SUPPORT,
    "ECS_IMAGE_PULL_BEHAVIOR=prefer-cached",
    # Pull every container's image when the task starts, not a dependent one's after its dependsOn is met (the
    # agent's default): the server's image then downloads while model-fetch copies the weights, and the task's pull
    # times cover the pulls alone (ECS agent README, ECS_PULL_DEPENDENT_CONTAINERS_UPFRONT).
    "ECS_PULL_DEPENDENT_CONTAINERS_UPFRONT=true",
    "ECS_ENABLE_TASK_IAM_ROLE=true",
    # awsvpc tasks cannot reach the instance metadata service, so never the instance role.
    "ECS_AWSVPC_BLOCK_IMDS=true",
    "ECS_ENABLE_CONTAINER_METADATA=true",
)


def instance_security_group(scope: Construct, vpc: ec2.IVpc, kind: str = "GPU") -> ec2.SecurityGroup:
    """No inbound; HTTPS out, which only the VPC endpoints and the S3 gateway answer (``InstanceSecurityGroup``)."""
    group = ec2.SecurityGroup(
        scope,
        "InstanceSecurityGroup",
        vpc=vpc,
        description=f"{kind} container instances: no inbound; HTTPS out, which only VPC endpoints can answer",
        allow_all_outbound=False,
    )
    group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to VPC endpoints and the S3 gateway")
    return group


def instance_role(scope: Construct, kind: str = "GPU") -> iam.Role:
    """The instances' role (``InstanceRole``): Session Manager here; the capacity provider adds the ECS agent's
    grants."""
    role = iam.Role(
        scope,
        "InstanceRole",
        assumed_by=service_principal("ec2.amazonaws.com"),
        description=f"{kind} container instances: ECS agent (added by the capacity provider) and Session Manager",
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore")],
    )
    acknowledge(
        default_child(role),
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]",
        "AmazonSSMManagedInstanceCore is AWS's documented minimum for Session Manager and ECS Exec on instances; "
        "AWS maintains it as the SSM agent's needs change.",
    )
    return role


def agent_user_data(*, warm_pool: bool, gpu: bool = True) -> ec2.UserData:
    """User data that appends :data:`ECS_AGENT_SETTINGS` (and, with a warm pool, its check) to the agent's config;
    without ``gpu`` (a Neuron fleet), all but the GPU support."""
    user_data = ec2.UserData.for_linux()
    user_data.add_commands(
        "cat >> /etc/ecs/ecs.config <<'EOF'",
        *(setting for setting in ECS_AGENT_SETTINGS if gpu or setting != GPU_SUPPORT),
        *((WARM_POOLS_CHECK,) if warm_pool else ()),
        "EOF",
    )
    return user_data


def machine_image(scope: Construct, props: GpuCapacityProps) -> ec2.IMachineImage:
    """The ECS-optimized AL2023 GPU AMI, or the team's own (``machine_image_ids``) for ``scope``'s region."""
    if props.machine_image_ids is None:
        return ecs.EcsOptimizedImage.amazon_linux2023(ecs.AmiHardwareType.GPU)
    region = cdk.Stack.of(scope).region
    if not cdk.Token.is_unresolved(region) and region not in props.machine_image_ids:
        raise ConfigError("machine_image_ids", f"has no AMI for {region}, this stack's region: add {region}: ami-...")
    return ec2.MachineImage.generic_linux(dict(props.machine_image_ids))


def gpu_launch_template(
    scope: Construct,
    props: CapacityGroupProps,
    *,
    role: iam.Role,
    security_group: ec2.ISecurityGroup,
    user_data: ec2.UserData,
    image: ec2.IMachineImage,
) -> ec2.LaunchTemplate:
    """The launch template (``LaunchTemplate``) of ``image``: IMDSv2 only, no public IP, an encrypted gp3 root
    volume."""
    return ec2.LaunchTemplate(
        scope,
        "LaunchTemplate",
        machine_image=image,
        role=as_role(role),
        security_group=security_group,
        user_data=user_data,
        require_imdsv2=True,
        # One hop: the instance itself reaches IMDS, containers behind a bridge do not.
        http_put_response_hop_limit=1,
        detailed_monitoring=True,
        associate_public_ip_address=False,
        block_devices=[
            ec2.BlockDevice(
                device_name="/dev/xvda",
                volume=ec2.BlockDeviceVolume.ebs(
                    props.root_volume_gib,
                    encrypted=True,
                    volume_type=ec2.EbsDeviceVolumeType.GP3,
                    **root_volume_performance(props.root_volume_throughput_mib_s),
                    delete_on_termination=True,
                ),
            )
        ],
    )
