"""ECS on an EC2 Auto Scaling group of Inferentia2 instances: Spot above an On-Demand base, as GpuCapacity, on the
ECS-optimized Amazon Linux 2023 Neuron AMI.

Its own capacity provider, because a Neuron fleet cannot share a launch template with CUDA types: another AMI
(``/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/recommended/image_id``, with the Neuron driver and no NVIDIA
one) and no GPU support in the agent. Its tasks map the instance's ``/dev/neuron*`` devices themselves and run one per
instance (neuron_placement.py says why and how that is proven at synth).

No warm pool yet: a pool's instances boot once, pull the images and stop, and nothing here has shown that the Neuron
driver and the ECS agent bring the devices back after the instance starts again (no Neuron device was available to
try). A scheduled prewarm (:meth:`add_prewarm`) raises the group's minimum as on GPU capacity.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..core.model_props import ModelProps, service_deployment
from ..core.neuron_capacity_props import NeuronCapacityProps
from ..shared.environment import InferenceEnvironment
from .capacity_group import CapacityGroup

__all__ = ["NeuronCapacity", "NeuronCapacityProps"]


class NeuronCapacity(CapacityGroup[NeuronCapacityProps]):
    """An ECS capacity provider managing a mixed Spot/On-Demand Auto Scaling group of Inferentia2 instances.

    Keyword arguments and attributes as GpuCapacity's (capacity_group.py: ``cluster``, ``auto_scaling_group``,
    ``capacity_provider``, ``launch_template``, ``instance_types``, ``smallest_instance_type``, ...), without a warm
    pool: ``cluster`` (default None: a cluster of its own) is usually the environment's, so the Neuron group is another
    capacity provider of it; an imported cluster gets it through an association (name its other providers in
    ``keep_capacity_providers``). ``topic`` (default None: a topic of its own, with a synth warning) receives the
    group's launches and terminations; ``environment`` (an InferenceEnvironment; default None) gives it once.

    A model placed on it (ModelService with ``capacity=`` this) maps every Neuron device of the instance type
    (``ModelProps.gpus`` = its devices), gets no GPU resource requirement, and reserves more than half of the
    instance's CPU or memory, so that ECS places one task per instance.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        props: NeuronCapacityProps | None = None,
        subnets: ec2.SubnetSelection | None = None,
        topic: sns.ITopic | None = None,
        cluster: ecs.ICluster | None = None,
        keep_capacity_providers: tuple[str, ...] = (),
        environment: InferenceEnvironment | None = None,
    ) -> None:
        props = props or NeuronCapacityProps()
        if environment is not None:
            InferenceEnvironment.refuse_beside("NeuronCapacity", topic=topic)
            topic = environment.topic
        super().__init__(
            scope,
            construct_id,
            vpc=vpc,
            props=props,
            instance_types=props.resolve_instance_types(),
            image=ecs.EcsOptimizedImage.amazon_linux2023(ecs.AmiHardwareType.NEURON),
            kind="Inferentia2",
            gpu=False,
            warm_pool=False,
            subnets=subnets,
            topic=topic,
            cluster=cluster,
            keep_capacity_providers=keep_capacity_providers,
        )

    def add_model(self, model: ModelProps) -> None:
        """Count ``model``'s service on this group, one task per instance (a task holds all of its Neuron devices), and
        refuse it where its deployment at peak would not fit ``max_capacity``."""
        self.add_service(service_deployment(model, in_gpus=True))
