"""ECS on an EC2 Auto Scaling group of GPU instances: Spot above an On-Demand base, g5 before g4dn.

Why a priority list and no weights: an ECS capacity provider cannot manage a group with
instance weights ("Instance weighting isn't supported when used with an Amazon ECS capacity
provider", ECS developer guide), and managed scaling sizes scale-out from the smallest type in
the group. So every override has the same shape (vCPUs, memory, GPUs) and the fallback is the
order: On-Demand ``prioritized`` and Spot ``capacity-optimized-prioritized`` try the first type
first and fall back to the next when it is short. A slower fallback GPU serves fewer requests
per task, and service auto scaling adds tasks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TypedDict

import aws_cdk as cdk
import jsii
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from .acknowledgements import acknowledge, default_child, default_policy, nag_rendering, skip_checkov
from .cdk_interfaces import as_role, as_topic, service_principal
from .deployment_capacity import ServiceDeployment, check_group_holds_deployment_at_peak
from .errors import ConfigError, require, require_range
from .gpu_packing import SharedService, check_one_kind, check_shared_group_holds_deployment_at_peak, shared_service
from .instance_catalog import GpuInstanceType, lookup, warn_if_unlisted
from .model_props import ModelProps, service_deployment
from .notifications import NotificationTopic, topic_target
from .schedules import CapacityPrewarm
from .subnet_selection import private_subnets
from .warm_pool import WARM_POOLS_CHECK, WarmPoolLaunches, WarmPoolProps, warm_pool_script

# Lines appended to /etc/ecs/ecs.config on every instance. CDK applies Spot draining only to
# groups with a spotPrice (aws/aws-cdk#24360), never to a mixed-instances group: set it here.
ECS_AGENT_SETTINGS: tuple[str, ...] = (
    "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true",
    "ECS_ENABLE_GPU_SUPPORT=true",
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

GP3_BASELINE_MIB_S = 125  # included in every gp3 volume (EC2 API EbsBlockDevice.Throughput minimum)
GP3_BASELINE_IOPS = 3000  # included in every gp3 volume (EC2 API EbsBlockDevice.Iops: 3,000-16,000)
GROUP_EVENT_TYPES = (
    "EC2 Instance Launch Successful",
    "EC2 Instance Launch Unsuccessful",
    "EC2 Instance Terminate Successful",
    "EC2 Instance Terminate Unsuccessful",
)


class Gp3Performance(TypedDict, total=False):
    """``ec2.BlockDeviceVolume.ebs`` keyword arguments above gp3's baseline."""

    throughput: int
    iops: int


def root_volume_performance(throughput_mib_s: int) -> Gp3Performance:
    """gp3 above its included 125 MiB/s: the throughput, and the IOPS it needs (at most 0.25 MiB/s per IOPS; 3,000
    IOPS are included). Nothing at the baseline, so default volumes keep their template."""
    if throughput_mib_s <= GP3_BASELINE_MIB_S:
        return {}
    return {"throughput": throughput_mib_s, "iops": max(GP3_BASELINE_IOPS, math.ceil(throughput_mib_s / 0.25))}


