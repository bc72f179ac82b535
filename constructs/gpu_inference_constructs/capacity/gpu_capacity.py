"""ECS on an EC2 Auto Scaling group of GPU instances: Spot above an On-Demand base, g5 before g4dn.

Why a priority list and no weights: an ECS capacity provider cannot manage a group with
instance weights ("Instance weighting isn't supported when used with an Amazon ECS capacity
provider", ECS developer guide), and managed scaling sizes scale-out from the smallest type in
the group. So every override has the same shape (vCPUs, memory, GPUs) and the fallback is the
order: On-Demand ``prioritized`` and Spot ``capacity-optimized-prioritized`` try the first type
first and fall back to the next when it is short. A slower fallback GPU serves fewer requests
per task, and service auto scaling adds tasks.

The parts, one module each: the props (gpu_capacity_props.py, without aws_cdk), what every capacity group shares (the
launch template, the group, its events and its capacity provider: capacity_group.py), the GPU AMI (gpu_instances.py)
and the warm pool (warm_pool.py).
"""

from __future__ import annotations

import warnings

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..core.capacity_props import (
    GP3_BASELINE_IOPS,
    GP3_BASELINE_MIB_S,
    Gp3Performance,
    GpuCapacityProps,
    root_volume_performance,
)
from ..core.deployment_capacity import ServiceDeployment
from ..core.errors import require
from ..core.legacy_keywords import RENAMES_ACCEPTED_UNTIL, accepts_legacy_keywords
from ..core.model_props import ModelProps
from ..shared.environment import DEFAULT_LOG_RETENTION_DAYS, InferenceEnvironment
from .capacity_group import CapacityGroup
from .gpu_packing import SharedService, check_joins_group, mps_prerequisites_warning
from .instances import machine_image
from .warm_pool import WarmPoolLaunches, add_warm_pool

# The props and the gp3 names live in gpu_capacity_props (aws_cdk-free); importable from here as before.
__all__ = [
    "GP3_BASELINE_IOPS",
    "GP3_BASELINE_MIB_S",
    "Gp3Performance",
    "GpuCapacity",
    "GpuCapacityProps",
    "root_volume_performance",
]


class GpuCapacity(CapacityGroup[GpuCapacityProps]):
    """An ECS cluster whose capacity provider manages a mixed Spot/On-Demand GPU Auto Scaling group.

    Attributes: ``cluster``, ``auto_scaling_group``, ``capacity_provider``, ``launch_template``,
    ``security_group`` (the instances'), ``instance_role``, ``instance_types`` (catalog entries,
    preferred first), ``smallest_instance_type`` (what every task must fit). Pass ``cluster`` (any ICluster: one of
    this app, or imported with ``ecs.Cluster.from_cluster_attributes``) to add this group as another capacity
    provider of an existing cluster (a second shape, such as 4-GPU 12xlarge instances for tensor-parallel models);
    by default (None) it makes its own cluster. An imported cluster gets the group through an
    ``AWS::ECS::ClusterCapacityProviderAssociations`` resource, which sets the cluster's whole list of capacity
    providers (PutClusterCapacityProviders): name the cluster's other providers in ``keep_capacity_providers``
    (default none), or they are removed from it; the construct warns so. Tasks in awsvpc mode get their own security
    groups; use :meth:`allow_ingress_from` only for bridge- or host-mode tasks on these instances.

    ``props`` default to GpuCapacityProps() (g5.xlarge falling back to g4dn.xlarge, all Spot, 0 to 8 instances).
    ``topic`` (default None: a NotificationTopic of its own, ``own_notifications``, with a synth warning
    that names the key) receives the group's launches and terminations, failed ones too (``group_events_rule``).
    ``environment`` (an InferenceEnvironment; default None) gives ``topic`` and ``logs_key`` once, not beside them,
    and the retention of the warm pool function's log group (default without one: 90 days).

    With ``props.warm_pool``: ``warm_pool`` (the AWS::AutoScaling::WarmPool), ``warm_pool_launches`` (the launch hook
    and the function that completes launches into service, :class:`~.warm_pool.WarmPoolLaunches`, whose log group
    ``logs_key`` encrypts; default None: CloudWatch Logs' own encryption) and :meth:`prepull` (the images a warming
    instance pulls; ``prepulled``). Without one, those attributes are None and ``prepull`` is refused.
    """

    @accepts_legacy_keywords("GpuCapacity")
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        props: GpuCapacityProps | None = None,
        subnets: ec2.SubnetSelection | None = None,
        topic: sns.ITopic | None = None,
        cluster: ecs.ICluster | None = None,
        keep_capacity_providers: tuple[str, ...] = (),
        logs_key: kms.IKey | None = None,
        environment: InferenceEnvironment | None = None,
    ) -> None:
        props = props or GpuCapacityProps()
        log_retention_days = DEFAULT_LOG_RETENTION_DAYS
        if environment is not None:
            InferenceEnvironment.refuse_beside("GpuCapacity", topic=topic, logs_key=logs_key)
            topic, logs_key = environment.topic, environment.logs_key
            log_retention_days = environment.log_retention_days
        super().__init__(
            scope,
            construct_id,
            vpc=vpc,
            props=props,
            instance_types=props.resolve_instance_types(),
            image=machine_image(scope, props),
            kind="GPU",
            gpu=True,
            warm_pool=props.warm_pool is not None,
            subnets=subnets,
            topic=topic,
            cluster=cluster,
            keep_capacity_providers=keep_capacity_providers,
        )
        self.shared_services: list[SharedService] = []
        self.prepulled: list[str] = []
        self.warm_pool: autoscaling.WarmPool | None = None
        self.warm_pool_launches: WarmPoolLaunches | None = None
        if props.warm_pool is not None:
            all_spot = props.on_demand_base_capacity == 0 and props.on_demand_percentage_above_base == 0
            self.warm_pool, self.warm_pool_launches = add_warm_pool(
                self,
                self.auto_scaling_group,
                props.warm_pool,
                all_spot=all_spot,
                user_data=self.user_data,
                images=self._prepull_images,
                logs_key=logs_key,
                log_retention_days=log_retention_days,
            )

    @property
    def notification_topic(self) -> sns.ITopic:
        """0.2's name of ``topic``: kept through 0.3 (legacy_keywords.RENAMES_ACCEPTED_UNTIL), with a
        DeprecationWarning."""
        warnings.warn(
            "GpuCapacity.notification_topic is renamed GpuCapacity.topic; notification_topic is removed after "
            f"{RENAMES_ACCEPTED_UNTIL}",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.topic

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
        require(
            self.props.warm_pool is not None,
            "warm_pool",
            "is not set, so nothing pre-pulls images: give the capacity a warm_pool (GpuCapacityProps.warm_pool)",
        )
        self.prepulled.append(image_uri)
        if repository is not None:
            repository.grant_pull(self.instance_role)

    def prepull_task(self, service: Construct, task_definition: ecs.TaskDefinition) -> None:
        """With a warm pool, every image a task of ``service`` runs (the server's and each sidecar's and init
        container's: collector, log router, fetcher) is pulled while an instance warms, so a task started on an instance
        from the pool pulls none (:meth:`prepull`); the instances may pull each ECR repository in ``service`` that the
        task's images come from (the asset's, the mirrors'). An image from a public registry is pulled where the
        subnets reach it. Without a warm pool, nothing."""
        if self.warm_pool is None:
            return
        for container in task_definition.node.children:
            if isinstance(container, ecs.ContainerDefinition):
                self.prepull(container.image_name)
        for repository in service.node.find_all():
            if isinstance(repository, ecr.RepositoryBase):
                repository.grant_pull(self.instance_role)

    def add_model(self, model: ModelProps) -> None:
        """Count ``model``'s service on this group: in whole GPUs, or packed by its GPU share
        (:func:`gpu_packing.check_joins_group`, which validate_service runs too). A group holds models on whole GPUs
        or models on shares, never both: a GPU in MPS mode takes only MPS containers (ECS API reference,
        GpuSharingMode)."""
        joined = check_joins_group(
            model,
            self.props.max_capacity,
            self.instance_types,
            self.services,
            self.shared_services,
            key=f"{self.node.id}.max_capacity",
        )
        if isinstance(joined, ServiceDeployment):
            self.services.append(joined)
            return
        if self.props.machine_image_ids is not None:
            cdk.Annotations.of(self).add_warning_v2(
                f"gpu-inference:mps-prerequisites:{model.name}",
                mps_prerequisites_warning(model.name, "this group launches your own AMI (machine_image_ids)"),
            )
        self.shared_services.append(joined)