@dataclass(frozen=True)
class GpuCapacityProps:
    """GPU capacity for one cluster. Defaults are a small all-Spot fleet that scales to zero: at most 8 instances,
    enough for ModelProps' defaults (4 tasks of 1 GPU) deploying at 200 % (8 tasks) on 1-GPU types."""

    instance_types: tuple[str, ...] = ("g5.xlarge", "g4dn.xlarge")
    on_demand_base_capacity: int = 0
    on_demand_percentage_above_base: int = 0
    min_capacity: int = 0
    max_capacity: int = 8
    target_capacity_percent: int = 100
    root_volume_gib: int = 100
    # The root volume holds the task's scratch volume (the model copy): gp3's 125 MiB/s baseline moves 26 GB in
    # 3.5 minutes; up to 1,000 MiB/s can be provisioned (EC2 API EbsBlockDevice.Throughput: 125-1000).
    root_volume_throughput_mib_s: int = 125
    managed_termination_protection: bool = False
    instance_warmup_seconds: int = 300
    instance_weights: dict[str, int] | None = None
    # Region -> the ID of an AMI built from the ECS-optimized Amazon Linux 2023 GPU AMI with the task images already
    # pulled (docs/scaling-and-alarms.md, "An AMI with the images"): a new instance starts its tasks without pulling
    # them (ECS_IMAGE_PULL_BEHAVIOR=prefer-cached). Default None: the ECS-optimized GPU AMI, from its SSM parameter.
    machine_image_ids: dict[str, str] | None = None
    # Stopped instances that booted once and pulled the task images, started on a scale-out instead of launching a new
    # one (warm_pool.WarmPoolProps; docs/scaling-and-alarms.md, "A warm pool"). Default None: no pool.
    warm_pool: WarmPoolProps | None = None

    def __post_init__(self) -> None:
        require(
            self.instance_weights is None,
            "instance_weights",
            "ECS capacity providers do not support instance weighting; list types of one shape in priority order in instance_types instead",
        )
        require(len(self.instance_types) >= 1, "instance_types", "list at least one GPU instance type, preferred first")
        require(
            len(set(self.instance_types)) == len(self.instance_types),
            "instance_types",
            f"{list(self.instance_types)} repeats a type",
        )
        require(len(self.instance_types) <= 20, "instance_types", "a mixed-instances policy takes at most 20 overrides")
        require(0 <= self.on_demand_base_capacity, "on_demand_base_capacity", f"{self.on_demand_base_capacity} must be 0 or more")
        require_range(self.on_demand_percentage_above_base, 0, 100, "on_demand_percentage_above_base", hint=" (0 = all Spot above the base)")
        require(0 <= self.min_capacity, "min_capacity", f"{self.min_capacity} must be 0 or more")
        require(
            self.min_capacity <= self.max_capacity,
            "min_capacity",
            f"{self.min_capacity} is greater than max_capacity {self.max_capacity}; min must be <= max",
        )
        require(self.max_capacity >= 1, "max_capacity", f"{self.max_capacity} must be at least 1")
        require(
            self.on_demand_base_capacity <= self.max_capacity,
            "on_demand_base_capacity",
            f"{self.on_demand_base_capacity} is greater than max_capacity {self.max_capacity}; the base must fit in the group",
        )
        require_range(self.target_capacity_percent, 1, 100, "target_capacity_percent")
        require_range(self.root_volume_gib, 30, 16384, "root_volume_gib", hint=" (CUDA images need room: 100 or more is sensible)")
        require_range(self.root_volume_throughput_mib_s, 125, 1000, "root_volume_throughput_mib_s",
                      hint=" (gp3: 125 MiB/s included, up to 1000 provisioned)")
        require_range(self.instance_warmup_seconds, 0, 10000, "instance_warmup_seconds")
        if self.machine_image_ids is not None:
            require(bool(self.machine_image_ids), "machine_image_ids",
                    "is empty: give region -> AMI ID, or leave it out for the ECS-optimized GPU AMI")
            for region, image_id in self.machine_image_ids.items():
                require(bool(re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", region)), f"machine_image_ids.{region}",
                        "is not a region name such as us-east-1")
                require(bool(re.fullmatch(r"ami-([0-9a-f]{8}|[0-9a-f]{17})", image_id)), f"machine_image_ids.{region}",
                        f"{image_id!r} is not an AMI ID (ami- and 8 or 17 hex digits)")
        if self.warm_pool is not None:
            require(self.warm_pool.min_size <= self.max_capacity, "warm_pool.min_size",
                    f"{self.warm_pool.min_size} is greater than max_capacity {self.max_capacity}; keep at most as many "
                    "stopped instances as the group may run")

    def resolve_instance_types(self) -> list[GpuInstanceType]:
        """The catalog entries, in priority order, checked for one shape (the region: :func:`region_warning`)."""
        types = [lookup(name, f"instance_types[{index}]") for index, name in enumerate(self.instance_types)]
        first = types[0]
        for index, other in enumerate(types[1:], start=1):
            if other.shape != first.shape:
                raise ConfigError(
                    f"instance_types[{index}]",
                    f"{other.name} has shape {_shape(other)} but {first.name} has {_shape(first)}; every type must have "
                    "the same vCPUs, memory and GPUs (managed scaling sizes from the smallest type and capacity "
                    "providers allow no weights); pick the same size in each family, e.g. g5.xlarge and g4dn.xlarge",
                )
        return types

    def smallest_instance_type(self) -> GpuInstanceType:
        """The type a task must fit on: the least memory, then the fewest vCPUs."""
        return min(self.resolve_instance_types(), key=lambda t: (t.memory_gib, t.vcpus))


@jsii.implements(cdk.IStableStringProducer)
class _WarmPoolScript:
    """The warm pool's user data, rendered at synth once every model has added its images (GpuCapacity.prepull)."""

    def __init__(self, capacity: GpuCapacity) -> None:
        self._capacity = capacity

    def produce(self) -> str:
        return warm_pool_script(self._capacity._prepull_images())




def _shape(instance_type: GpuInstanceType) -> str:
    return f"({instance_type.vcpus} vCPU, {instance_type.memory_gib} GiB, {instance_type.gpus} GPU)"


class GpuCapacity(Construct):
    """An ECS cluster whose capacity provider manages a mixed Spot/On-Demand GPU Auto Scaling group.

    Attributes: ``cluster``, ``auto_scaling_group``, ``capacity_provider``, ``launch_template``,
    ``security_group`` (the instances'), ``instance_role``, ``instance_types`` (catalog entries,
    preferred first), ``smallest_instance_type`` (what every task must fit). Pass ``cluster`` (any ICluster: one of
    this app, or imported with ``ecs.Cluster.from_cluster_attributes``) to add this group as another capacity
    provider of an existing cluster (a second shape, such as 4-GPU 12xlarge instances for tensor-parallel models);
    by default (None) it makes its own cluster. An imported cluster gets the group through an
    ``AWS::ECS::ClusterCapacityProviderAssociations`` resource, which sets the cluster's whole list of capacity
    providers (PutClusterCapacityProviders): name the cluster's other providers in ``keep_capacity_providers``
    (default none), or they are removed from it; the construct warns so. Tasks in awsvpc mode get their own security groups; use
    :meth:`allow_ingress_from` only for bridge- or host-mode tasks on these instances.

    ``topic`` (default None: a NotificationTopic of its own, ``own_notifications``, with a synth warning
    that names the key) receives the group's launches and terminations, failed ones too (``group_events_rule``).

    With ``props.warm_pool``: ``warm_pool`` (the AWS::AutoScaling::WarmPool), ``warm_pool_launches`` (the launch hook and
    the function that completes launches into service, :class:`~.warm_pool.WarmPoolLaunches`, whose log group
    ``logs_key`` encrypts; default None: CloudWatch Logs' own encryption) and :meth:`prepull` (the images a warming
    instance pulls; ``prepulled``). Without one, those attributes are None and ``prepull`` is refused.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        props: GpuCapacityProps,
        subnets: ec2.SubnetSelection | None = None,
        topic: sns.ITopic | None = None,
        cluster: ecs.ICluster | None = None,
        keep_capacity_providers: tuple[str, ...] = (),
        logs_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.props = props
        self.services: list[ServiceDeployment] = []
        self.shared_services: list[SharedService] = []
        self.instance_types = props.resolve_instance_types()
        for index, instance_type in enumerate(self.instance_types):
            warn_if_unlisted(self, instance_type, cdk.Stack.of(self).region, f"instance_types[{index}]")
        self.smallest_instance_type = min(self.instance_types, key=lambda t: (t.memory_gib, t.vcpus))
        subnets = subnets or private_subnets(vpc, "GpuCapacity")

        self.cluster = cluster or ecs.Cluster(
            self,
            "Cluster",
            vpc=vpc,
            container_insights_v2=ecs.ContainerInsights.ENHANCED,
        )

        self.security_group = ec2.SecurityGroup(
            self,
            "InstanceSecurityGroup",
            vpc=vpc,
            description="GPU container instances: no inbound; HTTPS out, which only VPC endpoints can answer",
            allow_all_outbound=False,
        )
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to VPC endpoints and the S3 gateway")

        self.instance_role = iam.Role(
            self,
            "InstanceRole",
            assumed_by=service_principal("ec2.amazonaws.com"),
            description="GPU container instances: ECS agent (added by the capacity provider) and Session Manager",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore")],
        )

        user_data = ec2.UserData.for_linux()
        user_data.add_commands(
            "cat >> /etc/ecs/ecs.config <<'EOF'",
            *ECS_AGENT_SETTINGS,
            *((WARM_POOLS_CHECK,) if props.warm_pool is not None else ()),
            "EOF",
        )
        self.launch_template = ec2.LaunchTemplate(
            self,
            "LaunchTemplate",
            machine_image=self._machine_image(props),
            role=as_role(self.instance_role),
            security_group=self.security_group,
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

        self.auto_scaling_group = autoscaling.AutoScalingGroup(
            self,
            "AutoScalingGroup",
            vpc=vpc,
            vpc_subnets=subnets,
            mixed_instances_policy=autoscaling.MixedInstancesPolicy(
                launch_template=self.launch_template,
                launch_template_overrides=[
                    autoscaling.LaunchTemplateOverrides(instance_type=ec2.InstanceType(t.name)) for t in self.instance_types
                ],
                instances_distribution=autoscaling.InstancesDistribution(
                    on_demand_allocation_strategy=autoscaling.OnDemandAllocationStrategy.PRIORITIZED,
                    on_demand_base_capacity=props.on_demand_base_capacity,
                    on_demand_percentage_above_base_capacity=props.on_demand_percentage_above_base,
                    spot_allocation_strategy=autoscaling.SpotAllocationStrategy.CAPACITY_OPTIMIZED_PRIORITIZED,
                ),
            ),
            min_capacity=props.min_capacity,
            max_capacity=props.max_capacity,
            capacity_rebalance=True,
            group_metrics=[autoscaling.GroupMetrics.all()],
        )
        self.own_notifications: NotificationTopic | None = None
        if topic is None:
            # Launch failures must reach someone (cdk-nag AS3 refuses a group that tells no one): a topic of its own.
            self.own_notifications = NotificationTopic(self, "Notifications")
            topic = as_topic(self.own_notifications.topic)
            cdk.Annotations.of(self).add_warning_v2(
                "gpu-inference:capacity-own-topic",
                f"{self.node.path} has no topic: its launches and terminations, failed ones too, go to a "
                "topic of its own (GpuCapacity.own_notifications.topic) that nobody subscribes to yet. Pass "
                "topic= (your alarm topic), or subscribe to that one.")
        self.topic: sns.ITopic = topic
        self.group_events_rule = self._notify_group_events(self.topic)

        self.capacity_provider = ecs.AsgCapacityProvider(
            self,
            "CapacityProvider",
            auto_scaling_group=self.auto_scaling_group,
            enable_managed_scaling=True,
            target_capacity_percent=props.target_capacity_percent,
            enable_managed_draining=True,
            enable_managed_termination_protection=props.managed_termination_protection,
            instance_warmup_period=props.instance_warmup_seconds,
            machine_image_type=ecs.MachineImageType.AMAZON_LINUX_2,
        )
        if isinstance(self.cluster, ecs.Cluster):
            self.cluster.add_asg_capacity_provider(self.capacity_provider)
            self.capacity_provider_association = None
        else:
            self.capacity_provider_association = self._join_imported_cluster(user_data, keep_capacity_providers)
        self._grant_spot_draining()
        self._acknowledge_findings()
        self.prepulled: list[str] = []
        self.warm_pool, self.warm_pool_launches = (
            self._add_warm_pool(props.warm_pool, user_data, logs_key) if props.warm_pool is not None else (None, None))

    def _add_warm_pool(self, pool: WarmPoolProps, user_data: ec2.UserData,
                       logs_key: kms.IKey | None) -> tuple[autoscaling.WarmPool, WarmPoolLaunches]:
        """The pool, its launch hook and the function that completes launches into service, and the user data that
        pulls :meth:`prepull`'s images while an instance warms (warm_pool.py)."""
        if self.props.on_demand_base_capacity == 0 and self.props.on_demand_percentage_above_base == 0:
            cdk.Annotations.of(self).add_warning_v2(
                "gpu-inference:warm-pool-all-spot",
                "warm_pool on a group whose instances are all Spot: Auto Scaling cannot stop a Spot instance it "
                "launched (one-time Spot requests), and whether it fills the pool with On-Demand instances on such a "
                "group is not documented in the sources found (docs/aws-facts.md, Issue 44); give the group an "
                "On-Demand share (on_demand_base_capacity) or check describe-warm-pool after the first deploy",
            )
        launches = WarmPoolLaunches(self, "WarmPoolLaunches", group=self.auto_scaling_group, props=pool, logs_key=logs_key)
        warm_pool = self.auto_scaling_group.add_warm_pool(
            min_size=pool.min_size,
            max_group_prepared_capacity=pool.prepared_capacity,
            pool_state=autoscaling.PoolState.STOPPED if pool.pool_state == "Stopped" else autoscaling.PoolState.RUNNING,
        )
        # Instances launch into the pool only once the hook holds them while they pull.
        warm_pool.node.add_dependency(launches.hook)
        user_data.add_commands(cdk.Lazy.string(_WarmPoolScript(self)))
        return warm_pool, launches

    def _prepull_images(self) -> list[str]:
        """:meth:`prepull`'s images, each once (two models of one bundled image give the same URI)."""
        stack, seen, images = cdk.Stack.of(self), set(), []
        for image in self.prepulled:
            key = repr(stack.resolve(image))
            if key not in seen:
                seen.add(key)
                images.append(image)
        return images

    def prepull(self, image_uri: str, repository: ecr.IRepository | None = None) -> None:
        """Pull ``image_uri`` on every instance warming into the group's warm pool, so that a task started on an
        instance from the pool finds it (ECS_IMAGE_PULL_BEHAVIOR=prefer-cached). ``repository``: the image's ECR
        repository, whose pull this grants the instance role (a public registry is not reachable from the private
        subnets). ModelService does this for its image assets; call it for images of your own."""
        require(self.props.warm_pool is not None, "warm_pool",
                "is not set, so nothing pre-pulls images: give the capacity a warm_pool (GpuCapacityProps.warm_pool)")
        self.prepulled.append(image_uri)
        if repository is not None:
            repository.grant_pull(self.instance_role)

    def _join_imported_cluster(self, user_data: ec2.UserData, keep: tuple[str, ...]) -> ecs.CfnClusterCapacityProviderAssociations:
        """What ``Cluster.add_asg_capacity_provider`` does for a cluster of this app, for an imported one: the agent
        joins the cluster by name, the instance role gets the agent's cluster-scoped actions, and the provider is
        associated with the cluster."""
        cluster = self.cluster
        user_data.add_commands(f"echo ECS_CLUSTER={cluster.cluster_name} >> /etc/ecs/ecs.config")
        role = self.instance_role
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["ecs:DeregisterContainerInstance", "ecs:RegisterContainerInstance", "ecs:Submit*"], resources=[cluster.cluster_arn]))
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["ecs:Poll", "ecs:StartTelemetrySession"], resources=["*"], conditions={"ArnEquals": {"ecs:cluster": cluster.cluster_arn}}))
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["ecs:DiscoverPollEndpoint", "ecr:GetAuthorizationToken", "logs:CreateLogStream", "logs:PutLogEvents"], resources=["*"]))
        for index, name in enumerate(keep):
            require(bool(name) and name != self.capacity_provider.capacity_provider_name, f"keep_capacity_providers[{index}]",
                    f"{name!r}: name the cluster's other capacity providers (this group's is added)")
        cdk.Annotations.of(self).add_warning_v2(
            "gpu-inference:imported-cluster-capacity-providers",
            f"cluster {cluster.cluster_name!r} is imported: its capacity providers are set to this group's"
            + (f" and {', '.join(keep)}" if keep else "")
            + " (AWS::ECS::ClusterCapacityProviderAssociations calls PutClusterCapacityProviders, which replaces the "
            "cluster's list). Name the cluster's other capacity providers in keep_capacity_providers, or they are "
            "removed from it; only one stack may associate capacity providers with one cluster. Once checked, acknowledge it: "
            "cdk.Annotations.of(<this GpuCapacity>).acknowledge_warning('gpu-inference:imported-cluster-capacity-providers')",
        )
        return ecs.CfnClusterCapacityProviderAssociations(
            self, "ClusterAssociation", cluster=cluster.cluster_name,
            capacity_providers=[self.capacity_provider.capacity_provider_name, *keep],
            default_capacity_provider_strategy=[],
        )

    def _notify_group_events(self, topic: sns.ITopic) -> events.Rule:
        """Launches and terminations of this group, failed ones too, to ``topic`` through EventBridge.

        Not the group's own notification configuration: EC2 Auto Scaling publishes those with its service-linked
        role, which an encrypted topic's key policy would have to name, and cannot before the role exists.
        """
        acknowledge(
            default_child(self.auto_scaling_group),
            "AwsSolutions-AS3",
            "Launch and termination events, failed ones included, reach the alarm topic through EventBridge (rule "
            "GroupEvents): the group's own notifications would publish with a service-linked role that the topic's key "
            "policy cannot name. Proven by tests/infra/test_runtime_interactions.py.",
        )
        return events.Rule(
            self,
            "GroupEvents",
            description="Launches and terminations (successful or not) of the GPU Auto Scaling group",
            event_pattern=events.EventPattern(
                source=["aws.autoscaling"],
                detail_type=list(GROUP_EVENT_TYPES),
                detail={"AutoScalingGroupName": [self.auto_scaling_group.auto_scaling_group_name]},
            ),
            targets=[topic_target(topic)],
        )

    def _grant_spot_draining(self) -> None:
        """On a Spot interruption notice the ECS agent sets its own instance to DRAINING (ECS_ENABLE_SPOT_INSTANCE_DRAINING)."""
        stack = cdk.Stack.of(self)
        instances = f"arn:{stack.partition}:ecs:{stack.region}:{stack.account}:container-instance/{self.cluster.cluster_name}/*"
        self.instance_role.add_to_principal_policy(
            iam.PolicyStatement(sid="SpotDrainingOfThisClustersInstances", actions=["ecs:UpdateContainerInstancesState"], resources=[instances])
        )
        acknowledge(
            default_policy(self.instance_role),
            f"AwsSolutions-IAM5[Resource::{nag_rendering(self, instances)}]",
            "Spot draining: the ECS agent sets its own container instance to DRAINING; instance IDs are not known "
            "in advance, so the grant covers this cluster's container instances (the cluster name is in the ARN) and no other.",
        )

    def _acknowledge_findings(self) -> None:
        acknowledge(
            default_child(self.instance_role),
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]",
            "AmazonSSMManagedInstanceCore is AWS's documented minimum for Session Manager and ECS Exec on instances; "
            "AWS maintains it as the SSM agent's needs change.",
        )
        policy = default_policy(self.instance_role)
        skip_checkov(
            policy, "CKV_AWS_111",
            "aws-cdk-lib's capacity provider grants the ECS agent logs:CreateLogStream and logs:PutLogEvents on * for "
            "tasks without an execution role; every task here has one, scoped to its own log group. The other writes "
            "(RegisterContainerInstance, Submit*, UpdateContainerInstancesState) are limited to this cluster.",
        )
        acknowledge(
            policy,
            "AwsSolutions-IAM5[Resource::*]",
            "Added by aws-cdk-lib's AsgCapacityProvider for the ECS agent: ecs:DiscoverPollEndpoint, "
            "ecr:GetAuthorizationToken and the agent's log actions support no resource-level permissions; "
            "ecs:Poll and ecs:StartTelemetrySession are conditioned on this cluster's ARN.",
        )
        acknowledge(
            policy,
            "AwsSolutions-IAM5[Action::ecs:Submit*]",
            "Added by aws-cdk-lib's AsgCapacityProvider: the ECS agent's ecs:Submit* state-change calls, limited to this cluster's ARN.",
        )
        acknowledge(
            default_child(self.auto_scaling_group),
            "AwsSolutions-EC26",
            "cdk-nag reads only AutoScalingGroup.LaunchTemplate and throws on a mixed-instances policy (cdklabs/cdk-nag#1902). "
            "The launch template's root volume is encrypted gp3: asserted by "
            "tests/infra/test_capacity.py::test_launch_template_root_volume_is_encrypted_gp3.",
        )

    def add_model(self, model: ModelProps) -> None:
        """Count ``model``'s service on this group: in whole GPUs (:meth:`add_service`), or packed by its GPU share.
        A group holds models on whole GPUs or models on shares, never both: a GPU in MPS mode takes only MPS
        containers (ECS API reference, GpuSharingMode)."""
        shared = model.gpu_share is not None
        check_one_kind([s.deployment.name for s in self.shared_services] + ([model.name] if shared else []),
                       [s.name for s in self.services] + ([] if shared else [model.name]), f"models[{model.name}].gpu_share")
        if not shared:
            self.add_service(service_deployment(model, in_gpus=True))
            return
        candidate = [*self.shared_services, shared_service(model)]
        check_shared_group_holds_deployment_at_peak(self.props.max_capacity, self.instance_types, candidate,
                                                    key=f"{self.node.id}.max_capacity")
        self.shared_services.append(candidate[-1])

    def add_service(self, service: ServiceDeployment) -> None:
        """Count a service (in GPUs) that runs on this group, refusing the one whose deployment at peak (all services
        at ``max_tasks``, the one with the largest surge deploying) would not fit ``max_capacity`` instances."""
        check_group_holds_deployment_at_peak(self.props.max_capacity, self.smallest_instance_type.gpus, [*self.services, service],
                                             key=f"{self.node.id}.max_capacity")
        self.services.append(service)

    def _machine_image(self, props: GpuCapacityProps) -> ec2.IMachineImage:
        """The ECS-optimized AL2023 GPU AMI, or the team's own (``machine_image_ids``) for this stack's region."""
        if props.machine_image_ids is None:
            return ecs.EcsOptimizedImage.amazon_linux2023(ecs.AmiHardwareType.GPU)
        region = cdk.Stack.of(self).region
        if not cdk.Token.is_unresolved(region) and region not in props.machine_image_ids:
            raise ConfigError("machine_image_ids", f"has no AMI for {region}, this stack's region: add {region}: ami-...")
        return ec2.MachineImage.generic_linux(dict(props.machine_image_ids))

    def add_prewarm(self, prewarm: CapacityPrewarm) -> autoscaling.ScheduledAction:
        """Raise the group's minimum on a schedule. Never its desired capacity: ECS managed scaling owns that."""
        require(
            prewarm.min_capacity <= self.props.max_capacity,
            f"capacity_prewarm.{prewarm.name}.min_capacity",
            f"{prewarm.min_capacity} is greater than the group's max_capacity {self.props.max_capacity}",
        )
        return self.auto_scaling_group.scale_on_schedule(
            f"Prewarm-{prewarm.name}",
            schedule=autoscaling.Schedule.expression(prewarm.cron),
            time_zone=prewarm.time_zone,
            min_capacity=prewarm.min_capacity,
        )

    def allow_ingress_from(self, peer: ec2.IConnectable, port: ec2.Port, description: str) -> None:
        """Open ``port`` on the instances to ``peer`` (for bridge- or host-mode tasks, e.g. from a load balancer)."""
        self.security_group.connections.allow_from(peer, port, description)
